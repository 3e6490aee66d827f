//! A small protocol v2 agent written by hand (std threads + serde_json, no runtime), for the
//! checker's v2 tests. It serves v2 only (it answers `protocolVersion: 2` whatever is asked),
//! takes JSON-RPC batches, and is well-behaved by default; each `Flaws` field breaks one rule
//! on purpose.
//!
//! A turn: the answer `{"messageId"}`, `user_message`, `running`, three agent message chunks
//! 20 ms apart, a `read` tool call that asks permission (`requires_action` meanwhile), then,
//! allowed, the tool call runs and completes, or, cancelled, it is marked `cancelled`; an idle
//! `state_update` with the stop reason ends it. `session/cancel` and `session/close` cancel the
//! turn and send `$/cancel_request` for its pending permission request.

use std::collections::HashMap;
use std::io::{BufRead, Write};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};

/// The rules this agent breaks.
#[derive(Clone, Copy, Default)]
pub struct Flaws {
    /// `session/prompt` is answered only at the end of the turn, after its idle update.
    pub answer_at_end: bool,
    /// A turn that is not cancelled never reports idle.
    pub no_idle_at_end: bool,
    /// A tool call's content chunk comes before the `tool_call_update` that creates it.
    pub chunk_before_create: bool,
    /// Any batch is refused with one -32600 error (as the official SDKs do).
    pub reject_batches: bool,
    /// `initialize` advertises v1-style boolean capabilities.
    pub v1_capabilities: bool,
    /// `session/prompt` is answered `{}` (v1.7.0's shape, which the SDK clients reject).
    pub empty_prompt_result: bool,
    /// `session/cancel` is ignored: the turn goes on 250 ms and ends `end_turn`.
    pub ignore_cancel: bool,
    /// A cancelled turn's tool call is updated once more after the idle update.
    pub update_after_idle: bool,
    /// `session/list` (outside a batch) is answered after 100 ms, and not at all when
    /// `$/cancel_request` named it meanwhile.
    pub silent_on_cancel: bool,
    /// `tool_call/cancel` of a tool call nobody made is answered `{}`, not -32602.
    pub cancel_unknown_ok: bool,
    /// `tool_call/cancel` of `/work`'s tool call is answered `{}`, and the call runs on.
    pub cancel_ignored: bool,
    /// Cancelling `/work`'s tool call ends the whole turn `cancelled`.
    pub cancel_ends_turn: bool,
    /// `/work`'s cancelled tool call keeps advertising `capabilities.cancel`.
    pub keep_cancel_capability: bool,
    /// `/work` lists its watcher as background work without announcing it first.
    pub background_unannounced: bool,
    /// `/work`'s last state update leaves out the background work reported before.
    pub background_omitted: bool,
    /// Not a flaw: sessions are made without a login, but `session/list` answers
    /// auth_required and each turn ends at once, idle with stopReason `error` and the
    /// auth_required error (as `@agentclientprotocol/claude-agent-acp` ends its turns).
    pub requires_auth: bool,
}

impl Flaws {
    /// The flaws named on the command line.
    pub fn from_args() -> Flaws {
        let mut flaws = Flaws::default();
        for arg in std::env::args().skip(1) {
            match arg.as_str() {
                "answer-at-end" => flaws.answer_at_end = true,
                "no-idle-at-end" => flaws.no_idle_at_end = true,
                "chunk-before-create" => flaws.chunk_before_create = true,
                "reject-batches" => flaws.reject_batches = true,
                "v1-capabilities" => flaws.v1_capabilities = true,
                "empty-prompt-result" => flaws.empty_prompt_result = true,
                "ignore-cancel" => flaws.ignore_cancel = true,
                "update-after-idle" => flaws.update_after_idle = true,
                "silent-on-cancel" => flaws.silent_on_cancel = true,
                "requires-auth" => flaws.requires_auth = true,
                "cancel-unknown-ok" => flaws.cancel_unknown_ok = true,
                "cancel-ignored" => flaws.cancel_ignored = true,
                "cancel-ends-turn" => flaws.cancel_ends_turn = true,
                "keep-cancel-capability" => flaws.keep_cancel_capability = true,
                "background-unannounced" => flaws.background_unannounced = true,
                "background-omitted" => flaws.background_omitted = true,
                other => panic!("unknown flaw {other}"),
            }
        }
        flaws
    }
}

