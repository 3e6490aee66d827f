//! The protocol v2 suite (`--protocol 2`, and `--protocol auto` when the agent serves v2), and
//! the version probes `auto` starts with. The judgments themselves are in `judge.rs`.
//!
//! Two processes: one for the handshake and a session's life (a turn, a cancelled turn, the
//! baseline methods, closing an idle session, then closing one in the middle of a turn), one
//! for batches and `$/cancel_request`. Each `initialize` carries both versions' fields, as a
//! client that negotiates (`ProtocolRouter::negotiate`) sends it.

pub mod judge;
pub mod work;

use std::time::{Duration, Instant};

use acp_rpc::acp_types::v2::{AgentCapabilities, InitializeResponse};
use serde::Serialize;
use serde_json::{Value, json};

use crate::checks::{
    Auth, CANCEL_BOUND, Level, NOTIFICATION_GRACE, Options, Outcome, Run, SessionError, UNKNOWN_SESSION,
    initialize_got, initialize_params, new_session, no_answer_within, prompt_params, race_window,
};
use crate::serve::Offer;
use crate::shape;
use crate::wire::{Agent, Observed, Reply, Sent, truncate};
use judge::{EndWatch, Turn, state_of, stop_reason_of};

/// How long late updates of a turn are waited for once it has reported idle.
const AFTER_IDLE_GRACE: Duration = Duration::from_millis(100);
/// How long the cancel waits, once the turn has started, for a permission request to be
/// pending (so that the cancel meets one) before it goes out anyway.
const CANCEL_WAIT: Duration = Duration::from_millis(500);
/// The ids of the checker's batched requests: strings, which its own connection never uses.
const BATCH_IDS: [&str; 2] = ["acp-check-batch-1", "acp-check-batch-2"];
/// The id of the request the checker cancels with `$/cancel_request`.
const CANCELLED_ID: &str = "acp-check-cancelled-1";

// ---- the checks -----------------------------------------------------------------------------

const CHECKS: &[(&str, Level, &str)] = &[
    (
        "serves-v2",
        Level::Must,
        "asked for protocol version 2 (v1's fields beside v2's, as a negotiating client sends them), the agent \
         answers 2",
    ),
    (
        "v2-initialize",
        Level::Must,
        "initialize is answered with a v2 InitializeResponse: protocolVersion, the required `info` (name, version), \
         authMethods as v2 describes them",
    ),
    (
        "v2-capabilities",
        Level::Must,
        "capabilities are v2 support markers under `capabilities`: objects ({} = supported, omitted or null = not), \
         no v1 booleans, no v1 capability fields",
    ),
    ("v2-session-new", Level::Must, "session/new is answered with a sessionId"),
    (
        "v2-prompt-accepted",
        Level::Must,
        "session/prompt is answered with a result as soon as the prompt is accepted: before the turn's output, and \
         before the idle state_update that ends the turn",
    ),
    (
        "v2-prompt-message-id",
        Level::Must,
        "the session/prompt answer carries the user message's messageId (required by the schema; the official SDK \
         clients fail the prompt without it)",
    ),
    (
        "v2-user-message",
        Level::Must,
        "once it accepts a prompt, the agent reports it as a `user_message` (or `user_message_chunk`s) with a \
         messageId of its own",
    ),
    ("v2-running", Level::Must, "when the turn's work starts, the agent sends a `state_update` with state `running`"),
    ("v2-idle-stop-reason", Level::Must, "the turn ends with an idle `state_update` that carries its stopReason"),
    (
        "v2-idle-ends-turn",
        Level::Should,
        "nothing more of the turn's messages comes after the idle state_update that ended it",
    ),
    (
        "v2-cancel",
        Level::Must,
        "after session/cancel, the turn ends with an idle state_update with stopReason `cancelled` (within 2 s)",
    ),
    (
        "v2-cancel-updates-before-idle",
        Level::Must,
        "a cancelled turn's updates (of its messages and tool calls) all come before the idle state_update that \
         reports the cancellation",
    ),
    (
        "v2-cancel-permission",
        Level::Should,
        "a permission request pending at the cancel, which the client answers `cancelled`, is no approval: its tool \
         call is not run",
    ),
    (
        "v2-methods-answered",
        Level::Must,
        "what the agent advertises is implemented (not -32601): with `capabilities.session` the baseline \
         session/list, session/resume and session/close; session/delete with `session.delete`; auth/login and \
         auth/logout with a non-empty authMethods",
    ),
    ("v2-close", Level::Must, "session/close of an idle session is answered with a result"),
    (
        "v2-close-cancels",
        Level::Must,
        "session/close during a turn cancels it as session/cancel does: an idle state_update with stopReason \
         `cancelled` (within 2 s), and the close is answered",
    ),
    (
        "v2-update-shape",
        Level::Must,
        "every session/update decodes as a v2 UpdateSessionNotification of a session of the connection, as sent \
         (no v1 update kinds)",
    ),
    ("v2-message-ids", Level::Must, "every message update and chunk (user, agent, thought) carries a messageId"),
    (
        "v2-upserts",
        Level::Should,
        "upserts keyed by id come in order: a tool_call_update with a title creates a tool call before chunks are \
         appended to it, a finished tool call is not reopened, a messageId names messages of one role",
    ),
    (
        "v2-requires-action",
        Level::Should,
        "while a permission request waits, the agent reports `requires_action`, and `running` again when the work \
         resumes",
    ),
    (
        "v2-batch",
        Level::Should,
        "a v2 connection takes JSON-RPC batches: each request of a batch gets its own response, by id, the \
         responses together in one array (transports.mdx words both as SHOULDs)",
    ),
    (
        "v2-batch-empty",
        Level::Must,
        "an empty batch `[]` is answered with a single -32600 error with a null id, not an array",
    ),
    (
        "v2-batch-notifications",
        Level::Must,
        "a batch of notifications gets no answer (no response, no empty array), and the agent keeps working",
    ),
    (
        "v2-cancel-request",
        Level::Must,
        "a request the client cancels with `$/cancel_request` still gets its response: a result, or error -32800",
    ),
    (
        "v2-tool-call-cancel",
        Level::Must,
        "a tool call that advertises `capabilities.cancel` (in a --work-prompt turn) is cancelled by \
         tool_call/cancel: -32602 for an id the agent never made, a result for its own, then a final status, and the \
         turn is not ended `cancelled` by it",
    ),
    (
        "v2-terminal-cancel",
        Level::Must,
        "a terminal that advertises `capabilities.cancel` (in a --work-prompt turn) is cancelled by terminal/cancel: \
         -32602 for an id the agent never made, a result for its own, then a terminal_update with its exitStatus, and \
         the turn is not ended `cancelled` by it",
    ),
    (
        "v2-cancel-capability-withdrawn",
        Level::Should,
        "a cancelled tool call or terminal stops advertising `capabilities.cancel` once it reports its final status \
         or exit",
    ),
    (
        "v2-background-work",
        Level::Must,
        "background work, once a session reports it, is on every later state_update of the session; it lists tool \
         calls and terminals announced before, each once, and drops one only after its final status or exitStatus",
    ),
    ("v2-stdout-json-only", Level::Must, "the agent writes only JSON-RPC messages, or batches of them, on stdout"),
];

