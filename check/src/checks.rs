//! The checks, in the order they run. Each group of checks gets a fresh agent process, so
//! that an agent that dies in one check is still judged on the others.

use std::time::{Duration, Instant};

use acp_runtime::acp_types::{InitializeResponse, PromptResponse, StopReason};
use serde::Serialize;
use serde_json::{Value, json};

use crate::wire::{Agent, Launch, Observed, Reply, truncate};

/// The protocol version the checker asks for: the current one.
pub const CURRENT_PROTOCOL_VERSION: u64 = 1;
/// How long a cancelled turn may take to answer `cancelled`.
pub const CANCEL_BOUND: Duration = Duration::from_secs(2);

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum Level {
    Must,
    Should,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    Pass,
    Fail,
    Warn,
    Skip,
}

#[derive(Clone, Debug, Serialize)]
pub struct Check {
    pub id: &'static str,
    pub level: Level,
    pub status: Status,
    /// What the spec asks.
    pub rule: &'static str,
    /// What happened.
    pub detail: String,
}

pub struct Options {
    pub launch: Launch,
    /// The limit for each answer (a prompt turn included).
    pub timeout: Duration,
}

/// What the run found about the agent itself.
#[derive(Default, Debug, Serialize)]
pub struct AgentFacts {
    pub agent_info: Option<Value>,
    pub protocol_version: Option<Value>,
    pub agent_capabilities: Option<Value>,
}

#[derive(Default)]
pub struct Run {
    pub checks: Vec<Check>,
    pub facts: AgentFacts,
    observed: Vec<Observed>,
}

impl Run {
    fn record(&mut self, id: &'static str, level: Level, rule: &'static str, outcome: Outcome) {
        let (status, detail) = match outcome {
            Outcome::Pass(d) => (Status::Pass, d),
            // A SHOULD that does not hold is a warning, a MUST a failure.
            Outcome::Fail(d) => (if level == Level::Must { Status::Fail } else { Status::Warn }, d),
            Outcome::Warn(d) => (Status::Warn, d),
            Outcome::Skip(d) => (Status::Skip, d),
        };
        self.checks.push(Check { id, level, status, rule, detail });
    }

    async fn retire(&mut self, agent: Agent) {
        self.observed.push(agent.close().await);
    }
}

enum Outcome {
    Pass(String),
    Fail(String),
    Warn(String),
    Skip(String),
}

// ---- rules -----------------------------------------------------------------------------------

const INITIALIZE: &str = "initialize is answered with an InitializeResponse";
const VERSION: &str = "asked for the current protocol version, the agent answers a version <= the one requested";
const SESSION_NEW: &str = "session/new is answered with a sessionId";
const PROMPT: &str = "session/prompt is answered with a valid stopReason";
const UPDATES: &str = "every session/update decodes as a SessionNotification of the prompted session";
const STREAMS: &str = "a prompt turn reports progress with session/update";
const CANCEL: &str = "after session/cancel, the turn answers stopReason `cancelled` (within 2 s)";
const UNKNOWN: &str = "an unknown method is answered -32601 and the agent keeps working";
const MALFORMED_SURVIVES: &str = "a malformed line (`{not json`) does not stop the agent";
const MALFORMED_ANSWER: &str = "a malformed line is answered -32700 with a null id";
const EXTENSION: &str = "an unknown extension method `_acp_check/ping` is answered (-32601 or a result) without harm";
const STDOUT: &str = "the agent writes only JSON-RPC messages on stdout";

const CAPABILITIES: &[(&str, &str, &str)] = &[
    (
        "capability-session-list",
        "session/list",
        "sessionCapabilities.list advertised <=> session/list is implemented (not -32601)",
    ),
    ("capability-load-session", "session/load", "loadSession advertised <=> session/load is implemented (not -32601)"),
    (
        "capability-session-resume",
        "session/resume",
        "sessionCapabilities.resume advertised <=> session/resume is implemented (not -32601)",
    ),
    (
        "capability-session-close",
        "session/close",
        "sessionCapabilities.close advertised <=> session/close is implemented (not -32601)",
    ),
    (
        "capability-session-delete",
        "session/delete",
        "sessionCapabilities.delete advertised <=> session/delete is implemented (not -32601)",
    ),
];