#[derive(Clone)]
struct Out(Arc<Mutex<std::io::Stdout>>);

impl Out {
    fn send(&self, message: &Value) {
        let mut out = self.0.lock().unwrap();
        let _ = writeln!(out, "{message}");
        let _ = out.flush();
    }

    fn update(&self, session: &str, update: Value) {
        self.send(&json!({"jsonrpc": "2.0", "method": "session/update",
                          "params": {"sessionId": session, "update": update}}));
    }
}

fn result(id: &Value, result: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "result": result})
}

fn error(id: &Value, code: i64, message: &str) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}})
}

/// One session: its cwd, its current turn's cancel flag and pending permission request.
struct Session {
    cwd: String,
    cancelled: Arc<AtomicBool>,
    permission: Arc<Mutex<Option<String>>>,
}

struct Agent {
    flaws: Flaws,
    out: Out,
    sessions: Mutex<HashMap<String, Session>>,
    /// Requests to the client waiting for their answer.
    pending: Mutex<HashMap<String, std::sync::mpsc::Sender<Value>>>,
    /// The ids the client named in `$/cancel_request`.
    cancelled: Mutex<Vec<Value>>,
    /// `/work`'s running tool calls the client may cancel: id → (session, stop flag).
    work: Mutex<HashMap<String, (String, Arc<AtomicBool>)>>,
    next: AtomicU64,
}

pub fn run(flaws: Flaws) {
    let agent = Arc::new(Agent {
        flaws,
        out: Out(Arc::new(Mutex::new(std::io::stdout()))),
        sessions: Mutex::default(),
        pending: Mutex::default(),
        cancelled: Mutex::default(),
        work: Mutex::default(),
        next: AtomicU64::new(1),
    });
    for line in std::io::stdin().lock().lines() {
        let Ok(line) = line else { break };
        if line.trim().is_empty() {
            continue;
        }
        match serde_json::from_str::<Value>(&line) {
            Ok(Value::Array(_)) if flaws.reject_batches => {
                agent.out.send(&error(&Value::Null, -32600, "Invalid request: batches are not supported"))
            }
            Ok(Value::Array(entries)) if entries.is_empty() => {
                agent.out.send(&error(&Value::Null, -32600, "Invalid request: empty batch"))
            }
            Ok(Value::Array(entries)) => {
                let answers: Vec<Value> = entries.iter().filter_map(|entry| agent.handle(entry, true)).collect();
                if !answers.is_empty() {
                    agent.out.send(&Value::Array(answers));
                }
            }
            Ok(message @ Value::Object(_)) => {
                if let Some(answer) = agent.handle(&message, false) {
                    agent.out.send(&answer);
                }
            }
            Ok(_) => agent.out.send(&error(&Value::Null, -32600, "Invalid request")),
            Err(_) => agent.out.send(&error(&Value::Null, -32700, "Parse error")),
        }
    }
}