/// Records the outcome of the v2 check `id`.
fn record(run: &mut Run, id: &'static str, outcome: Outcome) {
    let (id, level, rule) = CHECKS.iter().find(|(c, ..)| *c == id).copied().expect("a v2 check");
    run.record(id, level, rule, outcome);
}

/// Skips each v2 check not recorded yet.
fn skip_rest(run: &mut Run, why: &str) {
    for (id, ..) in CHECKS {
        if !run.checks.iter().any(|c| c.id == *id) {
            record(run, id, Outcome::Skip(why.to_owned()));
        }
    }
}

/// Records every v2 check as inconclusive, for a suite that did not run because whether the
/// agent serves v2 is unknown (its probe timed out): not a skip, which would read as settled.
pub fn unchecked(run: &mut Run, detail: &str) {
    run.protocol = 2;
    for (id, ..) in CHECKS {
        record(run, id, Outcome::Inconclusive(detail.to_owned()));
    }
}

// ---- version probes -------------------------------------------------------------------------

/// What an `initialize` asking for one version got, on a process of its own.
#[derive(Clone, Debug, Serialize)]
pub struct Probe {
    pub asked: u16,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub answered: Option<u64>,
    /// Why there is no version: an error, no answer, a result without one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// No answer came within the time limit: the version may be served all the same.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub timed_out: bool,
}

impl Probe {
    /// What `reply` says, `limit` being how long it was waited for.
    fn of(asked: u16, reply: &Reply, limit: Duration) -> Probe {
        let failed = |error| Probe { asked, answered: None, error: Some(error), timed_out: false };
        match reply {
            Reply::Result(raw) => match raw["protocolVersion"].as_u64() {
                Some(answered) => Probe { asked, answered: Some(answered), error: None, timed_out: false },
                None => failed(format!("a result without a protocolVersion: {}", truncate(&raw.to_string(), 120))),
            },
            Reply::Timeout => Probe { timed_out: true, ..failed(no_answer_within(limit)) },
            other => failed(other.describe()),
        }
    }

    pub fn describe(&self) -> String {
        let got = match (self.answered, &self.error) {
            (Some(v), _) => format!("answered {v}"),
            (None, Some(e)) => e.clone(),
            (None, None) => "no answer".into(),
        };
        format!("asked for {}: {got}", self.asked)
    }
}

/// The `initialize` params asking for `version` with both versions' fields: v1's
/// `clientCapabilities` and `clientInfo` beside v2's `capabilities` and `info`.
pub fn initialize_params_both(version: u16) -> Value {
    let mut params = initialize_params(u64::from(version), &Offer::default());
    params["info"] = json!({"name": "acp-check", "version": env!("CARGO_PKG_VERSION")});
    params["capabilities"] = json!({});
    params
}

/// Asks a fresh process for `asked` (v2's fields too when it is 2); `Err` only when the agent
/// cannot be started.
pub async fn probe(options: &Options, asked: u16) -> Result<Probe, String> {
    let (agent, params) = if asked >= 2 {
        (Agent::spawn_v2(&options.launch), initialize_params_both(asked))
    } else {
        (Agent::spawn(&options.launch, Offer::default()), initialize_params(u64::from(asked), &Offer::default()))
    };
    let agent = agent.map_err(|e| format!("cannot start `{}`: {e}", options.launch.command.join(" ")))?;
    let reply = agent.call("initialize", params, options.timeout).await;
    agent.close().await;
    Ok(Probe::of(asked, &reply, options.timeout))
}

// ---- the suite ------------------------------------------------------------------------------

/// What the v2 suite found about the agent.
#[derive(Debug, Default, Serialize)]
pub struct Facts {
    pub info: Option<Value>,
    pub capabilities: Option<Value>,
    pub auth_methods: Option<Value>,
}

/// Runs the v2 checks; what `initialize` asking for 2 got. `Err` when the agent cannot be
/// started at all.
pub async fn run(run: &mut Run, options: &Options, cwd: &str) -> Result<Probe, String> {
    run.protocol = 2;
    let mut observed = Vec::new();
    let probe = lifecycle(run, options, cwd, &mut observed).await?;
    if probe.answered == Some(2) {
        batches(run, options, &mut observed).await;
    }
    // Also when initialize failed, which a line that is not JSON-RPC may explain; not for an
    // agent that answered another version, which is not judged by v2's rules at all.
    if probe.answered.is_none_or(|v| v == 2) {
        let outcome = match crate::checks::non_json_lines(&observed) {
            None => Outcome::Pass(format!("every line of the {} process(es) was JSON-RPC", observed.len())),
            Some(what) => Outcome::Fail(what),
        };
        record(run, "v2-stdout-json-only", outcome);
    }
    let why = if probe.answered.is_some() { "the agent does not serve protocol v2" } else { "initialize failed" };
    skip_rest(run, why);
    Ok(probe)
}

/// A fresh process for the v2 suite, initialized; `Err` says why not (with the process, when
/// there is one, so that what it wrote is judged too).
async fn start(options: &Options) -> Result<Agent, (Option<Agent>, String)> {
    let agent = Agent::spawn_v2(&options.launch)
        .map_err(|e| (None, format!("cannot start `{}`: {e}", options.launch.command.join(" "))))?;
    match agent.call("initialize", initialize_params_both(2), options.timeout).await {
        Reply::Result(raw) if raw["protocolVersion"] == 2 => Ok(agent),
        other => {
            let why = format!("initialize asking for 2 got {}", initialize_got(&other, options.timeout));
            Err((Some(agent), why))
        }
    }
}

