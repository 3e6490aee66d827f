//! One ACP connection of the Streamable HTTP profile: the runtime connection behind it (over
//! in-memory pipes), its streams' outboxes, the routing of the agent's output to them, and the
//! sweep that closes idle connections.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::task::Waker;
use std::time::Duration;

use bytes::Bytes;
use tokio::io::AsyncWriteExt;
use tokio::sync::{Notify, oneshot};
// tokio's clock, not std's: under a paused test clock, deadlines made from std's would be
// behind tokio's, so keep-alive timers fired again at once, without end.
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::core::framing::{Frame as LineFrame, LineReader};
use crate::core::owner::Owner;
use crate::core::transport::{PipeReader, PipeWriter, duplex};
use crate::http::{Envelope, push_sse_event};

use super::{ServerOptions, ServerShared};

/// Where the answer to a POSTed request goes.
#[derive(Clone, Debug)]
pub(super) enum Route {
    Connection,
    Session(String),
    /// `session/close` or `session/delete` of this session: a successful answer goes to the
    /// connection stream and the session's stream is forgotten (it ends once read empty).
    Ends(String),
}

/// The messages waiting for one stream's reader (each a single-line JSON text; the reader
/// frames them as SSE events).
#[derive(Default)]
pub(super) struct Outbox {
    pub(super) queue: VecDeque<Vec<u8>>,
    /// What the queue holds, counted as SSE events (`data: `, the message, a blank line).
    pub(super) bytes: usize,
    pub(super) reader: bool,
    pub(super) waker: Option<Waker>,
    /// Opened by a GET before anything named the session.
    pub(super) provisional: bool,
    /// The session was closed or deleted: the stream ends once empty, and the outbox goes.
    pub(super) ended: bool,
}

impl Outbox {
    pub(super) fn push(&mut self, message: Vec<u8>) {
        self.bytes += message.len() + SSE_FRAMING;
        self.queue.push_back(message);
        if let Some(waker) = self.waker.take() {
            waker.wake();
        }
    }

    /// Takes the waiting messages as SSE events in one buffer, up to about
    /// [`SSE_BATCH_BYTES`] (at least one message): a busy stream is written in large chunks
    /// instead of one per message.
    pub(super) fn take_events(&mut self) -> Option<Bytes> {
        let first = self.queue.front()?.len() + SSE_FRAMING;
        let mut batch = Vec::with_capacity(first.max(self.bytes.min(SSE_BATCH_BYTES)));
        while let Some(message) = self.queue.front() {
            let size = message.len() + SSE_FRAMING;
            if !batch.is_empty() && batch.len() + size > SSE_BATCH_BYTES {
                break;
            }
            push_sse_event(&mut batch, message);
            self.bytes -= size;
            self.queue.pop_front();
        }
        Some(Bytes::from(batch))
    }
}

/// The bytes an SSE event adds to its message (`data: ` and the blank line).
pub(super) const SSE_FRAMING: usize = 8;

/// How much of an outbox one body chunk carries at most (a larger single message goes alone).
pub(super) const SSE_BATCH_BYTES: usize = 64 * 1024;

#[derive(Default)]
pub(super) struct Streams {
    pub(super) connection: Outbox,
    pub(super) sessions: HashMap<String, Outbox>,
    /// Request id (JSON text) → the stream of its answer.
    pub(super) routes: HashMap<String, Route>,
    /// The pending `initialize`: its id and where its answer goes.
    pub(super) initialize: Option<(String, oneshot::Sender<Vec<u8>>)>,
}

impl Streams {
    pub(super) fn outbox(&mut self, session: Option<&str>) -> Option<&mut Outbox> {
        match session {
            None => Some(&mut self.connection),
            Some(id) => self.sessions.get_mut(id),
        }
    }

    pub(super) fn provisional_count(&self) -> usize {
        self.sessions.values().filter(|o| o.provisional).count()
    }
}

pub(super) struct AcpConnection {
    pub(super) id: String,
    /// The client has done something with the connection since `initialize`: attached a
    /// stream or posted. Until then, a connection is the first to go when the server is full.
    pub(super) used: std::sync::atomic::AtomicBool,
    /// Who opened it ([`HttpServer::identify`]); `None` without such a hook.
    pub(super) principal: Option<Owner>,
    pub(super) to_agent: tokio::sync::Mutex<Option<PipeWriter>>,
    pub(super) streams: Mutex<Streams>,
    /// Woken whenever a reader takes something from an outbox.
    pub(super) drained: Notify,
    pub(super) closed: CancellationToken,
    pub(super) last_active: Mutex<Instant>,
}

impl AcpConnection {
    pub(super) fn touch(&self) {
        *self.last_active.lock().expect("lock") = Instant::now();
    }

    /// The client used the connection (a stream attached, a POST after `initialize`).
    pub(super) fn used(&self) {
        self.used.store(true, std::sync::atomic::Ordering::Relaxed);
        self.touch();
    }

