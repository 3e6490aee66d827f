//! The connection: configuration ([`Connection`]), the running I/O ([`Serve`]) and the state
//! shared with [`Peer`] handles.
//!
//! # Concurrency contract
//!
//! One connection runs five kinds of work:
//!
//! - **The reader** (inside the [`Serve`] future) splits input into lines, decodes envelopes and
//!   routes them. It never runs user code and never waits for a request handler, so responses,
//!   cancellations and the end of input are read however busy the handlers are. It does wait
//!   when the notification queue or the write queue is full: those bounds (and the request
//!   bounds below) are what keeps memory flat under a flood.
//! - **Requests** each run in their own task, concurrently: at most `max_concurrent_requests`
//!   handlers at once; up to `max_queued_requests` more wait for a slot (a cancelled one is
//!   answered without ever running). Requests beyond both bounds are held, unstarted, in a
//!   backlog bounded in bytes and start in arrival order as slots free up; only a request that
//!   finds the backlog full too is refused, with the documented overload error (see
//!   [Overload](#overload-a-peer-that-sends-more-than-it-lets-us-finish)). A request handler
//!   may await calls to the peer: their responses are routed by the reader, which is not
//!   blocked by handlers.
//!
//!   Limitation: a request over the bound waits for a slot even when it is part of a chain of
//!   nested calls, so a chain deeper than the bound can wait forever. With
//!   `max_concurrent_requests(1)` on both sides, A calls B (`outer`), whose handler calls A
//!   (`inner`), whose handler calls B (`leaf`): `leaf` waits for B's only slot, which `outer`
//!   holds until `leaf` answers. The default bound (1024) makes this practically unreachable;
//!   a low bound suits peers whose handlers do not call back.
//! - **The backlog task** starts held requests as slots free up and answers the ones
//!   cancelled while held; it sleeps while nothing is held (see the overload section below).
//! - **Notifications** are handled by one task, one at a time, in arrival order.
//! - **The output** is one bounded FIFO queue (senders wait when it is full), drained by one
//!   writer task in batches and flushed whenever the queue runs empty. A request or a response
//!   that finds the queue empty and nothing being written is written by its sender instead, at
//!   once and within one poll: it keeps its place in the order, and a sender dropped afterwards
//!   cannot tear it (what the transport does not take at once is left to the writer task).
//!   Notifications always take the queue. With a wire tap, everything takes the queue.
//!
//! **Requests follow notifications too.** A request's handler starts only after every
//! notification that arrived before the request has been handled (the request's task waits; the
//! reader does not). So a client handles a `tool_call` update before the permission request that
//! is about it. Requests are not ordered with respect to each other.
//!
//! **Responses follow notifications.** The response to one of our calls is delivered to its
//! caller only after every notification that arrived before that response has been handled. So
//! a client that awaits `session/prompt` has seen every `session/update` of the turn when the
//! call returns. The reader tags each response with the number of notifications queued so far;
//! the caller's future waits until the notification task has handled that many.
//!
//! Consequence: a notification handler that awaits the response of an outgoing call would wait
//! for itself. Instead of deadlocking, the runtime recognises calls made from inside a
//! notification handler of the same connection (a task-local marker) and delivers their
//! responses without the ordering guarantee. Such a handler still holds up every later
//! notification while it waits, and if `notification_queue_capacity` notifications pile up
//! behind it the reader stops and the response can no longer be read: a notification handler
//! that needs an answer from the peer should spawn a task for it.
//!
//! Bounds are counted in messages, not bytes: the worst case of the write queue is
//! `write_queue_capacity` × the largest message. The request backlog is the exception: it is
//! counted in bytes.
//!
//! # Overload: a peer that sends more than it lets us finish
//!
//! An incoming request passes up to three stages, each bounded:
//!
//! | stage | bound (default) | what a request costs there |
//! |---|---|---|
//! | running | [`Connection::max_concurrent_requests`] (1024) | a task and its handler's state |
//! | waiting for a slot | [`Connection::max_queued_requests`] (4096) | a task, a cancellation token, an in-flight entry |
//! | backlog | [`Connection::max_backlog_bytes`] (64 MiB) | its params, id and method as read, plus 640 bytes of bookkeeping |
//!
//! A protocol v2 turn runs on after its `session/prompt` is answered (at acceptance). Turns are
//! counted apart, up to `max_concurrent_requests` of them too: a prompt that finds them all
//! running waits, unanswered and counted as a running request, until one ends.
//!
//! The reader holds the requests that arrive while both task bounds are full, and every
//! request after them while anything is held; the backlog task gives each, in arrival order, a
//! waiting task as soon as one frees up. A request that does not fit the backlog either is refused at once, unrun, with
//! [`codes::OVERLOADED`](crate::codes::OVERLOADED) (-32029, message `"Overloaded, retry later"`)
//! and `data` `{"retryAfterMs": N, "inFlight": .., "backlogBytes": .., "maxBacklogBytes": ..}`.
//! Since it never ran, sending it again is safe. `retryAfterMs` is how long the oldest request in
//! the backlog has waited (10 ms to 60 s; 100 ms when nothing is held), which is about how long
//! the backlog takes to drain; `inFlight` counts running, waiting and held requests. Our own
//! side recognises the refusal: [`Error::is_overloaded`], [`Error::retry_after`].
//! [`Peer::request_load`] shows the stages' current sizes, the backlog's peak and the refusals
//! so far.
//!
//! While requests are held, everything else flows as before: a `$/cancel_request` or
//! `session/cancel` for a held request answers it at once (it never runs; its bytes are freed),
//! responses to our own calls are delivered, notifications are queued, and the end of input
//! ends the connection: requests still held then are answered as cancelled (the table below,
//! without running), unless the output stalls for the grace period.
//!
//! Why not stop reading instead, and let the pipe or socket slow the peer down? Because what
//! the reader has not read, nobody sees. A handler that waits for the peer's answer to its own
//! call, or for its cancellation, keeps its slot until the reader gets to that message, and a
//! reader that waits for a slot never does: a deadlock (an earlier version did this; see
//! finding 1 in `FUZZING.md`). A peer that does not read while it writes would also stop
//! reading our answers once its own writes block. Scanning the unread input for cancellations
//! and responses without taking the requests in front of them only works as far as that
//! input is buffered, and a buffer of pending requests is a backlog by another name. Requests
//! that cannot run yet have to be kept somewhere, any bounded place fills up eventually, and
//! then an explicit, retryable refusal is the one answer that neither deadlocks nor loses
//! track of a request. So the reader never stops for requests; the backlog absorbs bursts
//! cheaply (requests there are bytes, not tasks: about 100,000 small ones fit the default),
//! and the refusal is the last resort.
//!
//! # Cancellation contract
//!
//! Each incoming request gets a [`CancellationToken`]
//! (a child of the connection's token). It fires on:
//!
//! - `$/cancel_request {requestId}` naming the request. This notification is consumed by the
//!   runtime and *not* passed to the handler.
//! - `session/cancel {sessionId}` (agent side) for in-flight `session/prompt` requests of that
//!   session. The notification is also queued for the handler as usual.
//! - Sending `session/cancel` ourselves ([`Peer::cancel_session`] or any `notify` of that
//!   method; client side) for in-flight incoming `session/request_permission` requests of that
//!   session. Their `cancelled` answers go out after the `session/cancel` itself, so the agent
//!   knows its turn was cancelled when it reads them.
//! - The end of the connection.
//!
//! A request cancelled (by `$/cancel_request` or `session/cancel`) before its handler started,
//! while it waited for earlier notifications, for a slot or in the backlog, is answered at once
//! and its handler is never called. (At the end of the connection, a request that has not started still may,
//! within the grace period: it was read before the end of input, and a peer that closed its
//! side may still read the answer.) Once the token fires, a running handler has the grace
//! period (`cancel_grace`, default 100 ms) to finish; then its future is dropped. A handler of
//! the typed layer ([`crate::agent`], [`crate::client`]) that has never asked its context for
//! the token (`cancelled()`, `is_cancelled()`, `cancellation_token()`) ignores it, so it gets
//! no grace: it is polled once more, in case it is about to finish, and then dropped and
//! answered at once. A raw [`Handler`]'s use of its token cannot be seen, so it always gets the
//! grace period. The answer of a cancelled request is:
//!
//! | method | answer |
//! |---|---|
//! | `session/prompt` (v1) | the handler's result if it says `"stopReason":"cancelled"`, else exactly `{"stopReason":"cancelled"}` — also when the handler failed, panicked or was dropped |
//! | `session/prompt` (a connection under [`Connection::v2_rules`]) | like anything else: in v2 the answer only accepts the prompt, and the turn's end (stop reason `cancelled`) is an idle `state_update` (see the `v2::turn` module, feature `unstable_protocol_v2`) |
//! | `session/request_permission` | `{"outcome":{"outcome":"cancelled"}}`, sent *as soon as* the token fires (the handler runs on for the grace period, its result ignored) |
//! | anything else | the handler's result if it returned `Ok` within the grace period (partial results), else error -32800 |
//!
//! Outgoing calls: dropping a call's future before its response sends `$/cancel_request` to
//! the peer. [`Peer::request_raw_until`] ties a call to a token and returns
//! [`Error::Cancelled`] when it fires. An incoming `session/cancel` also resolves our pending
//! outgoing `session/request_permission` calls of that session with the `cancelled` outcome at
//! once (and sends `$/cancel_request` for them), so an agent's permission request of a
//! cancelled turn never hangs.
//!
//! # Lifetime
//!
//! End of input, a read or write error, [`Peer::close`], or dropping the [`Serve`] future end
//! the connection: the connection token fires ([`Peer::closed`]), every pending outgoing call
//! fails with [`Error::ConnectionClosed`] at once, every in-flight handler is cancelled (and
//! answered as above while the output still works; requests still in the backlog are answered
//! as cancelled without running), queued notifications are still handled
//! (a handler that takes longer than the grace period after the end stops the draining), the
//! writer flushes what is queued, and [`Serve`] returns: `Ok(())` for end of input or `close`,
//! `Err(Error::Io)` for a transport error. Every request read gets its answer, and every line
//! is written whole, as long as the peer reads, however slowly; a peer that reads nothing for
//! the grace period is given up on (what is still queued for it is dropped).

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::{Semaphore, mpsc};
use tokio_util::sync::CancellationToken;