/// The handshake and a session's life, on one process.
async fn lifecycle(run: &mut Run, options: &Options, cwd: &str, observed: &mut Vec<Observed>) -> Result<Probe, String> {
    let limit = options.timeout;
    let agent = Agent::spawn_v2(&options.launch)
        .map_err(|e| format!("cannot start `{}`: {e}", options.launch.command.join(" ")))?;
    let reply = agent.call("initialize", initialize_params_both(2), limit).await;
    let probe = Probe::of(2, &reply, limit);
    let raw = match (&reply, probe.answered) {
        (Reply::Result(raw), Some(2)) => raw.clone(),
        (_, Some(other)) => {
            let outcome = Outcome::Fail(format!(
                "asked for protocol version 2, the agent answered {other}: it does not serve v2"
            ));
            record(run, "serves-v2", outcome);
            observed.push(agent.close().await);
            return Ok(probe);
        }
        (reply, None) => {
            let got = initialize_got(reply, limit);
            record(run, "serves-v2", Outcome::Fail(format!("initialize asking for 2 got {got}")));
            observed.push(agent.close().await);
            return Ok(probe);
        }
    };
    record(run, "serves-v2", Outcome::Pass("asked for 2, answered 2".into()));
    record(run, "v2-initialize", judge_initialize(&raw));
    record(run, "v2-capabilities", judge_capabilities(&raw));
    run.v2 = Some(Facts {
        info: raw.get("info").cloned(),
        capabilities: raw.get("capabilities").cloned(),
        auth_methods: raw.get("authMethods").cloned(),
    });

    let auth = Auth::of(&raw);
    let session = match new_session(&agent, cwd, limit, &auth).await {
        Ok(session) => {
            record(run, "v2-session-new", Outcome::Pass(format!("sessionId {session}")));
            session
        }
        Err(error) => {
            let why = match error {
                SessionError::AuthRequired(why) => {
                    run.stopped_at_auth(auth.stop(2, "session/new"));
                    record(run, "v2-session-new", Outcome::Skip(why.clone()));
                    why
                }
                SessionError::Failed(why) => {
                    record(run, "v2-session-new", Outcome::Fail(why));
                    "session/new failed".to_owned()
                }
            };
            // What needs no session is still checked.
            let methods = methods_answered(&agent, &raw, cwd, limit).await;
            observed.push(agent.close().await);
            record(run, "v2-methods-answered", methods);
            judge_updates(run, observed);
            skip_session_checks(run, &why);
            return Ok(probe);
        }
    };

    // A turn, allowed whatever it asks.
    let first = agent.observed(|o| o.sent.len());
    let started = Instant::now();
    let call = agent.call_in_background(
        "session/prompt",
        prompt_params(&session, "Hello from acp-check. Please answer briefly."),
        limit,
    );
    let watch = EndWatch::default();
    let ended = agent.wait_for(limit, |o| ended_after(o, &watch, &session, first)).await;
    let first_reply = call.await.unwrap_or_else(|e| Reply::Closed(format!("checker error: {e}")));
    let waited = started.elapsed();
    if ended {
        tokio::time::sleep(AFTER_IDLE_GRACE).await;
    }

    // A turn cancelled while (with luck) a permission request waits.
    let second = agent.observed(|o| o.sent.len());
    agent.hold_permissions(true);
    let call = agent.call_in_background(
        "session/prompt",
        prompt_params(&session, "Please take your time and tell me a long story; I may cancel."),
        limit + CANCEL_BOUND,
    );
    let watch = EndWatch::default();
    wait_until_busy(&agent, &watch, &session, second, limit).await;
    agent.notify("session/cancel", json!({"sessionId": session})).await;
    let ended = agent.wait_for(CANCEL_BOUND, |o| ended_after(o, &watch, &session, second)).await;
    if ended {
        tokio::time::sleep(AFTER_IDLE_GRACE).await;
    }
    agent.hold_permissions(false);
    let _ = tokio::time::timeout(limit, call).await;

    let methods = methods_answered(&agent, &raw, cwd, limit).await;

    let close_reply = agent.call("session/close", json!({"sessionId": session}), limit).await;

    // A second session, closed in the middle of a turn.
    let third = agent.observed(|o| o.sent.len());
    let closing = match new_session(&agent, cwd, limit, &auth).await {
        Ok(other) => {
            agent.hold_permissions(true);
            let call = agent.call_in_background(
                "session/prompt",
                prompt_params(&other, "Please take your time and tell me a long story; I may close the session."),
                limit + CANCEL_BOUND,
            );
            let watch = EndWatch::default();
            wait_until_busy(&agent, &watch, &other, third, limit).await;
            let close = agent.call_in_background("session/close", json!({"sessionId": other}), limit);
            // Held permission requests are answered `cancelled` once the close is on its way, as
            // after session/cancel (not before it, or the turn might end on them first).
            agent.wait_for(limit, |o| o.first_sent("session/close", third).is_some() || o.exit.is_some()).await;
            agent.release_permissions();
            agent.wait_for(CANCEL_BOUND, |o| ended_after(o, &watch, &other, third)).await;
            let close_reply = close.await.unwrap_or_else(|e| Reply::Closed(format!("checker error: {e}")));
            agent.hold_permissions(false);
            let _ = tokio::time::timeout(limit, call).await;
            Ok(close_reply)
        }
        Err(SessionError::AuthRequired(why) | SessionError::Failed(why)) => Err(why),
    };

    // The work the client can cancel, on sessions of its own.
    let found = work::cancel_work(&agent, &options.work_prompts, cwd, &auth, limit).await;
    for kind in [work::Kind::ToolCall, work::Kind::Terminal] {
        record(run, kind.check(), found.outcome(kind, &options.work_prompts));
    }
    record(run, "v2-cancel-capability-withdrawn", found.withdrawal(&options.work_prompts));

    let o = agent.close().await;
    if o.updates.iter().any(judge::stopped_for_auth) {
        run.stopped_at_auth(auth.stop(2, "session/prompt"));
    }
    judge_turns(run, &o, first, waited, &first_reply, second);
    record(run, "v2-methods-answered", methods);
    record(run, "v2-close", judge_close(&close_reply));
    let outcome = match closing {
        Ok(reply) => judge_close_cancels(&o, third, &reply),
        Err(why) => Outcome::Skip(format!("a second session/new failed: {why}")),
    };
    record(run, "v2-close-cancels", outcome);
    observed.push(o);
    judge_updates(run, observed);
    Ok(probe)
}

