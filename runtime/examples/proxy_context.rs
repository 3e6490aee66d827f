//! A proxy that adds context to every prompt: the text given with `--context` goes in front of
//! each `session/prompt`'s content, and everything else passes through untouched. Run it in a
//! chain with the conductor:
//!
//! `acp-conductor agent "cargo run -q -p acp-runtime --example proxy_context -- --context 'Be brief.'" "cargo run -q -p acp-runtime --example agent"`
//!
//! and drive the chain with the `client` example as with any agent:
//! `cargo run -p acp-runtime --example client -- -- cargo run -q -p acp-conductor -- agent "..." "..."`.

use acp_runtime::proxy::{Proxy, ProxyContext, Side, serve_proxy};
use acp_runtime::{ErrorObject, IncomingRequest, RawValue};
use serde_json::Value;

const USAGE: &str = "usage: proxy_context [--context TEXT]";

struct AddContext {
    context: String,
}

impl Proxy for AddContext {
    fn intercepts(&self, from: Side, method: &str) -> bool {
        from == Side::Client && method == "session/prompt"
    }

    async fn handle_request(
        &self,
        cx: ProxyContext,
        from: Side,
        mut req: IncomingRequest,
    ) -> Result<Box<RawValue>, ErrorObject> {
        // A `Value` keeps every member it reads, known or not; only this one array changes.
        let mut params: Value = req.parse_params()?;
        let Some(prompt) = params.get_mut("prompt").and_then(Value::as_array_mut) else {
            return Err(ErrorObject::invalid_params_at("prompt", "expected an array of content blocks"));
        };
        prompt.insert(0, serde_json::json!({"type": "text", "text": self.context}));
        req.params = Some(serde_json::value::to_raw_value(&params).map_err(ErrorObject::internal_error)?);
        cx.forward_request(from, req).await
    }
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let mut context = "Context from the proxy: keep the answer short.".to_owned();
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match (arg.as_str(), args.next()) {
            ("--context", Some(text)) => context = text,
            _ => {
                eprintln!("{USAGE}");
                return std::process::ExitCode::from(2);
            }
        }
    }
    let (stdin, stdout) = acp_runtime::transport::stdio();
    match serve_proxy(AddContext { context }, stdin, stdout).await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("proxy_context: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}