    /// Ends the connection: the agent sees end of input, every stream ends once drained.
    pub(super) fn close(&self) {
        self.closed.cancel();
        let mut streams = self.streams.lock().expect("lock");
        streams.initialize = None;
        let wake = |o: &mut Outbox| {
            if let Some(w) = o.waker.take() {
                w.wake();
            }
        };
        wake(&mut streams.connection);
        streams.sessions.values_mut().for_each(wake);
    }

    /// Writes one client message (a single line) to the agent. In a task of its own: a POST
    /// whose client goes away drops its handler, and a write cut off there would leave half a
    /// line in the agent's input, to which the next message would be glued.
    pub(super) async fn send_to_agent(self: &Arc<Self>, line: Vec<u8>) -> Result<(), ()> {
        let connection = self.clone();
        let write = tokio::spawn(async move {
            let mut guard = connection.to_agent.lock().await;
            let Some(writer) = guard.as_mut() else { return Err(()) };
            let write = async {
                writer.write_all(&line).await?;
                writer.write_all(b"\n").await
            };
            tokio::select! {
                result = write => result.map_err(|_| ()),
                () = connection.closed.cancelled() => Err(()),
            }
        });
        write.await.unwrap_or(Err(()))
    }
}

impl ServerShared {
    pub(super) fn connection(&self, id: &str) -> Option<Arc<AcpConnection>> {
        self.connections.lock().expect("lock").get(id).cloned()
    }

    /// The connection `id`, if `principal` is its principal: another principal's connection is
    /// as unknown as one that does not exist.
    pub(super) fn connection_of(&self, id: &str, principal: Option<&Owner>) -> Option<Arc<AcpConnection>> {
        self.connection(id).filter(|connection| connection.principal.as_ref() == principal)
    }

    pub(super) fn remove(&self, id: &str) {
        if self.connections.lock().expect("lock").remove(id).is_some() {
            self.open.fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
        }
    }

    /// Closes the connection, of either profile, that has been unused since it opened for the
    /// longest (see [`AcpConnection::used`], [`WsSlot::used`]); whether there was one.
    pub(super) fn evict_unused(&self) -> bool {
        let http = {
            let connections = self.connections.lock().expect("lock");
            connections
                .values()
                .filter(|c| {
                    !c.used.load(std::sync::atomic::Ordering::Relaxed)
                        && c.streams.lock().expect("lock").initialize.is_none()
                })
                .map(|c| (*c.last_active.lock().expect("lock"), c.clone()))
                .min_by_key(|(since, _)| *since)
        };
        let websocket = {
            let websockets = self.websockets.lock().expect("lock");
            websockets
                .values()
                .filter(|w| !w.used.load(std::sync::atomic::Ordering::Relaxed))
                .min_by_key(|w| w.opened)
                .cloned()
        };
        match (http, websocket) {
            (Some((since, _)), Some(websocket)) if websocket.opened < since => self.evict_websocket(&websocket),
            (None, Some(websocket)) => self.evict_websocket(&websocket),
            (Some((_, connection)), _) => {
                tracing::debug!(connection = %connection.id, "connection limit reached: closing a connection unused since its initialize");
                self.remove(&connection.id);
                connection.close();
            }
            (None, None) => return false,
        }
        true
    }

    pub(super) fn evict_websocket(&self, websocket: &WsSlot) {
        tracing::debug!("connection limit reached: closing a WebSocket unused since it opened");
        self.websockets.lock().expect("lock").remove(&websocket.id);
        websocket.release(self);
        websocket.evict.cancel();
    }

    /// Reserves a connection slot, or `None` at the limit.
    pub(super) fn reserve_slot(&self) -> Option<SlotGuard<'_>> {
        let open = self.open.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let guard = SlotGuard { shared: self, keep: false };
        (open < self.options.max_connections).then_some(guard)
    }

    /// Starts the agent side of a new connection: its runtime connection over in-memory
    /// pipes, served on a task. Returns our ends of the pipes.
    pub(super) fn start_agent(&self, owner: Owner) -> (PipeReader, PipeWriter) {
        let (agent_end, (from_agent, to_agent)) = duplex(64 * 1024);
        let serve = (self.start)(agent_end, owner);
        tokio::spawn(async move {
            if let Err(error) = serve.await {
                tracing::debug!(%error, "an http-served connection ended with an error");
            }
        });
        (from_agent, to_agent)
    }
}

/// A connection slot counted in `open`, given back unless kept.
pub(super) struct SlotGuard<'a> {
    pub(super) shared: &'a ServerShared,
    pub(super) keep: bool,
}

impl Drop for SlotGuard<'_> {
    fn drop(&mut self) {
        if !self.keep {
            self.shared.open.fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
        }
    }
}

/// An open WebSocket connection's slot among [`ServerOptions::max_connections`].
pub(super) struct WsSlot {
    pub(super) id: u64,
    pub(super) opened: Instant,
    /// The client has sent a message after its first (its `initialize`), as an HTTP
    /// connection is used once it posts after its `initialize`.
    pub(super) used: std::sync::atomic::AtomicBool,
    /// Its count in `open` was given back (once: by the eviction or by the socket's end).
    pub(super) released: std::sync::atomic::AtomicBool,
    /// Closes the WebSocket to make room.
    pub(super) evict: CancellationToken,
}