/// The checks of a session that could not be created.
fn skip_session_checks(run: &mut Run, why: &str) {
    for id in [
        "v2-prompt-accepted",
        "v2-prompt-message-id",
        "v2-user-message",
        "v2-running",
        "v2-idle-stop-reason",
        "v2-idle-ends-turn",
        "v2-cancel",
        "v2-cancel-updates-before-idle",
        "v2-cancel-permission",
        "v2-close",
        "v2-close-cancels",
        "v2-tool-call-cancel",
        "v2-terminal-cancel",
        "v2-cancel-capability-withdrawn",
    ] {
        record(run, id, Outcome::Skip(why.to_owned()));
    }
}

/// Whether the turn of the prompt written after index `from` has ended (see `judge::turn_end`),
/// or the agent has: nothing more will come either way.
fn ended_after(o: &Observed, watch: &EndWatch, session: &str, from: usize) -> bool {
    o.exit.is_some() || o.first_sent("session/prompt", from).is_some_and(|p| watch.ended(o, session, p.at))
}

/// Waits until the turn of the prompt written after index `from` has started (answered, or an
/// update of its session read), then until a permission request of the session waits or the
/// turn has ended, at most [`CANCEL_WAIT`] more: the moment to cancel or close it.
async fn wait_until_busy(agent: &Agent, watch: &EndWatch, session: &str, from: usize, limit: Duration) {
    let started = |o: &Observed| {
        o.exit.is_some()
            || o.first_sent("session/prompt", from).is_some_and(|p| {
                o.answer_to(p).is_some()
                    || o.updates.iter().any(|u| u.at >= p.at && judge::session_of(u) == Some(session))
            })
    };
    agent.wait_for(limit, started).await;
    let waiting = |o: &Observed| {
        o.permissions.iter().any(|p| p.session.as_deref() == Some(session) && p.answered.is_none())
            || ended_after(o, watch, session, from)
    };
    agent.wait_for(CANCEL_WAIT, waiting).await;
}

/// The judgments of the first two turns, on the whole record of their process.
fn judge_turns(run: &mut Run, o: &Observed, first: usize, waited: Duration, reply: &Reply, second: usize) {
    match o.first_sent("session/prompt", first).filter(|p| p.at < sent_at(o, second)).and_then(|p| Turn::of(o, p)) {
        Some(turn) => {
            record(run, "v2-prompt-accepted", judge::judge_accepted(o, &turn, reply));
            record(run, "v2-prompt-message-id", judge::judge_message_id(o, &turn, reply));
            record(run, "v2-user-message", judge::judge_user_message(o, &turn));
            record(run, "v2-running", judge::judge_running(o, &turn));
            record(run, "v2-idle-stop-reason", judge::judge_idle(o, &turn, waited, reply));
            record(run, "v2-idle-ends-turn", judge::judge_after_idle(o, &turn, false));
        }
        None => {
            let why = Outcome::Fail("the session/prompt was not written (the connection was closed)".into());
            for id in ["v2-prompt-accepted", "v2-user-message", "v2-running", "v2-idle-stop-reason"] {
                record(run, id, why.clone());
            }
            record(run, "v2-prompt-message-id", Outcome::Skip("no prompt".into()));
            record(run, "v2-idle-ends-turn", Outcome::Skip("no prompt".into()));
        }
    }
    let prompt = o.first_sent("session/prompt", second);
    let cancel = o.first_sent("session/cancel", second);
    match (prompt.and_then(|p| Turn::of(o, p)), cancel) {
        (Some(turn), Some(cancel)) => {
            let outcome = judge_cancel_idle(o, &turn, cancel, race_window(o), "session/cancel");
            record(run, "v2-cancel", outcome);
            record(run, "v2-cancel-updates-before-idle", judge::judge_after_idle(o, &turn, true));
            record(run, "v2-cancel-permission", judge::judge_cancelled_permissions(o, cancel));
        }
        _ => {
            let why = Outcome::Fail("the cancelled turn's prompt or cancel was not written".into());
            record(run, "v2-cancel", why);
            record(run, "v2-cancel-updates-before-idle", Outcome::Skip("no cancelled turn".into()));
            record(run, "v2-cancel-permission", Outcome::Skip("no cancelled turn".into()));
        }
    }
}

/// When the message at index `n` of `o.sent` was written (far in the future when there is none).
fn sent_at(o: &Observed, n: usize) -> Instant {
    o.sent.get(n).map_or_else(|| Instant::now() + Duration::from_secs(3600), |s| s.at)
}

/// Whether a turn ended `cancelled` because of `cause` (session/cancel or session/close),
/// judged by when its idle came, as v1's cancel check judges the answer (see
/// `checks::judge_cancel`): an idle read before the cause was written, or within the race
/// window after it, may have been on its way before the agent could know.
fn judge_cancel_idle(o: &Observed, turn: &Turn, cause: &Sent, window: Duration, what: &str) -> Outcome {
    let Some(end) = turn.idle.map(|i| &o.updates[turn.updates[i]]) else {
        let states: Vec<&str> = turn.updates.iter().filter_map(|&i| state_of(&o.updates[i])).collect();
        return Outcome::Fail(format!(
            "no idle state_update ended the turn within {} ms of {what} (states seen: {})",
            CANCEL_BOUND.as_millis(),
            if states.is_empty() { "none".into() } else { states.join(", ") }
        ));
    };
    let after = end.at.checked_duration_since(cause.at);
    if judge::stopped_for_auth(end) {
        // The turn was refused for want of a login: there was no work to cancel.
        let when = if after.is_some() { "after" } else { "before" };
        return Outcome::Skip(format!(
            "the agent requires authentication: the turn ended {when} {what} with stopReason `error` and \
             auth_required ({}); acp-check does not authenticate",
            crate::checks::AUTH_REQUIRED
        ));
    }
    let reason = stop_reason_of(end);
    match (reason, after) {
        (Some("cancelled"), None) => Outcome::Fail(format!("the turn reported `cancelled` before {what} was sent")),
        (Some("cancelled"), Some(after)) if after > CANCEL_BOUND => Outcome::Fail(format!(
            "idle with stopReason `cancelled` only {} ms after {what}, more than {} ms",
            after.as_millis(),
            CANCEL_BOUND.as_millis()
        )),
        (Some("cancelled"), Some(after)) => {
            Outcome::Pass(format!("idle with stopReason `cancelled` {} ms after {what}", after.as_millis()))
        }
        (reason, None) => Outcome::Inconclusive(format!(
            "inconclusive: the turn ended (stopReason {}) before {what} was written",
            reason.unwrap_or("none")
        )),
        (reason, Some(after)) if after < window => Outcome::Inconclusive(format!(
            "inconclusive: the turn ended (stopReason {}) {} ms after {what} was written, within the {} ms in which \
             an update already on its way cannot be told from one that ignored it",
            reason.unwrap_or("none"),
            after.as_millis(),
            window.as_millis()
        )),
        (reason, Some(after)) => Outcome::Fail(format!(
            "the turn ended with stopReason {} {} ms after {what} was written, not `cancelled`",
            reason.map_or("none".to_owned(), |r| format!("`{r}`")),
            after.as_millis()
        )),
    }
}

