//! What a request's task and its handler share beyond the request: whether the handler
//! watches its cancellation token, and when its answer was queued.

use std::sync::Arc;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU8, Ordering};
use std::time::Duration;

use tokio_util::sync::CancellationToken;

/// What a request's task and its handler share beyond the request itself.
///
/// Whether the handler watches its cancellation token decides how long the runtime waits for
/// it once the token fires. A raw handler's use of the token cannot be seen, so it always gets
/// the connection's grace period. The typed layer can see it: a typed handler that never asked
/// for its token (`cancelled()`, `is_cancelled()`, `cancellation_token()`) ignores it, and
/// waiting for it to finish would only delay the answer.
///
/// It also tells, on demand, when the answer has been queued for writing: anything queued
/// after that goes out after it (a v2 turn's first updates follow the prompt's answer).
#[derive(Clone, Debug, Default)]
pub(crate) struct Watch(Arc<WatchState>);

#[derive(Debug, Default)]
struct WatchState {
    watch: AtomicU8,
    /// Created only when someone waits for the answer (see [`Watch::answered`]).
    answered: OnceLock<CancellationToken>,
}

const UNTRACKED: u8 = 0;
const UNWATCHED: u8 = 1;
const WATCHED: u8 = 2;

impl Watch {
    /// The typed layer handles this request: from now on it reports whether the token is used.
    pub(crate) fn track(&self) {
        let _ = self.0.watch.compare_exchange(UNTRACKED, UNWATCHED, Ordering::Relaxed, Ordering::Relaxed);
    }

    /// The handler asked for its token.
    pub(crate) fn watched(&self) {
        self.0.watch.store(WATCHED, Ordering::Relaxed);
    }

    /// The time a cancelled handler gets to finish: `grace`, or none for a typed handler that
    /// never looked at its token (it is still polled once, in case it is about to finish).
    pub(crate) fn grace(&self, grace: Duration) -> Duration {
        if self.0.watch.load(Ordering::Relaxed) == UNWATCHED { Duration::ZERO } else { grace }
    }

    /// A token that fires once the request's answer is queued for writing (or can no longer
    /// be written).
    #[cfg_attr(not(feature = "unstable_protocol_v2"), allow(dead_code))]
    pub(crate) fn answered(&self) -> CancellationToken {
        self.0.answered.get_or_init(CancellationToken::new).clone()
    }

    /// The answer is queued (called by the request's task).
    pub(crate) fn mark_answered(&self) {
        if let Some(token) = self.0.answered.get() {
            token.cancel();
        }
    }
}
