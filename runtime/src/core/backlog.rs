//! The request backlog: incoming requests read while both task bounds were full, held as
//! bytes (no task yet) within `max_backlog_bytes`, and the task that starts them in arrival
//! order as task slots free up and answers the ones cancelled meanwhile. Why requests are held
//! rather than the input left unread: the overload section of [`crate::connection`].
//!
//! The reader adds to the backlog (see [`crate::router`]); everything else happens in
//! [`backlog_loop`], so that the reader's own loop stays a plain read loop whatever the
//! backlog does. The two meet under one lock, on the overflow path only: the reader looks at
//! the backlog's length (an atomic) before each request and holds the request whenever
//! anything is held before it, so held requests start in the order they came.

use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::value::RawValue;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::core::batch::ReplyTo;
use crate::core::connection::{LoadGauges, RequestKind, Shared, lock_backlog, lock_inflight};
use crate::core::handler::{DynHandler, IncomingRequest, Watch};
use crate::core::jsonrpc::Id;
use crate::core::peer::Peer;
use crate::core::router::{Run, Slot, cancelled_answer, finish, forward_held, spawn_request};
use crate::core::tasks::RequestTasks;

/// What a held request is charged beyond its params, id and method: the [`Held`] entry in the
/// backlog's map (136 bytes, in B-tree nodes that sequential inserts leave about half full),
/// its place in the index by id and its in-flight entry (32 and 56 bytes, in hash maps up to
/// half empty) and its cancellation token (a node of about 150 bytes) come to about 600
/// bytes; rounded up.
const HELD_OVERHEAD_BYTES: usize = 640;

/// The bounds of the `retryAfterMs` hint of an overload refusal, and its value when nothing is
/// held (backlog disabled, or a request too large for an empty backlog).
const MIN_RETRY_AFTER: Duration = Duration::from_millis(10);
const MAX_RETRY_AFTER: Duration = Duration::from_secs(60);
const DEFAULT_RETRY_AFTER: Duration = Duration::from_millis(100);

/// A held request: everything needed to start it later. Its in-flight entry (with `held` set)
/// exists already, so duplicates and cancellations find it.
pub(crate) struct Held {
    pub(crate) id: Id,
    pub(crate) method: Cow<'static, str>,
    pub(crate) params: Option<Box<RawValue>>,
    pub(crate) session_id: Option<Arc<str>>,
    pub(crate) kind: RequestKind,
    pub(crate) token: CancellationToken,
    /// Notifications queued before it (a request starts after them; see [`run_request`]).
    pub(crate) barrier: u64,
    pub(crate) reply: ReplyTo,
    pub(crate) since: Instant,
    pub(crate) cost: usize,
}

/// The held requests in arrival order, by backlog number.
#[derive(Default)]
pub(crate) struct Backlog {
    held: BTreeMap<u64, Held>,
    /// The backlog number of each held request's id (ids are unique among requests in flight).
    by_id: HashMap<Id, u64>,
    next: u64,
    bytes: usize,
}

impl Backlog {
    /// What a request is charged while held.
    pub(crate) fn cost(id: &Id, method: &str, params: Option<&RawValue>) -> usize {
        let id_len = match id {
            Id::String(s) => s.len(),
            Id::OtherNumber(text) => text.len(),
            Id::Null | Id::Number(_) => 0,
        };
        // The session id is a copy of part of the params: covered by their length.
        HELD_OVERHEAD_BYTES + id_len + method.len() + params.map_or(0, |p| p.get().len())
    }

    /// Whether a request of `cost` fits within `max` bytes.
    pub(crate) fn fits(&self, cost: usize, max: usize) -> bool {
        self.bytes.saturating_add(cost) <= max
    }

    /// The number the next held request gets.
    pub(crate) fn next_seq(&self) -> u64 {
        self.next
    }

    /// Holds `held` under `seq` (from [`Backlog::next_seq`]).
    pub(crate) fn hold(&mut self, seq: u64, held: Held, gauges: &LoadGauges) {
        debug_assert_eq!(seq, self.next);
        self.bytes += held.cost;
        self.by_id.insert(held.id.clone(), seq);
        self.held.insert(seq, held);
        self.next += 1;
        gauges.set_backlog(self.held.len(), self.bytes);
    }

    /// Takes the oldest held request.
    fn take_oldest(&mut self, gauges: &LoadGauges) -> Option<Held> {
        let (_, held) = self.held.pop_first()?;
        Some(self.taken(held, gauges))
    }

    /// Takes the held request `id` if it was cancelled (a report may be stale: the request it
    /// was about has started, and a new one reuses its id).
    fn take_cancelled(&mut self, id: &Id, gauges: &LoadGauges) -> Option<Held> {
        let seq = *self.by_id.get(id)?;
        if !self.held.get(&seq).is_some_and(|held| held.token.is_cancelled()) {
            return None;
        }
        let held = self.held.remove(&seq)?;
        Some(self.taken(held, gauges))
    }

