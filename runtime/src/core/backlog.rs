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
use tokio_util::sync::CancellationToken;

use crate::core::batch::ReplyTo;
use crate::core::jsonrpc::Id;
use crate::core::load::LoadGauges;
use crate::core::methods::RequestKind;

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
    pub(crate) fn take_oldest(&mut self, gauges: &LoadGauges) -> Option<Held> {
        let (_, held) = self.held.pop_first()?;
        Some(self.taken(held, gauges))
    }

    /// Takes the held request `id` if it was cancelled (a report may be stale: the request it
    /// was about has started, and a new one reuses its id).
    pub(crate) fn take_cancelled(&mut self, id: &Id, gauges: &LoadGauges) -> Option<Held> {
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

    /// The ids of the held requests.
    pub(crate) fn ids(&self) -> impl Iterator<Item = &Id> {
        self.held.values().map(|held| &held.id)
    }

    /// Bytes charged now.
    pub(crate) fn bytes(&self) -> usize {
        self.bytes
    }
}