fn judge_close(reply: &Reply) -> Outcome {
    match reply {
        Reply::Result(_) => Outcome::Pass(format!("answered with {}", reply.describe())),
        reply if reply.is_method_not_found() => {
            Outcome::Fail("session/close answers -32601: it is a baseline method of v2".into())
        }
        reply => Outcome::Fail(format!("session/close of an idle session got {}", reply.describe())),
    }
}

fn judge_close_cancels(o: &Observed, from: usize, close_reply: &Reply) -> Outcome {
    let (Some(prompt), Some(close)) = (o.first_sent("session/prompt", from), o.first_sent("session/close", from))
    else {
        return Outcome::Fail("the turn's prompt or session/close was not written".into());
    };
    let Some(turn) = Turn::of(o, prompt) else { return Outcome::Fail("the prompt names no session".into()) };
    let ended = judge_cancel_idle(o, &turn, close, race_window(o), "session/close");
    match (ended, close_reply) {
        (Outcome::Pass(detail), Reply::Result(_)) => Outcome::Pass(format!("{detail}; the close answered")),
        (Outcome::Pass(detail), reply) => Outcome::Fail(format!("{detail}, but the close got {}", reply.describe())),
        (other, _) => other,
    }
}

/// The judgments over every update of the suite's processes.
fn judge_updates(run: &mut Run, observed: &[Observed]) {
    let all: Vec<&Observed> = observed.iter().collect();
    record(run, "v2-update-shape", judge::judge_update_shape(&all));
    record(run, "v2-message-ids", judge::judge_message_ids(&all));
    record(run, "v2-upserts", judge::judge_upserts(&all));
    record(run, "v2-requires-action", judge::judge_requires_action(&all));
    record(run, "v2-background-work", work::judge_background(&all));
}

/// `v2-initialize`: the answer as a v2 `InitializeResponse`, its capabilities left to
/// `v2-capabilities`.
fn judge_initialize(raw: &Value) -> Outcome {
    let mut rest = raw.clone();
    if let Some(object) = rest.as_object_mut() {
        object.remove("capabilities");
    }
    match serde_json::from_value::<InitializeResponse>(rest.clone()) {
        Err(e) => Outcome::Fail(format!("not a v2 InitializeResponse: {e}: {}", truncate(&raw.to_string(), 200))),
        Ok(response) => match shape::first_difference_as(&rest, &response) {
            Some(difference) => Outcome::Fail(format!("initialize result {difference}")),
            None => {
                let methods = response.auth_methods.as_ref().map_or(0, Vec::len);
                Outcome::Pass(format!(
                    "agent {} {}; {methods} auth method(s)",
                    response.info.name, response.info.version
                ))
            }
        },
    }
}

/// v1 capability names, which v2 dropped or moved.
const V1_CAPABILITIES: &[(&str, &str)] = &[
    ("loadSession", "gone with session/load (session/resume replays)"),
    ("promptCapabilities", "now `session.prompt`"),
    ("mcpCapabilities", "now `session.mcp`"),
    ("sessionCapabilities", "now `session`"),
];

/// `v2-capabilities`: every marker an object; no v1 booleans or names.
fn judge_capabilities(raw: &Value) -> Outcome {
    let mut fails = Vec::new();
    let mut warns = Vec::new();
    let caps = raw.get("capabilities").filter(|c| !c.is_null());
    match (raw.get("agentCapabilities"), caps) {
        (Some(_), None) => fails.push(
            "v1's `agentCapabilities` instead of v2's `capabilities`: a v2 client finds no capability, not even the \
             session surface"
                .to_owned(),
        ),
        (Some(_), Some(_)) => {
            warns.push("a v1 `agentCapabilities` beside `capabilities` (v2 clients ignore it)".into())
        }
        _ => {}
    }
    match caps {
        None if fails.is_empty() => {
            return Outcome::Warn(
                "no `capabilities`: the agent advertises no session surface, so a v2 client calls no session method"
                    .into(),
            );
        }
        None => {}
        Some(object @ Value::Object(_)) => {
            let mut booleans = Vec::new();
            markers(object, "capabilities", &mut booleans, &mut warns);
            if !booleans.is_empty() {
                fails.push(format!(
                    "{} v1-style boolean(s) where v2 has support markers, objects ({{}} = supported, omitted or null = \
                     not), which a v2 client does not read from a boolean: {}",
                    booleans.len(),
                    booleans.join(", ")
                ));
            }
        }
        Some(other) => fails.push(format!("`capabilities` is {other}, not an object")),
    }
    if fails.is_empty() {
        if let Some(caps) = caps {
            // The lenient decode drops what it cannot read: compare (after the checks above, which
            // say more about booleans and v1 names).
            if let Ok(decoded) = serde_json::from_value::<AgentCapabilities>(caps.clone()) {
                if let Some(difference) = shape::first_difference_as(caps, &decoded) {
                    fails.push(format!("capabilities {}", difference.replacen("params", "capabilities", 1)));
                }
            }
        }
    }
    let session = caps.and_then(|c| c.get("session")).is_some_and(|s| !s.is_null());
    let advertised = if session { "the session surface advertised" } else { "no session surface advertised" };
    match (fails.first(), warns.first()) {
        (Some(_), _) => Outcome::Fail(fails.join("; ")),
        (None, Some(_)) => Outcome::Warn(format!("{advertised}; {}", warns.join("; "))),
        (None, None) => Outcome::Pass(format!(
            "{advertised}: {}",
            truncate(&caps.map_or(Value::Null, Value::clone).to_string(), 160)
        )),
    }
}

