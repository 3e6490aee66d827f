//! The conductor's message trace ([`Conductor::trace`](super::Conductor::trace)): every
//! message between two places of the chain, once, as newline-delimited JSON in the official
//! conductor's trace format (`--trace`), so the official sequence-diagram viewer reads it.
//!
//! Each hop's connection taps what the conductor reads and writes on it. A request or a
//! notification is recorded when the conductor reads it from its sender, with the sender's id,
//! so a sender's messages keep their order; an answer when the conductor writes it back to the
//! requester on the same hop, matched to its request by hop and id. Messages wrapped in
//! `proxy/successor` are recorded unwrapped, between the components they travel between. An
//! answer the conductor gives itself (a cancelled request, a component that ended) is recorded
//! as coming from where the request was going.
//!
//! | event | members |
//! |---|---|
//! | `{"type":"request", ...}` | `ts` (seconds since the chain started), `protocol` (`"acp"`), `from`, `to`, `id`, `method`, `session` (when the params name one), `params` |
//! | `{"type":"response", ...}` | `ts`, `from`, `to`, `id`, `is_error`, `error_domain` (`"acp"` on errors), `payload` (the result or the error) |
//! | `{"type":"notification", ...}` | `ts`, `protocol`, `from`, `to`, `method`, `session`, `params` |
//!
//! Places are `"Client"`, `"Proxy(N)"` and `"Agent"` (in proxy mode, the conductor's own
//! successor). Credentials are not written: the values of `env` and `headers` lists and maps
//! (MCP server definitions) and the user info and query of `http(s)` URLs become
//! `"[REDACTED]"`. A trace that cannot be written is given up, never the chain.

use std::collections::HashMap;
use std::io::Write;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Instant;

use serde::Serialize;
use serde_json::Value;
use tokio::io::AsyncWrite;

use super::Place;
use crate::core::methods::PROXY_INITIALIZE;

const INITIALIZE: &str = acp_types::agent_method::INITIALIZE;

const REDACTED: &str = "[REDACTED]";

/// Where a chain's trace goes, shared by the taps of all its hops.
#[derive(Clone)]
pub(super) struct Tracer(Arc<Mutex<State>>);

struct State {
    out: Box<dyn Write + Send>,
    started: Instant,
    /// How many components the chain has, and whether the last one is the agent.
    components: usize,
    proxy_mode: bool,
    /// Requests written and not answered yet, by hop and id: who sent each to whom.
    pending: HashMap<(Place, String), (String, String)>,
    failed: bool,
}

impl Tracer {
    pub(super) fn new(out: Box<dyn Write + Send>, components: usize, proxy_mode: bool) -> Self {
        Tracer(Arc::new(Mutex::new(State {
            out,
            started: Instant::now(),
            components,
            proxy_mode,
            pending: HashMap::new(),
            failed: false,
        })))
    }

    fn record(&self, place: Place, line: &[u8]) {
        let Ok(entry) = serde_json::from_slice::<Value>(line) else { return };
        let (Some(dir), Some(msg)) = (entry["dir"].as_str(), entry.get("msg")) else { return };
        let mut state = self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if state.failed {
            return;
        }
        let event = match (dir, msg.get("method").and_then(Value::as_str)) {
            ("in", Some(method)) => state.message(place, method, msg),
            ("out", None) => state.answered(place, msg),
            _ => None,
        };
        if let Some(event) = event {
            let written = serde_json::to_writer(&mut state.out, &event)
                .map_err(std::io::Error::other)
                .and_then(|()| state.out.write_all(b"\n"))
                .and_then(|()| state.out.flush());
            if let Err(e) = written {
                tracing::warn!(error = %e, "acp conductor: the trace cannot be written; tracing stops");
                state.failed = true;
            }
        }
    }
}

impl State {
    fn ts(&self) -> f64 {
        self.started.elapsed().as_secs_f64()
    }

    /// The name of component `index`.
    fn component(&self, index: usize) -> String {
        if !self.proxy_mode && index + 1 == self.components { "Agent".to_owned() } else { format!("Proxy({index})") }
    }

    /// The place before component `index`.
    fn before(&self, index: usize) -> String {
        index.checked_sub(1).map_or_else(|| "Client".to_owned(), |i| self.component(i))
    }

    /// The place after component `index`.
    fn after(&self, index: usize) -> String {
        if index + 1 == self.components { "Agent".to_owned() } else { self.component(index + 1) }
    }

