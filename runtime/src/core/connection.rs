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

use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;

use serde_json::value::RawValue;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::{Notify, Semaphore, mpsc, oneshot};
use tokio_util::sync::CancellationToken;

use crate::core::backlog::{self, Backlog};
use crate::core::error::Error;
use crate::core::framing::DEFAULT_MAX_LINE_BYTES;
use crate::core::handler::{DynHandler, Handler};
use crate::core::jsonrpc::{self, ErrorObject, Id};
use crate::core::methods;
use crate::core::peer::Peer;
use crate::core::router::Router;
use crate::core::tasks::{AbortOnDrop, RequestTasks};
use crate::core::writer::{self};

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

/// The params of the `$/cancel_request` that a notification (method, params) carries in a
/// successor envelope, if it is one.
pub(crate) type WrappedCancel = for<'a> fn(&str, Option<&'a RawValue>) -> Option<Option<&'a RawValue>>;

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
        self.wrapped_cancel = Some(crate::proxy::wrapped_cancel_request);
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
        let (out, out_rx) = writer::Output::new(self.write_queue_capacity, self.tap.is_none());
        let (tap_tx, tap_rx) = match self.tap {
            Some(_) => {
                let (tx, rx) = mpsc::channel(1024);
                (Some(tx), Some(rx))
            }
            None => (None, None),
        };
        let (held_cancels, held_cancels_rx) = mpsc::unbounded_channel();
        let shared = Arc::new(Shared {
            out,
            tap: tap_tx,
            load: LoadGauges::new(self.max_concurrent_requests, self.max_queued_requests),
            held_cancels,
            backlog: Mutex::new(Backlog::default()),
            backlog_grew: Notify::new(),
            next_id: AtomicI64::new(0),
            pending: Mutex::new(PendingCalls::default()),
            inflight: Mutex::new(HashMap::new()),
            closed: CancellationToken::new(),
            handled: AtomicU64::new(0),
            handled_waiters: AtomicUsize::new(0),
            handled_notify: Notify::new(),
            client_init: Mutex::new(None),
            #[cfg(feature = "unstable_protocol_v2")]
            client_init_v2: Mutex::new(None),
            #[cfg(feature = "unstable_protocol_v2")]
            v2_turns: Default::default(),
            #[cfg(feature = "unstable_protocol_v2")]
            v2_foreground: Default::default(),
            v2: AtomicBool::new(self.v2_rules),
            owner: self.owner.map(OnceLock::from).unwrap_or_default(),
            forwarding: self.forwarding,
            session_work: Mutex::new(SessionWork::default()),
            session_work_done: Notify::new(),
            #[cfg(feature = "unstable_protocol_v2")]
            cancel_grace: self.cancel_grace,
            #[cfg(feature = "unstable_protocol_v2")]
            v2_turn_slots: Arc::new(Semaphore::new(self.max_concurrent_requests)),
        });
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

#[derive(Clone, Copy, Debug)]
pub(crate) struct Options {
    pub(crate) max_line_bytes: usize,
    pub(crate) max_backlog_bytes: usize,
    pub(crate) notification_queue_capacity: usize,
    pub(crate) cancel_grace: Duration,
    pub(crate) forwarding: bool,
    pub(crate) wrapped_cancel: Option<WrappedCancel>,
    pub(crate) end_on_bad_input: bool,
}

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
        // A v2 turn being waited for ends too (`prompt_turn` fails with `ConnectionClosed`).
        #[cfg(feature = "unstable_protocol_v2")]
        self.shared.v2_turns.close();
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
    let mut writer_task = AbortOnDrop::spawn(writer::writer_loop(out_rx, writer, shared.clone(), writer_stop.clone()));
    let (notif_tx, notif_rx) = mpsc::channel(options.notification_queue_capacity);
    let mut notif_task =
        AbortOnDrop::spawn(crate::core::router::notification_loop(notif_rx, handler.clone(), shared.clone(), grace));
    let requests = RequestTasks::default();

    let backlog_stop = CancellationToken::new();
    let starter = backlog::Starter { shared: shared.clone(), handler: handler.clone(), grace, tasks: requests.clone() };
    let mut backlog_task = AbortOnDrop::spawn(backlog::backlog_loop(starter, held_cancels, backlog_stop.clone()));

    let read_result = {
        let mut router = Router::new(options, shared.clone(), handler, notif_tx, requests.clone());
        tokio::select! {
            r = router.run(reader) => r,
            () = shared.closed.cancelled() => Ok(()),
        }
        // `router` (and with it the notification queue's sender) is dropped here, so the
        // notification task sees the end of its queue once it has drained it.
    };

    // Requests still in the backlog never run: they are answered as cancelled while the writer
    // still works. From here on, a peer that reads, however slowly, gets every answer; one
    // that no longer reads (nothing written for the grace period) holds us up no longer.
    backlog_stop.cancel();
    let stall = grace.max(Duration::from_millis(10));
    let _ = while_output_moves(&shared, stall, &mut backlog_task).await;
    drop(backlog_task);
    backlog::answer_all_cancelled(&shared, stall).await;
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
    #[cfg(feature = "unstable_protocol_v2")]
    shared.v2_turns.close();

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