impl Agent {
    /// Handles one message (an entry of a batch, `in_batch`); its answer, if it gets one now.
    fn handle(self: &Arc<Self>, message: &Value, in_batch: bool) -> Option<Value> {
        let Some(method) = message["method"].as_str() else {
            // An answer to one of our requests.
            let id = message["id"].as_str()?;
            if let Some(answer) = self.pending.lock().unwrap().remove(id) {
                let _ = answer.send(message.clone());
            }
            return None;
        };
        let params = &message["params"];
        let session = params["sessionId"].as_str().unwrap_or_default().to_owned();
        let Some(id) = message.get("id") else {
            if method == "session/cancel" && !self.flaws.ignore_cancel {
                self.cancel(&session, false);
            }
            if method == "$/cancel_request" {
                self.cancelled.lock().unwrap().push(params["requestId"].clone());
            }
            return None;
        };
        Some(match method {
            "initialize" => {
                let capabilities = if self.flaws.v1_capabilities {
                    json!({"session": {"prompt": {"image": true, "embeddedContext": true}}, "loadSession": true})
                } else {
                    json!({"session": {"prompt": {"embeddedContext": {}}}})
                };
                result(
                    id,
                    json!({
                        "protocolVersion": 2,
                        "info": {"name": "raw-v2-test-agent", "version": "0.0.1"},
                        "capabilities": capabilities,
                        "authMethods": [],
                    }),
                )
            }
            "session/new" => match params["cwd"].as_str() {
                Some(cwd) => {
                    let n = self.next.fetch_add(1, Ordering::SeqCst);
                    let session = format!("raw2_{n}");
                    let state = Session { cwd: cwd.to_owned(), cancelled: Arc::default(), permission: Arc::default() };
                    self.sessions.lock().unwrap().insert(session.clone(), state);
                    result(id, json!({"sessionId": session}))
                }
                None => error(id, -32602, "Invalid params: cwd must be a string"),
            },
            "session/list" if self.flaws.requires_auth => error(id, -32000, "Authentication required"),
            "session/list" if self.flaws.silent_on_cancel && !in_batch => {
                let (agent, id) = (self.clone(), id.clone());
                std::thread::spawn(move || {
                    std::thread::sleep(Duration::from_millis(100));
                    if !agent.cancelled.lock().unwrap().contains(&id) {
                        agent.out.send(&result(&id, json!({"sessions": []})));
                    }
                });
                return None;
            }
            "session/list" => {
                let sessions: Vec<Value> = self
                    .sessions
                    .lock()
                    .unwrap()
                    .iter()
                    .map(|(id, s)| json!({"sessionId": id, "cwd": s.cwd}))
                    .collect();
                result(id, json!({"sessions": sessions}))
            }
            "session/resume" if self.sessions.lock().unwrap().contains_key(&session) => result(id, json!({})),
            "session/close" if self.sessions.lock().unwrap().contains_key(&session) => {
                self.cancel(&session, true);
                result(id, json!({}))
            }
            "session/resume" | "session/close" | "session/prompt"
                if !self.sessions.lock().unwrap().contains_key(&session) =>
            {
                error(id, -32002, "Resource not found")
            }
            "session/prompt" => return self.prompt(id, &session, params["prompt"].clone()),
            "tool_call/cancel" => {
                let call = params["toolCallId"].as_str().unwrap_or_default();
                let work = self.work.lock().unwrap();
                match work.get(call).filter(|(owner, _)| *owner == session) {
                    Some((_, stop)) => {
                        stop.store(!self.flaws.cancel_ignored, Ordering::SeqCst);
                        result(id, json!({}))
                    }
                    None if self.flaws.cancel_unknown_ok => result(id, json!({})),
                    None => error(id, -32602, "Invalid params: no cancellable tool call with that id"),
                }
            }
            _ => error(id, -32601, "Method not found"),
        })
    }

    /// Cancels the session's turn (and, `close`, forgets the session).
    fn cancel(&self, session: &str, close: bool) {
        let mut sessions = self.sessions.lock().unwrap();
        let Some(state) = sessions.get(session) else { return };
        state.cancelled.store(true, Ordering::SeqCst);
        if let Some(request) = state.permission.lock().unwrap().clone() {
            self.out.send(&json!({"jsonrpc": "2.0", "method": "$/cancel_request", "params": {"requestId": request}}));
        }
        if close {
            sessions.remove(session);
        }
    }

