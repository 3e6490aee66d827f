//! The fuzz targets' logic, shared by the libFuzzer binaries (`fuzz_targets/`), the corpus
//! replay test (`tests/replay.rs`, which runs on stable) and the seed-corpus writer
//! (`examples/seed_corpus.rs`). See ../FUZZING.md.
//!
//! Every target takes arbitrary bytes. The first byte is a knob (chunk size, line limit,
//! method), the rest is the input. A target fails by panicking (libFuzzer reports the panic as a
//! crash): on a panic inside the code under test, a hang, or a broken invariant.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use acp_rpc::agent::AgentContext;
use acp_rpc::framing::{DEFAULT_MAX_LINE_BYTES, Frame, LineReader};
use acp_rpc::jsonrpc::{self, DecodeErrorKind, Message};
use acp_rpc::{Connection, ErrorObject};
use acp_types::*;
use serde::de::IgnoredAny;
use serde_json::{Value, json};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt, ReadBuf};

mod http;
mod v2;
pub use http::{DOCUMENTED_STATUSES, http_server};
pub use v2::{FuzzAgentV2, router_v2};

// ---- (a) framing + envelope ---------------------------------------------------------------------

/// Hands out at most `chunk` bytes per read, so line boundaries fall anywhere in a read.
struct Chunked<'a> {
    data: &'a [u8],
    chunk: usize,
}

impl AsyncRead for Chunked<'_> {
    fn poll_read(mut self: Pin<&mut Self>, _: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let n = self.chunk.min(self.data.len()).min(buf.remaining());
        buf.put_slice(&self.data[..n]);
        self.data = &self.data[n..];
        Poll::Ready(Ok(()))
    }
}

/// Runs a future that never waits on anything but [`Chunked`] reads (always ready).
fn block_on_ready<F: Future>(f: F) -> F::Output {
    let mut f = std::pin::pin!(f);
    let mut cx = Context::from_waker(std::task::Waker::noop());
    match f.as_mut().poll(&mut cx) {
        Poll::Ready(out) => out,
        Poll::Pending => panic!("the line reader waited on a reader that is always ready"),
    }
}

fn trim_cr(line: &[u8]) -> &[u8] {
    line.strip_suffix(b"\r").unwrap_or(line)
}

fn is_blank(line: &[u8]) -> bool {
    line.iter().all(|b| matches!(b, b' ' | b'\t' | b'\r' | b'\n'))
}

/// What the framer must produce, written the obvious way: split on `\n` (a last line without
/// one counts), drop one trailing `\r`, skip blank lines, report lines over `max` as oversized
/// (`Err((raw length, trimmed length))`; either is an acceptable `len`).
fn model_frames(input: &[u8], max: usize) -> Vec<Result<&[u8], (u64, u64)>> {
    let mut out = Vec::new();
    let segments: Vec<&[u8]> = input.split(|b| *b == b'\n').collect();
    let n = segments.len();
    for (i, seg) in segments.into_iter().enumerate() {
        if i == n - 1 && seg.is_empty() {
            continue;
        }
        let line = trim_cr(seg);
        if line.len() > max {
            out.push(Err((seg.len() as u64, line.len() as u64)));
        } else if !is_blank(line) {
            out.push(Ok(line));
        }
    }
    out
}

