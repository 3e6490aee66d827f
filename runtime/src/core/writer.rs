//! The output of a connection: the bounded FIFO write queue, the writer task that drains it,
//! the direct path that lets a sender skip that task when it is idle, and the wire tap task.
//!
//! Everything a connection sends is one encoded line (with its newline). The writer task moves
//! queued lines into one buffer in batches and writes when the queue runs empty (or the buffer is
//! full), so a burst of small messages costs few syscalls and a lone message is not delayed.
//! A request or response that finds the queue and the buffer empty, and nobody writing, is
//! written by its sender at once instead ([`Output::send`]): on a multi-thread runtime that saves
//! handing the line to another task, the writer, on every hop of a round trip. The direct write
//! happens within one poll of the sender (never across an await), and whatever the transport
//! does not take at once stays in the shared buffer for the writer task: a sender dropped
//! afterwards cannot tear a line, and later lines queue behind it. Notifications always take
//! the queue, because they come in streams and the batching is for those.

use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError, TryLockError};
use std::task::{Context, Poll, Waker};

use tokio::io::{AsyncWrite, AsyncWriteExt, BufWriter};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::core::error::Error;

const BATCH: usize = 64;
const BUFFER: usize = 64 * 1024;

type BoxWriter = Box<dyn AsyncWrite + Send + Unpin>;

/// The sending side of a connection's output, shared by every sender and the writer task.
pub(crate) struct Output {
    /// The bounded queue to the writer task.
    pub(crate) queue: mpsc::Sender<Vec<u8>>,
    sink: Mutex<Sink>,
    /// Whether senders may write themselves: not with a wire tap, whose entries the writer task
    /// records in wire order.
    direct: bool,
    /// Bytes the transport has taken so far: how the end of the connection tells a peer that
    /// reads slowly from one that stopped reading.
    progress: AtomicU64,
    /// The error the writer task ended with (see [`Output::take_failure`]).
    failure: Mutex<Option<io::Error>>,
    /// The wire tap's queue, when there is one (see [`tap_loop`]).
    tap: Option<mpsc::Sender<Vec<u8>>>,
}

/// The transport and what was accepted for it but not written yet. Only ever locked for the
/// length of one poll, never across an await.
struct Sink {
    /// The transport, from the writer task's start to its end (dropping it is end of input for
    /// the peer); `None` before and after, and always with a wire tap.
    io: Option<BoxWriter>,
    /// Accepted bytes; `buf[done..]` is not written yet.
    buf: Vec<u8>,
    done: usize,
    /// Written since the last completed flush.
    unflushed: bool,
    /// A direct write failed: the writer task reports it and ends the connection.
    error: Option<io::Error>,
    /// The writer task, woken when a direct write leaves work behind.
    waker: Option<Waker>,
}

impl Output {
    /// An output whose queue holds `capacity` lines; with a `tap`, every line is recorded there
    /// first (and senders do not write themselves, so that the tap sees the wire's order).
    pub(crate) fn new(capacity: usize, tap: Option<mpsc::Sender<Vec<u8>>>) -> (Output, mpsc::Receiver<Vec<u8>>) {
        let (queue, rx) = mpsc::channel(capacity);
        let sink = Sink { io: None, buf: Vec::new(), done: 0, unflushed: false, error: None, waker: None };
        let direct = tap.is_none();
        let output = Output {
            queue,
            sink: Mutex::new(sink),
            direct,
            progress: AtomicU64::new(0),
            failure: Mutex::new(None),
            tap,
        };
        (output, rx)
    }

    /// Whether the wire tap is on.
    pub(crate) fn tapped(&self) -> bool {
        self.tap.is_some()
    }

    /// Sends one line: with `direct`, written at once when nothing is queued or being written;
    /// otherwise queued for the writer task, waiting while the queue is full.
    pub(crate) async fn send(&self, line: Vec<u8>, direct: bool) -> Result<(), Error> {
        let line = if direct {
            match self.try_write(line) {
                None => return Ok(()),
                Some(line) => line,
            }
        } else {
            line
        };
        self.queue.send(line).await.map_err(|_| Error::ConnectionClosed)
    }