/// `done`'s output, waiting for it as long as the transport takes bytes at least once every
/// `stall`; `None` once it has taken none for that long (the peer stopped reading).
pub(crate) async fn while_output_moves<F: Future>(shared: &Shared, stall: Duration, done: F) -> Option<F::Output> {
    let mut done = std::pin::pin!(done);
    let mut seen = shared.out.progress();
    loop {
        if let Ok(output) = tokio::time::timeout(stall, &mut done).await {
            return Some(output);
        }
        let now = shared.out.progress();
        if now == seen {
            return None;
        }
        seen = now;
    }
}

// ---- state shared by the reader, the tasks and every Peer ---------------------------------

pub(crate) enum Reply {
    /// The peer answered; deliver once `barrier` notifications have been handled.
    Response { result: Result<Box<RawValue>, ErrorObject>, barrier: u64 },
    /// The call failed without an answer.
    Failed(Error),
}

pub(crate) struct PendingCall {
    tx: oneshot::Sender<Reply>,
    /// For outgoing `session/request_permission`: its session.
    permission_session: Option<Arc<str>>,
    /// Run by the reader on the answer, before it reads the next message.
    on_answer: Option<AnswerHook>,
}

/// What a call must settle in reading order, before anything the peer sent after its answer is
/// dispatched: `initialize`'s answer fixes the connection's protocol version, and the peer may
/// send requests of that version right behind it. The hook is given the answer and its barrier
/// (how many notifications were read before it).
#[cfg(feature = "unstable_protocol_v2")]
pub(crate) type AnswerHook = Box<dyn FnOnce(&Result<Box<RawValue>, ErrorObject>, u64) + Send>;
/// Only v2's calls need one: without it, a call's hook slot costs nothing.
#[cfg(not(feature = "unstable_protocol_v2"))]
pub(crate) type AnswerHook = std::convert::Infallible;

#[cfg(feature = "unstable_protocol_v2")]
fn run_hook(on_answer: AnswerHook, result: &Result<Box<RawValue>, ErrorObject>, barrier: u64) {
    on_answer(result, barrier);
}

#[cfg(not(feature = "unstable_protocol_v2"))]
fn run_hook(on_answer: AnswerHook, _: &Result<Box<RawValue>, ErrorObject>, _: u64) {
    match on_answer {}
}