/// Target (a): the line framer on input split into reads of any size, checked against
/// [`model_frames`], then [`jsonrpc::decode`] on every line, checked against serde_json: a
/// decoded message is JSON, a -32700 is not, params are an object or an array, and every error
/// answer encodes.
pub fn framing_decode(data: &[u8]) {
    let Some((&knob, input)) = data.split_first() else { return };
    let chunk = 1 + (knob & 0x0f) as usize * 7;
    let max = match knob >> 4 {
        0 => DEFAULT_MAX_LINE_BYTES,
        n => n as usize * 24,
    };
    let frames = block_on_ready(async {
        let mut reader = LineReader::new(Chunked { data: input, chunk }, max);
        let mut frames = Vec::new();
        while let Some(frame) = reader.next_frame().await.expect("reading from memory cannot fail") {
            frames.push(match frame {
                Frame::Line(line) => Ok(line.to_vec()),
                Frame::Oversized { len } => Err(len),
            });
        }
        frames
    });
    let expected = model_frames(input, max);
    assert_eq!(frames.len(), expected.len(), "frame count (max {max}, chunk {chunk})");
    for (got, want) in frames.iter().zip(&expected) {
        match (got, want) {
            (Ok(a), Ok(b)) => assert_eq!(a.as_slice(), *b),
            (Err(len), Err((raw, trimmed))) => assert!(len == raw || len == trimmed, "oversized len {len}"),
            _ => panic!("frame {got:?} where the model has {want:?} (max {max}, chunk {chunk})"),
        }
    }
    for line in frames.iter().filter_map(|f| f.as_ref().ok()) {
        check_line(line);
    }
}

fn check_line(line: &[u8]) {
    let is_json = std::str::from_utf8(line).is_ok_and(|t| serde_json::from_str::<IgnoredAny>(t).is_ok());
    match jsonrpc::decode(line) {
        Ok(message) => {
            assert!(is_json, "decoded a line that is not JSON");
            let params = match &message {
                Message::Request { params, .. } | Message::Notification { params, .. } => *params,
                Message::Response { result, .. } => {
                    if let Ok(result) = result {
                        serde_json::from_str::<IgnoredAny>(result.get()).expect("a result is JSON");
                    }
                    None
                }
            };
            if let Some(params) = params {
                let first = params.get().trim_start().bytes().next();
                assert!(matches!(first, Some(b'{' | b'[')), "params neither object nor array: {}", params.get());
            }
        }
        Err(e) => {
            // serde_json reads a number beyond f64 (`1e400`) as a syntax error, so a line that is
            // such a number is grammatical JSON answered -32700; anything else must agree.
            let out_of_range = std::str::from_utf8(line).is_ok_and(|t| {
                serde_json::from_str::<Value>(t).is_err_and(|e| e.to_string().starts_with("number out of range"))
            });
            if !out_of_range {
                assert_eq!(e.kind == DecodeErrorKind::Parse, !is_json, "{e}");
            }
            if let Some((id, error)) = e.answer() {
                // Encoded as they are written (the id as read: `Value` cannot hold `1e999`).
                serde_json::to_string(&(id, error)).expect("an error answer encodes");
            }
        }
    }
}

// ---- (b) the router with a test agent ----------------------------------------------------------

/// An agent that uses the connection the way real ones do: updates, a permission request, a
/// file read, an extension call, and a turn that waits for its cancellation. It never panics,
/// so any panic is the runtime's.
pub struct FuzzAgent;

impl Agent<AgentContext> for FuzzAgent {
    async fn initialize(&self, params: InitializeRequest, _: AgentContext) -> Result<InitializeResponse, Error> {
        Ok(InitializeResponse::new(params.protocol_version))
    }

    async fn authenticate(&self, _: AuthenticateRequest, _: AgentContext) -> Result<AuthenticateResponse, Error> {
        Ok(AuthenticateResponse::new())
    }

    async fn session_new(&self, _: NewSessionRequest, _: AgentContext) -> Result<NewSessionResponse, Error> {
        Ok(NewSessionResponse::new("sess_1"))
    }

    async fn session_load(&self, _: LoadSessionRequest, _: AgentContext) -> Result<LoadSessionResponse, Error> {
        Ok(LoadSessionResponse::new())
    }

    async fn session_set_mode(
        &self,
        _: SetSessionModeRequest,
        _: AgentContext,
    ) -> Result<SetSessionModeResponse, Error> {
        Err(Error::invalid_params().data(json!("no such mode")))
    }