use crate::core::error::Error;
use crate::core::framing::DEFAULT_MAX_LINE_BYTES;
use crate::core::handler::{DynHandler, Handler};
use crate::core::jsonrpc::Id;
use crate::core::load::LoadGauges;
pub use crate::core::load::RequestLoad;
use crate::core::peer::Peer;
use crate::core::reader::Reader;
use crate::core::requests::{self, Starter};
use crate::core::state::{Options, Shared, WrappedCancel, while_output_moves};
use crate::core::tasks::{AbortOnDrop, RequestTasks};
use crate::core::writer;

/// Configuration of a connection; [`Connection::serve`] starts it.
///
/// ```no_run
/// # async fn example() -> Result<(), acp_rpc::Error> {
/// let (reader, writer) = acp_rpc::transport::stdio();
/// let (peer, serve) = acp_rpc::Connection::new().serve(reader, writer, ());
/// tokio::spawn(serve);
/// let result = peer.request_raw("initialize", None).await?;
/// # Ok(()) }
/// ```
pub struct Connection {
    max_line_bytes: usize,
    max_concurrent_requests: usize,
    max_queued_requests: usize,
    max_backlog_bytes: usize,
    write_queue_capacity: usize,
    notification_queue_capacity: usize,
    cancel_grace: Duration,
    tap: Option<writer::Tap>,
    v2_rules: bool,
    forwarding: bool,
    /// Set by [`Connection::forwarding`]: reached only through it, so that binaries without a
    /// forwarding connection do not carry the envelope's decoder.
    wrapped_cancel: Option<WrappedCancel>,
    end_on_bad_input: bool,
    owner: Option<crate::core::owner::Owner>,
}

