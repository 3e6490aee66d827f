//! The checks, in the order they run. Each group of checks gets a fresh agent process, so
//! that an agent that dies in one check is still judged on the others.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use acp_rpc::acp_types::{InitializeResponse, PromptResponse, SessionUpdate, StopReason};
use serde::Serialize;
use serde_json::{Value, json};

use crate::serve::Offer;
use crate::shape;
use crate::v2;
use crate::wire::{Agent, Launch, Observed, Reply, Sent, truncate};

/// The protocol version the v1 checks ask for.
pub const CURRENT_PROTOCOL_VERSION: u64 = 1;
/// The latest protocol version acp-check knows (and checks with `--protocol 2`).
pub const LATEST_KNOWN_VERSION: u64 = 2;
/// A protocol version no agent supports, for version negotiation: the largest a
/// `ProtocolVersion` holds (a uint16 in the schema, 0..=65535), so the request is still valid.
pub const UNSUPPORTED_PROTOCOL_VERSION: u16 = u16::MAX;
/// How long a cancelled turn may take to answer `cancelled`.
pub const CANCEL_BOUND: Duration = Duration::from_secs(2);
/// How long an agent may take to exit once its stdin is closed.
pub const STDIN_EXIT_BOUND: Duration = Duration::from_secs(3);
/// How long the cancel waits for the turn's first update before it goes out anyway.
pub const CANCEL_AFTER: Duration = Duration::from_millis(100);
/// The bounds of the window in which a turn's answer may have crossed the cancel (see
/// [`race_window`]).
pub const MIN_RACE_WINDOW: Duration = Duration::from_millis(100);
pub const MAX_RACE_WINDOW: Duration = Duration::from_secs(1);

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
    /// The protocol version the check is of.
    pub protocol: u8,
    pub level: Level,
    pub status: Status,
    /// What the spec asks.
    pub rule: &'static str,
    /// What happened.
    pub detail: String,
    /// The check could not tell whether the rule holds (its status is WARN).
    pub inconclusive: bool,
}

pub struct Options {
    pub launch: Launch,
    /// The limit for each answer (a prompt turn included).
    pub timeout: Duration,
    /// Prompts that make the agent start work the client can cancel (`--work-prompt`, v2).
    pub work_prompts: Vec<String>,
}

/// Which protocol versions to check (`--protocol`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Protocol {
    /// v1's checks only.
    V1,
    /// v2's checks only.
    V2,
    /// Find out which versions the agent serves, then check each of them.
    Auto,
}

/// The protocol versions the agent was found to serve, and what each `initialize` asking for
/// one got.
#[derive(Default, Debug, Serialize)]
pub struct Versions {
    pub served: Vec<u16>,
    pub probes: Vec<v2::Probe>,
}

impl Versions {
    pub(crate) fn of(probes: Vec<v2::Probe>) -> Versions {
        let mut served: Vec<u16> = Vec::new();
        for probe in &probes {
            // Whatever was asked, an agent answers a version it supports (the one asked for, or
            // its latest): asked for 2, a v1 agent answers 1. Versions acp-check does not know
            // are reported by the probes alone.
            if let Some(v) = probe.answered.filter(|v| (1..=2).contains(v)) {
                let v = v as u16;
                if !served.contains(&v) {
                    served.push(v);
                }
            }
        }
        served.sort_unstable();
        Versions { served, probes }
    }

    /// Whether the agent may serve `version` without the probes showing it: the probe asking
    /// for it got no answer in time (a slow start, say), and no other answer names it.
    pub fn unknown(&self, version: u16) -> bool {
        !self.served.contains(&version) && self.probes.iter().any(|p| p.asked == version && p.timed_out)
    }

    /// One line for the text report.
    pub fn describe(&self) -> String {
        let served = if self.served.is_empty() {
            "none found".to_owned()
        } else {
            self.served.iter().map(u16::to_string).collect::<Vec<_>>().join(", ")
        };
        let probes: Vec<String> = self.probes.iter().map(v2::Probe::describe).collect();
        let unknown: Vec<String> = [1, 2].into_iter().filter(|v| self.unknown(*v)).map(|v| v.to_string()).collect();
        let unknown = match unknown.as_slice() {
            [] => String::new(),
            versions => format!("; the probes could not tell whether it serves {}", versions.join(" or ")),
        };
        format!("{served} ({}){unknown}", probes.join("; "))
    }
}

/// A protocol version whose checks did not run because its probe got no answer in time: the
/// run cannot say the agent conforms (exit status 3, not 0), nor that it does not.
#[derive(Clone, Debug, Serialize)]
pub struct Unchecked {
    pub protocol: u8,
    pub why: String,
}

/// What a request that got no answer within `limit` got, naming the option that sets it.
pub(crate) fn no_answer_within(limit: Duration) -> String {
    format!("no answer within the --timeout-ms limit ({} ms)", limit.as_millis())
}

/// Why an `initialize` may get no answer in time, and what to do: the usual cause is a first
/// start that builds or fetches the agent (`cargo run`, `npx`), which the user can wait out.
pub(crate) const SLOW_START_HINT: &str = "an agent slow to start the first time (built or downloaded on its first \
                                          run, say) can cause this: run again, or raise --timeout-ms";

/// What an `initialize` got, in words; no answer in time comes with [`SLOW_START_HINT`].
pub(crate) fn initialize_got(reply: &Reply, limit: Duration) -> String {
    match reply {
        Reply::Timeout => format!("{}; {SLOW_START_HINT}", no_answer_within(limit)),
        other => other.describe(),
    }
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
    pub versions: Versions,
    /// What the v2 suite found, when it ran.
    pub v2: Option<v2::Facts>,
    /// The protocol version of the checks being recorded.
    pub protocol: u8,
    /// Where the agent asked for a login, which acp-check does not do: what needed a session
    /// (or a turn) was skipped from there on.
    pub auth_required: Vec<AuthStop>,
    /// The protocol versions left unchecked because their probe timed out.
    pub unchecked: Vec<Unchecked>,
    observed: Vec<Observed>,
    /// What went wrong in the notifications' own process, for `notifications-unanswered`
    /// (judged over all processes at the end).
    notifications: Option<Outcome>,
    /// How many turns ran with the client offering fs and terminal, and why others did not.
    client_turns: usize,
    client_notes: Vec<String>,
}

impl Run {
    pub(crate) fn record(&mut self, id: &'static str, level: Level, rule: &'static str, outcome: Outcome) {
        let inconclusive = matches!(outcome, Outcome::Inconclusive(_));
        let (status, detail) = match outcome {
            Outcome::Pass(d) => (Status::Pass, d),
            // A SHOULD that does not hold is a warning, a MUST a failure.
            Outcome::Fail(d) => (if level == Level::Must { Status::Fail } else { Status::Warn }, d),
            Outcome::Warn(d) | Outcome::Inconclusive(d) => (Status::Warn, d),
            Outcome::Skip(d) => (Status::Skip, d),
        };
        self.checks.push(Check { id, protocol: self.protocol, level, status, rule, detail, inconclusive });
    }

    /// Notes that the agent wanted a login at `stop` (once per protocol and method).
    pub(crate) fn stopped_at_auth(&mut self, stop: AuthStop) {
        if !self.auth_required.iter().any(|s| s.protocol == stop.protocol && s.method == stop.method) {
            self.auth_required.push(stop);
        }
    }

    async fn retire(&mut self, agent: Agent) {
        self.observed.push(agent.close().await);
    }
}