    /// A request or notification read from `place`: who sent it, who gets it.
    fn message(&mut self, place: Place, method: &str, msg: &Value) -> Option<Event> {
        // The earlier wires' envelopes are read as the current one (see `Wire`).
        let wrapped = crate::proxy::is_any_successor_envelope(method);
        let last = self.components.checked_sub(1)?;
        let (from, to) = match (place, wrapped) {
            // From a proxy, wrapped: for its successor (an agent has none).
            (Place::Component(i), true) if self.proxy_mode || i < last => (self.component(i), self.after(i)),
            (Place::Component(_), true) => return None,
            (Place::Component(i), false) => (self.component(i), self.before(i)),
            // In proxy mode, from our own conductor, wrapped: from our successor.
            (Place::Client, true) => ("Agent".to_owned(), self.component(last)),
            (Place::Client, false) => ("Client".to_owned(), self.component(0)),
        };
        let (method, mut params) = if wrapped {
            let inner = msg.get("params")?;
            (inner.get("method")?.as_str()?, inner.get("params").cloned().unwrap_or(Value::Null))
        } else {
            (method, msg.get("params").cloned().unwrap_or(Value::Null))
        };
        // As the receiver gets it: a proxy is initialized with `proxy/initialize`.
        let method = if method == INITIALIZE && to.starts_with("Proxy(") { PROXY_INITIALIZE } else { method };
        redact(&mut params);
        let session = params.get("sessionId").and_then(Value::as_str).map(str::to_owned);
        let (ts, method) = (self.ts(), method.to_owned());
        Some(match msg.get("id") {
            Some(id) => {
                // A request whose id is not a valid JSON-RPC id is answered with `null`: nothing to
                // match it with later.
                if let Some(key) = id_key(id) {
                    self.pending.insert((place, key), (from.clone(), to.clone()));
                }
                Event::Request { ts, protocol: "acp", from, to, id: id.clone(), method, session, params }
            }
            None => Event::Notification { ts, protocol: "acp", from, to, method, session, params },
        })
    }

    /// The conductor wrote an answer to `place`: the answer to a request it read there.
    fn answered(&mut self, place: Place, msg: &Value) -> Option<Event> {
        let id = msg.get("id")?;
        let (from, to) = self.pending.remove(&(place, id_key(id)?))?;
        let (is_error, mut payload) = match (msg.get("result"), msg.get("error")) {
            (_, Some(error)) => (true, error.clone()),
            (Some(result), None) => (false, result.clone()),
            (None, None) => return None,
        };
        redact(&mut payload);
        let error_domain = is_error.then_some("acp");
        Some(Event::Response { ts: self.ts(), from: to, to: from, id: id.clone(), is_error, error_domain, payload })
    }
}

/// One line of the trace, its members in the official conductor's order.
#[derive(Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum Event {
    Request {
        ts: f64,
        protocol: &'static str,
        from: String,
        to: String,
        id: Value,
        method: String,
        #[serde(skip_serializing_if = "Option::is_none")]
        session: Option<String>,
        params: Value,
    },
    Response {
        ts: f64,
        from: String,
        to: String,
        id: Value,
        is_error: bool,
        #[serde(skip_serializing_if = "Option::is_none")]
        error_domain: Option<&'static str>,
        payload: Value,
    },
    Notification {
        ts: f64,
        protocol: &'static str,
        from: String,
        to: String,
        method: String,
        #[serde(skip_serializing_if = "Option::is_none")]
        session: Option<String>,
        params: Value,
    },
}

/// Replaces credentials in `value`, at any depth, as the trace does: the values of `env` and
/// `headers` lists and maps, and the user info and query of `http(s)` URLs in `url` members.
pub fn redact_credentials(value: &mut Value) {
    redact(value);
}

/// A request id as the runtime reads it and writes it back in the answer (`1.0`, or a string
/// with escapes, come back in the same form as the request's), `None` for what is no id.
fn id_key(id: &Value) -> Option<String> {
    let raw = serde_json::value::to_raw_value(id).ok()?;
    crate::core::jsonrpc::parse_id(&raw).map(|id| id.to_string())
}

/// Replaces credentials in `value`, at any depth: see the module docs.
pub(super) fn redact(value: &mut Value) {
    match value {
        Value::Object(object) => {
            if let Some(Value::String(url)) = object.get_mut("url") {
                redact_url(url);
            }
            for (key, member) in object.iter_mut() {
                if key == "env" || key == "headers" {
                    redact_pairs(member);
                }
                redact(member);
            }
        }
        Value::Array(items) => items.iter_mut().for_each(redact),
        _ => {}
    }
}

/// `[{"name", "value"}]` lists and `{name: value}` maps: every value.
fn redact_pairs(value: &mut Value) {
    match value {
        Value::Array(entries) => {
            for value in entries.iter_mut().filter_map(|entry| entry.get_mut("value")) {
                *value = REDACTED.into();
            }
        }
        Value::Object(entries) => entries.values_mut().for_each(|value| *value = REDACTED.into()),
        _ => {}
    }
}

