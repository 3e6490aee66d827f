//! Between the runtime connection's pipes and a transport driver: the lines the connection
//! writes, and the messages (or the failure that answers a pending request) it is given to read.

use std::sync::Arc;

use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::sync::mpsc;

use crate::core::jsonrpc::codes;
use crate::core::transport::{PipeReader, PipeWriter};
use crate::http::Envelope;

use super::live::Status;

/// One message for the connection's input, or its end.
pub(super) enum Inbound {
    Line(Vec<u8>),
    End,
}

/// Writes what the driver received into the connection's input, one line per message; ends
/// the input on [`Inbound::End`] (or once every sender is gone).
pub(super) async fn deliver(mut inbound: mpsc::Receiver<Inbound>, mut input: PipeWriter) {
    while let Some(Inbound::Line(mut line)) = inbound.recv().await {
        line.push(b'\n');
        if input.write_all(&line).await.is_err() {
            break;
        }
    }
}

/// Reads the lines the connection writes (one message each).
pub(super) fn read_lines(output: PipeReader) -> mpsc::Receiver<Vec<u8>> {
    let (tx, rx) = mpsc::channel(16);
    tokio::spawn(async move {
        let mut output = BufReader::new(output);
        loop {
            let mut line = Vec::new();
            match output.read_until(b'\n', &mut line).await {
                Ok(0) | Err(_) => break,
                Ok(_) => {}
            }
            while line.last().is_some_and(|b| *b == b'\n' || *b == b'\r') {
                line.pop();
            }
            if !line.is_empty() && tx.send(line).await.is_err() {
                break;
            }
        }
    });
    rx
}

/// The way into the connection's input, and the status to report to.
pub(super) struct Delivery {
    pub(super) inbound: mpsc::Sender<Inbound>,
    pub(super) status: Arc<Status>,
}

impl Delivery {
    /// Hands one message to the connection; `false` once it is gone.
    pub(super) async fn line(&self, line: Vec<u8>) -> bool {
        self.inbound.send(Inbound::Line(line)).await.is_ok()
    }

    /// Ends the connection's input (pending calls fail), after what was handed over so far.
    pub(super) async fn end(&self, reason: String) {
        let _ = self.inbound.send(self.ending(reason)).await;
    }

    /// The end of the input, its reason recorded.
    pub(super) fn ending(&self, reason: String) -> Inbound {
        tracing::warn!(%reason, "acp http client: the connection ends");
        self.status.set_end_reason(reason);
        Inbound::End
    }
}

/// A -32603 answer to our request `id`, as if the server had sent it.
pub(super) fn failure(id: &str, message: &str, data: Value) -> Inbound {
    let id: Value = serde_json::from_str(id).unwrap_or(Value::Null);
    let answer = json!({
        "jsonrpc": "2.0",
        "id": id,
        "error": { "code": codes::INTERNAL_ERROR, "message": message, "data": data },
    });
    Inbound::Line(serde_json::to_vec(&answer).unwrap_or_default())
}

/// Whether `message` is a JSON-RPC error response.
pub(super) fn is_error_response(message: &[u8]) -> bool {
    #[derive(serde::Deserialize)]
    struct Outcome<'a> {
        #[serde(borrow, default)]
        error: Option<&'a serde_json::value::RawValue>,
    }
    serde_json::from_slice::<Outcome<'_>>(message).is_ok_and(|o| o.error.is_some())
}

/// Whether a message is a request (it has a method and an id) and its id.
pub(super) fn request_id(envelope: &Envelope) -> Option<&str> {
    envelope.method.as_ref().and(envelope.id.as_deref())
}

/// Reads a message received from the server; `None` (logged) when it is not a JSON object.
pub(super) fn read_received(data: &[u8], source: &str) -> Option<Envelope> {
    let envelope = std::str::from_utf8(data).ok().and_then(Envelope::read);
    if envelope.is_none() {
        let start = String::from_utf8_lossy(&data[..data.len().min(120)]).into_owned();
        tracing::warn!(source, start, "acp http client: skipped a message that is not a JSON-RPC object");
    }
    envelope
}