impl fmt::Debug for Connection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Connection")
            .field("max_line_bytes", &self.max_line_bytes)
            .field("max_concurrent_requests", &self.max_concurrent_requests)
            .field("max_queued_requests", &self.max_queued_requests)
            .field("max_backlog_bytes", &self.max_backlog_bytes)
            .field("write_queue_capacity", &self.write_queue_capacity)
            .field("notification_queue_capacity", &self.notification_queue_capacity)
            .field("cancel_grace", &self.cancel_grace)
            .field("tap", &self.tap.is_some())
            .field("v2_rules", &self.v2_rules)
            .field("forwarding", &self.forwarding)
            .field("end_on_bad_input", &self.end_on_bad_input)
            .finish()
    }
}

impl Default for Connection {
    fn default() -> Self {
        Self::new()
    }
}

impl Connection {
    /// The defaults: 64 MiB lines, 1024 concurrent incoming requests, 4096 more waiting and a
    /// 64 MiB backlog beyond them, a write queue and a notification queue of 1024 messages each,
    /// a 100 ms cancellation grace period, no tap.
    pub fn new() -> Self {
        Connection {
            max_line_bytes: DEFAULT_MAX_LINE_BYTES,
            max_concurrent_requests: 1024,
            max_queued_requests: 4096,
            max_backlog_bytes: DEFAULT_MAX_LINE_BYTES,
            write_queue_capacity: 1024,
            notification_queue_capacity: 1024,
            cancel_grace: Duration::from_millis(100),
            tap: None,
            v2_rules: false,
            forwarding: false,
            wrapped_cancel: None,
            end_on_bad_input: false,
            owner: None,
        }
    }

