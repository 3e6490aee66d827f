//! The bridge's state of one connection: each bridged prompt from acceptance to its idle state,
//! the sessions open and closed, what the v1 agent advertised, and the guards that keep a turn's
//! bookkeeping right when a call is dropped.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use serde_json::value::RawValue;
use serde_json::{Map, Value, json};
use tokio::sync::{oneshot, watch};
use tokio_util::sync::CancellationToken;

use crate::core::error::Error;
use crate::core::handler::{DynHandler, Handler, IncomingNotification, IncomingRequest};
use crate::core::jsonrpc::ErrorObject;
use crate::core::peer::Peer;

use super::shapes::{lock, state_update};

/// One v2 prompt on its way through the bridge.
pub(super) struct BridgedTurn {
    pub(super) session: Arc<str>,
    /// The id of the prompt as a `user_message`.
    pub(super) user_message: String,
    pub(super) content: Value,
    /// Fires once the prompt's answer is queued: the turn's updates go after it.
    pub(super) answered: CancellationToken,
    pub(super) decision: Mutex<Decision>,
    /// The turn's updates that came before its start, and whether it started.
    pub(super) out: tokio::sync::Mutex<Held>,
    /// `true` once started or refused: what waited for it may go on.
    pub(super) settled: watch::Sender<bool>,
    /// The client cancelled it: it reports no more states but its idle end.
    pub(super) cancelled: AtomicBool,
}

#[derive(Default)]
pub(super) struct Held {
    pub(super) started: bool,
    pub(super) updates: Vec<Map<String, Value>>,
}

/// Whether a bridged prompt is accepted: by the first sign that the agent took it, or by the
/// bridge (the answer came, or a cancellation); or refused, by an error before either.
pub(super) enum Decision {
    Waiting(oneshot::Sender<()>),
    Accepted,
    Refused,
}

impl BridgedTurn {
    /// Accepts the prompt unless it was refused; whether it is accepted.
    pub(super) fn accept(&self) -> bool {
        let mut decision = lock(&self.decision);
        match std::mem::replace(&mut *decision, Decision::Accepted) {
            Decision::Waiting(accept) => {
                let _ = accept.send(());
                true
            }
            Decision::Accepted => true,
            Decision::Refused => {
                *decision = Decision::Refused;
                false
            }
        }
    }

    pub(super) fn is_accepted(&self) -> bool {
        matches!(*lock(&self.decision), Decision::Accepted)
    }

    /// Refuses the prompt unless it was accepted; whether it is refused.
    pub(super) fn refuse(&self) -> bool {
        let mut decision = lock(&self.decision);
        if matches!(*decision, Decision::Accepted) {
            return false;
        }
        *decision = Decision::Refused;
        self.settled.send_replace(true);
        true
    }

    /// Reports the accepted prompt once its answer is written (or can no longer be): the user
    /// message, `running`, then the updates held meanwhile.
    pub(super) async fn start(&self, client: &Peer) {
        tokio::select! {
            () = self.answered.cancelled() => {}
            () = client.closed() => {}
        }
        let mut held = self.out.lock().await;
        let session = &*self.session;
        let message = json!({"sessionUpdate": "user_message", "messageId": self.user_message, "content": self.content});
        let _ = client.notify("session/update", &json!({"sessionId": session, "update": message})).await;
        let _ = client.notify("session/update", &state_update(session, "running")).await;
        for update in held.updates.drain(..) {
            let _ = client.notify("session/update", &update).await;
        }
        held.started = true;
        drop(held);
        self.settled.send_replace(true);
    }

    /// Waits until the turn started (or was refused).
    pub(super) async fn started(&self) {
        let _ = self.settled.subscribe().wait_for(|settled| *settled).await;
    }
}

pub(super) enum Outcome {
    Answered(Result<Box<RawValue>, Error>),
    Pending(crate::core::peer::PendingResponse),
}

/// What the v1 side said it can do, from its `initialize` answer.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct V1Caps {
    pub(super) load: bool,
    pub(super) list: bool,
    pub(super) resume: bool,
    pub(super) close: bool,
    pub(super) logout: bool,
}

impl V1Caps {
    pub(super) fn of(capabilities: &Value) -> Self {
        let marker = |pointer: &str| capabilities.pointer(pointer).is_some_and(Value::is_object);
        Self {
            load: capabilities.get("loadSession").and_then(Value::as_bool).unwrap_or(false),
            list: marker("/sessionCapabilities/list"),
            resume: marker("/sessionCapabilities/resume"),
            close: marker("/sessionCapabilities/close"),
            logout: marker("/auth/logout"),
        }
    }
}