impl WsSlot {
    pub(super) fn release(&self, shared: &ServerShared) {
        if !self.released.swap(true, std::sync::atomic::Ordering::Relaxed) {
            shared.open.fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
        }
    }
}

/// Closes connections idle for longer than the limit.
pub(super) async fn sweep_idle(shared: Arc<ServerShared>) {
    let limit = shared.options.idle_timeout;
    let mut tick = tokio::time::interval((limit / 4).max(Duration::from_millis(50)));
    loop {
        tick.tick().await;
        let idle: Vec<_> = {
            let connections = shared.connections.lock().expect("lock");
            connections
                .values()
                .filter(|c| {
                    let streams = c.streams.lock().expect("lock");
                    let reading = streams.connection.reader || streams.sessions.values().any(|o| o.reader);
                    !reading && c.last_active.lock().expect("lock").elapsed() >= limit
                })
                .cloned()
                .collect()
        };
        for connection in idle {
            tracing::debug!(connection = %connection.id, "closing an idle connection");
            shared.remove(&connection.id);
            connection.close();
        }
    }
}

/// Carries the agent's output to the outboxes until the agent ends, then closes the
/// connection.
pub(super) async fn route_output(shared: Arc<ServerShared>, connection: Arc<AcpConnection>, from_agent: PipeReader) {
    let mut lines = LineReader::new(from_agent, usize::MAX >> 1);
    loop {
        let line = tokio::select! {
            frame = lines.next_frame() => match frame {
                Ok(Some(LineFrame::Line(line))) => line.to_vec(),
                Ok(Some(LineFrame::Oversized { .. })) => continue,
                Ok(None) | Err(_) => break,
            },
            () = connection.closed.cancelled() => break,
        };
        if !deliver(&shared.options, &connection, line).await {
            break;
        }
    }
    shared.remove(&connection.id);
    connection.close();
}

/// Puts one agent message in its outbox, waiting while that outbox is over its limit.
/// Returns false when the connection must end (closed, or stalled).
pub(super) async fn deliver(options: &ServerOptions, connection: &AcpConnection, line: Vec<u8>) -> bool {
    let mut envelope = std::str::from_utf8(&line).ok().and_then(Envelope::read).unwrap_or_default();
    let target = {
        let mut streams = connection.streams.lock().expect("lock");
        if envelope.is_response {
            if let (Some(id), Some((init_id, _))) = (&envelope.id, &streams.initialize) {
                if id == init_id {
                    let (_, answer) = streams.initialize.take().expect("checked");
                    let _ = answer.send(line);
                    return true;
                }
            }
            let route = envelope.id.as_ref().and_then(|id| streams.routes.remove(id));
            if let Some(session) = envelope.result_session.take() {
                // Known before its id reaches the client, so that an immediate GET finds it.
                streams.sessions.entry(session).or_default().provisional = false;
            }
            match route {
                // A session that is gone (closed while this request ran) has no stream any more:
                // the answer goes to the connection's, where the client reads it by its id.
                Some(Route::Session(session) | Route::Ends(session)) if !streams.sessions.contains_key(&session) => {
                    None
                }
                Some(Route::Session(session)) => Some(session),
                Some(Route::Ends(session)) if envelope.is_error => Some(session),
                Some(Route::Ends(session)) => {
                    match streams.sessions.get_mut(&session) {
                        // Whatever it still holds is read first; then its reader sees the end.
                        Some(outbox) if outbox.reader => {
                            outbox.ended = true;
                            if let Some(waker) = outbox.waker.take() {
                                waker.wake();
                            }
                        }
                        _ => {
                            streams.sessions.remove(&session);
                        }
                    }
                    None
                }
                Some(Route::Connection) | None => None,
            }
        } else {
            let to_session =
                envelope.params_session.take().filter(|_| envelope.method.as_deref() != Some("$/cancel_request"));
            if let Some(session) = &to_session {
                // (Most messages are for a known session: no key is copied for them.)
                match streams.sessions.get_mut(session) {
                    Some(outbox) => outbox.provisional = false,
                    None => {
                        streams.sessions.insert(session.clone(), Outbox::default());
                    }
                }
            }
            to_session
        }
    };
    let mut line = Some(line);
    // Taken the first time the outbox is found full: most messages never need it.
    let mut deadline = None;
    loop {
        let drained = connection.drained.notified();
        {
            let mut streams = connection.streams.lock().expect("lock");
            let Some(outbox) = streams.outbox(target.as_deref()) else { return true };
            if outbox.bytes < options.max_buffered_bytes {
                outbox.push(line.take().expect("pushed once"));
                return true;
            }
        }
        let deadline = *deadline.get_or_insert_with(|| Instant::now() + options.output_stall);
        tokio::select! {
            () = drained => {}
            () = connection.closed.cancelled() => return false,
            () = tokio::time::sleep_until(deadline) => {
                tracing::warn!(connection = %connection.id, "closing a connection whose client stopped reading");
                return false;
            }
        }
    }
}