    /// The [`Owner`](crate::owner::Owner) of what this connection creates, as its handlers
    /// read it ([`Peer::owner`], `AgentContext::owner`): by default a new anonymous owner,
    /// made for this connection alone. The remote transport sets the principal its
    /// authentication hook names.
    pub fn owner(mut self, owner: crate::core::owner::Owner) -> Self {
        self.owner = Some(owner);
        self
    }

    /// Follows protocol v2's connection rules from the start, for a connection that speaks v2
    /// only: an incoming JSON-RPC batch is answered entry by entry (see the bad-input table in
    /// the [crate docs](crate)) instead of -32600, and a cancelled `session/prompt` is an
    /// ordinary cancelled request (in v2 it only acknowledges the prompt; the turn reports its
    /// own end). A connection that negotiates its version switches to these rules by itself
    /// when v2 is chosen (see [`crate::version`]).
    pub fn v2_rules(mut self) -> Self {
        self.v2_rules = true;
        self
    }

    /// Runs the connection as a link in a chain (a proxy, a conductor): the handler's
    /// [`Handler::forward`] is asked about every incoming request and notification, in arrival
    /// order, and what it forwards goes out in that order, each request's answer coming back
    /// verbatim. Requests it does not forward start in that order too.
    ///
    /// The cancellation rules stay those of the side the connection plays, so a chain answers
    /// its peer as an agent or a client must even when a link further on is stuck. A forwarded
    /// request that is cancelled here:
    ///
    /// | request | what is passed on | its answer |
    /// |---|---|---|
    /// | `session/prompt` (v1) | after a `session/cancel`: nothing more (the `session/cancel` is itself forwarded); after a `$/cancel_request`: `$/cancel_request` | what comes back within the grace period if it says `"stopReason":"cancelled"`, else exactly `{"stopReason":"cancelled"}` |
    /// | `session/request_permission` | `$/cancel_request` | the `cancelled` outcome, at once |
    /// | anything else | `$/cancel_request` | what comes back within the grace period, result or error; else -32800 |
    ///
    /// A chain's links each wait their own grace period, so give the outer ones at least as
    /// much as the inner ones ([`Connection::cancel_grace`]).
    pub fn forwarding(mut self) -> Self {
        self.forwarding = true;
        self
    }

    /// How a forwarding connection finds a `$/cancel_request` wrapped in another notification
    /// (the proxy layer's successor envelope), so that the cancellation rules above apply to
    /// it as to a plain one. Set by the proxy layer, which owns the envelope's format.
    pub(crate) fn wrapped_cancels(mut self, unwrap: WrappedCancel) -> Self {
        self.wrapped_cancel = Some(unwrap);
        self
    }

    /// Ends the connection at the first input that is not a JSON-RPC message (after answering
    /// it as usual), instead of serving on: for a peer that is part of one's own machinery,
    /// such as a conductor's components, where a stray line on stdout means it is broken and
    /// waiting for it would only hang whoever waits for its answers.
    pub fn end_on_bad_input(mut self) -> Self {
        self.end_on_bad_input = true;
        self
    }

    /// The longest accepted line in bytes; longer lines are skipped and answered -32600.
    pub fn max_line_bytes(mut self, n: usize) -> Self {
        self.max_line_bytes = n.max(1);
        self
    }

