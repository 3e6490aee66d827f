//! The single FIFO writer task and the wire tap task.
//!
//! Everything a connection sends is one encoded line (with its newline) in one bounded queue;
//! the writer drains it in batches into a `BufWriter` and flushes only when the queue is empty,
//! so a burst of small messages costs few syscalls and a lone message is not delayed.

use std::io;
use std::sync::Arc;

use tokio::io::{AsyncWrite, AsyncWriteExt, BufWriter};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::connection::Shared;

const BATCH: usize = 64;
const BUFFER: usize = 64 * 1024;

/// Writes queued lines until `stop` fires (then writes what is still queued and returns) or a
/// write fails (then the connection is closed and the queue refuses further sends).
pub(crate) async fn writer_loop(
    mut rx: mpsc::Receiver<Vec<u8>>,
    writer: Box<dyn AsyncWrite + Send + Unpin>,
    shared: Arc<Shared>,
    stop: CancellationToken,
) -> io::Result<()> {
    let mut out = BufWriter::with_capacity(BUFFER, writer);
    let result = write_until_stopped(&mut rx, &mut out, &shared, &stop).await;
    if let Err(e) = &result {
        tracing::warn!(error = %e, "acp connection: write failed, closing");
        rx.close();
        shared.closed.cancel();
    }
    result
}

async fn write_until_stopped<W: AsyncWrite + Unpin>(
    rx: &mut mpsc::Receiver<Vec<u8>>,
    out: &mut BufWriter<W>,
    shared: &Shared,
    stop: &CancellationToken,
) -> io::Result<()> {
    pump(rx, out, stop, Some(shared)).await
}

/// Drains `rx` into `out` in batches until `stop` fires or every sender is gone, flushing
/// whenever the queue runs empty; with `tap_to`, each line is recorded in the wire tap first.
/// On stop the queue refuses new lines and the ones already queued are still written.
async fn pump<W: AsyncWrite + Unpin>(
    rx: &mut mpsc::Receiver<Vec<u8>>,
    out: &mut BufWriter<W>,
    stop: &CancellationToken,
    tap_to: Option<&Shared>,
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
            if let Some(shared) = tap_to {
                tap_out(shared, &line).await;
            }
            out.write_all(&line).await?;
        }
        if rx.is_empty() {
            out.flush().await?;
        }
    }
    rx.close();
    while let Some(line) = rx.recv().await {
        if let Some(shared) = tap_to {
            tap_out(shared, &line).await;
        }
        out.write_all(&line).await?;
    }
    out.flush().await
}

async fn tap_out(shared: &Shared, line: &[u8]) {
    if let Some(tap) = &shared.tap {
        let msg = line.strip_suffix(b"\n").unwrap_or(line);
        let mut entry = Vec::with_capacity(msg.len() + 24);
        entry.extend_from_slice(br#"{"dir":"out","msg":"#);
        entry.extend_from_slice(msg);
        entry.extend_from_slice(b"}\n");
        let _ = tap.send(entry).await;
    }
}

/// Writes tap entries (already formatted JSON lines) until `stop`, then the rest.
pub(crate) async fn tap_loop(
    mut rx: mpsc::Receiver<Vec<u8>>,
    writer: Box<dyn AsyncWrite + Send + Unpin>,
    stop: CancellationToken,
) {
    let mut out = BufWriter::with_capacity(BUFFER, writer);
    let result = pump(&mut rx, &mut out, &stop, None).await;
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

pub(crate) async fn tap_in(shared: &Shared, item: TapIn<'_>) {
    let Some(tap) = &shared.tap else { return };
    let mut entry = Vec::new();
    match item {
        TapIn::Json(msg) => {
            entry.reserve(msg.len() + 24);
            entry.extend_from_slice(br#"{"dir":"in","msg":"#);
            entry.extend_from_slice(msg);
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