#[derive(Default)]
pub(crate) struct PendingCalls {
    closed: bool,
    map: HashMap<i64, PendingCall>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum RequestKind {
    Prompt,
    Permission,
    /// A protocol v2 `session/prompt`: `session/cancel` does not cancel the request (it only
    /// acknowledges the prompt) but the turn it starts, through the session's scopes; it marks
    /// the request ([`Shared::mark_turns_cancelled`]) so that a turn whose handler has not
    /// started yet, and has no scope yet, starts cancelled.
    Turn,
    Other,
}

impl RequestKind {
    /// The kind of an incoming request. On a protocol v2 connection `session/prompt` only
    /// acknowledges the prompt, and the turn it starts is cancelled through
    /// [`Shared::session_work`] instead (see [`RequestKind::Turn`]).
    pub(crate) fn of(method: &str, v2: bool) -> Self {
        match method {
            methods::SESSION_PROMPT if v2 => RequestKind::Turn,
            methods::SESSION_PROMPT => RequestKind::Prompt,
            methods::SESSION_REQUEST_PERMISSION => RequestKind::Permission,
            _ => RequestKind::Other,
        }
    }
}

pub(crate) struct InFlight {
    pub(crate) token: CancellationToken,
    pub(crate) kind: RequestKind,
    pub(crate) session: Option<Arc<str>>,
    /// Cancelled on request (`$/cancel_request`, `session/cancel`), not by the connection's
    /// end: then a handler that has not started never does.
    pub(crate) cancel_requested: bool,
    /// Cancelled by a `$/cancel_request` naming it (which the runtime consumes), rather than
    /// by a `session/cancel` (which goes on to the handler): a forwarded `session/prompt`
    /// must then send the next hop a `$/cancel_request` of its own.
    pub(crate) by_cancel_request: bool,
    /// Held in the backlog (no task yet): a cancellation on request tells the backlog task,
    /// which answers it at once.
    pub(crate) held: bool,
    /// A v2 prompt whose session was cancelled (`session/cancel`, `session/close`) since it
    /// was read (see [`RequestKind::Turn`]).
    pub(crate) turn_cancelled: bool,
}

impl InFlight {
    /// Cancels the request on the peer's (or our own `session/cancel`'s) behalf; a held one is
    /// reported to the backlog task through `held_cancels`.
    pub(crate) fn cancel_on_request(&mut self, id: &Id, held_cancels: &mpsc::UnboundedSender<Id>) {
        if self.held && !self.cancel_requested {
            // Once per request, so the channel never holds more than the backlog did.
            let _ = held_cancels.send(id.clone());
        }
        self.cancel_requested = true;
        self.token.cancel();
    }
}

/// How busy a connection is with the peer's requests: a snapshot from [`Peer::request_load`]
/// (see the [overload section](self#overload-a-peer-that-sends-more-than-it-lets-us-finish)).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct RequestLoad {
    /// Handlers running now (at most `max_concurrent_requests`).
    pub running: usize,
    /// Requests with a task of their own whose handler has not started: waiting for a handler
    /// slot or for earlier notifications to be handled (`running + waiting` is at most
    /// `max_concurrent_requests + max_queued_requests`).
    pub waiting: usize,
    /// Requests held in the backlog, without a task.
    pub backlog: usize,
    /// Bytes the backlog is charged for now (at most `max_backlog_bytes`).
    pub backlog_bytes: usize,
    /// The most bytes the backlog was charged for at any time on this connection.
    pub peak_backlog_bytes: usize,
    /// Requests refused with [`codes::OVERLOADED`](crate::codes::OVERLOADED) so far.
    pub refused: u64,
}

/// The request bounds' state, shared by the reader (which admits and holds requests), the
/// backlog task, the request tasks (which release their permits) and [`Peer::request_load`].
pub(crate) struct LoadGauges {
    /// Requests with a task (running or waiting): `max_concurrent + max_queued` permits.
    pub(crate) admitted: Arc<Semaphore>,
    /// Handler slots: `max_concurrent` permits.
    pub(crate) running: Arc<Semaphore>,
    max_concurrent: usize,
    max_admitted: usize,
    /// Written under the backlog's lock; atomics so that they can be read without it.
    backlog: AtomicUsize,
    backlog_bytes: AtomicUsize,
    peak_backlog_bytes: AtomicUsize,
    refused: AtomicU64,
}

impl LoadGauges {
    fn new(max_concurrent: usize, max_queued: usize) -> Self {
        LoadGauges {
            admitted: Arc::new(Semaphore::new(max_concurrent + max_queued)),
            running: Arc::new(Semaphore::new(max_concurrent)),
            max_concurrent,
            max_admitted: max_concurrent + max_queued,
            backlog: AtomicUsize::new(0),
            backlog_bytes: AtomicUsize::new(0),
            peak_backlog_bytes: AtomicUsize::new(0),
            refused: AtomicU64::new(0),
        }
    }

