//! A small ACP agent written by hand (std threads + serde_json, no runtime), for the checker's
//! tests. Well-behaved by default; each `Flaws` field breaks one rule of the spec on purpose.
//!
//! A prompt turn streams six `agent_message_chunk`s, 50 ms apart, then answers `end_turn`;
//! `session/cancel` ends it with `cancelled` at the next chunk. Invalid params and prompts for
//! sessions it never made are refused with -32602; notifications are never answered.

use std::collections::{HashMap, HashSet};
use std::io::{BufRead, Write};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
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
    /// Not a flaw: a turn is one update and `end_turn`, written together (so the answer is on
    /// the wire before any cancel can be).
    pub quick_turn: bool,
    /// A line that is not JSON makes the process exit.
    pub crash_on_malformed: bool,
    /// The first update of each turn is this (malformed) `update` object instead.
    pub bad_update: Option<&'static str>,
    /// Not a flaw: `authMethods` is advertised and `session/new` answers auth_required.
    pub requires_auth: bool,
    /// Not a flaw: `authMethods` is empty, whatever else (as an agent whose only method is a
    /// `terminal` one lists none to a client without `auth.terminal`).
    pub no_auth_methods: bool,
    /// Not a flaw: sessions are made without a login, but `session/prompt` answers
    /// auth_required (with no `authMethods`, as `@agentclientprotocol/claude-agent-acp` does).
    pub prompt_requires_auth: bool,
    /// Not a flaw: every `session/prompt` is answered at once with -32603 (as an agent whose
    /// model cannot be reached answers).
    pub prompt_error: bool,
    /// A turn calls `fs/read_text_file`, which the client did not advertise.
    pub reads_files: bool,
    /// These bytes are written as a line on stdout first.
    pub noise: Option<&'static [u8]>,
    /// `initialize` is answered with 80 MiB and no newline, then nothing.
    pub endless_line: bool,
    /// `session/new` is followed by an update; the turns send none.
    pub update_before_prompt: bool,
    /// The pid and the session's cwd go to stderr, prompts are never answered, and the process
    /// stays 60 s after end of input.
    pub linger: bool,
    /// Not a flaw: `initialize` answers protocol version 2 whatever was asked.
    pub version_2: bool,
    /// `initialize` answers the protocol version asked for, whatever it is.
    pub echo_version: bool,
    /// `initialize` asking for a version other than 1 is answered with an error.
    pub reject_version: bool,
    /// A turn's answer is followed by this `update` object (in the same write, so it is read
    /// before the next prompt can be sent).
    pub late_update: Option<&'static str>,
    /// Not a flaw by itself: a turn sends no update and answers after 600 ms (`cancelled` at
    /// once when cancelled, unless `ignore_cancel`).
    pub quiet_turn: bool,
    /// A line that is not JSON is answered -32700 without an `id` member.
    pub idless_parse_error: bool,
    /// Unknown notifications, and `session/cancel` for an unknown session, are answered with
    /// an error with `id: null`.
    pub answer_notifications: bool,
    /// `session/new` without a `cwd` and `session/prompt` with a `prompt` that is not an
    /// array are accepted (a session in the process's directory; a turn).
    pub lenient_params: bool,
    /// `session/prompt` for a session that was never created runs a turn all the same.
    pub any_session: bool,
    /// The process stays 10 s after end of input.
    pub stay_after_eof: bool,
    /// Not a flaw: a turn uses what the client offers, as the prompt asks: it reads
    /// `acp-check.txt`, writes `acp-check-copy.txt` and runs `echo acp-check` in a terminal
    /// (waits for it, reads its output, releases it). The fields below break one rule each.
    pub uses_client: bool,
    /// The read names a relative path.
    pub relative_path: bool,
    /// The read is of `<cwd>/../acp-check-outside.txt`.
    pub reads_outside_root: bool,
    /// The write is made when reads are offered, writes or not.
    pub writes_without_capability: bool,
    /// The terminal is never released.
    pub keeps_terminal: bool,
    /// The terminal's output is asked for again after its release.
    pub uses_released_terminal: bool,
}