/// The bridge's view of the connection, shared by both of its sides.
#[derive(Default)]
pub(super) struct State {
    pub(super) client: OnceLock<Peer>,
    pub(super) caps: OnceLock<V1Caps>,
    pub(super) sessions: Mutex<HashMap<Arc<str>, Track>>,
    /// Sessions closed on this connection and not resumed since.
    pub(super) closed: Mutex<std::collections::HashSet<Arc<str>>>,
    /// Woken when a turn ends or its last update is sent.
    pub(super) changed: tokio::sync::Notify,
    pub(super) next_id: AtomicU64,
}

/// What the bridge keeps of one session.
#[derive(Default)]
pub(super) struct Track {
    /// The message that chunks without an id continue: its kind and id.
    pub(super) message: Option<(String, String)>,
    /// The session's prompts not yet ended, in the order they came: it is idle when none of
    /// them is accepted.
    pub(super) turns: Vec<Arc<BridgedTurn>>,
    /// The agent's permission requests waiting for the client.
    pub(super) asking: u32,
    /// How many loads are replaying history that is not for the client.
    pub(super) quiet: u32,
    /// Created, loaded or resumed on this connection, and not closed.
    pub(super) open: bool,
    /// Accepted turns whose end is still to be reported.
    pub(super) finishing: u32,
}

/// An accepted turn whose end is not yet reported: counted in its session's [`Track`] from
/// the prompt's answer until the turn's task is done with it, however it ends.
pub(super) struct Finishing {
    pub(super) state: Arc<State>,
    pub(super) session: Arc<str>,
}

impl Finishing {
    pub(super) fn new(state: &Arc<State>, session: &Arc<str>) -> Self {
        state.with(session, |track| track.finishing += 1);
        Finishing { state: state.clone(), session: session.clone() }
    }
}

impl Drop for Finishing {
    fn drop(&mut self) {
        if let Some(track) = lock(&self.state.sessions).get_mut(&*self.session) {
            track.finishing = track.finishing.saturating_sub(1);
        }
        self.state.changed.notify_waiters();
    }
}

impl State {
    pub(super) fn caps(&self) -> V1Caps {
        self.caps.get().copied().unwrap_or_default()
    }

    pub(super) fn next_id(&self, prefix: &str) -> String {
        format!("{prefix}-{}", self.next_id.fetch_add(1, Ordering::Relaxed) + 1)
    }

    pub(super) fn with<T>(&self, session: &str, f: impl FnOnce(&mut Track) -> T) -> T {
        let mut sessions = lock(&self.sessions);
        match sessions.get_mut(session) {
            Some(track) => f(track),
            None => f(sessions.entry(Arc::from(session)).or_default()),
        }
    }

    pub(super) fn begin_turn(&self, session: &str, turn: Arc<BridgedTurn>) {
        self.with(session, |track| {
            if track.turns.is_empty() {
                track.message = None;
            }
            track.turns.push(turn);
        });
    }

    /// The turn is over (ended or refused); how many accepted turns the session still has.
    pub(super) fn end_turn(&self, turn: &Arc<BridgedTurn>) -> usize {
        let mut sessions = lock(&self.sessions);
        let Some(track) = sessions.get_mut(&*turn.session) else { return 0 };
        track.turns.retain(|other| !Arc::ptr_eq(other, turn));
        let others = track.turns.iter().filter(|other| other.is_accepted()).count();
        drop(sessions);
        self.changed.notify_waiters();
        others
    }

    /// The turn the agent's work on the session belongs to: the oldest one not ended.
    pub(super) fn working_turn(&self, session: &str) -> Option<Arc<BridgedTurn>> {
        lock(&self.sessions).get(session).and_then(|track| track.turns.first().cloned())
    }

    pub(super) fn cancel_turns(&self, session: &str) {
        if let Some(track) = lock(&self.sessions).get(session) {
            for turn in &track.turns {
                turn.cancelled.store(true, Ordering::Relaxed);
            }
        }
    }

    pub(super) fn opened(&self, session: &str) {
        lock(&self.closed).remove(session);
        self.with(session, |track| track.open = true);
    }

    /// `session/close` was answered: the session is gone from the connection.
    pub(super) fn close(&self, session: &str) {
        lock(&self.closed).insert(Arc::from(session));
    }

    pub(super) fn is_closed(&self, session: &str) -> bool {
        lock(&self.closed).contains(session)
    }

    /// Whether the session has turns not yet ended, or ended turns whose last update is not yet
    /// sent.
    pub(super) fn busy(&self, session: &str) -> bool {
        lock(&self.sessions).get(session).is_some_and(|track| !track.turns.is_empty() || track.finishing > 0)
    }