    /// Whether nothing is held. Only the reader adds to the backlog, so it never sees it empty
    /// when it is not.
    pub(crate) fn backlog_is_empty(&self) -> bool {
        self.backlog.load(Ordering::Relaxed) == 0
    }

    /// The backlog changed: it now holds `len` requests charged `bytes`.
    pub(crate) fn set_backlog(&self, len: usize, bytes: usize) {
        self.backlog.store(len, Ordering::Relaxed);
        self.backlog_bytes.store(bytes, Ordering::Relaxed);
        self.peak_backlog_bytes.fetch_max(bytes, Ordering::Relaxed);
    }

    /// The reader refused a request; returns how many requests are in flight (for the answer).
    pub(crate) fn refused(&self) -> usize {
        self.refused.fetch_add(1, Ordering::Relaxed);
        let load = self.snapshot();
        load.running + load.waiting + load.backlog
    }

    pub(crate) fn snapshot(&self) -> RequestLoad {
        let with_task = self.max_admitted.saturating_sub(self.admitted.available_permits());
        let running = self.max_concurrent.saturating_sub(self.running.available_permits());
        RequestLoad {
            running,
            waiting: with_task.saturating_sub(running),
            backlog: self.backlog.load(Ordering::Relaxed),
            backlog_bytes: self.backlog_bytes.load(Ordering::Relaxed),
            peak_backlog_bytes: self.peak_backlog_bytes.load(Ordering::Relaxed),
            refused: self.refused.load(Ordering::Relaxed),
        }
    }
}

pub(crate) struct Shared {
    pub(crate) out: writer::Output,
    pub(crate) tap: Option<mpsc::Sender<Vec<u8>>>,
    /// The request bounds and how full they are.
    pub(crate) load: LoadGauges,
    /// Held requests cancelled on request, for the backlog task to answer.
    pub(crate) held_cancels: mpsc::UnboundedSender<Id>,
    /// Requests beyond the task bounds (see [`crate::backlog`]).
    backlog: Mutex<Backlog>,
    /// The reader held a request (wakes the backlog task).
    pub(crate) backlog_grew: Notify,
    pub(crate) next_id: AtomicI64,
    pending: Mutex<PendingCalls>,
    inflight: Mutex<HashMap<Id, InFlight>>,
    /// Fires when the connection ends.
    pub(crate) closed: CancellationToken,
    /// How many notifications the notification task has handled (`u64::MAX` once it is gone).
    handled: AtomicU64,
    handled_waiters: AtomicUsize,
    handled_notify: Notify,
    /// Agent side: the client's last `initialize` params (see `AgentContext::client_init`).
    pub(crate) client_init: Mutex<Option<Arc<acp_types::InitializeRequest>>>,
    /// Agent side, protocol v2: the client's last `initialize` params.
    #[cfg(feature = "unstable_protocol_v2")]
    client_init_v2: Mutex<Option<Arc<acp_types::v2::InitializeRequest>>>,
    /// Client side, protocol v2: the turns `AgentHandle::prompt_turn` waits for.
    #[cfg(feature = "unstable_protocol_v2")]
    pub(crate) v2_turns: crate::v2::client::TurnWatches,
    /// Agent side, protocol v2: the accepted turns still running, by session.
    #[cfg(feature = "unstable_protocol_v2")]
    pub(crate) v2_foreground: crate::v2::turn::Foreground,
    /// The connection follows protocol v2's rules: batches are accepted, and `session/prompt`
    /// is not answered `{"stopReason":"cancelled"}` when cancelled (see [`RequestKind::of`]).
    v2: AtomicBool,
    /// Who is asking (see [`Connection::owner`]); an anonymous owner is made on first use.
    pub(crate) owner: OnceLock<crate::core::owner::Owner>,
    /// A link in a chain (see [`Connection::forwarding`]).
    pub(crate) forwarding: bool,
    /// Work tied to a session rather than to a request (see [`crate::peer::SessionScope`]).
    session_work: Mutex<SessionWork>,
    /// Woken whenever a session's last piece of work ends (see [`Shared::session_work_ended`]).
    session_work_done: Notify,
    /// How long a cancelled handler may run on (see [`Connection::cancel_grace`]).
    #[cfg(feature = "unstable_protocol_v2")]
    pub(crate) cancel_grace: Duration,
    /// One per v2 turn running after its prompt was answered, as many as requests may run:
    /// a turn outlives its request, and is counted here instead (see `v2::turn`).
    #[cfg(feature = "unstable_protocol_v2")]
    pub(crate) v2_turn_slots: Arc<Semaphore>,
}