// ---- the run ---------------------------------------------------------------------------------

pub async fn run(options: &Options) -> Result<Run, String> {
    let mut run = Run::default();
    let scratch = ScratchDir::create()?;
    let cwd = scratch.path.clone();

    // 1. The handshake, a session, a prompt turn, a cancelled turn.
    let agent = spawn(options)?;
    let init = initialize(&agent, options.timeout).await;
    match &init {
        Ok((response, raw)) => {
            run.facts.agent_info = raw.get("agentInfo").cloned();
            run.facts.protocol_version = raw.get("protocolVersion").cloned();
            run.facts.agent_capabilities = raw.get("agentCapabilities").cloned();
            let name = raw["agentInfo"]["name"].as_str().map_or(String::new(), |n| {
                format!("; agent {n} {}", raw["agentInfo"]["version"].as_str().unwrap_or(""))
            });
            run.record("initialize", Level::Must, INITIALIZE, Outcome::Pass(format!("answered{name}")));
            let version = u64::from(response.protocol_version.0);
            let outcome = if version <= CURRENT_PROTOCOL_VERSION {
                Outcome::Pass(format!("asked for {CURRENT_PROTOCOL_VERSION}, got {version}"))
            } else {
                Outcome::Fail(format!(
                    "asked for {CURRENT_PROTOCOL_VERSION}, got {version}, a version the client did not ask for"
                ))
            };
            run.record("protocol-version", Level::Must, VERSION, outcome);
        }
        Err(why) => {
            run.record("initialize", Level::Must, INITIALIZE, Outcome::Fail(why.clone()));
            run.record("protocol-version", Level::Must, VERSION, Outcome::Skip("initialize failed".into()));
            run.retire(agent).await;
            skip_rest(&mut run, "initialize failed");
            return Ok(run);
        }
    }

    let session = new_session(&agent, &cwd, options.timeout).await;
    match &session {
        Ok(id) => run.record("session-new", Level::Must, SESSION_NEW, Outcome::Pass(format!("sessionId {id}"))),
        Err(why) => run.record("session-new", Level::Must, SESSION_NEW, Outcome::Fail(why.clone())),
    }
    if let Ok(session) = &session {
        prompt_turn(&mut run, &agent, session, options.timeout).await;
        cancel_turn(&mut run, &agent, session, options.timeout).await;
    } else {
        for (id, level, rule) in [
            ("prompt-turn", Level::Must, PROMPT),
            ("session-update-shape", Level::Must, UPDATES),
            ("prompt-streams-updates", Level::Should, STREAMS),
            ("cancel", Level::Must, CANCEL),
        ] {
            run.record(id, level, rule, Outcome::Skip("session/new failed".into()));
        }
    }
    run.retire(agent).await;

    // 2. Robustness, each on a fresh process.
    unknown_method(&mut run, options, &cwd).await?;
    malformed_line(&mut run, options, &cwd).await?;
    extension_method(&mut run, options, &cwd).await?;

    // 3. Capability honesty.
    capabilities(&mut run, options, &cwd).await?;

    // 4. What the tap saw over all the runs.
    let non_json: Vec<String> = run.observed.iter().flat_map(|o| o.non_json_lines.iter().cloned()).collect();
    let outcome = if non_json.is_empty() {
        Outcome::Pass("every line was a JSON object".into())
    } else {
        Outcome::Fail(format!("{} line(s) that are not JSON-RPC, e.g. {:?}", non_json.len(), non_json[0]))
    };
    run.record("stdout-json-only", Level::Must, STDOUT, outcome);
    Ok(run)
}

