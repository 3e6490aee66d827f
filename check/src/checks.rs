//! The checks, in the order they run. Each group of checks gets a fresh agent process, so
//! that an agent that dies in one check is still judged on the others.

use std::time::{Duration, Instant};

use acp_runtime::acp_types::{InitializeResponse, PromptResponse, StopReason};
use serde::Serialize;
use serde_json::{Value, json};

use crate::shape;
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
const CLIENT_CALLS: &str =
    "the client advertises neither fs nor terminal: the agent calls no fs/* or terminal/* method";
const STDOUT: &str = "the agent writes only JSON-RPC messages on stdout";

/// The error `session/new` may answer when the agent wants the client to authenticate first.
const AUTH_REQUIRED: i64 = -32000;

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

/// The checks that need a session (after `session-new`).
const SESSION_CHECKS: &[(&str, Level, &str)] = &[
    ("prompt-turn", Level::Must, PROMPT),
    ("session-update-shape", Level::Must, UPDATES),
    ("prompt-streams-updates", Level::Should, STREAMS),
    ("cancel", Level::Must, CANCEL),
];

// ---- the run ---------------------------------------------------------------------------------

/// Runs every check; `cwd` is the sessions' working directory.
pub async fn run(options: &Options, cwd: &str) -> Result<Run, String> {
    let mut run = Run::default();

    // 1. The handshake, a session, a prompt turn, a cancelled turn.
    let agent = spawn(options)?;
    let init = initialize(&agent, options.timeout).await;
    let auth = match &init {
        Ok((response, raw)) => {
            run.facts.agent_info = raw.get("agentInfo").cloned();
            run.facts.protocol_version = raw.get("protocolVersion").cloned();
            run.facts.agent_capabilities = raw.get("agentCapabilities").cloned();
            let name = raw["agentInfo"]["name"].as_str().map_or(String::new(), |n| {
                format!("; agent {n} {}", raw["agentInfo"]["version"].as_str().unwrap_or(""))
            });
            run.record("initialize", Level::Must, INITIALIZE, Outcome::Pass(format!("answered{name}")));
            let version = u64::from(response.protocol_version.0);
            if version > CURRENT_PROTOCOL_VERSION {
                // Version negotiation: an agent that does not support the version asked for
                // answers the latest it does; the client then closes the connection.
                let why = format!("the agent speaks protocol version {version}, not {CURRENT_PROTOCOL_VERSION}");
                run.record(
                    "protocol-version",
                    Level::Must,
                    VERSION,
                    Outcome::Warn(format!(
                        "asked for {CURRENT_PROTOCOL_VERSION}, got {version}: the agent does not support version \
                         {CURRENT_PROTOCOL_VERSION}, the only one acp-check checks"
                    )),
                );
                run.retire(agent).await;
                skip_rest(&mut run, &why);
                final_checks(&mut run);
                return Ok(run);
            }
            run.record(
                "protocol-version",
                Level::Must,
                VERSION,
                Outcome::Pass(format!("asked for {CURRENT_PROTOCOL_VERSION}, got {version}")),
            );
            Auth::of(raw)
        }
        Err(why) => {
            run.record("initialize", Level::Must, INITIALIZE, Outcome::Fail(why.clone()));
            run.record("protocol-version", Level::Must, VERSION, Outcome::Skip("initialize failed".into()));
            run.retire(agent).await;
            skip_rest(&mut run, "initialize failed");
            final_checks(&mut run);
            return Ok(run);
        }
    };

    match new_session(&agent, cwd, options.timeout, &auth).await {
        Ok(session) => {
            run.record("session-new", Level::Must, SESSION_NEW, Outcome::Pass(format!("sessionId {session}")));
            prompt_turn(&mut run, &agent, &session, options.timeout).await;
            cancel_turn(&mut run, &agent, &session, options.timeout).await;
        }
        Err(error) => {
            let why = match error {
                SessionError::AuthRequired(why) => {
                    run.record("session-new", Level::Must, SESSION_NEW, Outcome::Skip(why.clone()));
                    why
                }
                SessionError::Failed(why) => {
                    run.record("session-new", Level::Must, SESSION_NEW, Outcome::Fail(why));
                    "session/new failed".to_owned()
                }
            };
            for (id, level, rule) in SESSION_CHECKS {
                run.record(id, *level, rule, Outcome::Skip(why.clone()));
            }
        }
    }
    run.retire(agent).await;

    // 2. Robustness, each on a fresh process.
    unknown_method(&mut run, options, cwd).await?;
    malformed_line(&mut run, options, cwd).await?;
    extension_method(&mut run, options, cwd).await?;

    // 3. Capability honesty.
    capabilities(&mut run, options, cwd).await?;

    // 4. What was seen over all the runs.
    final_checks(&mut run);
    Ok(run)
}