    /// Sends a request to the client; its id and where its answer will come.
    fn request(&self, method: &str, params: Value) -> (String, std::sync::mpsc::Receiver<Value>) {
        let id = format!("agent_{}", self.next.fetch_add(1, Ordering::SeqCst));
        let (answer, answered) = std::sync::mpsc::channel();
        self.pending.lock().unwrap().insert(id.clone(), answer);
        self.out.send(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        (id, answered)
    }

    fn prompt(self: &Arc<Self>, id: &Value, session: &str, prompt: Value) -> Option<Value> {
        let n = self.next.fetch_add(1, Ordering::SeqCst);
        let user = format!("msg_user_{n}");
        let (cancelled, permission) = {
            let sessions = self.sessions.lock().unwrap();
            let state = sessions.get(session).expect("checked by the caller");
            state.cancelled.store(false, Ordering::SeqCst);
            (state.cancelled.clone(), state.permission.clone())
        };
        let answer =
            if self.flaws.empty_prompt_result { result(id, json!({})) } else { result(id, json!({"messageId": user})) };
        // Written here, before the turn's first update (a prompt does not belong in a batch:
        // it changes what comes next).
        if !self.flaws.answer_at_end {
            self.out.send(&answer);
        }
        let agent = self.clone();
        let session = session.to_owned();
        let at_end = self.flaws.answer_at_end.then_some(answer);
        std::thread::spawn(move || {
            agent.turn(&session, n, &user, prompt, &cancelled, &permission);
            if let Some(answer) = at_end {
                agent.out.send(&answer);
            }
        });
        None
    }

    fn turn(
        &self,
        session: &str,
        n: u64,
        user: &str,
        prompt: Value,
        cancelled: &AtomicBool,
        permission: &Mutex<Option<String>>,
    ) {
        let out = &self.out;
        let up = |update: Value| out.update(session, update);
        let state = |state: &str| json!({"sessionUpdate": "state_update", "state": state});
        up(json!({"sessionUpdate": "user_message", "messageId": user, "content": prompt}));
        if prompt[0]["text"] == "/work" {
            return self.work_turn(session, n, cancelled);
        }
        up(state("running"));
        if self.flaws.requires_auth {
            up(json!({"sessionUpdate": "state_update", "state": "idle", "stopReason": "error",
                      "error": {"code": -32000, "message": "Authentication required"}}));
            return;
        }
        let message = format!("msg_agent_{n}");
        for word in ["Hello", " from", " raw."] {
            if cancelled.load(Ordering::SeqCst) {
                break;
            }
            up(json!({"sessionUpdate": "agent_message_chunk", "messageId": message,
                      "content": {"type": "text", "text": word}}));
            std::thread::sleep(Duration::from_millis(20));
        }
        let call = format!("call_{n}");
        let text = |t: &str| json!({"type": "content", "content": {"type": "text", "text": t}});
        if self.flaws.chunk_before_create {
            up(json!({"sessionUpdate": "tool_call_content_chunk", "toolCallId": call, "content": text("early")}));
        }
        up(json!({"sessionUpdate": "tool_call_update", "toolCallId": call, "title": "Read notes.txt",
                  "kind": "read", "status": "pending"}));
        let mut allowed = false;
        if !cancelled.load(Ordering::SeqCst) {
            up(state("requires_action"));
            let (request, answered) = self.request("session/request_permission", json!({
                "sessionId": session,
                "title": "Allow reading notes.txt?",
                "subject": {"type": "tool_call", "toolCall": {"toolCallId": call, "title": "Read notes.txt", "status": "pending"}},
                "options": [
                    {"optionId": "allow", "name": "Allow once", "kind": "allow_once"},
                    {"optionId": "reject", "name": "Reject", "kind": "reject_once"},
                ],
            }));
            *permission.lock().unwrap() = Some(request);
            let answer = answered.recv_timeout(Duration::from_secs(5)).unwrap_or(Value::Null);
            *permission.lock().unwrap() = None;
            let outcome = &answer["result"]["outcome"];
            allowed = outcome["outcome"] == "selected" && outcome["optionId"] == "allow";
        }
        let stop = if cancelled.load(Ordering::SeqCst) {
            up(json!({"sessionUpdate": "tool_call_update", "toolCallId": call, "status": "cancelled"}));
            "cancelled"
        } else if allowed {
            up(state("running"));
            up(json!({"sessionUpdate": "tool_call_update", "toolCallId": call, "status": "in_progress"}));
            up(json!({"sessionUpdate": "tool_call_content_chunk", "toolCallId": call, "content": text("notes")}));
            up(json!({"sessionUpdate": "tool_call_update", "toolCallId": call, "status": "completed"}));
            "end_turn"
        } else {
            up(state("running"));
            up(json!({"sessionUpdate": "tool_call_update", "toolCallId": call, "status": "failed"}));
            if self.flaws.ignore_cancel {
                // Working on as if nothing had happened.
                std::thread::sleep(Duration::from_millis(250));
                up(json!({"sessionUpdate": "agent_message_chunk", "messageId": message,
                          "content": {"type": "text", "text": " Still here."}}));
            }
            "end_turn"
        };
        if stop == "cancelled" || !self.flaws.no_idle_at_end {
            up(json!({"sessionUpdate": "state_update", "state": "idle", "stopReason": stop}));
        }
        if stop == "cancelled" && self.flaws.update_after_idle {
            up(json!({"sessionUpdate": "tool_call_update", "toolCallId": call, "rawOutput": {"late": true}}));
        }
    }

    /// `/work`: a tool call the client may cancel with `tool_call/cancel`, beside a watcher
    /// listed as background work; after the cancel the turn goes on and ends `end_turn`.
    fn work_turn(&self, session: &str, n: u64, cancelled: &AtomicBool) {
        let flaws = self.flaws;
        let up = |update: Value| self.out.update(session, update);
        let state = |state: &str, stop: Option<&str>, background: Value| {
            let mut update = json!({"sessionUpdate": "state_update", "state": state});
            if let Some(stop) = stop {
                update["stopReason"] = json!(stop);
            }
            if !background.is_null() {
                update["background"] = background;
            }
            update
        };
        let (call, watcher) = (format!("work_{n}"), format!("watch_{n}"));
        up(state("running", None, json!([])));
        if !flaws.background_unannounced {
            up(json!({"sessionUpdate": "tool_call_update", "toolCallId": watcher, "title": "Watch the files",
                      "kind": "other", "status": "in_progress"}));
        }
        up(state("running", None, json!([{"type": "tool_call", "toolCallId": watcher}])));
        let stop = Arc::new(AtomicBool::new(false));
        self.work.lock().unwrap().insert(call.clone(), (session.to_owned(), stop.clone()));
        up(json!({"sessionUpdate": "tool_call_update", "toolCallId": call, "title": "A long task",
                  "kind": "execute", "status": "in_progress", "capabilities": {"cancel": {}}}));
        // At most 5 s (30 s when cancels are ignored), unless cancelled.
        let ticks = if flaws.cancel_ignored { 1500 } else { 250 };
        for _ in 0..ticks {
            if stop.load(Ordering::SeqCst) || cancelled.load(Ordering::SeqCst) {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        self.work.lock().unwrap().remove(&call);
        let stopped = stop.load(Ordering::SeqCst) || cancelled.load(Ordering::SeqCst);
        let mut last = json!({"sessionUpdate": "tool_call_update", "toolCallId": call,
                              "status": if stopped { "cancelled" } else { "completed" }});
        if !flaws.keep_cancel_capability {
            last["capabilities"] = Value::Null;
        }
        up(last);
        up(json!({"sessionUpdate": "tool_call_update", "toolCallId": watcher, "status": "completed"}));
        let background = if flaws.background_omitted { Value::Null } else { json!([]) };
        if cancelled.load(Ordering::SeqCst) || (stopped && flaws.cancel_ends_turn) {
            up(state("idle", Some("cancelled"), background));
            return;
        }
        up(json!({"sessionUpdate": "agent_message_chunk", "messageId": format!("msg_agent_{n}"),
                  "content": {"type": "text", "text": "Stopped the long task."}}));
        up(state("idle", Some("end_turn"), background));
    }
}