fn skip_rest(run: &mut Run, why: &str) {
    let mut rest = vec![
        ("session-new", Level::Must, SESSION_NEW),
        ("prompt-turn", Level::Must, PROMPT),
        ("session-update-shape", Level::Must, UPDATES),
        ("prompt-streams-updates", Level::Should, STREAMS),
        ("cancel", Level::Must, CANCEL),
        ("unknown-method", Level::Must, UNKNOWN),
        ("malformed-line-survives", Level::Must, MALFORMED_SURVIVES),
        ("malformed-line-answer", Level::Should, MALFORMED_ANSWER),
        ("extension-method", Level::Must, EXTENSION),
    ];
    rest.extend(CAPABILITIES.iter().map(|(id, _, rule)| (*id, Level::Must, *rule)));
    rest.push(("stdout-json-only", Level::Must, STDOUT));
    for (id, level, rule) in rest {
        run.record(id, level, rule, Outcome::Skip(why.to_owned()));
    }
}

fn spawn(options: &Options) -> Result<Agent, String> {
    Agent::spawn(&options.launch).map_err(|e| format!("cannot start `{}`: {e}", options.launch.command.join(" ")))
}

/// The sessions' working directory, removed on every way out of the run (early returns too).
struct ScratchDir {
    path: String,
}

impl ScratchDir {
    fn create() -> Result<Self, String> {
        let dir = std::env::temp_dir().join(format!("acp-check-{}", std::process::id()));
        std::fs::create_dir_all(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
        let mut guard = Self { path: dir.to_string_lossy().into_owned() };
        let canonical = dir.canonicalize().map_err(|e| format!("cannot resolve {}: {e}", dir.display()))?;
        guard.path = canonical.to_string_lossy().into_owned();
        Ok(guard)
    }
}

impl Drop for ScratchDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
    }
}

async fn initialize(agent: &Agent, limit: Duration) -> Result<(InitializeResponse, Value), String> {
    let params = json!({
        "protocolVersion": CURRENT_PROTOCOL_VERSION,
        "clientCapabilities": {"fs": {"readTextFile": false, "writeTextFile": false}, "terminal": false},
        "clientInfo": {"name": "acp-check", "version": env!("CARGO_PKG_VERSION")},
    });
    match agent.call("initialize", params, limit).await {
        Reply::Result(raw) => match serde_json::from_value::<InitializeResponse>(raw.clone()) {
            Ok(response) => Ok((response, raw)),
            Err(e) => Err(format!("the result is not an InitializeResponse: {e}: {}", truncate(&raw.to_string(), 200))),
        },
        other => Err(format!("initialize got {}", other.describe())),
    }
}

async fn new_session(agent: &Agent, cwd: &str, limit: Duration) -> Result<String, String> {
    match agent.call("session/new", json!({"cwd": cwd, "mcpServers": []}), limit).await {
        Reply::Result(raw) => match raw["sessionId"].as_str() {
            Some(id) => Ok(id.to_owned()),
            None => Err(format!("the result has no string sessionId: {}", truncate(&raw.to_string(), 200))),
        },
        other => Err(format!("session/new got {}", other.describe())),
    }
}

/// A fresh process, initialized, with a session.
async fn start(options: &Options, cwd: &str) -> Result<(Agent, Value, String), String> {
    let agent = spawn(options)?;
    let (_, raw) = match initialize(&agent, options.timeout).await {
        Ok(init) => init,
        Err(why) => {
            agent.close().await;
            return Err(why);
        }
    };
    match new_session(&agent, cwd, options.timeout).await {
        Ok(session) => Ok((agent, raw, session)),
        Err(why) => {
            agent.close().await;
            Err(why)
        }
    }
}

fn prompt_params(session: &str, text: &str) -> Value {
    json!({"sessionId": session, "prompt": [{"type": "text", "text": text}]})
}

fn stop_reason(reply: &Reply) -> Result<StopReason, String> {
    match reply {
        Reply::Result(raw) => match serde_json::from_value::<PromptResponse>(raw.clone()) {
            Ok(response) => match response.stop_reason {
                StopReason::Other(other) => Err(format!("stopReason {other:?} is not one the spec defines")),
                known => Ok(known),
            },
            Err(e) => Err(format!("the result is not a PromptResponse: {e}: {}", truncate(&raw.to_string(), 200))),
        },
        other => Err(format!("session/prompt got {}", other.describe())),
    }
}