    async fn session_prompt(&self, params: PromptRequest, cx: AgentContext) -> Result<PromptResponse, Error> {
        let s = params.session_id.clone();
        let client = cx.client();
        let chunk = SessionUpdate::AgentMessageChunk(ContentChunk::new(ContentBlock::Text(TextContent::new("hi"))));
        client.session_update(SessionNotification::new(s.clone(), chunk)).await?;
        if params.prompt.len() > 1 {
            // Waits for `session/cancel`, `$/cancel_request` or the end of the input.
            cx.cancelled().await;
            return Ok(PromptResponse::new(StopReason::Cancelled));
        }
        let options = vec![PermissionOption::new("allow", "Allow", PermissionOptionKind::AllowOnce)];
        let permission =
            client.request_permission(RequestPermissionRequest::new(s.clone(), ToolCallUpdate::new("call_1"), options));
        match tokio::time::timeout(Duration::from_secs(5), permission).await {
            Ok(Ok(p)) if matches!(p.outcome, RequestPermissionOutcome::Cancelled) => {
                return Ok(PromptResponse::new(StopReason::Cancelled));
            }
            Ok(Err(e)) => return Err(e.into()),
            _ => {}
        }
        let _ = tokio::time::timeout(Duration::from_secs(5), client.read_text_file(ReadTextFileRequest::new(s, "/a")))
            .await;
        let _ = tokio::time::timeout(Duration::from_secs(5), client.ext_method("_fuzz/echo", json!({"a": 1}))).await;
        Ok(PromptResponse::new(StopReason::EndTurn))
    }

    async fn session_cancel(&self, _: CancelNotification, _: AgentContext) -> Result<(), Error> {
        Ok(())
    }

    async fn ext_method(&self, method: &str, params: ExtRequest, _: AgentContext) -> Result<ExtResponse, Error> {
        match method {
            "_fuzz/echo" => Ok(ExtResponse(params.0)),
            _ => Err(Error::method_not_found()),
        }
    }
}

/// How long the connection may take to end after the end of its input. The runtime's clock is
/// paused and jumps ahead whenever every task waits, so this costs no real time; a connection
/// still running when it fires is waiting for something that never comes (a hang).
const HANG: Duration = Duration::from_secs(600);

/// Target (b): the whole agent side of a connection (framing, envelope, router, typed decode,
/// the test agent's handlers and its calls back) fed arbitrary bytes as the client's input,
/// written in chunks of any size, then end of input. The connection must not panic, must end
/// (no hang), and everything it writes must be JSON-RPC 2.0 messages, one per line.
pub fn router(data: &[u8]) {
    let Some((&knob, input)) = data.split_first() else { return };
    let out = drive(knob, &[input], |connection, reader, writer| {
        let (client, serve) = connection.serve_agent(FuzzAgent, reader, writer);
        drop(client);
        serve
    });
    for line in out.split(|b| *b == b'\n').filter(|l| !l.is_empty()) {
        let Some(message) = output_line(line) else { continue };
        check_message(&message);
    }
}

