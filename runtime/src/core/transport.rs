//! Transports: the `(reader, writer)` pairs a [`crate::Connection`] runs over — this process's
//! stdio (an agent), a spawned agent process (a client, with the `process` feature), and
//! in-memory pipes (tests).

use std::collections::VecDeque;
use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

#[cfg(feature = "process")]
mod process;
mod stdio;
#[cfg(feature = "process")]
pub use process::{ChildProcess, SpawnOptions, StderrMode};
pub use stdio::{Stdin, Stdout, stdio};

/// One end of an in-memory [`duplex`]: what it reads and what it writes.
pub type DuplexEnd = (PipeReader, PipeWriter);

/// Two connected in-memory ends, each direction buffering up to `max_buf_size` bytes (a writer
/// waits when its direction is full, like a pipe). Dropping a writer is end of input for the
/// other end's reader; dropping a reader makes the other end's writes fail (broken pipe).
pub fn duplex(max_buf_size: usize) -> (DuplexEnd, DuplexEnd) {
    let (a_writes, b_reads) = pipe(max_buf_size);
    let (b_writes, a_reads) = pipe(max_buf_size);
    ((a_reads, a_writes), (b_reads, b_writes))
}

/// A one-way in-memory pipe holding up to `max_buf_size` bytes (at least 1).
pub fn pipe(max_buf_size: usize) -> (PipeWriter, PipeReader) {
    let inner = Arc::new(Mutex::new(PipeState {
        buf: VecDeque::new(),
        cap: max_buf_size.max(1),
        writer_gone: false,
        reader_gone: false,
        read_waker: None,
        write_waker: None,
    }));
    (PipeWriter { inner: inner.clone() }, PipeReader { inner })
}

struct PipeState {
    buf: VecDeque<u8>,
    cap: usize,
    writer_gone: bool,
    reader_gone: bool,
    read_waker: Option<Waker>,
    write_waker: Option<Waker>,
}

fn lock_pipe(inner: &Mutex<PipeState>) -> std::sync::MutexGuard<'_, PipeState> {
    inner.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The reading end of a [`pipe`].
pub struct PipeReader {
    inner: Arc<Mutex<PipeState>>,
}

/// The writing end of a [`pipe`].
pub struct PipeWriter {
    inner: Arc<Mutex<PipeState>>,
}

impl std::fmt::Debug for PipeReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PipeReader").finish_non_exhaustive()
    }
}

impl std::fmt::Debug for PipeWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PipeWriter").finish_non_exhaustive()
    }
}

impl AsyncRead for PipeReader {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, out: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let mut state = lock_pipe(&self.inner);
        if state.buf.is_empty() {
            if state.writer_gone {
                return Poll::Ready(Ok(()));
            }
            state.read_waker = Some(cx.waker().clone());
            return Poll::Pending;
        }
        let n = out.remaining().min(state.buf.len());
        let (front, back) = state.buf.as_slices();
        let from_front = n.min(front.len());
        out.put_slice(&front[..from_front]);
        out.put_slice(&back[..n - from_front]);
        state.buf.drain(..n);
        let waiting_writer = state.write_waker.take();
        // Woken after unlocking: the woken side may run on another thread at once, and it
        // should not find the lock still held.
        drop(state);
        if let Some(w) = waiting_writer {
            w.wake();
        }
        Poll::Ready(Ok(()))
    }
}

impl Drop for PipeReader {
    fn drop(&mut self) {
        let mut state = lock_pipe(&self.inner);
        state.reader_gone = true;
        state.buf = VecDeque::new();
        if let Some(w) = state.write_waker.take() {
            w.wake();
        }
    }
}

impl AsyncWrite for PipeWriter {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, data: &[u8]) -> Poll<io::Result<usize>> {
        let mut state = lock_pipe(&self.inner);
        if state.reader_gone {
            return Poll::Ready(Err(io::ErrorKind::BrokenPipe.into()));
        }
        let room = state.cap.saturating_sub(state.buf.len());
        if room == 0 {
            state.write_waker = Some(cx.waker().clone());
            return Poll::Pending;
        }
        let n = room.min(data.len());
        state.buf.extend(&data[..n]);
        let waiting_reader = state.read_waker.take();
        drop(state);
        if let Some(w) = waiting_reader {
            w.wake();
        }
        Poll::Ready(Ok(n))
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.close();
        Poll::Ready(Ok(()))
    }
}

impl PipeWriter {
    fn close(&self) {
        let mut state = lock_pipe(&self.inner);
        state.writer_gone = true;
        if let Some(w) = state.read_waker.take() {
            w.wake();
        }
    }
}

impl Drop for PipeWriter {
    fn drop(&mut self) {
        self.close();
    }
}