async fn prompt_turn(run: &mut Run, agent: &Agent, session: &str, limit: Duration) {
    let started = Instant::now();
    let reply = agent
        .call("session/prompt", prompt_params(session, "Hello from acp-check. Please answer briefly."), limit)
        .await;
    let elapsed = started.elapsed().as_millis();
    let outcome = match stop_reason(&reply) {
        Ok(reason) => Outcome::Pass(format!("stopReason {} after {elapsed} ms", reason.as_str())),
        Err(why) => Outcome::Fail(why),
    };
    run.record("prompt-turn", Level::Must, PROMPT, outcome);

    let (count, tags, bad, unknown, permissions) = agent.observed(|o| {
        let mut bad = Vec::new();
        let mut unknown = Vec::new();
        let mut tags: Vec<String> = Vec::new();
        for update in &o.updates {
            let tag = update.tag();
            match &update.decoded {
                Err(e) => bad.push(format!("{e}: {}", truncate(&update.raw, 160))),
                Ok(n) if n.session_id.0 != session => {
                    bad.push(format!("sessionId {:?} instead of {session:?}", n.session_id.0))
                }
                Ok(_) if tag.starts_with("unknown") => unknown.push(tag.clone()),
                Ok(_) => {}
            }
            if !tags.contains(&tag) {
                tags.push(tag);
            }
        }
        (o.updates.len(), tags, bad, unknown, o.permission_requests)
    });
    let seen = format!("{count} update(s): {}", if tags.is_empty() { "none".into() } else { tags.join(", ") });
    let asked = if permissions > 0 { format!("; {permissions} permission request(s) allowed") } else { String::new() };
    let outcome = if !bad.is_empty() {
        Outcome::Fail(format!("{} of {count} update(s) do not decode: {}", bad.len(), bad[0]))
    } else if !unknown.is_empty() {
        Outcome::Warn(format!("{seen}{asked}; not in the v1 schema: {}", unknown.join(", ")))
    } else {
        Outcome::Pass(format!("{seen}{asked}"))
    };
    run.record("session-update-shape", Level::Must, UPDATES, outcome);
    let outcome =
        if count > 0 { Outcome::Pass(seen) } else { Outcome::Fail("no session/update during the turn".into()) };
    run.record("prompt-streams-updates", Level::Should, STREAMS, outcome);
}

async fn cancel_turn(run: &mut Run, agent: &Agent, session: &str, limit: Duration) {
    agent.hold_permissions(true);
    let before = agent.observed(|o| o.updates.len());
    let turn = agent.call_in_background(
        "session/prompt",
        prompt_params(session, "Please take your time and tell me a long story; I may cancel."),
        limit + CANCEL_BOUND,
    );
    // Cancel after the first update of the turn, or after a short delay.
    agent.wait_for(Duration::from_millis(1000), |o| o.updates.len() > before).await;
    if turn.is_finished() {
        let reply = turn.await.unwrap_or(Reply::Timeout);
        let outcome = match stop_reason(&reply) {
            Ok(StopReason::Cancelled) => Outcome::Fail("the turn answered `cancelled` before it was cancelled".into()),
            Ok(reason) => Outcome::Warn(format!(
                "inconclusive: the turn ended ({}) before session/cancel could be sent",
                reason.as_str()
            )),
            Err(why) => Outcome::Fail(why),
        };
        run.record("cancel", Level::Must, CANCEL, outcome);
        agent.hold_permissions(false);
        return;
    }
    agent.notify("session/cancel", json!({"sessionId": session})).await;
    let sent = Instant::now();
    let reply = tokio::time::timeout(CANCEL_BOUND, turn).await;
    let elapsed = sent.elapsed().as_millis();
    let outcome = match reply {
        Err(_) => Outcome::Fail(format!(
            "no answer to session/prompt within {} ms of session/cancel",
            CANCEL_BOUND.as_millis()
        )),
        Ok(Err(join)) => Outcome::Fail(format!("checker error: {join}")),
        Ok(Ok(reply)) => match stop_reason(&reply) {
            Ok(StopReason::Cancelled) => {
                Outcome::Pass(format!("stopReason cancelled {elapsed} ms after session/cancel"))
            }
            Ok(other) => Outcome::Fail(format!(
                "the turn answered stopReason `{}` {elapsed} ms after session/cancel, not `cancelled`",
                other.as_str()
            )),
            Err(why) => Outcome::Fail(format!(
                "after session/cancel: {why} (a cancelled turn must answer stopReason `cancelled`)"
            )),
        },
    };
    run.record("cancel", Level::Must, CANCEL, outcome);
    agent.hold_permissions(false);
}