/// The checks of what was observed over all the processes; they run however the run ended.
fn final_checks(run: &mut Run) {
    let forbidden: Vec<&str> = run
        .observed
        .iter()
        .flat_map(|o| &o.other_requests)
        .map(String::as_str)
        .filter(|m| m.starts_with("fs/") || m.starts_with("terminal/"))
        .collect();
    let outcome = match forbidden.first() {
        None => Outcome::Pass("no fs/* or terminal/* request".into()),
        Some(first) => Outcome::Fail(format!(
            "{} request(s) to methods the client did not advertise, e.g. {first}",
            forbidden.len()
        )),
    };
    run.record("client-capabilities-respected", Level::Must, CLIENT_CALLS, outcome);

    let non_json: Vec<&String> = run.observed.iter().flat_map(|o| &o.non_json_lines).collect();
    let outcome = match non_json.first() {
        None => Outcome::Pass("every line was a JSON-RPC message".into()),
        Some(first) => Outcome::Fail(format!("{} line(s) that are not JSON-RPC, e.g. {first:?}", non_json.len())),
    };
    run.record("stdout-json-only", Level::Must, STDOUT, outcome);
}

/// Skips what follows `protocol-version` (the final checks excepted).
fn skip_rest(run: &mut Run, why: &str) {
    let mut rest = vec![("session-new", Level::Must, SESSION_NEW)];
    rest.extend(SESSION_CHECKS.iter().copied());
    rest.extend([
        ("unknown-method", Level::Must, UNKNOWN),
        ("malformed-line-survives", Level::Must, MALFORMED_SURVIVES),
        ("malformed-line-answer", Level::Should, MALFORMED_ANSWER),
        ("extension-method", Level::Must, EXTENSION),
    ]);
    rest.extend(CAPABILITIES.iter().map(|(id, _, rule)| (*id, Level::Must, *rule)));
    for (id, level, rule) in rest {
        run.record(id, level, rule, Outcome::Skip(why.to_owned()));
    }
}