    /// How many bytes the transport has taken so far.
    pub(crate) fn progress(&self) -> u64 {
        self.progress.load(Ordering::Relaxed)
    }

    /// The write error the writer task ended with, if it ended on one.
    pub(crate) fn take_failure(&self) -> Option<io::Error> {
        self.failure.lock().unwrap_or_else(PoisonError::into_inner).take()
    }

    /// Drops the transport (end of input for the peer); nothing is written after this.
    pub(crate) fn detach(&self) {
        let io = lock(&self.sink).io.take();
        drop(io);
    }

    /// The direct path: takes `line` (`None`) if the writer is idle, with nothing queued and
    /// nothing left to write, or hands it back for the queue. Everything happens in this call:
    /// what the transport does not take at once goes to the buffer, for the writer task.
    fn try_write(&self, line: Vec<u8>) -> Option<Vec<u8>> {
        if !self.direct {
            return Some(line);
        }
        // Busy (the writer task or another sender is writing): queue, which also batches.
        let mut sink = match self.sink.try_lock() {
            Ok(sink) => sink,
            Err(TryLockError::Poisoned(e)) => e.into_inner(),
            Err(TryLockError::WouldBlock) => return Some(line),
        };
        // The writer task moves lines from the queue to the buffer under this lock, so an empty
        // queue and an empty buffer mean every line accepted before this one is written: FIFO.
        let idle = self.queue.capacity() == self.queue.max_capacity()
            && !self.queue.is_closed()
            && sink.done == sink.buf.len()
            && sink.error.is_none();
        let sink = &mut *sink;
        let Some(io) = sink.io.as_mut().filter(|_| idle) else {
            return Some(line);
        };
        // The writer task registers for readiness when it takes over; this poll must not.
        let mut cx = Context::from_waker(Waker::noop());
        let mut written = 0;
        let mut failed = None;
        while written < line.len() {
            match Pin::new(&mut *io).poll_write(&mut cx, &line[written..]) {
                Poll::Ready(Ok(0)) => failed = Some(io::ErrorKind::WriteZero.into()),
                Poll::Ready(Ok(n)) => written += n,
                Poll::Ready(Err(e)) => failed = Some(e),
                Poll::Pending => break,
            }
            if failed.is_some() {
                break;
            }
        }
        if written > 0 {
            sink.unflushed = true;
            self.progress.fetch_add(written as u64, Ordering::Relaxed);
        }
        if failed.is_none() && written == line.len() {
            match Pin::new(&mut *io).poll_flush(&mut cx) {
                Poll::Ready(Ok(())) => sink.unflushed = false,
                Poll::Ready(Err(e)) => failed = Some(e),
                Poll::Pending => {}
            }
        }
        if failed.is_none() && written < line.len() {
            sink.buf.clear();
            sink.done = 0;
            sink.buf.extend_from_slice(&line[written..]);
        }
        sink.error = failed;
        if sink.unflushed || sink.error.is_some() || !sink.buf.is_empty() {
            if let Some(waker) = &sink.waker {
                waker.wake_by_ref();
            }
        }
        None
    }