/// The user info and the query of an `http(s)` URL: whatever sits between `//` and `@`, and
/// after `?` up to any `#`.
fn redact_url(url: &mut String) {
    let lower = url.trim_start().to_ascii_lowercase();
    if !(lower.starts_with("http://") || lower.starts_with("https://")) {
        return;
    }
    let Some(authority) = url.find("//").map(|at| at + 2) else { return };
    let end = url[authority..].find(['/', '?', '#']).map_or(url.len(), |at| authority + at);
    if let Some(at) = url[authority..end].rfind('@') {
        url.replace_range(authority..authority + at, REDACTED);
    }
    if let Some(query) = url.find('?') {
        let end = url[query..].find('#').map_or(url.len(), |at| query + at);
        if end > query + 1 {
            url.replace_range(query + 1..end, REDACTED);
        }
    }
}

/// A hop's wire tap: splits what the connection copies into lines and hands each to the trace
/// and the debug log.
pub(super) struct Tap {
    tracer: Option<Tracer>,
    debug: Option<super::debug_log::DebugLog>,
    place: Place,
    line: Vec<u8>,
}

impl Tap {
    pub(super) fn new(tracer: Option<Tracer>, debug: Option<super::debug_log::DebugLog>, place: Place) -> Self {
        Tap { tracer, debug, place, line: Vec::new() }
    }
}

impl AsyncWrite for Tap {
    fn poll_write(mut self: Pin<&mut Self>, _: &mut Context<'_>, data: &[u8]) -> Poll<std::io::Result<usize>> {
        let this = &mut *self;
        for chunk in data.split_inclusive(|b| *b == b'\n') {
            this.line.extend_from_slice(chunk);
            if this.line.ends_with(b"\n") {
                if let Some(tracer) = &this.tracer {
                    tracer.record(this.place, &this.line);
                }
                if let Some(debug) = &this.debug {
                    debug.wire(this.place, &this.line);
                }
                this.line.clear();
            }
        }
        Poll::Ready(Ok(data.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn credentials_are_redacted_and_nothing_else() {
        let mut params = json!({
            "cwd": "/w",
            "mcpServers": [
                {"name": "a", "command": "x", "args": ["--token", "t"], "env": [{"name": "KEY", "value": "s3cret"}]},
                {"type": "http", "name": "b", "url": "https://user:pw@example.test/mcp?key=k&x=1#top",
                 "headers": [{"name": "Authorization", "value": "Bearer t"}]},
                {"type": "sse", "name": "c", "url": "http://example.test/sse", "headers": {"X-Key": "k"}},
            ],
        });
        redact(&mut params);
        assert_eq!(
            params,
            json!({
                "cwd": "/w",
                "mcpServers": [
                    {"name": "a", "command": "x", "args": ["--token", "t"], "env": [{"name": "KEY", "value": REDACTED}]},
                    {"type": "http", "name": "b", "url": "https://[REDACTED]@example.test/mcp?[REDACTED]#top",
                     "headers": [{"name": "Authorization", "value": REDACTED}]},
                    {"type": "sse", "name": "c", "url": "http://example.test/sse", "headers": {"X-Key": REDACTED}},
                ],
            })
        );
        let mut other = json!({"url": "file:///a?b=c", "uri": "https://u:p@h/"});
        redact(&mut other);
        assert_eq!(other, json!({"url": "file:///a?b=c", "uri": "https://u:p@h/"}), "only `url` members of http(s)");
    }

    #[test]
    fn places_are_named_as_the_official_trace_names_them() {
        let tracer = Tracer::new(Box::new(std::io::sink()), 3, false);
        let state = tracer.0.lock().unwrap();
        assert_eq!(
            (state.component(0), state.component(2), state.before(0), state.after(1)),
            ("Proxy(0)".into(), "Agent".into(), "Client".into(), "Agent".into())
        );
        drop(state);
        let tracer = Tracer::new(Box::new(std::io::sink()), 2, true);
        let state = tracer.0.lock().unwrap();
        assert_eq!((state.component(1), state.after(1)), ("Proxy(1)".into(), "Agent".into()));
    }

    /// A request whose id is no JSON-RPC id is answered with `null`, and one whose id the
    /// runtime writes in another form (`1.0`) with that form: neither leaves an entry behind.
    #[test]
    fn requests_answered_under_another_form_of_their_id_leave_nothing_pending() {
        let tracer = Tracer::new(Box::new(std::io::sink()), 1, false);
        let answer = |id: &str| format!(r#"{{"dir":"out","msg":{{"jsonrpc":"2.0","id":{id},"result":{{}}}}}}"#);
        for n in 0..100 {
            let request = format!(r#"{{"dir":"in","msg":{{"jsonrpc":"2.0","id":{{"n":{n}}},"method":"x"}}}}"#);
            tracer.record(Place::Client, request.as_bytes());
            tracer.record(Place::Client, answer("null").as_bytes());
        }
        tracer.record(Place::Client, br#"{"dir":"in","msg":{"jsonrpc":"2.0","id":"\u0061","method":"x"}}"#);
        tracer.record(Place::Client, answer(r#""a""#).as_bytes());
        assert_eq!(tracer.0.lock().unwrap().pending.len(), 0);
    }
}