    /// How many incoming request handlers may run at once; further requests wait for a slot
    /// (see [`Connection::max_queued_requests`]).
    ///
    /// A request waits for a slot even when the handlers holding the slots wait for it: a
    /// chain of nested calls between the two sides (a handler calling the peer, whose handler
    /// calls back, ...) deeper than this bound can wait forever. The default (1024) makes that
    /// practically unreachable; see the [module docs](self).
    ///
    /// Clamped to `1..=usize::MAX >> 4` (half of tokio's `Semaphore::MAX_PERMITS`, so that both
    /// request bounds together fit one semaphore).
    pub fn max_concurrent_requests(mut self, n: usize) -> Self {
        self.max_concurrent_requests = n.clamp(1, Semaphore::MAX_PERMITS / 2);
        self
    }

    /// How many incoming requests may wait, each in a task of its own, for a handler slot when
    /// [`max_concurrent_requests`](Connection::max_concurrent_requests) are running. Requests
    /// beyond both bounds go to the backlog ([`Connection::max_backlog_bytes`]); the reader
    /// never stops for requests, so cancellations and responses still get through.
    /// Clamped to `usize::MAX >> 4`, like `max_concurrent_requests`.
    pub fn max_queued_requests(mut self, n: usize) -> Self {
        self.max_queued_requests = n.min(Semaphore::MAX_PERMITS / 2);
        self
    }

    /// How many bytes of incoming requests may be held, unstarted, once
    /// `max_concurrent_requests` + `max_queued_requests` are reached. A held request counts its
    /// params, id and method plus 640 bytes, and starts in arrival order when a waiting slot
    /// frees up. A request that does not fit is refused at once with
    /// [`codes::OVERLOADED`](crate::codes::OVERLOADED) ("Overloaded, retry later", with a
    /// `retryAfterMs` hint). 0 holds nothing: requests beyond the two task bounds are refused.
    /// See the [module docs](self#overload-a-peer-that-sends-more-than-it-lets-us-finish) for
    /// why the reader holds requests rather than stop reading.
    pub fn max_backlog_bytes(mut self, n: usize) -> Self {
        self.max_backlog_bytes = n;
        self
    }

    /// How many outgoing messages may wait for the writer; senders wait when it is full.
    /// Clamped to `1..=usize::MAX >> 3` (tokio's `Semaphore::MAX_PERMITS`, the most a bounded
    /// channel holds).
    pub fn write_queue_capacity(mut self, n: usize) -> Self {
        self.write_queue_capacity = n.clamp(1, Semaphore::MAX_PERMITS);
        self
    }

    /// How many incoming notifications may wait for the notification handler; the reader waits
    /// when it is full. Clamped to `1..=usize::MAX >> 3` (tokio's `Semaphore::MAX_PERMITS`, the
    /// most a bounded channel holds).
    pub fn notification_queue_capacity(mut self, n: usize) -> Self {
        self.notification_queue_capacity = n.clamp(1, Semaphore::MAX_PERMITS);
        self
    }

    /// How long a cancelled handler may run on before its future is dropped. A typed handler
    /// that never asks for its token gets none of it (see the [module docs](self)). It also
    /// bounds the waits at the end of the connection; a huge value (up to `Duration::MAX`)
    /// means waiting as long as the handlers and the writer need.
    pub fn cancel_grace(mut self, grace: Duration) -> Self {
        self.cancel_grace = grace;
        self
    }

    /// Copies every message in and out to `tap` as JSON lines:
    /// `{"dir":"in","msg":...}` / `{"dir":"out","msg":...}`; input that is not JSON is recorded
    /// as `{"dir":"in","invalid":"<lossy text>"}`, a skipped oversized line as
    /// `{"dir":"in","oversized":LEN}`. A slow tap slows the connection down (nothing is lost).
    pub fn wire_tap(mut self, tap: impl AsyncWrite + Send + Unpin + 'static) -> Self {
        self.tap = Some(Box::new(tap));
        self
    }

    /// Builds the connection over `reader`/`writer` with `handler` for incoming messages.
    ///
    /// Returns the [`Peer`] handle and the [`Serve`] future that does the I/O. Nothing happens
    /// until `Serve` is polled (spawn it, or `select!` on it); it needs a tokio runtime and
    /// resolves when the connection ends.
    pub fn serve<R, W, H>(self, reader: R, writer: W, handler: H) -> (Peer, Serve)
    where
        R: AsyncRead + Send + Unpin + 'static,
        W: AsyncWrite + Send + Unpin + 'static,
        H: Handler,
    {
        self.serve_with(reader, writer, |_| handler)
    }

