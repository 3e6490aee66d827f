//! A proxy that filters tool calls: permission requests for tool calls of a denied kind
//! (`--deny execute,delete`, the default) are rejected on the user's behalf, without reaching
//! the editor; every other message passes through untouched. Run it with the conductor:
//!
//! `acp-conductor agent "cargo run -q -p acp-runtime --example proxy_filter -- --deny read" "cargo run -q -p acp-runtime --example agent"`

use acp_runtime::proxy::{Proxy, ProxyContext, Side, serve_proxy};
use acp_runtime::{ErrorObject, IncomingRequest, RawValue};
use serde_json::{Value, json};

const USAGE: &str = "usage: proxy_filter [--deny KIND[,KIND...]]  (tool kinds: read, edit, delete, move, search, execute, think, fetch, other)";

struct FilterTools {
    denied: Vec<String>,
}

impl Proxy for FilterTools {
    fn intercepts(&self, from: Side, method: &str) -> bool {
        from == Side::Agent && method == "session/request_permission"
    }

    async fn handle_request(
        &self,
        cx: ProxyContext,
        from: Side,
        req: IncomingRequest,
    ) -> Result<Box<RawValue>, ErrorObject> {
        let params: Value = req.parse_params()?;
        let kind = params.pointer("/toolCall/kind").and_then(Value::as_str).unwrap_or("other");
        if !self.denied.iter().any(|d| d == kind) {
            return cx.forward_request(from, req).await;
        }
        let title = params.pointer("/toolCall/title").and_then(Value::as_str).unwrap_or("a tool call");
        eprintln!("proxy_filter: rejected {title:?} ({kind} is denied)");
        // The agent's own reject option, so that it knows the user (here: the policy) said no.
        let options = params.get("options").and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default();
        let reject = options.iter().find(|o| o["kind"].as_str().is_some_and(|k| k.starts_with("reject")));
        let answer = match reject.and_then(|o| o.get("optionId")) {
            Some(id) => json!({"outcome": {"outcome": "selected", "optionId": id}}),
            None => json!({"outcome": {"outcome": "cancelled"}}),
        };
        serde_json::value::to_raw_value(&answer).map_err(ErrorObject::internal_error)
    }
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let mut denied = vec!["execute".to_owned(), "delete".to_owned()];
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match (arg.as_str(), args.next()) {
            ("--deny", Some(kinds)) => denied = kinds.split(',').map(str::trim).map(str::to_owned).collect(),
            _ => {
                eprintln!("{USAGE}");
                return std::process::ExitCode::from(2);
            }
        }
    }
    let (stdin, stdout) = acp_runtime::transport::stdio();
    match serve_proxy(FilterTools { denied }, stdin, stdout).await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("proxy_filter: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}