    fn taken(&mut self, held: Held, gauges: &LoadGauges) -> Held {
        self.by_id.remove(&held.id);
        self.bytes -= held.cost;
        gauges.set_backlog(self.held.len(), self.bytes);
        held
    }

    /// The `retryAfterMs` hint of an overload refusal: how long the oldest held request has
    /// waited, about the time the backlog takes to drain.
    pub(crate) fn retry_after(&self) -> Duration {
        match self.held.first_key_value() {
            Some((_, oldest)) => oldest.since.elapsed().clamp(MIN_RETRY_AFTER, MAX_RETRY_AFTER),
            None => DEFAULT_RETRY_AFTER,
        }
    }

    /// Bytes charged now.
    pub(crate) fn bytes(&self) -> usize {
        self.bytes
    }
}

/// What the backlog task needs to start requests.
pub(crate) struct Starter {
    pub(crate) shared: Arc<Shared>,
    pub(crate) handler: Arc<dyn DynHandler>,
    pub(crate) grace: Duration,
    pub(crate) tasks: RequestTasks,
}

/// The backlog task: while requests are held, answers the ones cancelled on request (reported
/// through `held_cancels`, see [`crate::connection::InFlight::cancel_on_request`]) and gives
/// each freed task slot to the oldest; sleeps while nothing is held. Returns when `stop` fires
/// (then [`answer_all_cancelled`] takes over).
pub(crate) async fn backlog_loop(
    starter: Starter,
    mut held_cancels: mpsc::UnboundedReceiver<Id>,
    stop: CancellationToken,
) {
    let shared = &starter.shared;
    let admitted = shared.load.admitted.clone();
    loop {
        if shared.load.backlog_is_empty() {
            // The reader notifies after each request it holds; a notification sent before
            // this wait starts is kept, so none is missed.
            tokio::select! {
                biased;
                () = stop.cancelled() => return,
                () = shared.backlog_grew.notified() => continue,
            }
        }
        tokio::select! {
            biased;
            () = stop.cancelled() => return,
            Some(id) = held_cancels.recv() => {
                // Gone already when it started before the report was read.
                let taken = lock_backlog(shared).take_cancelled(&id, &shared.load);
                if let Some(held) = taken {
                    // Never started: answered at once, without running.
                    let answer = cancelled_answer(held.kind, None);
                    finish(shared, held.id, answer, &held.reply, &Watch::default()).await;
                }
            }
            // The semaphore is never closed.
            Ok(permit) = admitted.clone().acquire_owned() => {
                let taken = lock_backlog(shared).take_oldest(&shared.load);
                // Emptied by cancellations meanwhile: the slot goes back.
                let Some(held) = taken else { continue };
                if let Some(entry) = lock_inflight(shared).get_mut(&held.id) {
                    // From now on its task answers a cancellation (a report already sent for
                    // it finds nothing held).
                    entry.held = false;
                }
                start(&starter, held, permit);
            }
        }
    }
}

fn start(starter: &Starter, held: Held, admitted: tokio::sync::OwnedSemaphorePermit) {
    let Held { id, method, params, session_id, kind, token, barrier, reply, .. } = held;
    let shared = &starter.shared;
    let req = IncomingRequest {
        id,
        method,
        params,
        session_id,
        cancel: token,
        peer: Peer { shared: shared.clone() },
        watch: Watch::default(),
    };
    let slot = Slot::new(shared.load.running.clone(), admitted);
    let counted = starter.tasks.count();
    let run = Run {
        shared: shared.clone(),
        handler: starter.handler.clone(),
        kind,
        grace: starter.grace,
        barrier,
        in_order: false,
    };
    if shared.forwarding {
        // Boxed: what only forwarding connections run costs no task machinery of its own in
        // every binary.
        crate::core::tasks::spawn_boxed(forward_held(run, req, slot, reply, counted));
    } else {
        spawn_request(run, req, slot, reply, counted);
    }
}

/// The connection ends (the backlog task has stopped): every held request is answered as
/// cancelled, oldest first, without running, until the output stalls for `stall` (a peer
/// that no longer reads); the rest are dropped unanswered.
pub(crate) async fn answer_all_cancelled(shared: &Shared, stall: Duration) {
    loop {
        let taken = lock_backlog(shared).take_oldest(&shared.load);
        let Some(held) = taken else { return };
        let (answer, watch) = (cancelled_answer(held.kind, None), Watch::default());
        let answered = finish(shared, held.id, answer, &held.reply, &watch);
        if crate::core::connection::while_output_moves(shared, stall, answered).await.is_none() {
            break;
        }
    }
    let forgotten = std::mem::take(&mut *lock_backlog(shared));
    let mut inflight = lock_inflight(shared);
    for held in forgotten.held.values() {
        inflight.remove(&held.id);
    }
    drop(inflight);
    shared.load.set_backlog(0, 0);
}