fn spawn(options: &Options) -> Result<Agent, String> {
    Agent::spawn(&options.launch).map_err(|e| format!("cannot start `{}`: {e}", options.launch.command.join(" ")))
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

/// The authentication methods the agent advertised (acp-check uses none of them).
struct Auth {
    methods: Vec<String>,
}

impl Auth {
    fn of(init: &Value) -> Self {
        let methods = init["authMethods"].as_array().map_or_else(Vec::new, |methods| {
            methods.iter().map(|m| m["id"].as_str().unwrap_or("?").to_owned()).collect()
        });
        Auth { methods }
    }

    /// Whether `reply` is the `auth_required` error of an agent that advertised how to
    /// authenticate: the spec allows it, and acp-check cannot go further.
    fn required_by(&self, reply: &Reply) -> bool {
        !self.methods.is_empty() && matches!(reply, Reply::Error(e) if i64::from(e.code) == AUTH_REQUIRED)
    }

    fn why(&self, method: &str) -> String {
        format!(
            "the agent requires authentication ({method} answered auth_required, {AUTH_REQUIRED}; authMethods: {}); \
             acp-check does not authenticate",
            self.methods.join(", ")
        )
    }
}

enum SessionError {
    /// The agent wants the client to authenticate first (see [`Auth::required_by`]).
    AuthRequired(String),
    Failed(String),
}

async fn new_session(agent: &Agent, cwd: &str, limit: Duration, auth: &Auth) -> Result<String, SessionError> {
    match agent.call("session/new", json!({"cwd": cwd, "mcpServers": []}), limit).await {
        Reply::Result(raw) => match raw["sessionId"].as_str() {
            Some(id) => Ok(id.to_owned()),
            None => Err(SessionError::Failed(format!(
                "the result has no string sessionId: {}",
                truncate(&raw.to_string(), 200)
            ))),
        },
        reply if auth.required_by(&reply) => Err(SessionError::AuthRequired(auth.why("session/new"))),
        Reply::Error(e) if i64::from(e.code) == AUTH_REQUIRED => Err(SessionError::Failed(format!(
            "session/new got auth_required ({AUTH_REQUIRED}), but the agent advertised no authMethods to \
             authenticate with"
        ))),
        other => Err(SessionError::Failed(format!("session/new got {}", other.describe()))),
    }
}

/// A fresh process, initialized, with a session unless the agent requires authentication.
struct Started {
    agent: Agent,
    init: Value,
    session: Option<String>,
    auth: Auth,
}

async fn start(options: &Options, cwd: &str) -> Result<Started, String> {
    let agent = spawn(options)?;
    let (_, init) = match initialize(&agent, options.timeout).await {
        Ok(init) => init,
        Err(why) => {
            agent.close().await;
            return Err(why);
        }
    };
    let auth = Auth::of(&init);
    match new_session(&agent, cwd, options.timeout, &auth).await {
        Ok(session) => Ok(Started { agent, init, session: Some(session), auth }),
        Err(SessionError::AuthRequired(_)) => Ok(Started { agent, init, session: None, auth }),
        Err(SessionError::Failed(why)) => {
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
    let (updates_before, sent_before) = agent.observed(|o| (o.updates.len(), o.sent.len()));
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

    let (count, tags, bad, unknown, permissions, during_turn) = agent.observed(|o| {
        let mut bad = Vec::new();
        let mut unknown = Vec::new();
        let mut tags: Vec<String> = Vec::new();
        for update in &o.updates {
            let tag = update.tag();
            match &update.decoded {
                Err(e) => bad.push(format!("{e}: {}", truncate(&update.params.to_string(), 160))),
                Ok(n) if n.session_id.0 != session => {
                    bad.push(format!("sessionId {:?} instead of {session:?}", n.session_id.0))
                }
                Ok(n) => {
                    if let Some(difference) = shape::first_difference(&update.params, n) {
                        bad.push(format!("`{tag}` {difference}"));
                    } else if tag.starts_with("unknown") {
                        unknown.push(tag.clone());
                    }
                }
            }
            if !tags.contains(&tag) {
                tags.push(tag);
            }
        }
        // Progress is what arrived once the prompt was on its way, not what came before it.
        let during_turn = match o.last_sent("session/prompt", sent_before) {
            Some(prompt) => o.updates.iter().filter(|u| u.at >= prompt.at).count(),
            None => o.updates.len() - updates_before,
        };
        (o.updates.len(), tags, bad, unknown, o.permission_requests, during_turn)
    });
    let seen = format!("{count} update(s): {}", if tags.is_empty() { "none".into() } else { tags.join(", ") });
    let asked = if permissions > 0 { format!("; {permissions} permission request(s) allowed") } else { String::new() };
    let outcome = if !bad.is_empty() {
        Outcome::Fail(format!("{} of {count} update(s) do not decode as sent: {}", bad.len(), bad[0]))
    } else if !unknown.is_empty() {
        Outcome::Warn(format!("{seen}{asked}; not in the v1 schema: {}", unknown.join(", ")))
    } else {
        Outcome::Pass(format!("{seen}{asked}"))
    };
    run.record("session-update-shape", Level::Must, UPDATES, outcome);
    let outcome = if during_turn > 0 {
        Outcome::Pass(format!("{during_turn} update(s) during the turn"))
    } else if count > 0 {
        Outcome::Fail(format!("no session/update during the turn ({count} before the prompt was sent)"))
    } else {
        Outcome::Fail("no session/update during the turn".into())
    };
    run.record("prompt-streams-updates", Level::Should, STREAMS, outcome);
}

async fn cancel_turn(run: &mut Run, agent: &Agent, session: &str, limit: Duration) {
    agent.hold_permissions(true);
    let (before, sent_before) = agent.observed(|o| (o.updates.len(), o.sent.len()));
    let turn = agent.call_in_background(
        "session/prompt",
        prompt_params(session, "Please take your time and tell me a long story; I may cancel."),
        limit + CANCEL_BOUND,
    );
    // Cancel after the first update of the turn, or after a short delay. A turn that has
    // ended by then is judged below, by when its answer arrived.
    agent.wait_for(Duration::from_millis(1000), |o| o.updates.len() > before).await;
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
        Ok(Ok(reply)) => {
            let crossed = answer_crossed_cancel(agent, sent_before).await;
            match stop_reason(&reply) {
                Ok(StopReason::Cancelled) if crossed => {
                    Outcome::Fail("the turn answered `cancelled` before session/cancel was sent".into())
                }
                Ok(StopReason::Cancelled) => {
                    Outcome::Pass(format!("stopReason cancelled {elapsed} ms after session/cancel"))
                }
                // The answer was on the wire before the cancel: there was nothing left to cancel.
                Ok(other) if crossed => Outcome::Warn(format!(
                    "inconclusive: the turn answered `{}` before session/cancel reached the agent (the answer \
                     was already on the wire)",
                    other.as_str()
                )),
                Err(why) if crossed => Outcome::Fail(why),
                Ok(other) => Outcome::Fail(format!(
                    "the turn answered stopReason `{}` {elapsed} ms after session/cancel, not `cancelled`",
                    other.as_str()
                )),
                Err(why) => Outcome::Fail(format!(
                    "after session/cancel: {why} (a cancelled turn must answer stopReason `cancelled`)"
                )),
            }
        }
    };
    run.record("cancel", Level::Must, CANCEL, outcome);
    agent.hold_permissions(false);
}

/// Whether the answer to the last `session/prompt` (sent after index `sent_before`) was read
/// from the agent before `session/cancel` was written to it, or the cancel never was.
async fn answer_crossed_cancel(agent: &Agent, sent_before: usize) -> bool {
    // The answer can be read before the writer has recorded the cancel it is writing.
    let written = |o: &Observed| o.last_sent("session/cancel", sent_before).is_some();
    agent.wait_for(Duration::from_millis(500), written).await;
    agent.observed(|o| {
        let Some(cancel) = o.last_sent("session/cancel", sent_before) else { return true };
        let answered = o.last_sent("session/prompt", sent_before).and_then(|p| o.answered_at(p.id.as_ref()?));
        answered.is_some_and(|at| at < cancel.at)
    })
}

/// Whether the agent still works: it answers another `session/new` (with a session, or with
/// `auth_required` when it wants authentication).
async fn still_works(agent: &Agent, cwd: &str, limit: Duration, auth: &Auth) -> Result<(), String> {
    match new_session(agent, cwd, limit, auth).await {
        Ok(_) | Err(SessionError::AuthRequired(_)) => Ok(()),
        Err(SessionError::Failed(why)) => Err(format!("afterwards, {why}")),
    }
}

async fn unknown_method(run: &mut Run, options: &Options, cwd: &str) -> Result<(), String> {
    let Started { agent, auth, .. } = match start(options, cwd).await {
        Ok(started) => started,
        Err(why) => {
            run.record("unknown-method", Level::Must, UNKNOWN, Outcome::Skip(format!("could not start: {why}")));
            return Ok(());
        }
    };
    let reply = agent.call("acp_check/no_such_method", json!({"probe": true}), options.timeout).await;
    let outcome = match reply {
        Reply::Closed(how) => Outcome::Fail(format!("{how} after the request for an unknown method")),
        reply if reply.is_method_not_found() => match still_works(&agent, cwd, options.timeout, &auth).await {
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
    let Started { agent, auth, .. } = match start(options, cwd).await {
        Ok(started) => started,
        Err(why) => {
            let why = format!("could not start: {why}");
            run.record("malformed-line-survives", Level::Must, MALFORMED_SURVIVES, Outcome::Skip(why.clone()));
            run.record("malformed-line-answer", Level::Should, MALFORMED_ANSWER, Outcome::Skip(why));
            return Ok(());
        }
    };
    // Written before the next request goes out: the answer to that request shows the agent
    // read past the bad line.
    agent.inject_line("{not json").await;
    let survived = still_works(&agent, cwd, options.timeout, &auth).await;
    let answered = agent.wait_for(Duration::from_millis(300), |o| !o.null_id_errors.is_empty()).await;
    let codes = agent.observed(|o| o.null_id_errors.clone());
    let outcome = match &survived {
        Ok(()) => Outcome::Pass("the agent still answers session/new after it".into()),
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
    let Started { agent, auth, .. } = match start(options, cwd).await {
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
            match still_works(&agent, cwd, options.timeout, &auth).await {
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
    let mut current: Option<Started> = None;
    for (id, method, rule) in CAPABILITIES {
        if current.as_ref().is_some_and(|started| started.agent.is_closed()) {
            let started = current.take().expect("checked");
            run.retire(started.agent).await;
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
        let Started { agent, init, session, auth } = current.as_ref().expect("started");
        let caps = &init["agentCapabilities"];
        let (advertised, name) = match *method {
            "session/load" => (caps["loadSession"].as_bool() == Some(true), "loadSession"),
            "session/list" => (is_set(&caps["sessionCapabilities"]["list"]), "sessionCapabilities.list"),
            "session/resume" => (is_set(&caps["sessionCapabilities"]["resume"]), "sessionCapabilities.resume"),
            "session/close" => (is_set(&caps["sessionCapabilities"]["close"]), "sessionCapabilities.close"),
            _ => (is_set(&caps["sessionCapabilities"]["delete"]), "sessionCapabilities.delete"),
        };
        let params = match (*method, session) {
            ("session/list", _) => json!({}),
            (_, None) => {
                run.record(id, Level::Must, rule, Outcome::Skip(auth.why("session/new")));
                continue;
            }
            ("session/load", Some(session)) => json!({"sessionId": session, "cwd": cwd, "mcpServers": []}),
            ("session/resume", Some(session)) => json!({"sessionId": session, "cwd": cwd}),
            (_, Some(session)) => json!({"sessionId": session}),
        };
        let reply = agent.call(method, params, options.timeout).await;
        let outcome = match (&reply, advertised) {
            (reply, _) if auth.required_by(reply) => Outcome::Skip(auth.why(method)),
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
    if let Some(started) = current {
        run.retire(started.agent).await;
    }
    Ok(())
}

/// A capability object that is present and not `null` (or `false`).
fn is_set(value: &Value) -> bool {
    !matches!(value, Value::Null | Value::Bool(false))
}