impl Flaws {
    /// The flaws named on the command line (see `flawed.rs`).
    #[allow(dead_code)]
    pub fn from_args() -> Flaws {
        let mut flaws = Flaws::default();
        for arg in std::env::args().skip(1) {
            match arg.as_str() {
                "quick-turn" => flaws.quick_turn = true,
                "quiet-turn" => flaws.quiet_turn = true,
                "ignore-cancel" => flaws.ignore_cancel = true,
                "idless-parse-error" => flaws.idless_parse_error = true,
                "answers-notifications" => flaws.answer_notifications = true,
                "lenient-params" => flaws.lenient_params = true,
                "any-session" => flaws.any_session = true,
                "stays-after-eof" => flaws.stay_after_eof = true,
                "uses-client" => flaws.uses_client = true,
                "relative-path" => (flaws.uses_client, flaws.relative_path) = (true, true),
                "reads-outside-root" => (flaws.uses_client, flaws.reads_outside_root) = (true, true),
                "writes-without-capability" => (flaws.uses_client, flaws.writes_without_capability) = (true, true),
                "keeps-terminal" => (flaws.uses_client, flaws.keeps_terminal) = (true, true),
                "uses-released-terminal" => (flaws.uses_client, flaws.uses_released_terminal) = (true, true),
                "crash-on-malformed" => flaws.crash_on_malformed = true,
                "bad-update=kind" => {
                    flaws.bad_update =
                        Some(r#"{"sessionUpdate":"tool_call","toolCallId":"c1","title":"Read","kind":42}"#)
                }
                "bad-update=content" => {
                    flaws.bad_update = Some(
                        r#"{"sessionUpdate":"tool_call","toolCallId":"c1","title":"Read","content":"not an array"}"#,
                    )
                }
                "bad-update=entries" => flaws.bad_update = Some(r#"{"sessionUpdate":"plan","entries":"nope"}"#),
                "requires-auth" => flaws.requires_auth = true,
                "no-auth-methods" => flaws.no_auth_methods = true,
                "prompt-error" => flaws.prompt_error = true,
                "prompt-requires-auth" => (flaws.prompt_requires_auth, flaws.no_auth_methods) = (true, true),
                "reads-files" => flaws.reads_files = true,
                "non-utf8-line" => flaws.noise = Some(b"\xff\xfe starting"),
                "json-log-line" => flaws.noise = Some(br#"{"level":30,"msg":"starting"}"#),
                "endless-line" => flaws.endless_line = true,
                "update-before-prompt" => flaws.update_before_prompt = true,
                "linger" => flaws.linger = true,
                "version-2" => flaws.version_2 = true,
                "echo-version" => flaws.echo_version = true,
                "reject-version" => flaws.reject_version = true,
                "late-update" => {
                    flaws.late_update =
                        Some(r#"{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"PS."}}"#)
                }
                // Not a flaw: a session's commands may change at any time.
                "late-update=commands" => {
                    flaws.late_update = Some(r#"{"sessionUpdate":"available_commands_update","availableCommands":[]}"#)
                }
                other => panic!("unknown flaw {other}"),
            }
        }
        flaws
    }
}

#[derive(Clone)]
struct Out(Arc<Mutex<std::io::Stdout>>);

impl Out {
    fn send(&self, message: Value) {
        let mut out = self.0.lock().unwrap();
        let _ = writeln!(out, "{message}");
        let _ = out.flush();
    }
    fn raw(&self, bytes: &[u8]) {
        let mut out = self.0.lock().unwrap();
        let _ = out.write_all(bytes);
        let _ = out.flush();
    }
    fn result(&self, id: &Value, result: Value) {
        self.send(json!({"jsonrpc": "2.0", "id": id, "result": result}));
    }
    fn error(&self, id: &Value, code: i64, message: &str) {
        self.send(json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}}));
    }
}

/// What the client advertised in `initialize`.
#[derive(Clone, Copy, Default)]
struct Offered {
    read: bool,
    write: bool,
    terminal: bool,
}

/// Calls to the client, each waiting (at most 5 s) for its answer, which the main loop routes.
#[derive(Clone)]
struct Caller {
    out: Out,
    pending: Arc<Mutex<HashMap<String, std::sync::mpsc::Sender<Value>>>>,
    next: Arc<AtomicU64>,
}

impl Caller {
    /// The whole answer (`result` or `error`), or `null` without one.
    fn call(&self, method: &str, params: Value) -> Value {
        let id = format!("agent_{}", self.next.fetch_add(1, Ordering::SeqCst));
        let (answer, answered) = std::sync::mpsc::channel();
        self.pending.lock().unwrap().insert(id.clone(), answer);
        self.out.send(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        answered.recv_timeout(Duration::from_secs(5)).unwrap_or(Value::Null)
    }

    fn answered(&self, message: &Value) {
        let Some(id) = message["id"].as_str() else { return };
        if let Some(answer) = self.pending.lock().unwrap().remove(id) {
            let _ = answer.send(message.clone());
        }
    }
}

/// A turn's use of the client's fs and terminal (see `Flaws::uses_client`).
fn use_client(caller: &Caller, flaws: Flaws, offered: Offered, session: &str, cwd: &str) {
    let mut first_line = String::new();
    if offered.read {
        let path = if flaws.relative_path {
            "acp-check.txt".to_owned()
        } else if flaws.reads_outside_root {
            format!("{cwd}/../acp-check-outside.txt")
        } else {
            format!("{cwd}/acp-check.txt")
        };
        let read = caller.call("fs/read_text_file", json!({"sessionId": session, "path": path, "line": 1}));
        first_line = read["result"]["content"].as_str().unwrap_or_default().lines().next().unwrap_or_default().into();
    }
    if offered.write || (flaws.writes_without_capability && offered.read) {
        let path = format!("{cwd}/acp-check-copy.txt");
        caller.call("fs/write_text_file", json!({"sessionId": session, "path": path, "content": first_line}));
    }
    if offered.terminal {
        let create = json!({"sessionId": session, "command": "echo", "args": ["acp-check"], "cwd": cwd});
        let created = caller.call("terminal/create", create);
        let terminal = json!({"sessionId": session, "terminalId": created["result"]["terminalId"]});
        caller.call("terminal/wait_for_exit", terminal.clone());
        caller.call("terminal/output", terminal.clone());
        if !flaws.keeps_terminal {
            caller.call("terminal/release", terminal.clone());
        }
        if flaws.uses_released_terminal {
            caller.call("terminal/output", terminal);
        }
    }
}

pub fn run(flaws: Flaws) {
    let out = Out(Arc::new(Mutex::new(std::io::stdout())));
    let caller = Caller { out: out.clone(), pending: Arc::default(), next: Arc::default() };
    let mut offered = Offered::default();
    // Session id -> its cwd.
    let mut cwds: HashMap<String, String> = HashMap::new();
    if flaws.linger {
        eprintln!("raw-test-agent: pid {}", std::process::id());
    }
    if let Some(noise) = flaws.noise {
        out.raw(&[noise, b"\n"].concat());
    }
    // Session id -> the cancel flag of its current turn.
    let turns: Arc<Mutex<HashMap<String, Arc<AtomicBool>>>> = Arc::default();
    let mut sessions = 0u32;
    let mut created: HashSet<String> = HashSet::new();
    for line in std::io::stdin().lock().lines() {
        let Ok(line) = line else { break };
        if line.trim().is_empty() {
            continue;
        }
        let Ok(message) = serde_json::from_str::<Value>(&line) else {
            if flaws.crash_on_malformed {
                eprintln!("raw-test-agent: cannot parse {line:?}, giving up");
                std::process::exit(71);
            }
            let error = json!({"code": -32700, "message": "Parse error"});
            if flaws.idless_parse_error {
                out.send(json!({"jsonrpc": "2.0", "error": error}));
            } else {
                out.send(json!({"jsonrpc": "2.0", "id": null, "error": error}));
            }
            continue;
        };
        let method = message["method"].as_str().unwrap_or_default().to_owned();
        let params = message.get("params").cloned().unwrap_or(Value::Null);
        let Some(id) = message.get("id").cloned() else {
            // A notification.
            let session = params["sessionId"].as_str().unwrap_or_default();
            if method == "session/cancel" && !flaws.ignore_cancel {
                if let Some(flag) = turns.lock().unwrap().get(session) {
                    flag.store(true, Ordering::SeqCst);
                }
            }
            if flaws.answer_notifications && !(method == "session/cancel" && created.contains(session)) {
                out.error(&Value::Null, -32601, "Method not found");
            }
            continue;
        };
        if message.get("method").is_none() {
            caller.answered(&message);
            continue;
        }
        match method.as_str() {
            "initialize" if flaws.endless_line => out.raw(&vec![b'x'; 80 << 20]),
            "initialize" if flaws.reject_version && params["protocolVersion"] != 1 => {
                out.error(&id, -32602, "Unsupported protocol version")
            }
            "initialize" => {
                let capabilities = &params["clientCapabilities"];
                offered = Offered {
                    read: capabilities["fs"]["readTextFile"] == true,
                    write: capabilities["fs"]["writeTextFile"] == true,
                    terminal: capabilities["terminal"] == true,
                };
                let asked = params["protocolVersion"].as_u64().unwrap_or(1);
                let version = if flaws.version_2 {
                    2
                } else if flaws.echo_version {
                    asked
                } else {
                    asked.min(1)
                };
                out.result(
                    &id,
                    json!({
                        "protocolVersion": version,
                        "agentCapabilities": {"loadSession": flaws.lie_about_load_session},
                        "authMethods": if flaws.requires_auth && !flaws.no_auth_methods {
                            json!([{"id": "login", "name": "Log in"}])
                        } else {
                            json!([])
                        },
                        "agentInfo": {"name": "raw-test-agent", "version": "0.0.1"},
                    }),
                );
            }
            "authenticate" => out.result(&id, json!({})),
            "session/new" if flaws.requires_auth => out.error(&id, -32000, "Authentication required"),
            "session/new" if !params["cwd"].is_string() && !flaws.lenient_params => {
                out.error(&id, -32602, "Invalid params: cwd must be a string")
            }
            "session/prompt" if !params["prompt"].is_array() && !flaws.lenient_params => {
                out.error(&id, -32602, "Invalid params: prompt must be an array")
            }
            "session/prompt"
                if !created.contains(params["sessionId"].as_str().unwrap_or_default()) && !flaws.any_session =>
            {
                out.error(&id, -32602, "Invalid params: unknown session")
            }
            "session/prompt" if flaws.prompt_requires_auth => out.error(&id, -32000, "Authentication required"),
            "session/prompt" if flaws.prompt_error => {
                out.error(&id, -32603, "Internal error: Cannot connect to API: Unable to connect")
            }
            "session/new" => {
                sessions += 1;
                let session = format!("raw_{sessions}");
                created.insert(session.clone());
                cwds.insert(session.clone(), params["cwd"].as_str().unwrap_or_default().to_owned());
                if flaws.linger {
                    eprintln!("raw-test-agent: cwd {}", params["cwd"].as_str().unwrap_or_default());
                }
                let answer = json!({"jsonrpc": "2.0", "id": id, "result": {"sessionId": session}});
                if flaws.update_before_prompt {
                    // In one write with the answer: it is read before any prompt can be sent.
                    let update = json!({"jsonrpc": "2.0", "method": "session/update", "params": {
                        "sessionId": session,
                        "update": {"sessionUpdate": "available_commands_update", "availableCommands": []},
                    }});
                    out.raw(format!("{answer}\n{update}\n").as_bytes());
                } else {
                    out.send(answer);
                }
            }
            "session/prompt" if flaws.linger => {}
            "session/prompt" if flaws.update_before_prompt => out.result(&id, json!({"stopReason": "end_turn"})),
            "session/prompt" if flaws.quick_turn => {
                let session = params["sessionId"].clone();
                let update = json!({"jsonrpc": "2.0", "method": "session/update", "params": {
                    "sessionId": session,
                    "update": {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": "Hi."}},
                }});
                let answer = json!({"jsonrpc": "2.0", "id": id, "result": {"stopReason": "end_turn"}});
                out.raw(format!("{update}\n{answer}\n").as_bytes());
            }
            "session/prompt" if flaws.quiet_turn => {
                let session = params["sessionId"].as_str().unwrap_or_default().to_owned();
                let flag = Arc::new(AtomicBool::new(false));
                turns.lock().unwrap().insert(session, flag.clone());
                let out = out.clone();
                std::thread::spawn(move || {
                    // Thinking, in 10 ms steps so that a cancel is noticed at once.
                    for _ in 0..60 {
                        if flag.load(Ordering::SeqCst) {
                            break;
                        }
                        std::thread::sleep(Duration::from_millis(10));
                    }
                    let stop = if flag.load(Ordering::SeqCst) { "cancelled" } else { "end_turn" };
                    out.result(&id, json!({"stopReason": stop}));
                });
            }
            "session/prompt" => {
                let session = params["sessionId"].as_str().unwrap_or_default().to_owned();
                let flag = Arc::new(AtomicBool::new(false));
                turns.lock().unwrap().insert(session.clone(), flag.clone());
                let out = out.clone();
                let (caller, cwd) = (caller.clone(), cwds.get(&session).cloned().unwrap_or_default());
                std::thread::spawn(move || {
                    let mut stop = "end_turn";
                    if flaws.uses_client {
                        use_client(&caller, flaws, offered, &session, &cwd);
                    }
                    if flaws.reads_files {
                        out.send(json!({"jsonrpc": "2.0", "id": "fs_1", "method": "fs/read_text_file",
                                        "params": {"sessionId": session, "path": "/etc/hostname"}}));
                    }
                    if let Some(update) = flaws.bad_update {
                        let update: Value = serde_json::from_str(update).unwrap();
                        out.send(json!({"jsonrpc": "2.0", "method": "session/update",
                                        "params": {"sessionId": session, "update": update}}));
                    }
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
                    if let Some(update) = flaws.late_update {
                        let answer = json!({"jsonrpc": "2.0", "id": id, "result": {"stopReason": stop}});
                        let update: Value = serde_json::from_str(update).unwrap();
                        let update = json!({"jsonrpc": "2.0", "method": "session/update",
                                            "params": {"sessionId": session, "update": update}});
                        out.raw(format!("{answer}\n{update}\n").as_bytes());
                    } else {
                        out.result(&id, json!({"stopReason": stop}));
                    }
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
    if flaws.linger {
        std::thread::sleep(Duration::from_secs(60));
    }
    if flaws.stay_after_eof {
        std::thread::sleep(Duration::from_secs(10));
    }
}