/// The tokens of the live [`crate::peer::SessionScope`]s, by session; `session/cancel` fires
/// them. A scope removes its own entry when dropped.
#[derive(Default)]
pub(crate) struct SessionWork {
    next: u64,
    by_session: HashMap<Arc<str>, Vec<(u64, CancellationToken)>>,
}

pub(crate) fn lock_inflight(shared: &Shared) -> MutexGuard<'_, HashMap<Id, InFlight>> {
    lock(&shared.inflight)
}

/// Taken before the in-flight lock when both are needed.
pub(crate) fn lock_backlog(shared: &Shared) -> MutexGuard<'_, Backlog> {
    lock(&shared.backlog)
}

impl Shared {
    pub(crate) fn client_init(&self) -> Option<Arc<acp_types::InitializeRequest>> {
        lock(&self.client_init).clone()
    }

    pub(crate) fn set_client_init(&self, params: acp_types::InitializeRequest) {
        *lock(&self.client_init) = Some(Arc::new(params));
    }

    #[cfg(feature = "unstable_protocol_v2")]
    pub(crate) fn client_init_v2(&self) -> Option<Arc<acp_types::v2::InitializeRequest>> {
        lock(&self.client_init_v2).clone()
    }

    #[cfg(feature = "unstable_protocol_v2")]
    pub(crate) fn set_client_init_v2(&self, params: acp_types::v2::InitializeRequest) {
        *lock(&self.client_init_v2) = Some(Arc::new(params));
    }

    /// Whether the connection follows protocol v2's rules (see [`Shared::v2`]).
    pub(crate) fn speaks_v2(&self) -> bool {
        self.v2.load(Ordering::Acquire)
    }

    /// From now on the connection follows protocol v2's rules (or v1's). Set before the `initialize`
    /// answer that negotiates v2 goes out, so everything the peer sends after reading it is
    /// read under these rules.
    pub(crate) fn set_v2(&self, v2: bool) {
        self.v2.store(v2, Ordering::Release);
    }

    /// Registers a token that `session/cancel` for `session` fires; returns its key.
    pub(crate) fn add_session_work(&self, session: Arc<str>, token: CancellationToken) -> u64 {
        let mut work = lock(&self.session_work);
        work.next += 1;
        let key = work.next;
        work.by_session.entry(session).or_default().push((key, token));
        key
    }

    /// Forgets the token registered under `key`.
    pub(crate) fn remove_session_work(&self, session: &str, key: u64) {
        let mut work = lock(&self.session_work);
        if let Some(tokens) = work.by_session.get_mut(session) {
            tokens.retain(|(k, _)| *k != key);
            if tokens.is_empty() {
                work.by_session.remove(session);
                drop(work);
                self.session_work_done.notify_waiters();
            }
        }
    }

    /// Resolves once no work of `session` is left (at once when there is none).
    pub(crate) async fn session_work_ended(&self, session: &str) {
        loop {
            let woken = self.session_work_done.notified();
            tokio::pin!(woken);
            // Registered before the check, so an end between the two is not missed.
            woken.as_mut().enable();
            if !lock(&self.session_work).by_session.contains_key(session) {
                return;
            }
            woken.await;
        }
    }