/// Walks a capabilities object: collects the booleans (`path = value`) and warns of v1 names;
/// `_meta` is the agent's own.
fn markers(value: &Value, path: &str, booleans: &mut Vec<String>, warns: &mut Vec<String>) {
    let Some(object) = value.as_object() else { return };
    for (key, value) in object {
        if key == "_meta" {
            continue;
        }
        let at = format!("{path}.{key}");
        if let Some((_, instead)) = V1_CAPABILITIES.iter().find(|(name, _)| name == key) {
            if !value.is_boolean() {
                warns.push(format!("`{at}` is a v1 name ({instead}); v2 clients ignore it"));
            }
        }
        if path == "capabilities.session" && matches!(key.as_str(), "list" | "resume" | "close") {
            warns.push(format!("`{at}` is a v1 marker: v2's baseline includes session/{key} without one"));
        }
        match value {
            Value::Bool(b) => booleans.push(format!("`{at}` = {b}")),
            Value::Object(_) => markers(value, &at, booleans, warns),
            _ => {}
        }
    }
}

/// `v2-methods-answered`: the advertised methods are there. Probes with side effects are made
/// harmless: session/resume and session/delete name a session that does not exist, and
/// auth/login and auth/logout get params of the wrong shape (an array), which an agent that
/// implements them refuses (-32602) without logging anybody in or out.
async fn methods_answered(agent: &Agent, init: &Value, cwd: &str, limit: Duration) -> Outcome {
    let caps = &init["capabilities"];
    let session = !caps["session"].is_null();
    let mut probes: Vec<(&str, Value, &str)> = Vec::new();
    if session {
        probes.push(("session/list", json!({}), "capabilities.session"));
        probes.push(("session/resume", json!({"sessionId": UNKNOWN_SESSION, "cwd": cwd}), "capabilities.session"));
        if !caps["session"]["delete"].is_null() {
            probes.push(("session/delete", json!({"sessionId": UNKNOWN_SESSION}), "capabilities.session.delete"));
        }
    }
    if init["authMethods"].as_array().is_some_and(|m| !m.is_empty()) {
        probes.push(("auth/login", json!([0, 0, 0]), "authMethods"));
        probes.push(("auth/logout", json!([0, 0, 0]), "authMethods"));
    }
    if probes.is_empty() {
        return Outcome::Pass(
            "neither `capabilities.session` nor authMethods advertised: no method to check (nothing to check)".into(),
        );
    }
    let mut said = Vec::new();
    let mut missing = Vec::new();
    for (method, params, because) in probes {
        let reply = agent.call(method, params, limit).await;
        match &reply {
            reply if reply.is_method_not_found() => {
                missing.push(format!("{method} answers -32601 ({because} advertised)"))
            }
            Reply::Timeout | Reply::Closed(_) => missing.push(format!("{method}: {}", reply.describe())),
            Reply::Error(e) => said.push(format!("{method}: error {}", e.code)),
            Reply::Result(_) => said.push(format!("{method}: a result")),
        }
    }
    let checked_elsewhere = if session { "; session/new, prompt, cancel and close: see their checks" } else { "" };
    match missing.first() {
        None => Outcome::Pass(format!("{}{checked_elsewhere}", said.join("; "))),
        Some(_) => Outcome::Fail(missing.join("; ")),
    }
}

// ---- batches --------------------------------------------------------------------------------

/// The batch checks, and `$/cancel_request`, on a process of their own.
async fn batches(run: &mut Run, options: &Options, observed: &mut Vec<Observed>) {
    let limit = options.timeout;
    let agent = match start(options).await {
        Ok(agent) => agent,
        Err((agent, why)) => {
            if let Some(agent) = agent {
                observed.push(agent.close().await);
            }
            for id in ["v2-batch", "v2-batch-empty", "v2-batch-notifications", "v2-cancel-request"] {
                record(run, id, Outcome::Skip(format!("on a fresh process, {why}")));
            }
            return;
        }
    };
    let gone = |o: &Observed| o.exit.is_some();

    // Over Streamable HTTP the remote-transport RFD has batches refused (501) before they
    // reach the agent; WebSocket carries them like stdio.
    let http = options.launch.url.as_deref().is_some_and(|u| u.starts_with("http://") || u.starts_with("https://"));
    if http {
        for id in ["v2-batch", "v2-batch-empty", "v2-batch-notifications"] {
            record(run, id, Outcome::Skip("Streamable HTTP carries no batches (the remote-transport RFD: 501)".into()));
        }
    }

    // Two requests.
    let before = agent.observed(|o| o.unaddressed.len());
    if !http {
        let batch = json!([
            {"jsonrpc": "2.0", "id": BATCH_IDS[0], "method": "session/list", "params": {}},
            {"jsonrpc": "2.0", "id": BATCH_IDS[1], "method": "_acp_check/ping", "params": {}},
        ]);
        agent.inject_line(&batch.to_string()).await;
        let answered = |o: &Observed| BATCH_IDS.iter().all(|id| o.answer(&json!(id)).is_some());
        agent.wait_for(limit, |o| answered(o) || o.unaddressed.len() > before || gone(o)).await;
        let outcome = agent.observed(|o| judge_batch(o, before, limit));
        record(run, "v2-batch", outcome);

        // An empty batch.
        let before = agent.observed(|o| (o.unaddressed.len(), o.batches.len()));
        agent.inject_line("[]").await;
        agent.wait_for(limit, |o| o.unaddressed.len() > before.0 || o.batches.len() > before.1 || gone(o)).await;
        let outcome = agent.observed(|o| judge_empty_batch(o, before, limit));
        record(run, "v2-batch-empty", outcome);

        // Notifications only, then a request: once it is answered, the agent has read them.
        let before = agent.observed(|o| (o.unaddressed.len(), o.batches.len(), o.responses.len()));
        let batch = json!([
            {"jsonrpc": "2.0", "method": "_acp_check/notice", "params": {"note": "an unknown extension notification"}},
            {"jsonrpc": "2.0", "method": "session/cancel", "params": {"sessionId": UNKNOWN_SESSION}},
        ]);
        agent.inject_line(&batch.to_string()).await;
        let after = agent.call("session/list", json!({}), limit).await;
        let answered_more = |o: &Observed| o.unaddressed.len() > before.0 || o.batches.len() > before.1;
        agent.wait_for(NOTIFICATION_GRACE, answered_more).await;
        let outcome = agent.observed(|o| judge_notification_batch(o, before, &after));
        record(run, "v2-batch-notifications", outcome);
    }

    // A request, cancelled at once (cancellation.mdx): answered all the same.
    let request = json!({"jsonrpc": "2.0", "id": CANCELLED_ID, "method": "session/list", "params": {}});
    agent.inject_line(&request.to_string()).await;
    let cancel = json!({"jsonrpc": "2.0", "method": "$/cancel_request", "params": {"requestId": CANCELLED_ID}});
    agent.inject_line(&cancel.to_string()).await;
    agent.wait_for(limit, |o| o.answer(&json!(CANCELLED_ID)).is_some() || gone(o)).await;
    let outcome = agent.observed(|o| judge_cancel_request(o, limit));
    record(run, "v2-cancel-request", outcome);
    observed.push(agent.close().await);
}

