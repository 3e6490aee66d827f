//! A small ACP agent written by hand (std threads + serde_json, no runtime), for the checker's
//! tests. Well-behaved by default; each `Flaws` field breaks one rule of the spec on purpose.
//!
//! A prompt turn streams six `agent_message_chunk`s, 50 ms apart, then answers `end_turn`;
//! `session/cancel` ends it with `cancelled` at the next chunk.

use std::collections::HashMap;
use std::io::{BufRead, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};

/// The rules this agent breaks.
#[derive(Clone, Copy, Default)]
pub struct Flaws {
    /// `session/cancel` is ignored: the turn runs on and answers `end_turn`.
    pub ignore_cancel: bool,
    /// An unknown (non-extension) request makes the process exit.
    pub crash_on_unknown_method: bool,
    /// `loadSession: true` is advertised, but `session/load` answers -32601.
    pub lie_about_load_session: bool,
}

#[derive(Clone)]
struct Out(Arc<Mutex<std::io::Stdout>>);

impl Out {
    fn send(&self, message: Value) {
        let mut out = self.0.lock().unwrap();
        let _ = writeln!(out, "{message}");
        let _ = out.flush();
    }
    fn result(&self, id: &Value, result: Value) {
        self.send(json!({"jsonrpc": "2.0", "id": id, "result": result}));
    }
    fn error(&self, id: &Value, code: i64, message: &str) {
        self.send(json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}}));
    }
}

pub fn run(flaws: Flaws) {
    let out = Out(Arc::new(Mutex::new(std::io::stdout())));
    // Session id -> the cancel flag of its current turn.
    let turns: Arc<Mutex<HashMap<String, Arc<AtomicBool>>>> = Arc::default();
    let mut sessions = 0u32;
    for line in std::io::stdin().lock().lines() {
        let Ok(line) = line else { break };
        if line.trim().is_empty() {
            continue;
        }
        let Ok(message) = serde_json::from_str::<Value>(&line) else {
            out.send(json!({"jsonrpc": "2.0", "id": null, "error": {"code": -32700, "message": "Parse error"}}));
            continue;
        };
        let method = message["method"].as_str().unwrap_or_default().to_owned();
        let params = message.get("params").cloned().unwrap_or(Value::Null);
        let Some(id) = message.get("id").cloned() else {
            // A notification.
            if method == "session/cancel" && !flaws.ignore_cancel {
                let session = params["sessionId"].as_str().unwrap_or_default();
                if let Some(flag) = turns.lock().unwrap().get(session) {
                    flag.store(true, Ordering::SeqCst);
                }
            }
            continue;
        };
        if message.get("method").is_none() {
            continue; // a response: we never call the client
        }
        match method.as_str() {
            "initialize" => {
                let version = params["protocolVersion"].as_u64().unwrap_or(1).min(1);
                out.result(
                    &id,
                    json!({
                        "protocolVersion": version,
                        "agentCapabilities": {"loadSession": flaws.lie_about_load_session},
                        "authMethods": [],
                        "agentInfo": {"name": "raw-test-agent", "version": "0.0.1"},
                    }),
                );
            }
            "authenticate" => out.result(&id, json!({})),
            "session/new" => {
                sessions += 1;
                out.result(&id, json!({"sessionId": format!("raw_{sessions}")}));
            }
            "session/prompt" => {
                let session = params["sessionId"].as_str().unwrap_or_default().to_owned();
                let flag = Arc::new(AtomicBool::new(false));
                turns.lock().unwrap().insert(session.clone(), flag.clone());
                let out = out.clone();
                std::thread::spawn(move || {
                    let mut stop = "end_turn";
                    for n in 0..6 {
                        if flag.load(Ordering::SeqCst) {
                            stop = "cancelled";
                            break;
                        }
                        out.send(json!({"jsonrpc": "2.0", "method": "session/update", "params": {
                            "sessionId": session,
                            "update": {"sessionUpdate": "agent_message_chunk",
                                       "content": {"type": "text", "text": format!("word{n} ")}},
                        }}));
                        std::thread::sleep(Duration::from_millis(50));
                    }
                    if flag.load(Ordering::SeqCst) {
                        stop = "cancelled";
                    }
                    out.result(&id, json!({"stopReason": stop}));
                });
            }
            m if m.starts_with('_') => out.error(&id, -32601, "Method not found"),
            _ => {
                if flaws.crash_on_unknown_method {
                    eprintln!("raw-test-agent: unknown method {method}, giving up");
                    std::process::exit(70);
                }
                out.error(&id, -32601, "Method not found");
            }
        }
    }
}
