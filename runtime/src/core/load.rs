//! The request bounds of a connection and how full they are: the semaphores that admit and
//! run incoming requests, the backlog's size, the refusals, and the public snapshot
//! [`RequestLoad`].

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use tokio::sync::Semaphore;

/// How busy a connection is with the peer's requests: a snapshot from [`Peer::request_load`](crate::Peer::request_load)
/// (see the [overload section](crate::connection#overload-a-peer-that-sends-more-than-it-lets-us-finish)).
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
    pub(crate) fn new(max_concurrent: usize, max_queued: usize) -> Self {
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

    /// The `max_concurrent_requests` bound.
    #[cfg_attr(not(feature = "unstable_protocol_v2"), allow(dead_code))]
    pub(crate) fn max_concurrent(&self) -> usize {
        self.max_concurrent
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