#[derive(Clone, Debug)]
pub(crate) enum Outcome {
    Pass(String),
    Fail(String),
    Warn(String),
    /// Whether the rule holds could not be told (a WARN, whatever the level): what happened
    /// neither shows it nor contradicts it.
    Inconclusive(String),
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
const TURN_ORDER: &str = "a turn's message/thought chunks, tool calls, tool call updates and plans are sent before \
                          its session/prompt answer";
const NEGOTIATION: &str = "asked for a protocol version it does not support (65535), the agent answers the latest \
                           version it supports, not the one asked for";
const UNKNOWN: &str = "an unknown method is answered -32601 and the agent keeps working";
const MALFORMED_SURVIVES: &str = "a malformed line (`{not json`) does not stop the agent";
const MALFORMED_ANSWER: &str = "a malformed line is answered -32700 with a null id";
const EXTENSION: &str = "an unknown extension method `_acp_check/ping` is answered (-32601 or a result) without harm";
const NOTIFICATIONS: &str = "notifications are never answered (no response with a null, missing or unknown id), \
                             and the agent keeps working after session/cancel for an unknown session and unknown \
                             notifications";
const INVALID_PARAMS: &str = "a request with invalid params (session/new without cwd, session/prompt whose prompt is \
                              not an array) is answered with an error, -32602, and the agent keeps working";
const UNKNOWN_SESSION_RULE: &str = "session/prompt for a session that was never created is answered with an error, \
                                    and the agent keeps working (no MUST: session-setup.mdx only lets an agent \
                                    answer an error for a session that does not exist, under session/close)";
const STDIN_EXIT: &str = "when the client closes the agent's stdin, the agent exits (within 3 s)";
const CLIENT_CALLS: &str = "the agent calls fs/* and terminal/* methods only when the client advertised their \
                            capability (fs.readTextFile, fs.writeTextFile, terminal)";
const FS_CALLS: &str = "the agent's fs/* calls are well-formed: params that decode as sent, a session of the \
                        connection, an absolute path, lines counted from 1";
const WITHIN_ROOT: &str = "file paths and terminal working directories stay within the session's cwd, the root \
                           that SHOULD bound file-system operations (acp-check refuses the others)";
const TERMINAL_CALLS: &str = "the agent's terminal/* calls are well-formed: params that decode as sent, a session \
                              of the connection, a terminal created in that session and not yet released";
const TERMINAL_RELEASED: &str = "every terminal is released with terminal/release once no longer needed, by the end \
                                 of the turn that created it";
const STDOUT: &str = "the agent writes only JSON-RPC messages on stdout";

/// The file the client-offering runs ask the agent to read, in the session's directory.
const FIXTURE_FILE: &str = "acp-check.txt";
const FIXTURE_TEXT: &str = "acp-check was here.\nThis file is served through fs/read_text_file.\n";
/// The prompt of the client-offering runs: a read, a write and a command, each of which an
/// agent may do through the client.
const CLIENT_PROMPT: &str = "Please read acp-check.txt in the session's directory, write its first line to \
                             acp-check-copy.txt beside it, and run `echo acp-check` in a terminal.";

/// A session id no agent handed out.
pub(crate) const UNKNOWN_SESSION: &str = "acp-check-no-such-session";
/// How long answers to notifications are waited for once the request after them is answered.
pub(crate) const NOTIFICATION_GRACE: Duration = Duration::from_millis(300);

/// The error an agent answers when the client must authenticate first (`auth_required`).
pub(crate) const AUTH_REQUIRED: i64 = -32000;

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
    ("turn-updates-before-answer", Level::Must, TURN_ORDER),
];

// ---- the run ---------------------------------------------------------------------------------

/// Runs the checks of the versions `protocol` asks for; `cwd` is the sessions' working
/// directory. `Err` when the agent cannot be started.
pub async fn run(options: &Options, cwd: &str, protocol: Protocol) -> Result<Run, String> {
    let mut run = Run::default();
    match protocol {
        Protocol::V1 => {
            run_v1(&mut run, options, cwd).await?;
            let answered = run.facts.protocol_version.as_ref().and_then(Value::as_u64);
            let error = answered.is_none().then(|| "initialize failed (see the `initialize` check)".to_owned());
            run.versions = Versions::of(vec![v2::Probe { asked: 1, answered, error, timed_out: false }]);
        }
        Protocol::V2 => {
            let probe = v2::run(&mut run, options, cwd).await?;
            run.versions = Versions::of(vec![probe]);
        }
        Protocol::Auto => {
            // Negotiation first, each on a fresh process: a client asking for 2 (as one that
            // negotiates does), then one asking for 1.
            let two = v2::probe(options, 2).await?;
            let one = v2::probe(options, 1).await?;
            run.versions = Versions::of(vec![two, one]);
            let (v1, v2) = (run.versions.served.contains(&1), run.versions.served.contains(&2));
            // The v1 checks unless the agent is known to serve v2 only (they would all be
            // skipped); an agent that serves neither gets them, for what they say about its
            // handshake, and so does one whose probe for 1 timed out: its suite asks again.
            if v1 || !v2 || run.versions.unknown(1) {
                run_v1(&mut run, options, cwd).await?;
            }
            if v2 {
                v2::run(&mut run, options, cwd).await?;
            } else if run.versions.unknown(2) {
                // Not run: asked for 2, a v1-only agent fails `serves-v2`, which a timeout
                // cannot tell from a slow v2 agent. Each v2 check is inconclusive instead.
                let probe =
                    format!("the probe asking for protocol version 2 got {}", no_answer_within(options.timeout));
                v2::unchecked(&mut run, &format!("inconclusive: not checked, as {probe}"));
                run.unchecked.push(Unchecked { protocol: 2, why: format!("{probe}; {SLOW_START_HINT}") });
            }
        }
    }
    Ok(run)
}