/// Whether the agent still works: it answers another `session/new`.
async fn still_works(agent: &Agent, cwd: &str, limit: Duration) -> Result<(), String> {
    new_session(agent, cwd, limit).await.map(|_| ()).map_err(|why| format!("afterwards, {why}"))
}

async fn unknown_method(run: &mut Run, options: &Options, cwd: &str) -> Result<(), String> {
    let (agent, _, _) = match start(options, cwd).await {
        Ok(started) => started,
        Err(why) => {
            run.record("unknown-method", Level::Must, UNKNOWN, Outcome::Skip(format!("could not start: {why}")));
            return Ok(());
        }
    };
    let reply = agent.call("acp_check/no_such_method", json!({"probe": true}), options.timeout).await;
    let outcome = match reply {
        Reply::Closed(how) => Outcome::Fail(format!("{how} after the request for an unknown method")),
        reply if reply.is_method_not_found() => match still_works(&agent, cwd, options.timeout).await {
            Ok(()) => Outcome::Pass("-32601, and the agent still answers session/new".into()),
            Err(why) => Outcome::Fail(format!("-32601, but {why}")),
        },
        other => Outcome::Fail(format!("got {} instead of -32601", other.describe())),
    };
    run.record("unknown-method", Level::Must, UNKNOWN, outcome);
    run.retire(agent).await;
    Ok(())
}

async fn malformed_line(run: &mut Run, options: &Options, cwd: &str) -> Result<(), String> {
    let (agent, _, _) = match start(options, cwd).await {
        Ok(started) => started,
        Err(why) => {
            let why = format!("could not start: {why}");
            run.record("malformed-line-survives", Level::Must, MALFORMED_SURVIVES, Outcome::Skip(why.clone()));
            run.record("malformed-line-answer", Level::Should, MALFORMED_ANSWER, Outcome::Skip(why));
            return Ok(());
        }
    };
    agent.inject_line("{not json");
    let survived = still_works(&agent, cwd, options.timeout).await;
    let answered = agent.wait_for(Duration::from_millis(300), |o| !o.null_id_errors.is_empty()).await;
    let codes = agent.observed(|o| o.null_id_errors.clone());
    let outcome = match &survived {
        Ok(()) => Outcome::Pass("the agent still answers session/new".into()),
        Err(why) if agent.is_closed() => Outcome::Fail(format!("{why}; the agent is gone after `{{not json`")),
        Err(why) => Outcome::Fail(why.clone()),
    };
    run.record("malformed-line-survives", Level::Must, MALFORMED_SURVIVES, outcome);
    let outcome = if codes.contains(&-32700) {
        Outcome::Pass("-32700 with a null id".into())
    } else if answered {
        Outcome::Fail(format!("answered with a null id but code {:?}, not -32700", codes))
    } else {
        Outcome::Fail("the line was ignored (no -32700 answer)".into())
    };
    run.record("malformed-line-answer", Level::Should, MALFORMED_ANSWER, outcome);
    run.retire(agent).await;
    Ok(())
}