/// `v2-cancel-request`: cancellation.mdx lets the receiver of `$/cancel_request` cancel or not,
/// but "MUST send one of these responses for the original request": a valid result, or -32800.
fn judge_cancel_request(o: &Observed, limit: Duration) -> Outcome {
    match o.answer(&json!(CANCELLED_ID)) {
        Some(answer) => match answer.code {
            None => Outcome::Pass("session/list, cancelled at once, was answered with a result".into()),
            Some(-32800) => Outcome::Pass("session/list, cancelled at once, was answered -32800 (cancelled)".into()),
            // Refused before it ran: whether a cancelled request still gets its response cannot
            // be seen on a request that never started.
            Some(crate::checks::AUTH_REQUIRED) => Outcome::Skip(format!(
                "the agent requires authentication: session/list answered auth_required ({}); acp-check does not \
                 authenticate",
                crate::checks::AUTH_REQUIRED
            )),
            Some(code) => Outcome::Warn(format!(
                "session/list, cancelled at once, was answered with error {code}: a cancelled request gets a result \
                 or -32800"
            )),
        },
        None => Outcome::Fail(match &o.exit {
            Some(how) => format!("session/list, cancelled with $/cancel_request, got no answer: the agent {how}"),
            None => format!(
                "session/list, cancelled with $/cancel_request, got no answer within {} ms: a cancelled request \
                 still gets its response",
                limit.as_millis()
            ),
        }),
    }
}

fn judge_batch(o: &Observed, unaddressed_before: usize, limit: Duration) -> Outcome {
    let answers: Vec<_> = BATCH_IDS.iter().map(|id| o.answer(&json!(id))).collect();
    let refused = o.unaddressed[unaddressed_before..].iter().find(|a| a.code == Some(-32600));
    match (answers[0], answers[1]) {
        (Some(a), Some(b)) if a.batch.is_some() && a.batch == b.batch => {
            Outcome::Pass("both requests answered, together in one array".into())
        }
        (Some(a), Some(b)) => {
            let how = if a.batch.is_none() && b.batch.is_none() { "each on a line of its own" } else { "apart" };
            Outcome::Warn(format!("both requests answered, but {how}: JSON-RPC answers a batch with one array"))
        }
        (None, None) if refused.is_some() => Outcome::Fail(format!(
            "the batch was refused as a whole with {}: a v2 connection on stdio takes batch arrays and answers each \
             request in them (the official SDKs refuse batches this way, so batches do not reach them; v1.7.0's \
             transports.mdx has no such refusal)",
            refused.map_or(String::new(), |r| r.line.clone())
        )),
        (Some(_), None) | (None, Some(_)) => {
            let id = if answers[0].is_some() { BATCH_IDS[1] } else { BATCH_IDS[0] };
            Outcome::Fail(format!("request {id:?} of the batch got no answer within {} ms", limit.as_millis()))
        }
        (None, None) => Outcome::Fail(match &o.exit {
            Some(how) => format!("no answer to the batch: the agent {how}"),
            None => format!("neither request of the batch was answered within {} ms", limit.as_millis()),
        }),
    }
}

fn judge_empty_batch(o: &Observed, (unaddressed, batches): (usize, usize), limit: Duration) -> Outcome {
    if let Some(array) = o.batches.get(batches) {
        return Outcome::Fail(format!(
            "answered with an array ({} entr{}): an empty batch gets one error object, not an array",
            array.entries.len(),
            if array.entries.len() == 1 { "y" } else { "ies" }
        ));
    }
    match o.unaddressed.get(unaddressed) {
        Some(answer) if answer.null_id && answer.code == Some(-32600) => {
            Outcome::Pass("a single -32600 error with a null id".into())
        }
        Some(answer) if !answer.null_id => Outcome::Fail(format!(
            "answered without an `id` member (JSON-RPC asks for `\"id\": null`): {}",
            answer.line
        )),
        Some(answer) => Outcome::Fail(format!(
            "answered {}, not -32600: {}",
            answer.code.map_or("without an error code".to_owned(), |c| format!("error {c}")),
            answer.line
        )),
        None => Outcome::Fail(match &o.exit {
            Some(how) => format!("no answer: the agent {how}"),
            None => format!("no answer within {} ms", limit.as_millis()),
        }),
    }
}