    /// Fires every token registered for `session` (an incoming `session/cancel`).
    pub(crate) fn cancel_session_work(&self, session: &str) {
        let work = lock(&self.session_work);
        for (_, token) in work.by_session.get(session).into_iter().flatten() {
            token.cancel();
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // No code panics while holding these locks; if one ever did, the data is still usable.
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Shared {
    /// Queues one encoded line for the writer, waiting while the queue is full.
    pub(crate) async fn send_line(&self, line: Vec<u8>) -> Result<(), Error> {
        self.out.send(line, false).await
    }

    /// Like [`Shared::send_line`], but the line is written at once when the writer is idle (for
    /// requests and responses, whose latency counts; see [`writer`]).
    pub(crate) async fn send_line_direct(&self, line: Vec<u8>) -> Result<(), Error> {
        self.out.send(line, true).await
    }

    pub(crate) fn register_call(
        &self,
        id: i64,
        tx: oneshot::Sender<Reply>,
        permission_session: Option<Arc<str>>,
        on_answer: Option<AnswerHook>,
    ) -> Result<(), Error> {
        let mut pending = lock(&self.pending);
        if pending.closed {
            return Err(Error::ConnectionClosed);
        }
        pending.map.insert(id, PendingCall { tx, permission_session, on_answer });
        Ok(())
    }

    /// Removes a pending call; `true` if it was still pending.
    pub(crate) fn forget_call(&self, id: i64) -> bool {
        lock(&self.pending).map.remove(&id).is_some()
    }

    /// Completes a pending call; `false` if no call has that id.
    pub(crate) fn complete_call(&self, id: i64, reply: Reply) -> bool {
        let call = lock(&self.pending).map.remove(&id);
        match call {
            Some(call) => {
                if let (Some(on_answer), Reply::Response { result, barrier }) = (call.on_answer, &reply) {
                    run_hook(on_answer, result, *barrier);
                }
                // The caller may have just given up; then nobody needs the reply.
                let _ = call.tx.send(reply);
                true
            }
            None => false,
        }
    }

    /// Resolves our pending `session/request_permission` calls of `session` as cancelled, and
    /// tells the peer (`$/cancel_request`).
    pub(crate) fn resolve_outgoing_permissions(&self, session: &str) {
        let resolved: Vec<(i64, PendingCall)> = {
            let mut pending = lock(&self.pending);
            let ids: Vec<i64> = pending
                .map
                .iter()
                .filter(|(_, c)| c.permission_session.as_deref() == Some(session))
                .map(|(id, _)| *id)
                .collect();
            ids.into_iter().filter_map(|id| pending.map.remove(&id).map(|c| (id, c))).collect()
        };
        for (id, call) in resolved {
            let result = RawValue::from_string(methods::CANCELLED_PERMISSION_RESULT.to_owned())
                .map_err(ErrorObject::internal_error);
            let _ = call.tx.send(Reply::Response { result, barrier: 0 });
            self.send_cancel_request(id);
        }
    }

    /// Cancels in-flight incoming requests of `kind` for `session`.
    pub(crate) fn cancel_incoming(&self, kind: RequestKind, session: &str) {
        let mut inflight = lock(&self.inflight);
        for (id, entry) in inflight.iter_mut() {
            if entry.kind == kind && entry.session.as_deref() == Some(session) {
                entry.cancel_on_request(id, &self.held_cancels);
            }
        }
    }

    /// Marks the in-flight v2 prompts of `session` cancelled (see [`RequestKind::Turn`]).
    /// Called before the session's scopes are cancelled: a turn creates its scope, then asks
    /// [`Shared::turn_cancelled`], so a cancel reaches it one way or the other.
    pub(crate) fn mark_turns_cancelled(&self, session: &str) {
        for entry in lock(&self.inflight).values_mut() {
            if entry.kind == RequestKind::Turn && entry.session.as_deref() == Some(session) {
                entry.turn_cancelled = true;
            }
        }
    }

    /// Whether in-flight v2 prompt `id`'s session was cancelled since it was read.
    #[cfg(feature = "unstable_protocol_v2")]
    pub(crate) fn turn_cancelled(&self, id: &Id) -> bool {
        lock(&self.inflight).get(id).is_some_and(|entry| entry.turn_cancelled)
    }

    /// Whether in-flight request `id` was cancelled by a `$/cancel_request` (see [`InFlight`]).
    pub(crate) fn cancelled_by_cancel_request(&self, id: &Id) -> bool {
        lock(&self.inflight).get(id).is_some_and(|entry| entry.by_cancel_request)
    }

    /// Whether in-flight request `id` was cancelled on request (see [`InFlight`]).
    pub(crate) fn cancel_requested(&self, id: &Id) -> bool {
        lock(&self.inflight).get(id).is_some_and(|entry| entry.cancel_requested)
    }

    /// Client side of `session/cancel`: our in-flight incoming permission requests of the
    /// session are cancelled (and answered `cancelled` by their tasks at once).
    pub(crate) fn cancel_incoming_permissions(&self, session: &str) {
        self.cancel_incoming(RequestKind::Permission, session);
    }

    /// Sends `$/cancel_request` from a synchronous context (a dropped call future). It goes
    /// through the same FIFO queue, behind the request it cancels; when the queue is full the
    /// send continues in a spawned task rather than being lost.
    pub(crate) fn send_cancel_request(&self, id: i64) {
        #[derive(serde::Serialize)]
        struct Params {
            #[serde(rename = "requestId")]
            request_id: i64,
        }
        let mut line = Vec::with_capacity(96);
        if jsonrpc::encode_notification(&mut line, methods::CANCEL_REQUEST, Some(&Params { request_id: id })).is_err() {
            return;
        }
        match self.out.queue.try_send(line) {
            Ok(()) => {}
            Err(mpsc::error::TrySendError::Closed(_)) => {}
            Err(mpsc::error::TrySendError::Full(line)) => {
                if let Ok(handle) = tokio::runtime::Handle::try_current() {
                    let tx = self.out.queue.clone();
                    // Boxed: the task then shares tokio's task code with the connection's
                    // other boxed tasks (see `tasks::spawn_boxed`).
                    let send: Pin<Box<dyn Future<Output = ()> + Send>> = Box::pin(async move {
                        let _ = tx.send(line).await;
                    });
                    handle.spawn(send);
                }
            }
        }
    }

    /// The connection ends: the token fires (cancelling every handler, whose tokens are its
    /// children) and every pending call fails at once.
    pub(crate) fn close(&self) {
        self.closed.cancel();
        let calls = {
            let mut pending = lock(&self.pending);
            pending.closed = true;
            std::mem::take(&mut pending.map)
        };
        for (_, call) in calls {
            let _ = call.tx.send(Reply::Failed(Error::ConnectionClosed));
        }
    }

    /// The notification task handled notification number `seq`.
    pub(crate) fn mark_handled(&self, seq: u64) {
        // Never lower: a handler that finishes after `Serve` was dropped must not take back the
        // `u64::MAX` of `release_waiters` (its task is aborted only at its next await).
        self.handled.fetch_max(seq, Ordering::SeqCst);
        // Waking is a lock on the Notify; skip it when nobody waits (the common case).
        if self.handled_waiters.load(Ordering::SeqCst) > 0 {
            self.handled_notify.notify_waiters();
        }
    }

    /// No notification will be handled any more: nobody may wait for one.
    pub(crate) fn release_waiters(&self) {
        self.mark_handled(u64::MAX);
    }

    /// Whether the current task runs one of this connection's notification handlers.
    pub(crate) fn in_notification_handler(&self) -> bool {
        let me = self as *const Shared as usize;
        crate::core::router::IN_NOTIFICATION_HANDLER.try_with(|conn| *conn == me).unwrap_or(false)
    }

    /// Waits until `barrier` notifications have been handled (contract 3), unless we are inside
    /// this connection's notification handler, which would wait for itself.
    pub(crate) async fn wait_for_notifications(&self, barrier: u64) {
        if self.handled.load(Ordering::SeqCst) >= barrier || self.in_notification_handler() {
            return;
        }
        self.handled_waiters.fetch_add(1, Ordering::SeqCst);
        struct Unregister<'a>(&'a AtomicUsize);
        impl Drop for Unregister<'_> {
            fn drop(&mut self) {
                self.0.fetch_sub(1, Ordering::SeqCst);
            }
        }
        let _unregister = Unregister(&self.handled_waiters);
        loop {
            let notified = self.handled_notify.notified();
            tokio::pin!(notified);
            // Register before checking, so a `notify_waiters` between the check and the await
            // is not missed.
            notified.as_mut().enable();
            if self.handled.load(Ordering::SeqCst) >= barrier {
                return;
            }
            notified.await;
        }
    }
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