    /// One poll of the writer task: writes the buffer, refills it from the queue (up to
    /// `BUFFER` bytes) and writes again, flushes when both are empty. `Ready(Ok(()))` once the
    /// queue is closed and drained and everything is flushed.
    fn poll_pump(
        &self,
        cx: &mut Context<'_>,
        rx: &mut mpsc::Receiver<Vec<u8>>,
        batch: &mut Vec<Vec<u8>>,
    ) -> Poll<io::Result<()>> {
        let mut guard = lock(&self.sink);
        let Sink { io, buf, done, unflushed, error, waker } = &mut *guard;
        if !waker.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
            *waker = Some(cx.waker().clone());
        }
        let Some(io) = io.as_mut() else {
            return Poll::Ready(Ok(()));
        };
        loop {
            if let Some(e) = error.take() {
                return Poll::Ready(Err(e));
            }
            while *done < buf.len() {
                match Pin::new(&mut *io).poll_write(cx, &buf[*done..]) {
                    Poll::Ready(Ok(0)) => return Poll::Ready(Err(io::ErrorKind::WriteZero.into())),
                    Poll::Ready(Ok(n)) => {
                        *done += n;
                        *unflushed = true;
                        self.progress.fetch_add(n as u64, Ordering::Relaxed);
                    }
                    Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                    Poll::Pending => return Poll::Pending,
                }
            }
            buf.clear();
            *done = 0;
            if buf.capacity() > 4 * BUFFER {
                // One huge line must not pin its size for the rest of the connection.
                *buf = Vec::new();
            }
            // Moved under the lock, so a direct sender never sees a line in neither place.
            let mut closed = false;
            while buf.len() < BUFFER {
                match rx.poll_recv_many(cx, batch, BATCH) {
                    Poll::Ready(0) => {
                        closed = true;
                        break;
                    }
                    Poll::Ready(_) => {
                        for line in batch.drain(..) {
                            buf.extend_from_slice(&line);
                        }
                    }
                    Poll::Pending => break,
                }
            }
            if !buf.is_empty() {
                continue;
            }
            if *unflushed {
                match Pin::new(&mut *io).poll_flush(cx) {
                    Poll::Ready(Ok(())) => *unflushed = false,
                    Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                    Poll::Pending => return Poll::Pending,
                }
            }
            return if closed { Poll::Ready(Ok(())) } else { Poll::Pending };
        }
    }
}

fn lock(sink: &Mutex<Sink>) -> MutexGuard<'_, Sink> {
    // Nothing panics while holding it; if something ever did, the state is still usable.
    sink.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Writes queued lines until `stop` fires (then writes what is still queued and returns) or a
/// write fails (then the connection is closed, the queue refuses further sends and the error
/// is kept for [`Output::take_failure`] and `closed` fires). It reports through `out` rather than returning
/// the error so that its task has the output type of the connection's other tasks: tokio
/// compiles its task machinery once per spawned type.
pub(crate) async fn writer_loop(
    mut rx: mpsc::Receiver<Vec<u8>>,
    writer: BoxWriter,
    output: &Output,
    closed: &CancellationToken,
    stop: CancellationToken,
) {
    let result = if output.tap.is_some() {
        // The tap records each line before it goes out, so this task keeps the transport.
        let mut out = BufWriter::with_capacity(BUFFER, writer);
        pump(&mut rx, &mut out, &stop, output.tap.as_ref(), &output.progress).await
    } else {
        write_until_stopped(&mut rx, writer, output, &stop).await
    };
    if let Err(e) = result {
        tracing::warn!(error = %e, "acp connection: write failed, closing");
        *output.failure.lock().unwrap_or_else(PoisonError::into_inner) = Some(e);
        rx.close();
        closed.cancel();
    }
}

/// The writer task without a tap: shares the transport with direct senders through `out`.
async fn write_until_stopped(
    rx: &mut mpsc::Receiver<Vec<u8>>,
    writer: BoxWriter,
    out: &Output,
    stop: &CancellationToken,
) -> io::Result<()> {
    /// Takes the transport back when the task ends, however it ends (aborted too): dropping it
    /// is what tells the peer the output has ended.
    struct Detach<'a>(&'a Output);
    impl Drop for Detach<'_> {
        fn drop(&mut self) {
            self.0.detach();
        }
    }
    {
        // The buffer grows with what is written (up to about `BUFFER` between writes), so an
        // idle connection holds none of it.
        lock(&out.sink).io = Some(writer);
    }
    let _detach = Detach(out);
    let mut batch = Vec::with_capacity(BATCH);
    tokio::select! {
        biased;
        result = std::future::poll_fn(|cx| out.poll_pump(cx, rx, &mut batch)) => return result,
        () = stop.cancelled() => {}
    }
    // Stopping: the queue refuses new lines (and so does the direct path); what is accepted is
    // still written.
    rx.close();
    std::future::poll_fn(|cx| out.poll_pump(cx, rx, &mut batch)).await
}