    /// Like [`Connection::serve`], but builds the handler from the connection's [`Peer`], for
    /// a handler that keeps a handle to the other side from the start.
    pub fn serve_with<R, W, H, F>(self, reader: R, writer: W, make_handler: F) -> (Peer, Serve)
    where
        R: AsyncRead + Send + Unpin + 'static,
        W: AsyncWrite + Send + Unpin + 'static,
        H: Handler,
        F: FnOnce(&Peer) -> H,
    {
        // Only the boxing is generic: everything behind `start` is compiled once, here.
        let (peer, parts) = self.prepare();
        let handler = Arc::new(make_handler(&peer));
        let serve = parts.start(Box::new(reader), Box::new(writer), handler);
        (peer, serve)
    }

    /// The connection's state, before the handler exists (it may need the [`Peer`]).
    fn prepare(self) -> (Peer, Prepared) {
        let (tap_tx, tap_rx) = match self.tap {
            Some(_) => {
                let (tx, rx) = mpsc::channel(1024);
                (Some(tx), Some(rx))
            }
            None => (None, None),
        };
        let (out, out_rx) = writer::Output::new(self.write_queue_capacity, tap_tx);
        let (held_cancels, held_cancels_rx) = mpsc::unbounded_channel();
        let shared = Arc::new(Shared::new(
            out,
            LoadGauges::new(self.max_concurrent_requests, self.max_queued_requests),
            held_cancels,
            self.v2_rules,
            self.owner,
            self.forwarding,
            self.cancel_grace,
        ));
        let options = Options {
            max_line_bytes: self.max_line_bytes,
            max_backlog_bytes: self.max_backlog_bytes,
            notification_queue_capacity: self.notification_queue_capacity,
            cancel_grace: self.cancel_grace,
            forwarding: self.forwarding,
            wrapped_cancel: self.wrapped_cancel,
            end_on_bad_input: self.end_on_bad_input,
        };
        let peer = Peer { shared: shared.clone() };
        (peer, Prepared { options, shared, out_rx, held_cancels_rx, tap: self.tap.zip(tap_rx) })
    }
}

/// A connection between [`Connection::prepare`] and its start.
struct Prepared {
    options: Options,
    shared: Arc<Shared>,
    out_rx: mpsc::Receiver<Vec<u8>>,
    held_cancels_rx: mpsc::UnboundedReceiver<Id>,
    tap: Option<(writer::Tap, mpsc::Receiver<Vec<u8>>)>,
}

impl Prepared {
    fn start(self, reader: BoxReader, writer: BoxWriter, handler: Arc<dyn DynHandler>) -> Serve {
        let Prepared { options, shared, out_rx, held_cancels_rx, tap } = self;
        let fut = run(options, shared.clone(), reader, writer, out_rx, held_cancels_rx, tap, handler);
        Serve { fut: Box::pin(fut), shared }
    }
}

type BoxReader = Box<dyn AsyncRead + Send + Unpin>;
type BoxWriter = Box<dyn AsyncWrite + Send + Unpin>;

/// The running connection: resolves when it ends (see the [module docs](self)). Dropping it
/// ends the connection at once.
#[must_use = "the connection does nothing unless `Serve` is polled"]
pub struct Serve {
    fut: Pin<Box<dyn Future<Output = Result<(), Error>> + Send>>,
    shared: Arc<Shared>,
}

impl Drop for Serve {
    /// Dropped early (or never polled), the connection ends: pending calls fail instead of
    /// waiting forever. The spawned tasks stop with their `AbortOnDrop` handles. After a normal
    /// end this changes nothing.
    fn drop(&mut self) {
        self.shared.close();
        self.shared.release_waiters();
        // The layers' close hooks run too (a v2 turn being waited for fails at once).
        self.shared.extensions.close();
        // At once, not when the aborted writer task gets to it: no direct write after this.
        self.shared.out.detach();
    }
}

impl fmt::Debug for Serve {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Serve").finish_non_exhaustive()
    }
}