/// The v1 checks (`--protocol 1`, today's suite).
async fn run_v1(run: &mut Run, options: &Options, cwd: &str) -> Result<(), String> {
    run.protocol = 1;

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
                         {CURRENT_PROTOCOL_VERSION}, so the v1 checks do not apply"
                    )),
                );
                run.retire(agent).await;
                skip_rest(run, &why);
                final_checks(run);
                return Ok(());
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
            skip_rest(run, "initialize failed");
            final_checks(run);
            return Ok(());
        }
    };

    let accepted = run.facts.protocol_version.as_ref().and_then(Value::as_u64).unwrap_or(CURRENT_PROTOCOL_VERSION);
    let prompted = match new_session(&agent, cwd, options.timeout, &auth).await {
        Ok(session) => {
            run.record("session-new", Level::Must, SESSION_NEW, Outcome::Pass(format!("sessionId {session}")));
            match prompt_turn(run, &agent, &session, options.timeout, &auth).await {
                Turned::Ran => {
                    cancel_turn(run, &agent, &session, options.timeout).await;
                    true
                }
                // A turn needs a login: there is nothing to cancel, nor a turn to judge.
                Turned::AuthRequired(why) => {
                    run.stopped_at_auth(auth.stop(1, "session/prompt"));
                    run.record("cancel", Level::Must, CANCEL, Outcome::Skip(why.clone()));
                    run.record("turn-updates-before-answer", Level::Must, TURN_ORDER, Outcome::Skip(why));
                    false
                }
            }
        }
        Err(error) => {
            let why = match error {
                SessionError::AuthRequired(why) => {
                    run.stopped_at_auth(auth.stop(1, "session/new"));
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
            false
        }
    };
    exits_on_stdin_close(run, &agent, options.launch.url.is_some()).await;
    run.retire(agent).await;
    if prompted {
        // Judged on all the process wrote, up to its end: an update may follow the last answer.
        let outcome = turn_order(run.observed.last().expect("just retired"));
        run.record("turn-updates-before-answer", Level::Must, TURN_ORDER, outcome);
    }

    // 2. Version negotiation, on a fresh process (initialize is sent once per connection).
    version_negotiation(run, options, accepted).await;

    // 3. Robustness, each on a fresh process.
    unknown_method(run, options, cwd).await?;
    malformed_line(run, options, cwd).await?;
    extension_method(run, options, cwd).await?;
    notifications(run, options, cwd).await;
    invalid_requests(run, options, cwd).await;

    // 4. Capability honesty.
    capabilities(run, options, cwd).await?;

    // 5. The client offers fs and terminal, and serves them.
    client_runs(run, options, cwd).await;

    // 6. What was seen over all the runs.
    final_checks(run);
    Ok(())
}

/// The checks of what was observed over all the processes; they run however the run ended.
fn final_checks(run: &mut Run) {
    // An answer to a notification anywhere says the most; then trouble in their own process.
    let outcome = match (judge_notifications(&run.observed), run.notifications.take()) {
        (answered @ Outcome::Fail(_), _) => answered,
        (_, Some(trouble)) => trouble,
        (judged, None) => judged,
    };
    run.record("notifications-unanswered", Level::Must, NOTIFICATIONS, outcome);

    let outcome = judge_capabilities(&run.observed);
    run.record("client-capabilities-respected", Level::Must, CLIENT_CALLS, outcome);
    // Without a turn in which the client offered them, and without a call, there is nothing
    // to judge; calls made in a turn that failed are judged all the same.
    let offered_calls = run.observed.iter().flat_map(|o| &o.client_calls).any(|c| c.offered);
    let no_turn = (run.client_turns == 0 && !offered_calls).then(|| {
        let mut notes: Vec<&str> = Vec::new();
        for note in &run.client_notes {
            // Both runs often stop for the same reason: say it once.
            if !notes.contains(&note.as_str()) {
                notes.push(note);
            }
        }
        let why = if notes.is_empty() { "not run".to_owned() } else { notes.join("; ") };
        Outcome::Skip(format!("no turn ran with the client offering fs and terminal: {why}"))
    });
    let outcome = no_turn.clone().unwrap_or_else(|| judge_calls(&run.observed, "fs/"));
    run.record("fs-calls-well-formed", Level::Must, FS_CALLS, outcome);
    let outcome = no_turn.clone().unwrap_or_else(|| judge_within_root(&run.observed));
    run.record("fs-within-session-root", Level::Should, WITHIN_ROOT, outcome);
    let outcome = no_turn.clone().unwrap_or_else(|| judge_calls(&run.observed, "terminal/"));
    run.record("terminal-calls-well-formed", Level::Must, TERMINAL_CALLS, outcome);
    let outcome = no_turn.unwrap_or_else(|| judge_released(&run.observed));
    run.record("terminal-released", Level::Should, TERMINAL_RELEASED, outcome);

    let outcome = match non_json_lines(&run.observed) {
        None => Outcome::Pass("every line was a JSON-RPC message".into()),
        Some(what) => Outcome::Fail(what),
    };
    run.record("stdout-json-only", Level::Must, STDOUT, outcome);
}

/// The lines on stdout that are not JSON-RPC, over all the processes, described so that a
/// line each process prints (a banner at startup) reads as one line, not as one per process.
pub(crate) fn non_json_lines(observed: &[Observed]) -> Option<String> {
    let first = observed.iter().flat_map(|o| &o.non_json_lines).next()?;
    let total: usize = observed.iter().map(|o| o.non_json_lines.len()).sum();
    let mut distinct: Vec<&String> = Vec::new();
    for line in observed.iter().flat_map(|o| &o.non_json_lines) {
        if !distinct.contains(&line) {
            distinct.push(line);
        }
    }
    let (printing, started) = (observed.iter().filter(|o| !o.non_json_lines.is_empty()).count(), observed.len());
    let lines = match distinct.len() {
        1 => "1 distinct line that is not JSON-RPC".to_owned(),
        n => format!("{n} distinct lines that are not JSON-RPC"),
    };
    let times = if total > distinct.len() { format!(" ({total} in all)") } else { String::new() };
    let by = match (printing, started) {
        (_, 1) => "printed by the one agent process started".to_owned(),
        (p, s) if p == s => format!("printed by each of the {s} agent processes started"),
        (p, s) => format!("printed by {p} of the {s} agent processes started"),
    };
    Some(format!("{lines}{times}, {by}; the first: {first:?}"))
}

/// Skips what follows `protocol-version` (the final checks excepted).
fn skip_rest(run: &mut Run, why: &str) {
    let mut rest = vec![("session-new", Level::Must, SESSION_NEW)];
    rest.extend(SESSION_CHECKS.iter().copied());
    rest.extend([
        ("exits-on-stdin-close", Level::Should, STDIN_EXIT),
        ("version-negotiation", Level::Must, NEGOTIATION),
        ("unknown-method", Level::Must, UNKNOWN),
        ("malformed-line-survives", Level::Must, MALFORMED_SURVIVES),
        ("malformed-line-answer", Level::Should, MALFORMED_ANSWER),
        ("extension-method", Level::Must, EXTENSION),
        ("invalid-params", Level::Must, INVALID_PARAMS),
        ("unknown-session", Level::Should, UNKNOWN_SESSION_RULE),
    ]);
    rest.extend(CAPABILITIES.iter().map(|(id, _, rule)| (*id, Level::Must, *rule)));
    for (id, level, rule) in rest {
        run.record(id, level, rule, Outcome::Skip(why.to_owned()));
    }
}

/// A fresh process, to which the client offers no capability.
fn spawn(options: &Options) -> Result<Agent, String> {
    spawn_offering(options, Offer::default())
}

fn spawn_offering(options: &Options, offer: Offer) -> Result<Agent, String> {
    Agent::spawn(&options.launch, offer)
        .map_err(|e| format!("cannot start `{}`: {e}", options.launch.command.join(" ")))
}

async fn initialize(agent: &Agent, limit: Duration) -> Result<(InitializeResponse, Value), String> {
    let params = initialize_params(CURRENT_PROTOCOL_VERSION, &agent.offer());
    match agent.call("initialize", params, limit).await {
        Reply::Result(raw) => decode_initialize(raw),
        other => Err(format!("initialize got {}", initialize_got(&other, limit))),
    }
}

pub(crate) fn initialize_params(version: u64, offer: &Offer) -> Value {
    json!({
        "protocolVersion": version,
        "clientCapabilities": offer.capabilities(),
        "clientInfo": {"name": "acp-check", "version": env!("CARGO_PKG_VERSION")},
    })
}

fn decode_initialize(raw: Value) -> Result<(InitializeResponse, Value), String> {
    match serde_json::from_value::<InitializeResponse>(raw.clone()) {
        Ok(response) => Ok((response, raw)),
        Err(e) => Err(format!("the result is not an InitializeResponse: {e}: {}", truncate(&raw.to_string(), 200))),
    }
}

/// Version negotiation with a version the agent cannot support. initialization.mdx, "Version
/// Negotiation": "If the Agent supports the requested version, it **MUST** respond with the
/// same version. Otherwise, the Agent **MUST** respond with the latest version it supports."
/// `accepted` is what it answered when asked for the current version.
async fn version_negotiation(run: &mut Run, options: &Options, accepted: u64) {
    let agent = match spawn(options) {
        Ok(agent) => agent,
        Err(why) => {
            let why = format!("could not start: {why}");
            run.record("version-negotiation", Level::Must, NEGOTIATION, Outcome::Skip(why));
            return;
        }
    };
    let asked = u64::from(UNSUPPORTED_PROTOCOL_VERSION);
    // With v2's fields beside v1's: a client of a later version knows those too, and an agent
    // that also serves v2 must not fail the request for want of v2's required `info`.
    let params = v2::initialize_params_both(UNSUPPORTED_PROTOCOL_VERSION);
    let reply = agent.call("initialize", params, options.timeout).await;
    let outcome = match reply {
        Reply::Result(raw) => match decode_initialize(raw) {
            Err(why) => Outcome::Fail(format!("asked for {asked}: {why}")),
            Ok((response, _)) => {
                let answered = u64::from(response.protocol_version.0);
                if answered == asked {
                    Outcome::Fail(format!(
                        "asked for {asked}, a version no agent supports, the agent answered {answered}: it echoes the \
                         version asked for instead of answering the latest one it supports"
                    ))
                } else if answered < accepted {
                    Outcome::Fail(format!(
                        "asked for {asked}, the agent answered {answered}, yet it answered {accepted} when asked for \
                         {CURRENT_PROTOCOL_VERSION}: {answered} is not the latest version it supports"
                    ))
                } else if answered > LATEST_KNOWN_VERSION {
                    // A version acp-check does not know may well be the latest the agent supports.
                    Outcome::Inconclusive(format!(
                        "inconclusive: asked for {asked}, the agent answered {answered}, a version acp-check does not \
                         know (it knows up to {LATEST_KNOWN_VERSION}); whether the agent supports it cannot be checked"
                    ))
                } else {
                    Outcome::Pass(format!("asked for {asked}, the agent answered {answered}"))
                }
            }
        },
        // Not the answer the spec asks for: the rule quoted above wants a *response with the
        // latest version it supports*, and the next line leaves the decision to the client: "If
        // the Client does not support the version specified by the Agent in the `initialize`
        // response, the Client **SHOULD** close the connection and inform the user about it."
        // An error names no version to tell the user about, so it breaks the MUST: a failure.
        Reply::Error(e) => Outcome::Fail(format!(
            "asked for {asked}, the agent answered error {} ({}) instead of the latest version it supports",
            e.code,
            truncate(&e.message, 80)
        )),
        other => {
            Outcome::Fail(format!("asked for {asked}, initialize got {}", initialize_got(&other, options.timeout)))
        }
    };
    run.record("version-negotiation", Level::Must, NEGOTIATION, outcome);
    run.retire(agent).await;
}

/// The authentication methods the agent advertised (acp-check uses none of them).
pub(crate) struct Auth {
    methods: Vec<String>,
}

impl Auth {
    pub(crate) fn of(init: &Value) -> Self {
        let methods = init["authMethods"].as_array().map_or_else(Vec::new, |methods| {
            // v1 names the method `id`, v2 `methodId`.
            methods.iter().map(|m| m["id"].as_str().or(m["methodId"].as_str()).unwrap_or("?").to_owned()).collect()
        });
        Auth { methods }
    }

    /// Whether `reply` is the `auth_required` error (-32000, "Authentication is required before
    /// this operation can be performed" in the schema's `ErrorCode`): the spec lets an agent
    /// gate requests behind a login, and acp-check, which does not log in, cannot go further.
    ///
    /// Also with no `authMethods`: which methods an agent lists depends on what the client can
    /// run (a `terminal` method only for a client advertising `auth.terminal`, which acp-check
    /// does not), and no rule ties the error to a non-empty list; the user then logs in outside
    /// ACP.
    pub(crate) fn required_by(&self, reply: &Reply) -> bool {
        matches!(reply, Reply::Error(e) if i64::from(e.code) == AUTH_REQUIRED)
    }

    pub(crate) fn why(&self, method: &str) -> String {
        let methods = if self.methods.is_empty() {
            "no authMethods offered to this client".to_owned()
        } else {
            format!("authMethods: {}", self.methods.join(", "))
        };
        format!(
            "the agent requires authentication ({method} answered auth_required, {AUTH_REQUIRED}; {methods}); \
             acp-check does not authenticate"
        )
    }

    /// What the report's `auth_required` records for a stop at `method`.
    pub(crate) fn stop(&self, protocol: u8, method: &'static str) -> AuthStop {
        AuthStop { protocol, method, auth_methods: self.methods.clone() }
    }
}

/// Where a run stopped because the agent wants a login: the method answered `auth_required`
/// (or, in v2, the turn that ended with that error), and the methods the agent offered.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct AuthStop {
    pub protocol: u8,
    pub method: &'static str,
    #[serde(rename = "authMethods")]
    pub auth_methods: Vec<String>,
}