/// Runs one connection on a paused clock and returns everything it wrote. `knob` picks the
/// write size (low 6 bits) and the connection's options (high 2 bits); `start` serves the
/// connection on its ends of an in-memory pipe. Each of `parts` is written in pieces, and
/// every task runs as far as it can after it; then the input ends. Fails on a panic, or a
/// connection that does not end after the end of its input.
fn drive<F, S>(knob: u8, parts: &[&[u8]], start: F) -> Vec<u8>
where
    F: FnOnce(Connection, acp_rpc::transport::PipeReader, acp_rpc::transport::PipeWriter) -> S,
    S: Future<Output = Result<(), acp_rpc::Error>> + Send + 'static,
{
    let rt = tokio::runtime::Builder::new_current_thread().enable_time().start_paused(true).build().expect("a runtime");
    rt.block_on(async {
        let chunk = 1 + (knob & 0x3f) as usize * 13;
        let connection = match knob >> 6 {
            0 => Connection::new(),
            1 => Connection::new().max_line_bytes(256),
            // Bounds that are reached: requests wait for a slot, then in a backlog of a few,
            // then are refused as overloaded, while the reader goes on.
            2 => Connection::new()
                .max_concurrent_requests(1)
                .max_queued_requests(2)
                .max_backlog_bytes(2048)
                .write_queue_capacity(1),
            _ => Connection::new().notification_queue_capacity(1).cancel_grace(Duration::from_millis(1)),
        };
        let ((agent_r, agent_w), (mut reader, mut writer)) = acp_rpc::transport::duplex(4096);
        let serve = tokio::spawn(start(connection, agent_r, agent_w));
        let drain = tokio::spawn(async move {
            let mut out = Vec::new();
            reader.read_to_end(&mut out).await.map(|_| out)
        });
        for part in parts {
            for piece in part.chunks(chunk) {
                if writer.write_all(piece).await.is_err() {
                    break;
                }
            }
            // Let every handler run as far as it can (the paused clock jumps ahead only when
            // all tasks wait, past the agents' 5 s call timeouts).
            tokio::time::sleep(Duration::from_secs(20)).await;
        }
        drop(writer);
        let served = tokio::time::timeout(HANG, serve).await.expect("the connection hangs after the end of its input");
        served.expect("the serve task panicked").expect("serve ends cleanly at the end of input");
        let out = tokio::time::timeout(HANG, drain).await.expect("the output never ends").unwrap().unwrap();
        if std::env::var_os("ACP_FUZZ_DEBUG").is_some() {
            eprintln!("{}", String::from_utf8_lossy(&out));
        }
        out
    })
}

/// A JSON-RPC 2.0 message, with a well-formed error object if it has one.
fn check_message(message: &Value) {
    assert_eq!(message["jsonrpc"], "2.0", "{message}");
    if let Some(error) = message.get("error") {
        serde_json::from_value::<ErrorObject>(error.clone()).expect("a well-formed error object");
    }
}

/// One line the runtime wrote, read as JSON; `None` for a JSON text with a number beyond f64
/// (an id or params the client sent, written back as they were), which `Value` cannot hold.
fn output_line(line: &[u8]) -> Option<Value> {
    match serde_json::from_slice(line) {
        Ok(message) => Some(message),
        Err(e) if e.to_string().starts_with("number out of range") => {
            serde_json::from_slice::<IgnoredAny>(line).expect("the runtime writes JSON lines");
            None
        }
        Err(e) => panic!("the runtime writes JSON lines: {e}: {}", String::from_utf8_lossy(line)),
    }
}

// ---- (c) typed decode by method ----------------------------------------------------------------

/// Every method name of the generated constants (unstable ones included), plus names no table
/// knows.
pub const METHODS: &[&str] = &[
    agent_method::INITIALIZE,
    agent_method::AUTHENTICATE,
    agent_method::LOGOUT,
    agent_method::SESSION_NEW,
    agent_method::SESSION_LOAD,
    agent_method::SESSION_LIST,
    agent_method::SESSION_DELETE,
    agent_method::SESSION_FORK,
    agent_method::SESSION_RESUME,
    agent_method::SESSION_CLOSE,
    agent_method::SESSION_SET_MODE,
    agent_method::SESSION_SET_CONFIG_OPTION,
    agent_method::SESSION_PROMPT,
    agent_method::SESSION_CANCEL,
    agent_method::PROVIDERS_LIST,
    agent_method::PROVIDERS_SET,
    agent_method::PROVIDERS_DISABLE,
    agent_method::MCP_MESSAGE,
    agent_method::AUTH_STATUS,
    agent_method::SESSION_ARCHIVE,
    agent_method::SESSION_UNARCHIVE,
    agent_method::SESSION_STATUS,
    agent_method::SESSION_SET_TITLE,
    client_method::FS_WRITE_TEXT_FILE,
    client_method::FS_READ_TEXT_FILE,
    client_method::SESSION_REQUEST_PERMISSION,
    client_method::TERMINAL_CREATE,
    client_method::TERMINAL_OUTPUT,
    client_method::TERMINAL_RELEASE,
    client_method::TERMINAL_WAIT_FOR_EXIT,
    client_method::TERMINAL_KILL,
    client_method::ELICITATION_CREATE,
    client_method::ELICITATION_COMPLETE,
    client_method::MCP_MESSAGE,
    client_method::SESSION_UPDATE,
    client_method::AUTH_STATUS_UPDATE,
    proxy_method::PROXY_INITIALIZE,
    proxy_method::PROXY_SUCCESSOR,
    protocol_method::CANCEL_REQUEST,
    "_vendor/ext",
    "no/such/method",
];