impl Future for Serve {
    type Output = Result<(), Error>;
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        self.fut.as_mut().poll(cx)
    }
}

#[allow(clippy::too_many_arguments)]
async fn run(
    options: Options,
    shared: Arc<Shared>,
    reader: BoxReader,
    writer: BoxWriter,
    out_rx: mpsc::Receiver<Vec<u8>>,
    held_cancels: mpsc::UnboundedReceiver<Id>,
    tap: Option<(writer::Tap, mpsc::Receiver<Vec<u8>>)>,
    handler: Arc<dyn DynHandler>,
) -> Result<(), Error> {
    let grace = options.cancel_grace;

    let writer_stop = CancellationToken::new();
    let tap_stop = CancellationToken::new();
    let tap_task = tap.map(|(w, rx)| AbortOnDrop::spawn(writer::tap_loop(rx, w, tap_stop.clone())));
    let mut writer_task = AbortOnDrop::spawn({
        let (shared, stop) = (shared.clone(), writer_stop.clone());
        async move { writer::writer_loop(out_rx, writer, &shared.out, &shared.closed, stop).await }
    });
    let (notif_tx, notif_rx) = mpsc::channel(options.notification_queue_capacity);
    let mut notif_task = AbortOnDrop::spawn(crate::core::notifications::notification_loop(
        notif_rx,
        handler.clone(),
        shared.clone(),
        grace,
    ));
    let requests = RequestTasks::default();

    let backlog_stop = CancellationToken::new();
    let starter = Starter { shared: shared.clone(), handler: handler.clone(), grace, tasks: requests.clone() };
    let mut backlog_task = AbortOnDrop::spawn(requests::backlog_loop(starter, held_cancels, backlog_stop.clone()));

    let read_result = {
        let mut reader_loop = Reader::new(options, shared.clone(), handler, notif_tx, requests.clone());
        tokio::select! {
            r = reader_loop.run(reader) => r,
            () = shared.closed.cancelled() => Ok(()),
        }
        // `reader_loop` (and with it the notification queue's sender) is dropped here, so the
        // notification task sees the end of its queue once it has drained it.
    };

    // Requests still in the backlog never run: they are answered as cancelled while the writer
    // still works. From here on, a peer that reads, however slowly, gets every answer; one
    // that no longer reads (nothing written for the grace period) holds us up no longer.
    backlog_stop.cancel();
    let stall = grace.max(Duration::from_millis(10));
    let _ = while_output_moves(&shared, stall, &mut backlog_task).await;
    drop(backlog_task);
    requests::answer_all_cancelled(&shared, stall).await;
    if let Err(e) = &read_result {
        tracing::warn!(error = %e, "acp connection: read failed");
    }

    // Fail pending calls at once and cancel every in-flight handler.
    shared.close();

    // Handlers get their grace period; their answers still go out while the writer runs, and
    // a full output queue holds them only while the peer still reads. Saturating: a huge grace
    // (`Duration::MAX`) means waiting as long as the handlers need.
    let handlers_grace = grace.saturating_mul(2).saturating_add(Duration::from_millis(50));
    let _ = while_output_moves(&shared, handlers_grace, requests.all_done()).await;

    // Queued notifications are still handled (bounded by the grace period per handler).
    let _ = (&mut notif_task).await;
    shared.release_waiters();
    shared.extensions.close();

    // The writer writes out what is queued, then stops.
    writer_stop.cancel();
    let _ = while_output_moves(&shared, stall, &mut writer_task).await;
    let write_result = shared.out.take_failure().map_or(Ok(()), Err);
    if let Some(tap_task) = tap_task {
        tap_stop.cancel();
        let _ = tokio::time::timeout(grace.max(Duration::from_millis(10)), tap_task).await;
    }

    read_result.map_err(Error::Io)?;
    write_result.map_err(Error::Io)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_late_mark_handled_does_not_undo_release_waiters() {
        let (_peer, prepared) = Connection::new().prepare();
        let shared = prepared.shared;
        shared.mark_handled(1);
        shared.release_waiters();
        // The notification task's last word, after `Serve` was dropped.
        shared.mark_handled(2);
        tokio::time::timeout(Duration::from_secs(5), shared.wait_for_notifications(3))
            .await
            .expect("nobody waits for notifications once the waiters are released");
    }
}