pub(crate) enum SessionError {
    /// The agent wants the client to authenticate first (see [`Auth::required_by`]).
    AuthRequired(String),
    Failed(String),
}

pub(crate) async fn new_session(
    agent: &Agent,
    cwd: &str,
    limit: Duration,
    auth: &Auth,
) -> Result<String, SessionError> {
    match agent.call("session/new", json!({"cwd": cwd, "mcpServers": []}), limit).await {
        Reply::Result(raw) => match raw["sessionId"].as_str() {
            Some(id) => Ok(id.to_owned()),
            None => Err(SessionError::Failed(format!(
                "the result has no string sessionId: {}",
                truncate(&raw.to_string(), 200)
            ))),
        },
        reply if auth.required_by(&reply) => Err(SessionError::AuthRequired(auth.why("session/new"))),
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

/// A process that is started but fails is retired into `run` all the same: what it wrote
/// counts in the final checks.
async fn start(run: &mut Run, options: &Options, cwd: &str) -> Result<Started, String> {
    start_offering(run, options, cwd, Offer::default()).await
}

/// [`start`], with the client offering `offer`.
async fn start_offering(run: &mut Run, options: &Options, cwd: &str, offer: Offer) -> Result<Started, String> {
    let agent = spawn_offering(options, offer)?;
    let (_, init) = match initialize(&agent, options.timeout).await {
        Ok(init) => init,
        Err(why) => {
            run.retire(agent).await;
            return Err(why);
        }
    };
    let auth = Auth::of(&init);
    match new_session(&agent, cwd, options.timeout, &auth).await {
        Ok(session) => Ok(Started { agent, init, session: Some(session), auth }),
        Err(SessionError::AuthRequired(_)) => Ok(Started { agent, init, session: None, auth }),
        Err(SessionError::Failed(why)) => {
            run.retire(agent).await;
            Err(why)
        }
    }
}

pub(crate) fn prompt_params(session: &str, text: &str) -> Value {
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

/// How the first prompt went.
enum Turned {
    /// Answered somehow (judged by `prompt-turn`).
    Ran,
    /// Refused with `auth_required`: why, for the checks that need a turn.
    AuthRequired(String),
}

async fn prompt_turn(run: &mut Run, agent: &Agent, session: &str, limit: Duration, auth: &Auth) -> Turned {
    let (updates_before, sent_before) = agent.observed(|o| (o.updates.len(), o.sent.len()));
    let started = Instant::now();
    let reply = agent
        .call("session/prompt", prompt_params(session, "Hello from acp-check. Please answer briefly."), limit)
        .await;
    let elapsed = started.elapsed().as_millis();
    // A session without a login, and turns that need one: the turn's checks cannot run.
    // What the session sent before the refusal is still judged by `session-update-shape`.
    let gated = auth.required_by(&reply).then(|| auth.why("session/prompt"));
    let failed = turn_failed(&reply);
    let outcome = match (&gated, stop_reason(&reply)) {
        (Some(why), _) => Outcome::Skip(why.clone()),
        (None, Ok(reason)) => Outcome::Pass(format!("stopReason {} after {elapsed} ms", reason.as_str())),
        (None, Err(why)) if failed => Outcome::Inconclusive(format!(
            "inconclusive: the turn could not run ({why} after {elapsed} ms), so whether a turn ends with a \
             stopReason could not be seen"
        )),
        (None, Err(why)) => Outcome::Fail(why),
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
        // Progress is what arrived once the prompt was on its way and before its answer.
        let during_turn = match o.last_sent("session/prompt", sent_before) {
            Some(prompt) => {
                let answer = o.answer_to(prompt).map(|a| a.seq);
                o.updates.iter().filter(|u| u.at >= prompt.at && answer.is_none_or(|a| u.seq < a)).count()
            }
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
    let outcome = if let Some(why) = &gated {
        Outcome::Skip(why.clone())
    } else if failed && during_turn == 0 {
        Outcome::Skip(format!("the turn could not run ({})", reply.describe()))
    } else if during_turn > 0 {
        Outcome::Pass(format!("{during_turn} update(s) during the turn"))
    } else if count > 0 {
        Outcome::Fail(format!("no session/update during the turn ({count} before the prompt was sent)"))
    } else {
        Outcome::Fail("no session/update during the turn".into())
    };
    run.record("prompt-streams-updates", Level::Should, STREAMS, outcome);
    match gated {
        Some(why) => Turned::AuthRequired(why),
        None => Turned::Ran,
    }
}

/// Whether a prompt was answered with an error that says the turn failed to run (its model
/// out of reach, say), not that the request was wrong or unknown. No rule forbids such an
/// answer outside cancellation (JSON-RPC lets any request fail): the turn's checks cannot tell.
fn turn_failed(reply: &Reply) -> bool {
    use acp_rpc::codes::{INVALID_PARAMS, INVALID_REQUEST, METHOD_NOT_FOUND, PARSE_ERROR};
    matches!(reply, Reply::Error(e) if ![PARSE_ERROR, INVALID_REQUEST, METHOD_NOT_FOUND, INVALID_PARAMS].contains(&e.code))
}

async fn cancel_turn(run: &mut Run, agent: &Agent, session: &str, limit: Duration) {
    agent.hold_permissions(true);
    let (before, sent_before) = agent.observed(|o| (o.updates.len(), o.sent.len()));
    let turn = agent.call_in_background(
        "session/prompt",
        prompt_params(session, "Please take your time and tell me a long story; I may cancel."),
        limit + CANCEL_BOUND,
    );
    // Cancel on the turn's first update, once it has ended, or after CANCEL_AFTER: a quiet
    // turn is cancelled while it thinks, not after it is over.
    let answered = |o: &Observed| o.last_sent("session/prompt", sent_before).and_then(|p| o.answer_to(p)).is_some();
    agent.wait_for(CANCEL_AFTER, |o| o.updates.len() > before || answered(o)).await;
    agent.notify("session/cancel", json!({"sessionId": session})).await;
    let sent = Instant::now();
    let reply = tokio::time::timeout(CANCEL_BOUND, turn).await;
    let outcome = match reply {
        Err(_) => Outcome::Fail(format!(
            "no answer to session/prompt within {} ms of session/cancel",
            CANCEL_BOUND.as_millis()
        )),
        Ok(Err(join)) => Outcome::Fail(format!("checker error: {join}")),
        Ok(Ok(reply)) => {
            let timing = cancel_timing(agent, sent_before, sent.elapsed());
            match (turn_failed(&reply), timing.after) {
                // The turn failed before the cancel went out: there was nothing to cancel.
                (true, None) => Outcome::Inconclusive(format!(
                    "inconclusive: the turn could not run ({}) and ended before session/cancel was written",
                    reply.describe()
                )),
                _ => judge_cancel(stop_reason(&reply), timing),
            }
        }
    };
    run.record("cancel", Level::Must, CANCEL, outcome);
    agent.hold_permissions(false);
}

/// When the cancelled turn's answer came, relative to the cancel.
#[derive(Clone, Copy, Debug)]
struct CancelTiming {
    /// How long after `session/cancel` was written the answer was read; `None` when it was
    /// read before (or the cancel never went out).
    after: Option<Duration>,
    /// Answers read within this long after the cancel may have been on their way before the
    /// agent could read it (see [`race_window`]).
    window: Duration,
}

/// Where the answer to the last `session/prompt` (sent after index `sent_before`) stands
/// relative to the `session/cancel` written after it. `elapsed` is the time since the cancel
/// was queued, the fallback should the answer's read time be unknown.
fn cancel_timing(agent: &Agent, sent_before: usize, elapsed: Duration) -> CancelTiming {
    // The writer records a message before it writes it: the cancel is on record if it went out.
    agent.observed(|o| {
        let window = race_window(o);
        let Some(cancel) = o.last_sent("session/cancel", sent_before) else {
            return CancelTiming { after: None, window };
        };
        let answered = o.last_sent("session/prompt", sent_before).and_then(|p| o.answer_to(p)).map(|a| a.at);
        let after = match answered {
            Some(at) => at.checked_duration_since(cancel.at),
            None => Some(elapsed),
        };
        CancelTiming { after, window }
    })
}

/// How long after the cancel was written an answer may still be one the agent wrote before it
/// could have read the cancel: twice the fastest round trip the agent showed on this
/// connection, within [MIN_RACE_WINDOW, MAX_RACE_WINDOW].
///
/// An answer still on its way when the cancel was written left the agent at most one trip out
/// before the cancel arrived one trip in, so it is read at most a round trip (both trips,
/// without the agent's own work) after the cancel was written. The fastest answer to any of
/// the checker's requests bounds that round trip from above; it is doubled, and at least
/// 100 ms, because the trips vary with scheduling on a loaded machine. Later than that, the
/// agent had the cancel in hand when it answered, and anything but `cancelled` breaks the rule.
pub(crate) fn race_window(o: &Observed) -> Duration {
    let fastest = o
        .sent
        .iter()
        .filter_map(|sent| Some(o.answer_to(sent)?.at.checked_duration_since(sent.at).unwrap_or_default()))
        .min();
    fastest.map_or(MIN_RACE_WINDOW, |rtt| (rtt * 2).clamp(MIN_RACE_WINDOW, MAX_RACE_WINDOW))
}

fn judge_cancel(stop: Result<StopReason, String>, timing: CancelTiming) -> Outcome {
    let window = timing.window.as_millis();
    match (stop, timing.after) {
        (Ok(StopReason::Cancelled), None) => {
            Outcome::Fail("the turn answered `cancelled` before session/cancel was sent".into())
        }
        (Ok(StopReason::Cancelled), Some(after)) => {
            Outcome::Pass(format!("stopReason cancelled {} ms after session/cancel", after.as_millis()))
        }
        // The answer was on the wire before the cancel: there was nothing left to cancel.
        (Ok(other), None) => Outcome::Inconclusive(format!(
            "inconclusive: the turn answered `{}` before session/cancel reached the agent (the answer was already \
             on the wire)",
            other.as_str()
        )),
        (Ok(other), Some(after)) if after < timing.window => Outcome::Inconclusive(format!(
            "inconclusive: the turn answered `{}` {} ms after session/cancel was written, within the {window} ms in \
             which an answer already on its way cannot be told from one that ignored the cancel",
            other.as_str(),
            after.as_millis()
        )),
        (Ok(other), Some(after)) => Outcome::Fail(format!(
            "the turn answered stopReason `{}` {} ms after session/cancel was written (more than the {window} ms an \
             answer already on its way could take), not `cancelled`",
            other.as_str(),
            after.as_millis()
        )),
        (Err(why), None) => Outcome::Fail(why),
        (Err(why), Some(_)) => {
            Outcome::Fail(format!("after session/cancel: {why} (a cancelled turn must answer stopReason `cancelled`)"))
        }
    }
}

/// Whether the agent ends when its input does. transports.mdx shows the end of a stdio
/// connection as the client closing the agent's stdin and then terminating the process; an
/// agent that outlives its input relies on the second step. No MUST says so, hence a SHOULD.
async fn exits_on_stdin_close(run: &mut Run, agent: &Agent, remote: bool) {
    let outcome = if remote {
        Outcome::Skip("a remote agent has no stdin: closing the connection is the client's doing".into())
    } else if let Some(how) = agent.exit() {
        Outcome::Skip(format!("the agent had already ended ({how})"))
    } else {
        let closed = Instant::now();
        match agent.close_stdin(STDIN_EXIT_BOUND).await {
            Some(how) => Outcome::Pass(format!("{how} {} ms after its stdin was closed", closed.elapsed().as_millis())),
            None => Outcome::Fail(format!(
                "still running {} ms after its stdin was closed (acp-check then terminated it)",
                STDIN_EXIT_BOUND.as_millis()
            )),
        }
    };
    run.record("exits-on-stdin-close", Level::Should, STDIN_EXIT, outcome);
}

/// Whether the agent sent a turn's output after the turn's answer, judged on everything the
/// process wrote (the updates after the last answer included).
///
/// prompt-turn.mdx, "Cancellation", is the one sentence on the order: "The Agent **MAY** send
/// `session/update` notifications with content or tool call updates after receiving the
/// `session/cancel` notification, but it **MUST** ensure that it does so before responding to the
/// `session/prompt` request." What holds for a cancelled turn, whose updates race the answer,
/// holds for any turn: the answer is its end ("4. Check for Completion": "If there are no
/// pending tool calls, the turn ends and the Agent **MUST** respond to the original
/// `session/prompt` request with a `StopReason`"), and its output comes before ("3. Agent
/// Reports Output"). Hence a MUST.
///
/// Only a turn's output counts: `available_commands_update`, `current_mode_update`,
/// `config_option_update`, `session_info_update` and `usage_update` describe the session and
/// may come at any time. An update counts as late only if it was read before the next prompt
/// was written: what comes after may be the next turn's.
fn turn_order(o: &Observed) -> Outcome {
    let prompts: Vec<&Sent> = o.sent.iter().filter(|s| s.method == "session/prompt").collect();
    let mut answered = 0;
    let mut late = Vec::new();
    for (n, prompt) in prompts.iter().enumerate() {
        let Some(answer) = o.answer_to(prompt) else { continue };
        answered += 1;
        let next = prompts.get(n + 1).map(|p| p.at);
        for update in &o.updates {
            let Ok(notification) = &update.decoded else { continue };
            if update.seq > answer.seq
                && next.is_none_or(|next| update.at < next)
                && prompt.session.as_deref() == Some(notification.session_id.0.as_str())
                && is_turn_output(&notification.update)
            {
                late.push(format!("`{}` after the answer to session/prompt #{}", update.tag(), n + 1));
            }
        }
    }
    match late.first() {
        _ if answered == 0 => Outcome::Skip("no session/prompt was answered".into()),
        None => Outcome::Pass(format!(
            "no message, thought, tool call or plan update after the answer, in {answered} turn(s)"
        )),
        Some(first) => Outcome::Fail(format!(
            "{} update(s) of a turn arrived after its answer (which ends the turn), before any next prompt: {first}",
            late.len()
        )),
    }
}

/// The updates that are a prompt turn's output.
fn is_turn_output(update: &SessionUpdate) -> bool {
    matches!(
        update,
        SessionUpdate::UserMessageChunk(_)
            | SessionUpdate::AgentMessageChunk(_)
            | SessionUpdate::AgentThoughtChunk(_)
            | SessionUpdate::ToolCall(_)
            | SessionUpdate::ToolCallUpdate(_)
            | SessionUpdate::Plan(_)
    )
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
    let Started { agent, auth, .. } = match start(run, options, cwd).await {
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
    let Started { agent, auth, .. } = match start(run, options, cwd).await {
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
    let answered = agent.wait_for(Duration::from_millis(300), |o| !o.unaddressed.is_empty()).await;
    let answers: Vec<(bool, Option<i64>)> =
        agent.observed(|o| o.unaddressed.iter().map(|a| (a.null_id, a.code)).collect());
    let outcome = match &survived {
        Ok(()) => Outcome::Pass("the agent still answers session/new after it".into()),
        Err(why) if agent.is_closed() => Outcome::Fail(format!("{why}; the agent is gone after `{{not json`")),
        Err(why) => Outcome::Fail(why.clone()),
    };
    run.record("malformed-line-survives", Level::Must, MALFORMED_SURVIVES, outcome);
    let outcome = judge_malformed_answer(answered, &answers);
    run.record("malformed-line-answer", Level::Should, MALFORMED_ANSWER, outcome);
    run.retire(agent).await;
    Ok(())
}

/// What the agent answered to `{not json`: its answers that name no request, as (whether the
/// id was `null` rather than missing, the error code).
fn judge_malformed_answer(answered: bool, answers: &[(bool, Option<i64>)]) -> Outcome {
    let parse_error = Some(i64::from(acp_rpc::codes::PARSE_ERROR));
    if answers.contains(&(true, parse_error)) {
        Outcome::Pass("-32700 with a null id".into())
    } else if answers.contains(&(false, parse_error)) {
        Outcome::Fail(
            "answered -32700 without an `id` member, which is no valid response: JSON-RPC asks for `\"id\": null` \
             when the request's id could not be read"
                .into(),
        )
    } else if let Some((null_id, code)) = answers.first().filter(|_| answered) {
        let id = if *null_id { "a null id" } else { "no `id` member" };
        let code = code.map_or("a result instead of an error".to_owned(), |c| format!("code {c}"));
        Outcome::Fail(format!("answered with {id} but {code}, not -32700"))
    } else {
        Outcome::Fail("the line was ignored (no -32700 answer)".into())
    }
}

async fn extension_method(run: &mut Run, options: &Options, cwd: &str) -> Result<(), String> {
    let Started { agent, auth, .. } = match start(run, options, cwd).await {
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

/// Notifications on a fresh process: `session/cancel` for a session that does not exist and for
/// one with no turn running, an unknown extension notification and an unknown one without the
/// `_` prefix. overview.mdx, "Error Handling": "Notifications never receive responses (success
/// or error)". A request follows, so that the agent has read them all when it answers; answers
/// to them are looked for in every process (see [`judge_notifications`]).
async fn notifications(run: &mut Run, options: &Options, cwd: &str) {
    let Started { agent, auth, session, .. } = match start(run, options, cwd).await {
        Ok(started) => started,
        Err(why) => {
            run.notifications = Some(Outcome::Skip(format!("could not start: {why}")));
            return;
        }
    };
    agent.notify("session/cancel", json!({"sessionId": UNKNOWN_SESSION})).await;
    if let Some(session) = &session {
        agent.notify("session/cancel", json!({"sessionId": session})).await;
    }
    agent.notify("_acp_check/notice", json!({"note": "an unknown extension notification"})).await;
    agent.notify("acp_check/notice", json!({"note": "an unknown notification"})).await;
    let trouble = match still_works(&agent, cwd, options.timeout, &auth).await {
        Err(why) if agent.is_closed() => {
            Some(Outcome::Fail(format!("{why}: the agent is gone after the notifications")))
        }
        Err(why) => Some(Outcome::Fail(format!("after the notifications, {why}"))),
        Ok(()) => None,
    };
    // An agent that handles notifications apart from requests may answer them a moment later.
    agent.wait_for(NOTIFICATION_GRACE, |o| !o.unrequested_answers().is_empty()).await;
    run.notifications = trouble;
    run.retire(agent).await;
}

/// Requests the agent is to refuse, on a fresh process (a new one should the agent die).
///
/// `invalid-params`: overview.mdx has every method follow JSON-RPC 2.0's error handling, whose
/// code for params that do not fit the method is -32602. A session without the `cwd` that
/// session-setup.mdx says "**MUST** be used for the session", or a turn on a prompt that is not
/// a list of content blocks, cannot be what the client asked for: a result pretends it is. An
/// error with another code is a warning.
///
/// `unknown-session`: a session id is what session/new (or load) handed out, "a unique
/// identifier for the conversation context" (session-setup.mdx); a result pretends a turn
/// happened in a session that does not exist. Yet no MUST asks for the error: the one sentence
/// on unknown sessions, in session-setup.mdx's "Closing a Session" (v1 and v2 alike), is that
/// an agent MAY answer session/close with an error when the session does not exist or is not
/// active. Hence a SHOULD, the lowest level acp-check reports, whose detail says so.
async fn invalid_requests(run: &mut Run, options: &Options, cwd: &str) {
    let mut current: Option<Started> = None;
    // (check, probe, method, params); `None` params need the session.
    let probes: [(&'static str, &str, &str, Option<Value>); 3] = [
        ("invalid-params", "session/new without cwd", "session/new", Some(json!({"mcpServers": []}))),
        ("invalid-params", "session/prompt with a string prompt", "session/prompt", None),
        (
            "unknown-session",
            "session/prompt for a session never created",
            "session/prompt",
            Some(prompt_params(UNKNOWN_SESSION, "Hello?")),
        ),
    ];
    let mut found: Vec<(&'static str, Outcome)> = Vec::new();
    for (check, probe, method, params) in probes {
        if current.as_ref().is_some_and(|started| started.agent.is_closed()) {
            run.retire(current.take().expect("checked").agent).await;
        }
        if current.is_none() {
            match start(run, options, cwd).await {
                Ok(started) => current = Some(started),
                Err(why) => {
                    found.push((check, Outcome::Skip(format!("{probe}: could not start: {why}"))));
                    continue;
                }
            }
        }
        let Started { agent, session, auth, .. } = current.as_ref().expect("started");
        let params = match (params, session) {
            (Some(params), _) => params,
            (None, Some(session)) => json!({"sessionId": session, "prompt": "Hello, as a plain string."}),
            (None, None) => {
                found.push((check, Outcome::Skip(format!("{probe}: {}", auth.why("session/new")))));
                continue;
            }
        };
        let reply = agent.call(method, params, options.timeout).await;
        let strict = check == "invalid-params";
        let outcome = match reply {
            reply if strict && auth.required_by(&reply) => Outcome::Skip(format!("{probe}: {}", auth.why(method))),
            Reply::Error(e) if !strict || e.code == acp_rpc::codes::INVALID_PARAMS => {
                match still_works(agent, cwd, options.timeout, auth).await {
                    Ok(()) => Outcome::Pass(format!("{probe}: error {}", e.code)),
                    Err(why) => Outcome::Fail(format!("{probe}: error {}, but {why}", e.code)),
                }
            }
            Reply::Error(e) => Outcome::Warn(format!(
                "{probe}: error {} ({}); invalid params should be answered -32602",
                e.code,
                truncate(&e.message, 80)
            )),
            Reply::Result(_) if strict => Outcome::Fail(format!("{probe}: {} instead of an error", reply.describe())),
            Reply::Result(_) => Outcome::Fail(format!(
                "{probe}: {} instead of an error (the spec does not require one: it only says, for \
                 session/close, that an agent MAY answer an error for a session that does not exist)",
                reply.describe()
            )),
            Reply::Timeout => Outcome::Fail(format!("{probe}: no answer in time")),
            Reply::Closed(how) => Outcome::Fail(format!("{probe}: no answer: {how}")),
        };
        found.push((check, outcome));
    }
    if let Some(started) = current {
        run.retire(started.agent).await;
    }
    for (check, level, rule) in
        [("invalid-params", Level::Must, INVALID_PARAMS), ("unknown-session", Level::Should, UNKNOWN_SESSION_RULE)]
    {
        let outcomes = found.iter().filter(|(c, _)| *c == check).map(|(_, outcome)| outcome);
        run.record(check, level, rule, worst(outcomes));
    }
}

/// The outcomes of several probes of one rule as one: the worst decides, and the details of
/// all are joined.
fn worst<'a>(outcomes: impl Iterator<Item = &'a Outcome>) -> Outcome {
    let mut rank = 0;
    let mut details = Vec::new();
    for outcome in outcomes {
        let (r, detail) = match outcome {
            Outcome::Pass(d) => (0, d),
            Outcome::Skip(d) => (1, d),
            Outcome::Inconclusive(d) => (2, d),
            Outcome::Warn(d) => (3, d),
            Outcome::Fail(d) => (4, d),
        };
        rank = rank.max(r);
        details.push(detail.as_str());
    }
    let detail = details.join("; ");
    match rank {
        0 => Outcome::Pass(detail),
        1 => Outcome::Skip(detail),
        2 => Outcome::Inconclusive(detail),
        3 => Outcome::Warn(detail),
        _ => Outcome::Fail(detail),
    }
}

/// Whether any process answered a notification, or anything else the checker never asked.
fn judge_notifications(observed: &[Observed]) -> Outcome {
    let notified: usize = observed.iter().map(|o| o.sent.iter().filter(|s| s.id.is_none()).count()).sum();
    match unrequested_answers(observed) {
        Some(what) => Outcome::Fail(what),
        None if notified == 0 => Outcome::Skip("no notification was sent".into()),
        None => Outcome::Pass(format!("{notified} notification(s) sent, none answered")),
    }
}

/// The answers to no request over all the processes, described, or `None`.
fn unrequested_answers(observed: &[Observed]) -> Option<String> {
    let mut count = 0;
    let mut first = None;
    for o in observed {
        let found = o.unrequested_answers();
        count += found.len();
        if let (None, Some((at, line))) = (&first, found.first()) {
            let after = match o.notification_before(*at) {
                Some(sent) => format!("read after the notification `{}`", sent.method),
                None => "read before any notification was sent".to_owned(),
            };
            first = Some(format!("{line} ({after})"));
        }
    }
    let first = first?;
    Some(format!("{count} response(s) that answer no request of the checker's; the first: {first}"))
}

/// Turns in which the client offers what an agent may use, on fresh processes: everything
/// (fs.readTextFile, fs.writeTextFile and terminal, confined to the session's directory), then
/// fs.readTextFile alone, so that a write or a command is a call without its capability.
/// Each asks for a read, a write and a command; whether the agent makes those calls is its
/// business, how it makes them is judged at the end with every other process's calls.
async fn client_runs(run: &mut Run, options: &Options, cwd: &str) {
    if let Err(e) = std::fs::write(Path::new(cwd).join(FIXTURE_FILE), FIXTURE_TEXT) {
        run.client_notes.push(format!("cannot write {FIXTURE_FILE}: {e}"));
    }
    let root = Path::new(cwd).canonicalize().unwrap_or_else(|_| PathBuf::from(cwd));
    let everything = Offer { read_text_file: true, write_text_file: true, terminal: true, root: Some(root.clone()) };
    let reads_only = Offer { read_text_file: true, root: Some(root), ..Offer::default() };
    for offer in [everything, reads_only] {
        let offered = offer.describe();
        let Started { agent, session, auth, .. } = match start_offering(run, options, cwd, offer).await {
            Ok(started) => started,
            Err(why) => {
                run.client_notes.push(format!("offering {offered}: could not start: {why}"));
                continue;
            }
        };
        match session {
            None => run.client_notes.push(auth.why("session/new")),
            Some(session) => {
                let reply = agent.call("session/prompt", prompt_params(&session, CLIENT_PROMPT), options.timeout).await;
                match stop_reason(&reply) {
                    Ok(_) => run.client_turns += 1,
                    Err(_) if auth.required_by(&reply) => run.client_notes.push(auth.why("session/prompt")),
                    Err(why) => run.client_notes.push(format!("offering {offered}: {why}")),
                }
            }
        }
        run.retire(agent).await;
    }
}

/// Calls to `fs/*` or `terminal/*` methods whose capability the client had not advertised.
/// file-system.mdx: "If `readTextFile` or `writeTextFile` is `false` or not present, the Agent
/// **MUST NOT** attempt to call the corresponding filesystem method"; terminals.mdx: "If
/// `terminal` is `false` or not present, the Agent **MUST NOT** attempt to call any terminal
/// methods."
fn judge_capabilities(observed: &[Observed]) -> Outcome {
    let calls = || observed.iter().flat_map(|o| o.client_calls.iter().map(move |c| (o, c)));
    let unoffered: Vec<String> = calls()
        .filter(|(_, c)| !c.offered)
        .map(|(o, c)| format!("{} (the client advertised: {})", c.method, o.offer.describe()))
        .collect();
    let offered = calls().count() - unoffered.len();
    match unoffered.first() {
        Some(first) => Outcome::Fail(format!(
            "{} request(s) to methods whose capability the client did not advertise; the first: {first}",
            unoffered.len()
        )),
        None if offered == 0 => Outcome::Pass("no fs/* or terminal/* request".into()),
        None => Outcome::Pass(format!("{offered} fs/* or terminal/* request(s), each with its capability advertised")),
    }
}

/// The calls of methods starting with `prefix` that the client had offered: their flaws, and
/// sessions the agent never handed out on that connection.
fn judge_calls(observed: &[Observed], prefix: &str) -> Outcome {
    let mut counts: Vec<(&str, usize)> = Vec::new();
    let mut flaws = Vec::new();
    let mut failed = Vec::new();
    for o in observed {
        for call in o.client_calls.iter().filter(|c| c.offered && c.method.starts_with(prefix)) {
            match counts.iter_mut().find(|(m, _)| *m == call.method) {
                Some((_, n)) => *n += 1,
                None => counts.push((&call.method, 1)),
            }
            let stranger = call.session.as_ref().filter(|s| !o.sessions.contains(s));
            if let Some(why) = &call.malformed {
                flaws.push(format!("{}: {why}", call.method));
            } else if let Some(session) = stranger {
                flaws.push(format!("{}: sessionId {session:?} is not a session of this connection", call.method));
            } else if let Some(why) = &call.failed {
                failed.push(format!("{}: {why}", call.method));
            }
        }
    }
    let total: usize = counts.iter().map(|(_, n)| n).sum();
    let made = counts.iter().map(|(m, n)| format!("{m} ×{n}")).collect::<Vec<_>>().join(", ");
    match flaws.first() {
        Some(first) => Outcome::Fail(format!("{} of {total} call(s) malformed; the first: {first}", flaws.len())),
        None if total == 0 => {
            Outcome::Pass(format!("no {prefix}* call was made although the client offered them (nothing to check)"))
        }
        None => {
            // Well-formed calls that could not be served (a file that does not exist) are no
            // flaw, but worth a word.
            let failed = match failed.first() {
                Some(first) => format!("; {} answered with an error, the first: {first}", failed.len()),
                None => String::new(),
            };
            Outcome::Pass(format!("{total} call(s), all well-formed: {made}{failed}"))
        }
    }
}

/// The offered calls refused as outside the session's directory. session-setup.mdx, "Working
/// Directory": the cwd "**MUST** be part of the session's effective root set", and "This root
/// set **SHOULD** serve as a boundary for tool operations on the file system."
fn judge_within_root(observed: &[Observed]) -> Outcome {
    let calls: Vec<_> = observed.iter().flat_map(|o| &o.client_calls).filter(|c| c.offered).collect();
    let outside: Vec<String> =
        calls.iter().filter_map(|c| Some(format!("{}: {}", c.method, c.outside.as_deref()?))).collect();
    match outside.first() {
        Some(first) => Outcome::Fail(format!("{} call(s) refused; the first: {first}", outside.len())),
        None if calls.is_empty() => Outcome::Pass("no fs/* or terminal/* call (nothing to check)".into()),
        None => Outcome::Pass(format!("{} call(s), none outside the session's directory", calls.len())),
    }
}

/// Terminals not released by the end of the turn that created it (or, made outside any turn,
/// by the end of the connection). terminals.mdx: "The Agent **MUST** release the terminal using
/// `terminal/release` when it's no longer needed." When that is, the spec leaves open; a turn
/// ends once its tool calls are done ("4. Check for Completion" in prompt-turn.mdx), so a
/// terminal still held after it is one acp-check reports, as a SHOULD.
fn judge_released(observed: &[Observed]) -> Outcome {
    let mut created = 0;
    let mut kept = Vec::new();
    for o in observed {
        let turns: Vec<(Instant, Option<Instant>)> = o
            .sent
            .iter()
            .filter(|s| s.method == "session/prompt")
            .map(|s| (s.at, o.answer_to(s).map(|a| a.at)))
            .collect();
        for terminal in &o.terminals {
            created += 1;
            let turn = turns.iter().rev().find(|(sent, _)| *sent <= terminal.created);
            let ended = turn.and_then(|(_, answered)| *answered);
            let released_in_time = match (terminal.released, ended) {
                (None, _) => false,
                (Some(released), Some(ended)) => released <= ended,
                (Some(_), None) => true,
            };
            if !released_in_time {
                let when = if terminal.released.is_some() { "released after its turn ended" } else { "never released" };
                kept.push(format!("{} was {when}", terminal.id));
            }
        }
    }
    match kept.first() {
        Some(first) => Outcome::Fail(format!("{} of {created} terminal(s) not released in time: {first}", kept.len())),
        None if created == 0 => Outcome::Pass("no terminal was created (nothing to check)".into()),
        None => Outcome::Pass(format!("{created} terminal(s), each released before its turn ended")),
    }
}

async fn capabilities(run: &mut Run, options: &Options, cwd: &str) -> Result<(), String> {
    let mut current: Option<Started> = None;
    for (id, method, rule) in CAPABILITIES {
        if current.as_ref().is_some_and(|started| started.agent.is_closed()) {
            let started = current.take().expect("checked");
            run.retire(started.agent).await;
        }
        if current.is_none() {
            match start(run, options, cwd).await {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::{Answer, Sent, Unaddressed};

    fn timing(after_ms: Option<u64>, window_ms: u64) -> CancelTiming {
        CancelTiming { after: after_ms.map(Duration::from_millis), window: Duration::from_millis(window_ms) }
    }

    fn is(outcome: &Outcome) -> &'static str {
        match outcome {
            Outcome::Pass(_) => "pass",
            Outcome::Fail(_) => "fail",
            Outcome::Warn(_) => "warn",
            Outcome::Inconclusive(_) => "inconclusive",
            Outcome::Skip(_) => "skip",
        }
    }

    #[test]
    fn a_cancel_is_judged_by_when_the_answer_came() {
        let end_turn = || Ok(StopReason::EndTurn);
        // Answered before the cancel was written: nothing was left to cancel.
        assert_eq!(is(&judge_cancel(end_turn(), timing(None, 100))), "inconclusive");
        // Within the window: it may have been on its way.
        assert_eq!(is(&judge_cancel(end_turn(), timing(Some(40), 100))), "inconclusive");
        // Well after: the agent had the cancel and ignored it.
        let late = judge_cancel(end_turn(), timing(Some(450), 100));
        assert_eq!(is(&late), "fail");
        let Outcome::Fail(detail) = late else { unreachable!() };
        assert!(detail.contains("`end_turn` 450 ms after session/cancel was written"), "{detail}");
        assert_eq!(is(&judge_cancel(Ok(StopReason::Cancelled), timing(Some(450), 100))), "pass");
        assert_eq!(is(&judge_cancel(Ok(StopReason::Cancelled), timing(None, 100))), "fail");
        assert_eq!(is(&judge_cancel(Err("error -32603".into()), timing(Some(5), 100))), "fail");
    }

    #[test]
    fn the_race_window_follows_the_fastest_round_trip_within_bounds() {
        let t0 = Instant::now();
        let mut o = Observed::default();
        let mut exchange = |id: i64, sent_ms: u64, answered_ms: u64| {
            let at = t0 + Duration::from_millis(sent_ms);
            o.sent.push(Sent { method: "x".into(), id: Some(json!(id)), session: None, at });
            let at = t0 + Duration::from_millis(answered_ms);
            o.responses.push(Answer { id: json!(id), at, seq: 0, code: None, batch: None });
        };
        exchange(1, 0, 900);
        exchange(2, 1000, 1300);
        assert_eq!(race_window(&o), Duration::from_millis(600));
        o.sent.push(Sent { method: "y".into(), id: Some(json!(3)), session: None, at: t0 });
        o.responses.push(Answer { id: json!(3), at: t0 + Duration::from_millis(2), seq: 0, code: None, batch: None });
        assert_eq!(race_window(&o), MIN_RACE_WINDOW);
        let slow = Observed {
            sent: vec![Sent { method: "z".into(), id: Some(json!(1)), session: None, at: t0 }],
            responses: vec![Answer { id: json!(1), at: t0 + Duration::from_secs(5), seq: 0, code: None, batch: None }],
            ..Observed::default()
        };
        assert_eq!(race_window(&slow), MAX_RACE_WINDOW);
        assert_eq!(race_window(&Observed::default()), MIN_RACE_WINDOW);
    }

    #[test]
    fn answers_to_notifications_are_found_and_a_parse_error_is_not_one() {
        let t0 = Instant::now();
        let ms = |n: u64| t0 + Duration::from_millis(n);
        let null_answer = |at| Unaddressed { null_id: true, code: Some(-32700), line: "{null}".into(), at };
        let mut o = Observed::default();
        o.sent.push(Sent { method: "session/new".into(), id: Some(json!(1)), session: None, at: ms(0) });
        o.responses.push(Answer { id: json!(1), at: ms(5), seq: 0, code: None, batch: None });
        // The malformed line's answer is its own.
        o.injected.push(ms(10));
        o.unaddressed.push(null_answer(ms(12)));
        assert_eq!(o.unrequested_answers(), Vec::new());
        assert_eq!(is(&judge_notifications(std::slice::from_ref(&o))), "skip");
        o.sent.push(Sent { method: "session/cancel".into(), id: None, session: None, at: ms(20) });
        assert_eq!(is(&judge_notifications(std::slice::from_ref(&o))), "pass");
        // A second null-id answer, after a notification, is an answer to it.
        o.unaddressed.push(null_answer(ms(25)));
        // As is one with an id the checker never used.
        o.responses.push(Answer { id: json!("n1"), at: ms(30), seq: 1, code: None, batch: None });
        assert_eq!(
            o.unrequested_answers().into_iter().map(|(_, line)| line).collect::<Vec<_>>(),
            ["{null}", "a response with id \"n1\""]
        );
        let Outcome::Fail(detail) = judge_notifications(&[o]) else { panic!("not a failure") };
        assert_eq!(
            detail,
            "2 response(s) that answer no request of the checker's; the first: {null} (read after the notification \
             `session/cancel`)"
        );
    }

    #[test]
    fn a_terminal_counts_as_released_only_before_its_turn_ends() {
        let t0 = Instant::now();
        let ms = |n: u64| t0 + Duration::from_millis(n);
        let terminal = |id: &str, created, released| crate::serve::Terminal {
            id: id.into(),
            session: "s".into(),
            created,
            released,
            output: String::new(),
            truncated: false,
        };
        let mut o = Observed::default();
        o.sent.push(Sent { method: "session/prompt".into(), id: Some(json!(1)), session: None, at: ms(0) });
        o.responses.push(Answer { id: json!(1), at: ms(100), seq: 0, code: None, batch: None });
        o.terminals.push(terminal("in_time", ms(10), Some(ms(90))));
        assert_eq!(is(&judge_released(std::slice::from_ref(&o))), "pass");
        o.terminals.push(terminal("late", ms(20), Some(ms(150))));
        let Outcome::Fail(detail) = judge_released(&[o]) else { panic!("not a failure") };
        assert_eq!(detail, "1 of 2 terminal(s) not released in time: late was released after its turn ended");
    }
}