fn judge_notification_batch(
    o: &Observed,
    (unaddressed, batches, responses): (usize, usize, usize),
    after: &Reply,
) -> Outcome {
    let asked: Vec<&Value> = o.sent.iter().filter_map(|s| s.id.as_ref()).collect();
    let mut answered: Vec<String> = o.unaddressed[unaddressed..].iter().map(|a| a.line.clone()).collect();
    answered
        .extend(o.batches[batches..].iter().filter(|b| b.entries.is_empty()).map(|_| "an empty array `[]`".to_owned()));
    answered.extend(
        o.responses[responses..]
            .iter()
            .filter(|a| !asked.contains(&&a.id))
            .map(|a| format!("a response with id {}", a.id)),
    );
    if let Some(first) = answered.first() {
        return Outcome::Fail(format!(
            "{} answer(s) to a batch of notifications, which get none; the first: {first}",
            answered.len()
        ));
    }
    match after {
        Reply::Closed(how) => Outcome::Fail(format!("after a batch of notifications, {how}")),
        Reply::Timeout => Outcome::Fail("after a batch of notifications, session/list got no answer in time".into()),
        _ => Outcome::Pass("no answer to a batch of 2 notifications, and a request after it was answered".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checks::Versions;
    use crate::wire::{Answer, Update};

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
    fn capabilities_are_judged_as_v2_markers() {
        let ok = json!({"capabilities": {"session": {"prompt": {"image": {}}, "delete": null, "_meta": {"x": true}}}});
        assert_eq!(is(&judge_capabilities(&ok)), "pass");
        let v1 = json!({"agentCapabilities": {"loadSession": true}});
        let Outcome::Fail(detail) = judge_capabilities(&v1) else { panic!() };
        assert!(detail.starts_with("v1's `agentCapabilities` instead of v2's `capabilities`"), "{detail}");
        let renamed = json!({"capabilities": {"session": {"list": {}}, "promptCapabilities": {"image": {}}}});
        let Outcome::Warn(detail) = judge_capabilities(&renamed) else { panic!() };
        assert!(detail.contains("`capabilities.session.list` is a v1 marker"), "{detail}");
        assert!(detail.contains("`capabilities.promptCapabilities` is a v1 name (now `session.prompt`)"), "{detail}");
        assert_eq!(is(&judge_capabilities(&json!({}))), "warn", "no session surface at all");
        let Outcome::Fail(detail) = judge_capabilities(&json!({"capabilities": {"session": {"mcp": {"http": 1}}}}))
        else {
            panic!()
        };
        assert!(detail.contains("capabilities.session.mcp.http"), "{detail}");
    }

    #[test]
    fn a_cancel_is_judged_by_when_the_idle_came() {
        let t0 = Instant::now();
        let ms = |n: u64| t0 + Duration::from_millis(n);
        let turn_with = |stop: &str, idle_ms: u64| {
            let mut o = Observed::default();
            let at = ms(0);
            o.sent.push(Sent { method: "session/prompt".into(), id: Some(json!(1)), session: Some("s".into()), at });
            o.responses.push(Answer { id: json!(1), at: ms(1), seq: 0, code: None, batch: None });
            for (n, (update, at)) in [
                (json!({"sessionUpdate": "state_update", "state": "running"}), ms(2)),
                (json!({"sessionUpdate": "state_update", "state": "idle", "stopReason": stop}), ms(idle_ms)),
            ]
            .into_iter()
            .enumerate()
            {
                let params = json!({"sessionId": "s", "update": update});
                o.updates.push(Update { decoded: Err(String::new()), params, at, seq: n + 1 });
            }
            o
        };
        let cancel = Sent { method: "session/cancel".into(), id: None, session: Some("s".into()), at: ms(50) };
        let window = Duration::from_millis(100);
        let judge = |o: &Observed| {
            let turn = Turn::of(o, &o.sent[0]).unwrap();
            judge_cancel_idle(o, &turn, &cancel, window, "session/cancel")
        };
        assert_eq!(is(&judge(&turn_with("cancelled", 80))), "pass");
        assert_eq!(is(&judge(&turn_with("cancelled", 10))), "fail", "cancelled before the cancel");
        assert_eq!(is(&judge(&turn_with("end_turn", 10))), "inconclusive", "over before the cancel");
        assert_eq!(is(&judge(&turn_with("end_turn", 120))), "inconclusive", "within the race window");
        let Outcome::Fail(detail) = judge(&turn_with("end_turn", 400)) else { panic!() };
        assert_eq!(
            detail,
            "the turn ended with stopReason `end_turn` 350 ms after session/cancel was written, not `cancelled`"
        );
        let Outcome::Fail(detail) = judge(&turn_with("cancelled", 2_500)) else { panic!() };
        assert!(detail.contains("only 2450 ms after session/cancel"), "{detail}");
    }

    #[test]
    fn the_versions_served_follow_the_answers() {
        let probe = |asked, answered| Probe { asked, answered, error: None, timed_out: false };
        assert_eq!(Versions::of(vec![probe(2, Some(2)), probe(1, Some(1))]).served, [1, 2]);
        // Asked for 2, a v1 agent answers 1: it serves 1.
        assert_eq!(Versions::of(vec![probe(2, Some(1)), probe(1, Some(1))]).served, [1]);
        // Asked for 1, a v2-only agent answers 2 (the latest it supports): 2 only.
        assert_eq!(Versions::of(vec![probe(2, Some(2)), probe(1, Some(2))]).served, [2]);
        let versions = Versions::of(vec![probe(2, None), probe(1, Some(7))]);
        assert!(versions.served.is_empty());
        assert_eq!(versions.describe(), "none found (asked for 2: no answer; asked for 1: answered 7)");
    }

    #[test]
    fn a_probe_that_times_out_leaves_its_version_unknown() {
        let limit = Duration::from_millis(1500);
        let (timed_out, one) = (Probe::of(2, &Reply::Timeout, limit), Probe::of(1, &Reply::Timeout, limit));
        assert!(timed_out.timed_out);
        assert_eq!(timed_out.describe(), "asked for 2: no answer within the --timeout-ms limit (1500 ms)");
        let both = Versions::of(vec![timed_out.clone(), one]);
        assert!(both.unknown(1) && both.unknown(2));
        assert_eq!(
            both.describe(),
            "none found (asked for 2: no answer within the --timeout-ms limit (1500 ms); asked for 1: no answer \
             within the --timeout-ms limit (1500 ms)); the probes could not tell whether it serves 1 or 2"
        );
        // Asked for 1, the agent answered 1: version 2 alone is unknown.
        let answered = Probe::of(1, &Reply::Result(json!({"protocolVersion": 1})), limit);
        let versions = Versions::of(vec![timed_out.clone(), answered]);
        assert!(!versions.unknown(1) && versions.unknown(2));
        assert!(
            versions.describe().ends_with("; the probes could not tell whether it serves 2"),
            "{}",
            versions.describe()
        );
        // Asked for 1, the agent answered 2 (its latest): it serves 2, and that is known.
        let latest = Probe::of(1, &Reply::Result(json!({"protocolVersion": 2})), limit);
        assert!(!Versions::of(vec![timed_out, latest]).unknown(2));
        // An error is an answer: nothing is unknown.
        let refused = Probe::of(2, &Reply::Closed("the agent exited with status 1".into()), limit);
        assert!(!refused.timed_out && !Versions::of(vec![refused]).unknown(2));
    }
}