/// Drains `rx` into `out` in batches until `stop` fires or every sender is gone, flushing
/// whenever the queue runs empty; with `tap_to`, each line is recorded in the wire tap first.
/// On stop the queue refuses new lines and the ones already queued are still written.
async fn pump<W: AsyncWrite + Unpin>(
    rx: &mut mpsc::Receiver<Vec<u8>>,
    out: &mut BufWriter<W>,
    stop: &CancellationToken,
    tap_to: Option<&mpsc::Sender<Vec<u8>>>,
    progress: &AtomicU64,
) -> io::Result<()> {
    let mut batch = Vec::with_capacity(BATCH);
    loop {
        let n = tokio::select! {
            biased;
            n = rx.recv_many(&mut batch, BATCH) => n,
            () = stop.cancelled() => break,
        };
        if n == 0 {
            break;
        }
        for line in batch.drain(..) {
            if let Some(tap) = tap_to {
                tap_out(tap, &line).await;
            }
            out.write_all(&line).await?;
            progress.fetch_add(line.len() as u64, Ordering::Relaxed);
        }
        if rx.is_empty() {
            out.flush().await?;
        }
    }
    rx.close();
    while let Some(line) = rx.recv().await {
        if let Some(tap) = tap_to {
            tap_out(tap, &line).await;
        }
        out.write_all(&line).await?;
        progress.fetch_add(line.len() as u64, Ordering::Relaxed);
    }
    out.flush().await
}

async fn tap_out(tap: &mpsc::Sender<Vec<u8>>, line: &[u8]) {
    let msg = line.strip_suffix(b"\n").unwrap_or(line);
    let mut entry = Vec::with_capacity(msg.len() + 24);
    entry.extend_from_slice(br#"{"dir":"out","msg":"#);
    entry.extend_from_slice(msg);
    entry.extend_from_slice(b"}\n");
    let _ = tap.send(entry).await;
}

/// Writes tap entries (already formatted JSON lines) until `stop`, then the rest.
pub(crate) async fn tap_loop(
    mut rx: mpsc::Receiver<Vec<u8>>,
    writer: Box<dyn AsyncWrite + Send + Unpin>,
    stop: CancellationToken,
) {
    let mut out = BufWriter::with_capacity(BUFFER, writer);
    let result = pump(&mut rx, &mut out, &stop, None, &AtomicU64::new(0)).await;
    if let Err(e) = result {
        tracing::warn!(error = %e, "acp connection: wire tap write failed; tap disabled");
    }
}

/// Records one incoming frame in the tap.
pub(crate) enum TapIn<'a> {
    /// A JSON line.
    Json(&'a [u8]),
    /// A line that is not JSON (or not UTF-8).
    Invalid(&'a [u8]),
    /// A skipped oversized line.
    Oversized(u64),
}

pub(crate) async fn tap_in(output: &Output, item: TapIn<'_>) {
    let Some(tap) = &output.tap else { return };
    let mut entry = Vec::new();
    match item {
        TapIn::Json(msg) => {
            entry.reserve(msg.len() + 24);
            entry.extend_from_slice(br#"{"dir":"in","msg":"#);
            let at = entry.len();
            entry.extend_from_slice(msg);
            // A lone `\r` between tokens is valid JSON, but some JSONL readers split on it.
            crate::core::jsonrpc::one_line(&mut entry[at..]);
        }
        TapIn::Invalid(raw) => {
            entry.extend_from_slice(br#"{"dir":"in","invalid":"#);
            let text = String::from_utf8_lossy(raw);
            if serde_json::to_writer(&mut entry, &*text).is_err() {
                return;
            }
        }
        TapIn::Oversized(len) => {
            entry.extend_from_slice(format!(r#"{{"dir":"in","oversized":{len}"#).as_bytes());
        }
    }
    entry.extend_from_slice(b"}\n");
    let _ = tap.send(entry).await;
}

/// The tap handle type used by the builder.
pub(crate) type Tap = Box<dyn AsyncWrite + Send + Unpin>;
