//! SIGTERM, SIGINT and SIGHUP end the chain the way the client closing its side does: the
//! client's input ends, so every component's input is closed, then their process groups get
//! SIGTERM and SIGKILL after the grace period, and every one is reaped; the conductor exits
//! 128 + the signal's number. (The default action would end the conductor at once and leave
//! what the components started running: each component has a process group of its own, which
//! a terminal's Ctrl-C does not reach either.)

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, ReadBuf};
use tokio::signal::unix::{SignalKind, signal};

/// The client's input, which ends at the first of the three signals.
pub struct EndOnSignal<R> {
    inner: R,
    signal: Pin<Box<dyn Future<Output = i32> + Send>>,
    signalled: Arc<OnceLock<i32>>,
}

impl<R> EndOnSignal<R> {
    /// `inner`, ending at a signal; the handlers are installed now.
    pub fn new(inner: R) -> io::Result<Self> {
        let mut term = signal(SignalKind::terminate())?;
        let mut interrupt = signal(SignalKind::interrupt())?;
        let mut hangup = signal(SignalKind::hangup())?;
        let signal = Box::pin(async move {
            tokio::select! {
                _ = term.recv() => 15,
                _ = interrupt.recv() => 2,
                _ = hangup.recv() => 1,
            }
        });
        Ok(EndOnSignal { inner, signal, signalled: Arc::default() })
    }

    /// The signal's number once one has ended the input.
    pub fn signalled(&self) -> Arc<OnceLock<i32>> {
        Arc::clone(&self.signalled)
    }
}

impl<R: AsyncRead + Unpin> AsyncRead for EndOnSignal<R> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let this = &mut *self;
        if this.signalled.get().is_none() {
            if let Poll::Ready(number) = this.signal.as_mut().poll(cx) {
                let _ = this.signalled.set(number);
            }
        }
        if this.signalled.get().is_some() {
            // The end of input, as when the client closes its side.
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut this.inner).poll_read(cx, buf)
    }
}