    /// Waits until the session is no longer [busy](Self::busy), at most `bound`.
    pub(super) async fn settled(&self, session: &str, bound: std::time::Duration) {
        let wait = async {
            loop {
                let changed = self.changed.notified();
                tokio::pin!(changed);
                changed.as_mut().enable();
                if !self.busy(session) {
                    return;
                }
                changed.await;
            }
        };
        if tokio::time::timeout(bound, wait).await.is_err() {
            tracing::debug!(session_id = %session, "acp v2 bridge: closing a session whose turns have not ended");
        }
    }

    pub(super) fn is_open(&self, session: &str) -> bool {
        lock(&self.sessions).get(session).is_some_and(|track| track.open)
    }

    /// The session is closed: nothing of it is kept.
    pub(super) fn forget(&self, session: &str) {
        lock(&self.sessions).remove(session);
    }

    /// The id for a message chunk of `kind`: the agent's own, else that of the message the
    /// last chunk belonged to when it was of the same kind, else a new one.
    pub(super) fn message_id(&self, session: &str, kind: &str, given: Option<String>) -> String {
        self.with(session, |track| {
            let id = match (given, &track.message) {
                (Some(id), _) => id,
                (None, Some((last, id))) if last == kind => id.clone(),
                (None, _) => self.next_id(kind.trim_end_matches("_chunk")),
            };
            track.message = Some((kind.to_owned(), id.clone()));
            id
        })
    }

    /// Something other than a message chunk came: the next chunk starts a new message.
    pub(super) fn message_ended(&self, session: &str) {
        self.with(session, |track| track.message = None);
    }

    pub(super) fn is_quiet(&self, session: &str) -> bool {
        lock(&self.sessions).get(session).is_some_and(|track| track.quiet > 0)
    }

    /// A permission request starts or ends: the state to report, if any. The session's turn
    /// `requires_action` while any waits, and runs again after the last (unless it was
    /// cancelled meanwhile).
    pub(super) fn asking(&self, session: &str, starts: bool) -> Option<&'static str> {
        self.with(session, |track| {
            let before = track.asking;
            track.asking = if starts { before + 1 } else { before.saturating_sub(1) };
            let edge = if starts { before == 0 } else { before == 1 };
            let live =
                track.turns.first().is_some_and(|turn| turn.is_accepted() && !turn.cancelled.load(Ordering::Relaxed));
            (edge && live).then_some(if starts { "requires_action" } else { "running" })
        })
    }
}

/// One permission request of the agent waiting for the client; counted until ended or
/// dropped (a handler given up after its grace period still ends its count).
pub(super) struct Asking {
    pub(super) state: Arc<State>,
    pub(super) client: Peer,
    pub(super) session: String,
    pub(super) ended: bool,
}

impl Asking {
    pub(super) async fn start(state: &Arc<State>, client: &Peer, session: &str) -> Self {
        if let Some(report) = state.asking(session, true) {
            let _ = client.notify("session/update", &state_update(session, report)).await;
        }
        Self { state: state.clone(), client: client.clone(), session: session.to_owned(), ended: false }
    }

    pub(super) async fn end(mut self) {
        self.ended = true;
        if let Some(report) = self.state.asking(&self.session, false) {
            let _ = self.client.notify("session/update", &state_update(&self.session, report)).await;
        }
    }
}

impl Drop for Asking {
    fn drop(&mut self) {
        if self.ended {
            return;
        }
        let report = self.state.asking(&self.session, false);
        if let (Some(report), Ok(runtime)) = (report, tokio::runtime::Handle::try_current()) {
            let (client, update) = (self.client.clone(), state_update(&self.session, report));
            runtime.spawn(async move {
                let _ = client.notify("session/update", &update).await;
            });
        }
    }
}

/// A session's history being loaded for a resume that asked for none: its replay is dropped
/// until the load ends, however it ends.
pub(super) struct Quiet {
    pub(super) state: Arc<State>,
    pub(super) session: Arc<str>,
}

impl Quiet {
    pub(super) fn new(state: &Arc<State>, session: &Arc<str>) -> Self {
        state.with(session, |track| track.quiet += 1);
        Self { state: state.clone(), session: session.clone() }
    }
}

impl Drop for Quiet {
    fn drop(&mut self) {
        self.state.with(&self.session, |track| track.quiet = track.quiet.saturating_sub(1));
    }
}

/// The v1 implementation as the bridge's own connection serves it.
pub(super) struct SharedV1(pub(super) Arc<dyn DynHandler>);

impl Handler for SharedV1 {
    fn handle_request(&self, req: IncomingRequest) -> impl Future<Output = Result<Box<RawValue>, ErrorObject>> + Send {
        self.0.handle_request_boxed(req)
    }

    fn handle_notification(&self, notification: IncomingNotification) -> impl Future<Output = ()> + Send {
        self.0.handle_notification_boxed(notification)
    }
}