/// The first object member name that appears twice in one object of `text` (JSON), if any.
pub fn duplicate_key(text: &str) -> Option<String> {
    use serde::Deserialize;
    use serde::de::{Deserializer, MapAccess, SeqAccess, Visitor};
    struct Check;
    impl<'de> serde::Deserialize<'de> for Check {
        fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            d.deserialize_any(Check)
        }
    }
    impl<'de> Visitor<'de> for Check {
        type Value = Check;
        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("JSON")
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Check, A::Error> {
            let mut seen = std::collections::HashSet::new();
            while let Some(key) = map.next_key::<String>()? {
                if !seen.insert(key.clone()) {
                    return Err(serde::de::Error::custom(format!("duplicate key `{key}`")));
                }
                map.next_value::<Check>()?;
            }
            Ok(Check)
        }
        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Check, A::Error> {
            while seq.next_element::<Check>()?.is_some() {}
            Ok(Check)
        }
        fn visit_bool<E>(self, _: bool) -> Result<Check, E> {
            Ok(Check)
        }
        fn visit_i64<E>(self, _: i64) -> Result<Check, E> {
            Ok(Check)
        }
        fn visit_u64<E>(self, _: u64) -> Result<Check, E> {
            Ok(Check)
        }
        fn visit_f64<E>(self, _: f64) -> Result<Check, E> {
            Ok(Check)
        }
        fn visit_str<E>(self, _: &str) -> Result<Check, E> {
            Ok(Check)
        }
        fn visit_unit<E>(self) -> Result<Check, E> {
            Ok(Check)
        }
    }
    let mut de = serde_json::Deserializer::from_str(text);
    match Check::deserialize(&mut de) {
        Err(e) if e.to_string().starts_with("duplicate key") => Some(e.to_string()),
        _ => None,
    }
}

/// Whether two JSON texts are the same value up to floats that differ in their last bits:
/// serde_json without its `float_roundtrip` feature (which acp-types turns on by default, and a
/// user may turn off) does not read back every float it writes exactly (see
/// tests/tests/fuzz_regressions.rs).
pub fn same_but_float_bits(a: &str, b: &str) -> bool {
    fn same(a: &Value, b: &Value) -> bool {
        match (a, b) {
            (Value::Number(x), Value::Number(y)) if x.is_f64() || y.is_f64() => {
                let (x, y) = (x.as_f64().unwrap_or(f64::NAN), y.as_f64().unwrap_or(f64::NAN));
                x == y || (x.to_bits().abs_diff(y.to_bits()) <= 2 && x.signum() == y.signum())
            }
            (Value::Array(x), Value::Array(y)) => x.len() == y.len() && x.iter().zip(y).all(|(x, y)| same(x, y)),
            (Value::Object(x), Value::Object(y)) => {
                x.len() == y.len() && x.iter().zip(y).all(|((kx, vx), (ky, vy))| kx == ky && same(vx, vy))
            }
            _ => a == b,
        }
    }
    match (serde_json::from_str::<Value>(a), serde_json::from_str::<Value>(b)) {
        (Ok(a), Ok(b)) => same(&a, &b),
        _ => false,
    }
}