async fn extension_method(run: &mut Run, options: &Options, cwd: &str) -> Result<(), String> {
    let (agent, _, _) = match start(options, cwd).await {
        Ok(started) => started,
        Err(why) => {
            run.record("extension-method", Level::Must, EXTENSION, Outcome::Skip(format!("could not start: {why}")));
            return Ok(());
        }
    };
    // An unknown extension notification first: it must be ignored.
    agent.notify("_acp_check/notice", json!({"_meta": {"acp-check": true}})).await;
    let reply = agent.call("_acp_check/ping", json!({"_meta": {"acp-check": true}}), options.timeout).await;
    let outcome = match reply {
        Reply::Closed(how) => Outcome::Fail(format!("{how} after `_acp_check/ping`")),
        Reply::Timeout => Outcome::Fail("no answer to `_acp_check/ping`".into()),
        reply @ (Reply::Result(_) | Reply::Error(_)) => {
            let said = if reply.is_method_not_found() { "-32601".to_owned() } else { reply.describe() };
            match still_works(&agent, cwd, options.timeout).await {
                Err(why) => Outcome::Fail(format!("{said}, but {why}")),
                Ok(()) if matches!(reply, Reply::Error(_)) && !reply.is_method_not_found() => {
                    Outcome::Warn(format!("{said}; an unknown extension method should be answered -32601"))
                }
                Ok(()) => Outcome::Pass(format!("{said}, and the agent still answers session/new")),
            }
        }
    };
    run.record("extension-method", Level::Must, EXTENSION, outcome);
    run.retire(agent).await;
    Ok(())
}

async fn capabilities(run: &mut Run, options: &Options, cwd: &str) -> Result<(), String> {
    let mut current: Option<(Agent, Value, String)> = None;
    for (id, method, rule) in CAPABILITIES {
        if current.as_ref().is_some_and(|(agent, _, _)| agent.is_closed()) {
            let (agent, _, _) = current.take().expect("checked");
            run.retire(agent).await;
        }
        if current.is_none() {
            match start(options, cwd).await {
                Ok(started) => current = Some(started),
                Err(why) => {
                    run.record(id, Level::Must, rule, Outcome::Skip(format!("could not start: {why}")));
                    continue;
                }
            }
        }
        let (agent, init, session) = current.as_ref().expect("started");
        let caps = &init["agentCapabilities"];
        let (advertised, name) = match *method {
            "session/load" => (caps["loadSession"].as_bool() == Some(true), "loadSession"),
            "session/list" => (is_set(&caps["sessionCapabilities"]["list"]), "sessionCapabilities.list"),
            "session/resume" => (is_set(&caps["sessionCapabilities"]["resume"]), "sessionCapabilities.resume"),
            "session/close" => (is_set(&caps["sessionCapabilities"]["close"]), "sessionCapabilities.close"),
            _ => (is_set(&caps["sessionCapabilities"]["delete"]), "sessionCapabilities.delete"),
        };
        let params = match *method {
            "session/list" => json!({}),
            "session/load" => json!({"sessionId": session, "cwd": cwd, "mcpServers": []}),
            "session/resume" => json!({"sessionId": session, "cwd": cwd}),
            _ => json!({"sessionId": session}),
        };
        let reply = agent.call(method, params, options.timeout).await;
        let outcome = match (&reply, advertised) {
            (Reply::Closed(how), _) => Outcome::Fail(format!("{how} after {method}")),
            (Reply::Timeout, true) => Outcome::Fail(format!("{name} is advertised, but {method} got no answer")),
            (Reply::Timeout, false) => {
                Outcome::Warn(format!("{name} is not advertised, and {method} got no answer (expected -32601)"))
            }
            (reply, true) if reply.is_method_not_found() => {
                Outcome::Fail(format!("{name} is advertised, but {method} answers -32601 (method not found)"))
            }
            (reply, true) => Outcome::Pass(format!("{name} advertised; {method} got {}", reply.describe())),
            (reply, false) if reply.is_method_not_found() => {
                Outcome::Pass(format!("{name} not advertised; {method} answers -32601"))
            }
            (reply, false) => Outcome::Warn(format!(
                "{name} is not advertised, yet {method} got {}; advertise it or answer -32601",
                reply.describe()
            )),
        };
        run.record(id, Level::Must, rule, outcome);
    }
    if let Some((agent, _, _)) = current {
        run.retire(agent).await;
    }
    Ok(())
}

/// A capability object that is present and not `null` (or `false`).
fn is_set(value: &Value) -> bool {
    !matches!(value, Value::Null | Value::Bool(false))
}
