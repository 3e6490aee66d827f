//! JSON-RPC batches (protocol v2): where the answers to one incoming batch are collected, and
//! how the batch goes out as one line once its last request is answered.
//!
//! The reader splits a batch into its entries and routes each like a message of its own
//! (see [`crate::router`]); each entry that is answered (a request, or an invalid entry) adds
//! its response here instead of writing it. Answers are written as one JSON array after every
//! request of the batch has been answered, in the order they were answered; a batch with
//! nothing to answer (only notifications and responses) writes nothing, as JSON-RPC asks.
//! A request counts as answered (its [`Watch`]) once the array is queued, not when its answer
//! joins it: a v2 turn's updates, which wait for that, then follow the array on the wire.

use std::sync::{Mutex, PoisonError};

use serde_json::value::RawValue;

use crate::core::jsonrpc::{self, ErrorObject, Id};
use crate::core::watch::Watch;
use crate::core::writer::Output;

/// Where the answer to an incoming request goes.
#[derive(Clone)]
pub(crate) enum ReplyTo {
    /// A line of its own.
    Line,
    /// Into the answer of the batch it came in.
    Batch(std::sync::Arc<BatchReply>),
}

/// The answers of one incoming batch, collected until every request in it is answered.
pub(crate) struct BatchReply {
    state: Mutex<State>,
}

struct State {
    /// Answers still expected, plus one while the reader is still routing the batch.
    outstanding: usize,
    /// `[` then the answers so far, comma-separated.
    line: Vec<u8>,
    answers: usize,
    /// The answered requests, told once the line is queued.
    watches: Vec<Watch>,
}

impl BatchReply {
    /// A batch being routed (the reader's own count is released by [`BatchReply::routed`]).
    pub(crate) fn new() -> Self {
        BatchReply { state: Mutex::new(State { outstanding: 1, line: b"[".to_vec(), answers: 0, watches: Vec::new() }) }
    }

    /// One more answer to wait for (a request of the batch was admitted).
    pub(crate) fn expect(&self) {
        self.lock().outstanding += 1;
    }

    /// Adds an answer that was expected (see [`BatchReply::expect`]); `watch` is told when
    /// the batch's line is queued.
    pub(crate) async fn answer(&self, out: &Output, id: &Id, result: Result<&RawValue, &ErrorObject>, watch: &Watch) {
        let line = self.push(id, result, Some(watch));
        write(out, line).await;
    }

    /// Adds an answer the reader gives itself (an invalid entry, a refused request).
    pub(crate) fn answer_now(&self, id: &Id, result: Result<&RawValue, &ErrorObject>) {
        let line = self.push(id, result, None);
        debug_assert!(line.is_none(), "the reader's own count keeps the batch open");
    }

    /// The reader has routed every entry; the batch goes out now if nothing is outstanding.
    pub(crate) async fn routed(&self, out: &Output) {
        let line = {
            let mut state = self.lock();
            state.outstanding -= 1;
            state.take_if_done()
        };
        write(out, line).await;
    }

    /// `watch`: the expected answer's request; `None` for the reader's own answers.
    fn push(
        &self,
        id: &Id,
        result: Result<&RawValue, &ErrorObject>,
        watch: Option<&Watch>,
    ) -> Option<(Vec<u8>, Vec<Watch>)> {
        let mut state = self.lock();
        if state.answers > 0 {
            state.line.push(b',');
        }
        jsonrpc::encode_response(&mut state.line, id, result);
        // Each answer is encoded as a line of its own; inside the array it is one element.
        if state.line.last() == Some(&b'\n') {
            state.line.pop();
        }
        state.answers += 1;
        if let Some(watch) = watch {
            state.outstanding -= 1;
            state.watches.push(watch.clone());
        }
        state.take_if_done()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl State {
    /// The finished line and the watches of its requests, once nothing is outstanding; `None`
    /// before, and for a batch with no answers at all (JSON-RPC: no empty array).
    fn take_if_done(&mut self) -> Option<(Vec<u8>, Vec<Watch>)> {
        if self.outstanding > 0 || self.answers == 0 {
            return None;
        }
        let mut line = std::mem::take(&mut self.line);
        line.extend_from_slice(b"]\n");
        // Written once: a late call finds nothing left.
        self.answers = 0;
        Some((line, std::mem::take(&mut self.watches)))
    }
}

async fn write(out: &Output, done: Option<(Vec<u8>, Vec<Watch>)>) {
    if let Some((line, watches)) = done {
        // A closed connection has nobody to answer.
        let _ = out.send(line, true).await;
        for watch in watches {
            watch.mark_answered();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_join_into_one_array_once_the_last_is_in() {
        let batch = BatchReply::new();
        batch.expect();
        batch.answer_now(&Id::Null, Err(&ErrorObject::invalid_request("x")));
        let one = RawValue::from_string("{}".into()).unwrap();
        let watch = Watch::default();
        assert!(batch.push(&Id::Number(1), Ok(&one), Some(&watch)).is_none(), "the reader still routes");
        let mut state = batch.lock();
        state.outstanding -= 1;
        let (line, watches) = state.take_if_done().unwrap();
        assert_eq!(watches.len(), 1, "the answered request's watch is told after the write");
        let text = String::from_utf8(line).unwrap();
        assert!(text.starts_with("[{") && text.ends_with("}]\n"), "{text}");
        let parsed: Vec<serde_json::Value> = serde_json::from_str(&text).unwrap();
        assert_eq!(parsed.len(), 2);
        assert_eq!(parsed[1]["id"], 1);
    }

    #[test]
    fn a_batch_without_answers_writes_nothing() {
        let batch = BatchReply::new();
        let mut state = batch.lock();
        state.outstanding -= 1;
        assert!(state.take_if_done().is_none());
    }
}
