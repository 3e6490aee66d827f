//! The connection's task bookkeeping: [`AbortOnDrop`] ties a spawned task to its owner, and
//! [`RequestTasks`] counts the request tasks so the end of a connection can wait for them.
//!
//! Small on purpose: tokio-util's `rt` feature has the same tools, but pulls in futures-util
//! and its proc-macro, which every crate that depends on the runtime would compile too.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll};

use tokio::sync::Notify;
use tokio::task::{JoinError, JoinHandle};

/// A spawned task that is aborted when this handle is dropped. Await it for the task's output.
#[derive(Debug)]
pub(crate) struct AbortOnDrop<T>(JoinHandle<T>);

impl<T: Send + 'static> AbortOnDrop<T> {
    /// Spawns `fut` on the current tokio runtime (boxed, see [`spawn_boxed`]).
    pub(crate) fn spawn(fut: impl Future<Output = T> + Send + 'static) -> Self {
        AbortOnDrop(spawn_boxed(fut))
    }
}

/// Spawns `fut` as a boxed future. tokio compiles its task machinery (polling, cancelling,
/// joining: about 13 KB of code) once per future type; the connection's long-lived loops and
/// the rarer tasks share one instantiation per output type this way, for one allocation each.
pub(crate) fn spawn_boxed<T: Send + 'static>(fut: impl Future<Output = T> + Send + 'static) -> JoinHandle<T> {
    let fut: Pin<Box<dyn Future<Output = T> + Send>> = Box::pin(fut);
    tokio::spawn(fut)
}

impl<T> AbortOnDrop<T> {
    /// Aborts the task now, before the handle drops.
    #[cfg(feature = "process")]
    pub(crate) fn abort(&self) {
        self.0.abort();
    }
}

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl<T> Future for AbortOnDrop<T> {
    type Output = Result<T, JoinError>;
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        Pin::new(&mut self.0).poll(cx)
    }
}

/// Counts running request tasks; [`RequestTasks::all_done`] waits until none is left.
#[derive(Clone, Default)]
pub(crate) struct RequestTasks(Arc<Counter>);

#[derive(Default)]
struct Counter {
    running: AtomicUsize,
    done: Notify,
}

impl RequestTasks {
    /// Counts one more task until the returned guard drops. The task's future owns the guard,
    /// so the task is counted down when it ends, also when it is dropped unfinished. (A guard
    /// rather than a wrapping future: wrapping would copy the request's large future once
    /// more on its way to the spawn.)
    pub(crate) fn count(&self) -> Counted {
        self.0.running.fetch_add(1, Ordering::SeqCst);
        Counted(self.0.clone())
    }

    /// Resolves once no counted task is running.
    pub(crate) async fn all_done(&self) {
        loop {
            let notified = self.0.done.notified();
            tokio::pin!(notified);
            // Registered before the check, so a task ending in between is not missed.
            notified.as_mut().enable();
            if self.0.running.load(Ordering::SeqCst) == 0 {
                return;
            }
            notified.await;
        }
    }
}

/// One counted task (see [`RequestTasks::count`]).
pub(crate) struct Counted(Arc<Counter>);

impl Drop for Counted {
    fn drop(&mut self) {
        if self.0.running.fetch_sub(1, Ordering::SeqCst) == 1 {
            self.0.done.notify_waiters();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn all_done_waits_for_every_counted_task() {
        let tasks = RequestTasks::default();
        tasks.all_done().await; // none yet
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let counted = tasks.count();
        tokio::spawn(async move {
            let _counted = counted;
            let _ = rx.await;
        });
        let counted = tasks.count();
        tokio::spawn(async move {
            let _counted = counted;
        });
        assert!(
            tokio::time::timeout(Duration::from_millis(20), tasks.all_done()).await.is_err(),
            "one is still running"
        );
        tx.send(()).unwrap();
        tokio::time::timeout(Duration::from_secs(5), tasks.all_done()).await.expect("both ended");
    }

    #[tokio::test]
    async fn dropping_the_handle_aborts_the_task() {
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let task = AbortOnDrop::spawn(async move {
            let _tx = tx;
            std::future::pending::<()>().await;
        });
        drop(task);
        // The sender is dropped with the aborted task.
        assert!(tokio::time::timeout(Duration::from_secs(5), rx).await.unwrap().is_err());
    }
}
