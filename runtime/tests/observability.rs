//! Contract line 11: a `tracing` span per incoming request with method, id and session id.
//! (The wire tap is tested in contract.rs.) A tiny recording subscriber stands in for
//! tracing-subscriber; the test runs on one thread so the scoped subscriber sees every span.

mod common;

use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use acp_rpc::Connection;
use common::*;
use serde_json::json;
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Metadata, Subscriber};

/// Span name and fields, by span id.
type SpanTable = HashMap<u64, (String, HashMap<String, String>)>;

#[derive(Default, Clone)]
struct Spans(Arc<Mutex<SpanTable>>);

struct Recorder {
    spans: Spans,
    next: AtomicU64,
}

struct Fields<'a>(&'a mut HashMap<String, String>);

impl Visit for Fields<'_> {
    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.0.insert(field.name().to_owned(), format!("{value:?}"));
    }
    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.insert(field.name().to_owned(), value.to_owned());
    }
}

impl Subscriber for Recorder {
    fn enabled(&self, _: &Metadata<'_>) -> bool {
        true
    }
    fn new_span(&self, attrs: &Attributes<'_>) -> Id {
        let id = self.next.fetch_add(1, Ordering::SeqCst) + 1;
        let mut fields = HashMap::new();
        attrs.record(&mut Fields(&mut fields));
        self.spans.0.lock().unwrap().insert(id, (attrs.metadata().name().to_owned(), fields));
        Id::from_u64(id)
    }
    fn record(&self, span: &Id, values: &Record<'_>) {
        if let Some((_, fields)) = self.spans.0.lock().unwrap().get_mut(&span.into_u64()) {
            values.record(&mut Fields(fields));
        }
    }
    fn record_follows_from(&self, _: &Id, _: &Id) {}
    fn event(&self, _: &Event<'_>) {}
    fn enter(&self, _: &Id) {}
    fn exit(&self, _: &Id) {}
}

#[tokio::test(flavor = "current_thread")]
async fn contract_11_a_tracing_span_per_request_with_method_id_and_session() {
    let spans = Spans::default();
    let _guard = tracing::subscriber::set_default(Recorder { spans: spans.clone(), next: AtomicU64::new(0) });

    let (handler, _rx) = test_handler();
    let (mut raw, _peer, _task) = start(Connection::new(), handler);
    raw.send_json(json!({"jsonrpc":"2.0","id":7,"method":"echo","params":{"sessionId":"sess_1"}})).await;
    raw.recv().await;
    raw.send_json(json!({"jsonrpc":"2.0","id":"s","method":"_ext/echo","params":[]})).await;
    raw.recv().await;

    let spans = spans.0.lock().unwrap();
    let requests: Vec<_> = spans.values().filter(|(name, _)| name == "acp_request").map(|(_, f)| f).collect();
    assert_eq!(requests.len(), 2, "{spans:?}");
    let echo = requests.iter().find(|f| f["method"] == "echo").expect("span for echo");
    assert_eq!(echo["id"], "7");
    assert_eq!(echo["session_id"], "sess_1");
    let ext = requests.iter().find(|f| f["method"] == "_ext/echo").expect("span for _ext/echo");
    assert_eq!(ext["id"], "\"s\"");
    assert!(!ext.contains_key("session_id"));
}
