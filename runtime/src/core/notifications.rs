//! The notification task: the peer's notifications handled one at a time, in arrival order
//! (on a forwarding connection, requests take the same queue so that what is forwarded keeps
//! its order), each within the grace period once the connection has ended.

use std::borrow::Cow;
use std::sync::Arc;
use std::time::Duration;

use serde_json::value::RawValue;
use tokio::sync::mpsc;

use crate::core::catch_unwind::{CatchUnwind, panic_message};
use crate::core::handler::{DynHandler, IncomingNotification};
use crate::core::peer::Peer;
use crate::core::requests::{QueuedRequest, after_close, start_or_forward};
use crate::core::state::{IN_NOTIFICATION_HANDLER, Shared};

/// A notification waiting for the notification task; `seq` numbers them from 1. On a
/// forwarding connection requests take the same queue (`request`), so that what is forwarded
/// keeps the order it came in; they do not count as notifications (`seq` is that of the last
/// notification before them).
pub(crate) struct Queued {
    pub(crate) method: Cow<'static, str>,
    pub(crate) params: Option<Box<RawValue>>,
    pub(crate) seq: u64,
    pub(crate) request: Option<Box<QueuedRequest>>,
}

/// Handles queued notifications one at a time, in order, until the queue ends.
pub(crate) async fn notification_loop(
    mut rx: mpsc::Receiver<Queued>,
    handler: Arc<dyn DynHandler>,
    shared: Arc<Shared>,
    grace: Duration,
) {
    let me = Arc::as_ptr(&shared) as usize;
    while let Some(queued) = rx.recv().await {
        if let Some(request) = queued.request {
            start_or_forward(shared.clone(), handler.clone(), *request, grace).await;
            continue;
        }
        if shared.forwarding {
            if let Some(forward) = handler.forward_notification_dyn(&queued.method, queued.params.as_deref()) {
                if let Err(e) = forward.to.notify_raw(&forward.method, forward.params.as_deref()).await {
                    tracing::debug!(error = %e, method = %forward.method, "acp connection: forwarded notification not sent");
                }
                shared.mark_handled(queued.seq);
                continue;
            }
        }
        let notification = IncomingNotification {
            method: queued.method,
            params: queued.params,
            peer: Peer { shared: shared.clone() },
            seq: queued.seq,
        };
        let handler = &handler;
        let fut = IN_NOTIFICATION_HANDLER
            .scope(me, CatchUnwind::new(async move { handler.handle_notification_boxed(notification).await }));
        tokio::pin!(fut);
        let finished = tokio::select! {
            biased;
            out = &mut fut => {
                if let Err(panic) = out {
                    tracing::error!(panic = panic_message(&*panic), "notification handler panicked");
                }
                true
            }
            () = after_close(&shared.closed, grace) => false,
        };
        shared.mark_handled(queued.seq);
        if !finished {
            tracing::warn!(
                "notification handler still running a grace period after the connection ended; dropped with the rest of the queue"
            );
            break;
        }
    }
}
