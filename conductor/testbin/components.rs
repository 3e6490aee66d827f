//! Misbehaving proxies for the conductor's fault tests, by the first argument:
//!
//! - `pass`: forwards everything (a well-behaved proxy);
//! - `older-pass`, `older-pass-forwarding`: `pass` written for the older proxy wire only
//!   (`@thinkwell/conductor`, earlier `sacp`), which knows neither `proxy/initialize` nor
//!   `_proxy/initialize`: the first answers them -32601, the second passes them on to its
//!   successor in the older wire's envelope, as a proxy passes on what it does not know. Each
//!   prints `off the older wire:` and the line on stderr for every line the conductor sends it
//!   in another wire's envelope or in the envelope of the other kind (our proxies would accept
//!   it, a proxy of that wire would not);
//! - `crash`: forwards until a `session/prompt` arrives, then exits with status 3;
//! - `silent`: never answers `session/prompt` (and ignores its cancellation);
//! - `garbage`: writes a line that is not JSON to stdout when a `session/prompt` arrives;
//! - `echo-agent`: a terminal agent that answers `initialize` with the protocol version asked
//!   for (1 or 2), each prompt with one `agent_message_chunk`
//!   whose `_meta.receivedParams` is the prompt's params exactly as they arrived, then
//!   `end_turn`, and `session/new` with `_meta.receivedParams` likewise. It prints its pid on
//!   stderr.

use std::io::Write;

use acp_rpc::proxy::{Passthrough, Proxy, ProxyContext, Side, serve_proxy};
use acp_rpc::{ErrorObject, IncomingRequest, RawValue};

#[path = "../tests/common/older_wire.rs"]
mod older_wire;

struct Faulty(&'static str);

impl Proxy for Faulty {
    fn intercepts(&self, from: Side, method: &str) -> bool {
        from == Side::Client && method == "session/prompt"
    }

    async fn handle_request(
        &self,
        _cx: ProxyContext,
        _from: Side,
        _req: IncomingRequest,
    ) -> Result<Box<RawValue>, ErrorObject> {
        match self.0 {
            "crash" => {
                eprintln!("crashing on purpose");
                std::process::exit(3)
            }
            "garbage" => {
                {
                    let mut out = std::io::stdout().lock();
                    let _ = out.write_all(b"this is not JSON-RPC\n");
                    let _ = out.flush();
                }
                std::future::pending().await
            }
            _ => std::future::pending().await,
        }
    }
}

/// The `echo-agent`: raw, so that what it reports is what arrived, byte for byte.
struct EchoAgent;

impl acp_rpc::Handler for EchoAgent {
    async fn handle_request(&self, req: IncomingRequest) -> Result<Box<RawValue>, ErrorObject> {
        let raw = |text: String| RawValue::from_string(text).map_err(ErrorObject::internal_error);
        match &*req.method {
            "initialize" => {
                // The version asked for, 1 or 2 (a v2 client's `initialize` is not checked).
                let asked = req.params.as_deref().and_then(|p| serde_json::from_str::<serde_json::Value>(p.get()).ok());
                let version = asked.and_then(|a| a["protocolVersion"].as_u64()).map_or(1, |v| v.clamp(1, 2));
                raw(format!(
                    r#"{{"protocolVersion":{version},"agentCapabilities":{{"loadSession":false,"_meta":{{"echo":true}}}},"authMethods":[],"agentInfo":{{"name":"echo","version":"1"}}}}"#
                ))
            }
            "session/new" => {
                let params = req.params.as_deref().map_or("null", RawValue::get);
                let received = serde_json::to_string(params).map_err(ErrorObject::internal_error)?;
                raw(format!(r#"{{"sessionId":"echo-1","_meta":{{"receivedParams":{received}}}}}"#))
            }
            "session/prompt" => {
                let params = req.params.as_deref().map_or("null", RawValue::get);
                let received = serde_json::to_string(params).map_err(ErrorObject::internal_error)?;
                let update = format!(
                    r#"{{"sessionId":"echo-1","update":{{"sessionUpdate":"agent_message_chunk","content":{{"type":"text","text":"echo"}},"_meta":{{"receivedParams":{received}}}}}}}"#
                );
                let update = raw(update)?;
                req.peer.notify_raw("session/update", Some(&update)).await.map_err(ErrorObject::internal_error)?;
                raw(r#"{"stopReason":"end_turn"}"#.into())
            }
            other => Err(ErrorObject::method_not_found(other)),
        }
    }
}

#[tokio::main]
async fn main() {
    let mode = std::env::args().nth(1).unwrap_or_default();
    let (stdin, stdout) = acp_rpc::transport::stdio();
    let result = match mode.as_str() {
        "echo-agent" => {
            eprintln!("pid {}", std::process::id());
            let (_peer, serve) = acp_rpc::Connection::new().serve(stdin, stdout, EchoAgent);
            serve.await
        }
        "pass" => serve_proxy(Passthrough, stdin, stdout).await,
        "older-pass" | "older-pass-forwarding" => {
            let proxy = older_wire::OlderOnly { inner: Passthrough, forwarding: mode == "older-pass-forwarding" };
            let input = older_wire::older_wire_only(stdin, |line| eprintln!("off the older wire: {line}"));
            serve_proxy(proxy, input, stdout).await
        }
        "crash" => serve_proxy(Faulty("crash"), stdin, stdout).await,
        "silent" => serve_proxy(Faulty("silent"), stdin, stdout).await,
        "garbage" => serve_proxy(Faulty("garbage"), stdin, stdout).await,
        other => {
            eprintln!("unknown mode {other:?}");
            std::process::exit(2)
        }
    };
    if let Err(e) = result {
        eprintln!("component: {e}");
    }
}