/// Decodes `bytes` as `$ty` for `method`; when that succeeds (and nothing trails), the value
/// must encode without a duplicate member name, the encoding must decode again, and encoding
/// that must give the same text.
macro_rules! idempotent {
    ($ty:ty, $method:expr, $bytes:expr) => {{
        let mut de = serde_json::Deserializer::from_slice($bytes);
        if let Ok(Some(first)) = <$ty>::decode($method, &mut de) {
            if de.end().is_ok() {
                let text = serde_json::to_string(&first).expect("a decoded message encodes");
                if let Some(dup) = duplicate_key(&text) {
                    panic!("{} {}: the encoding has a {dup}\n{text}", stringify!($ty), $method);
                }
                let again = <$ty>::decode($method, &mut serde_json::Deserializer::from_str(&text))
                    .unwrap_or_else(|e| {
                        panic!("{} {}: its own encoding does not decode: {e}\n{text}", stringify!($ty), $method)
                    })
                    .expect("same method");
                let text_again = serde_json::to_string(&again).expect("encodes");
                if text != text_again && !same_but_float_bits(&text, &text_again) {
                    panic!("{} {}: encoding is not stable\n{text}\n{text_again}", stringify!($ty), $method);
                }
            }
        }
    }};
}

/// Target (c): the first byte picks a method ([`METHODS`]), the rest is its params (or result)
/// as JSON, decoded through every envelope enum that knows the method. Decoding never panics,
/// and whatever decodes re-encodes to something that decodes to the same encoding.
pub fn typed_decode(data: &[u8]) {
    let Some((&pick, bytes)) = data.split_first() else { return };
    let method = METHODS[pick as usize % METHODS.len()];
    idempotent!(ClientRequest, method, bytes);
    idempotent!(AgentResponse, method, bytes);
    idempotent!(ClientNotification, method, bytes);
    idempotent!(AgentRequest, method, bytes);
    idempotent!(ClientResponse, method, bytes);
    idempotent!(AgentNotification, method, bytes);
    idempotent!(ProtocolLevelNotification, method, bytes);
}

// ---- seeds from the spec ----------------------------------------------------------------------

/// Every ```json block of the spec pages in `dir` that is a whole JSON-RPC message, compacted to
/// one line, grouped by page (`[...]` elisions read as empty arrays).
pub fn spec_messages(dir: &std::path::Path) -> io::Result<Vec<(String, Vec<Value>)>> {
    let mut pages: Vec<_> = std::fs::read_dir(dir)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "mdx"))
        .collect();
    pages.sort();
    let mut out = Vec::new();
    for page in pages {
        let text = std::fs::read_to_string(&page)?;
        let mut messages = Vec::new();
        let mut lines = text.lines();
        while let Some(line) = lines.next() {
            if line.trim_start().starts_with("```json") {
                let block: Vec<&str> = lines.by_ref().take_while(|l| !l.trim_start().starts_with("```")).collect();
                if let Ok(v) = serde_json::from_str::<Value>(&block.join("\n").replace("[...]", "[]"))
                    && v.get("jsonrpc").is_some()
                {
                    messages.push(v);
                }
            }
        }
        let name = page.file_stem().unwrap_or_default().to_string_lossy().into_owned();
        out.push((name, messages));
    }
    Ok(out)
}

