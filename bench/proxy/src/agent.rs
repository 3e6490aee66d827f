//! The agent at the end of each chain, in raw JSON-RPC over stdio: `initialize`,
//! `session/new`, `session/prompt` (streams `N` agent message chunks, N from the prompt's
//! text, then `end_turn`) and `_bench/ping` (answers `{}` at once).
use std::io::{BufRead, Write};

fn main() {
    let stdin = std::io::stdin().lock();
    let mut out = std::io::BufWriter::with_capacity(1 << 16, std::io::stdout().lock());
    for line in stdin.lines() {
        let Ok(line) = line else { break };
        let Ok(msg) = serde_json::from_str::<serde_json::Value>(&line) else { continue };
        let Some(method) = msg.get("method").and_then(|m| m.as_str()) else { continue };
        let id = msg.get("id").cloned();
        let result = match method {
            "initialize" => serde_json::json!({"protocolVersion": 1, "agentCapabilities": {}, "authMethods": []}),
            "session/new" => serde_json::json!({"sessionId": "bench"}),
            "_bench/ping" => serde_json::json!({}),
            "session/prompt" => {
                let n: u64 = msg
                    .pointer("/params/prompt/0/text")
                    .and_then(|t| t.as_str())
                    .and_then(|t| t.parse().ok())
                    .unwrap_or(1);
                for i in 0..n {
                    let _ = writeln!(
                        out,
                        r#"{{"jsonrpc":"2.0","method":"session/update","params":{{"sessionId":"bench","update":{{"sessionUpdate":"agent_message_chunk","content":{{"type":"text","text":"chunk {i}"}}}}}}}}"#
                    );
                }
                serde_json::json!({"stopReason": "end_turn"})
            }
            _ => continue,
        };
        if let Some(id) = id {
            let _ = writeln!(out, "{}", serde_json::json!({"jsonrpc": "2.0", "id": id, "result": result}));
        }
        let _ = out.flush();
    }
}