/// The seed corpus of each target from the spec examples: `(target, file name, bytes)`.
pub fn seed_corpus(dir: &std::path::Path) -> io::Result<Vec<(&'static str, String, Vec<u8>)>> {
    let mut out = Vec::new();
    for (page, messages) in spec_messages(dir)? {
        let mut all = Vec::new();
        let mut requests: Vec<(Value, String)> = Vec::new();
        for (i, m) in messages.iter().enumerate() {
            let line = serde_json::to_vec(m).expect("encodes");
            all.extend_from_slice(&line);
            all.push(b'\n');
            out.push(("framing_decode", format!("{page}-{i}"), [&[0u8][..], &line, b"\n"].concat()));
            out.push(("router", format!("{page}-{i}"), [&[0u8][..], &line, b"\n"].concat()));
            let method = match (m.get("method").and_then(Value::as_str), m.get("id")) {
                (Some(method), id) => {
                    if let Some(id) = id {
                        requests.push((id.clone(), method.to_owned()));
                    }
                    Some((method.to_owned(), m.get("params")))
                }
                (None, Some(id)) => {
                    requests.iter().rev().find(|(r, _)| r == id).map(|(_, method)| (method.clone(), m.get("result")))
                }
                _ => None,
            };
            if let Some((method, Some(payload))) = method
                && let Some(pick) = METHODS.iter().position(|x| *x == method)
            {
                let payload = serde_json::to_vec(payload).expect("encodes");
                out.push(("typed_decode", format!("{page}-{i}"), [&[pick as u8][..], &payload].concat()));
            }
        }
        if !all.is_empty() {
            // Whole pages: a client's side of a conversation, replies included.
            out.push(("framing_decode", format!("{page}-all"), [&[0x15u8][..], &all].concat()));
            out.push(("router", format!("{page}-all"), [&[0u8][..], &all].concat()));
            out.push(("router", format!("{page}-all-small-chunks"), [&[0x80u8][..], &all].concat()));
        }
    }
    // A hand-written conversation that reaches every handler of [`FuzzAgent`], with answers to
    // its calls back (the runtime's ids count from 0) and both kinds of cancellation.
    let conversation = [
        r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":1}}"#,
        r#"{"jsonrpc":"2.0","id":2,"method":"session/new","params":{"cwd":"/w","mcpServers":[]}}"#,
        r#"{"jsonrpc":"2.0","id":3,"method":"session/prompt","params":{"sessionId":"sess_1","prompt":[{"type":"text","text":"go"}]}}"#,
        r#"{"jsonrpc":"2.0","id":0,"result":{"outcome":{"outcome":"selected","optionId":"allow"}}}"#,
        r#"{"jsonrpc":"2.0","id":1,"result":{"content":"file"}}"#,
        r#"{"jsonrpc":"2.0","id":2,"result":{"a":1}}"#,
        r#"{"jsonrpc":"2.0","id":4,"method":"session/prompt","params":{"sessionId":"sess_1","prompt":[{"type":"text","text":"a"},{"type":"text","text":"b"}]}}"#,
        r#"{"jsonrpc":"2.0","method":"session/cancel","params":{"sessionId":"sess_1"}}"#,
        r#"{"jsonrpc":"2.0","id":5,"method":"_fuzz/echo","params":{"x":[1,2]}}"#,
        r#"{"jsonrpc":"2.0","id":6,"method":"session/prompt","params":{"sessionId":"sess_1","prompt":[{"type":"text","text":"a"},{"type":"text","text":"b"}]}}"#,
        r#"{"jsonrpc":"2.0","method":"$/cancel_request","params":{"requestId":6}}"#,
        r#"{"jsonrpc":"2.0","id":7,"method":"session/set_mode","params":{"sessionId":"sess_1","modeId":"m"}}"#,
    ]
    .join("\n")
        + "\n";
    for knob in [0u8, 0x41, 0x82, 0xc3] {
        out.push(("router", format!("conversation-{knob:02x}"), [&[knob][..], conversation.as_bytes()].concat()));
    }
    let messages: Vec<Value> = spec_messages(dir)?.into_iter().flat_map(|(_, m)| m).collect();
    out.extend(http::seeds(&messages));
    // Protocol v2's pages sit beside v1's (`acp-spec/v2`).
    let v2_pages = dir.join("../v2");
    if v2_pages.is_dir() {
        out.extend(v2::seeds(&spec_messages(&v2_pages)?));
    }
    Ok(out)
}
