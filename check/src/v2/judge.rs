//! The protocol v2 judgments: pure functions over what the tap recorded of one process (its
//! `session/update`s, the answers, what the checker wrote), so that each can be tested on a
//! hand-made record. The suite that drives the agent is in `mod.rs`.
//!
//! A v2 turn is read off the updates of its session: it starts when its `session/prompt` was
//! written and ends with the first idle `state_update` that either carries a stop reason or
//! follows a `running` / `requires_action` of that turn (a bare idle right after
//! `session/new`, which the official Rust SDK sends, ends nothing).

use std::cell::Cell;
use std::collections::HashMap;
use std::time::{Duration, Instant};

use acp_rpc::acp_types::v2::{
    IdleStateUpdateStopReason as StopReason, Nullable, SessionUpdate, ToolCallStatus, UpdateSessionNotification,
};
use acp_rpc::v2::SessionState;
use acp_rpc::v2::session::Role;
use serde_json::Value;

use crate::checks::Outcome;
use crate::shape;
use crate::wire::{Observed, Reply, Sent, Update, truncate};

/// The update kinds that carry a message (and so, in v2, a required `messageId`).
pub const MESSAGE_KINDS: &[&str] = &[
    "user_message",
    "user_message_chunk",
    "agent_message",
    "agent_message_chunk",
    "agent_thought",
    "agent_thought_chunk",
];

/// The update kinds that are a turn's output (not its bookkeeping: the user message, the
/// state, commands, config, session info, usage).
const OUTPUT_KINDS: &[&str] = &[
    "agent_message",
    "agent_message_chunk",
    "agent_thought",
    "agent_thought_chunk",
    "tool_call_update",
    "tool_call_content_chunk",
    "plan_update",
    "terminal_update",
    "terminal_output_chunk",
];

/// v1 update kinds that v2 removed, with what replaced them.
const V1_KINDS: &[(&str, &str)] = &[
    ("tool_call", "the first `tool_call_update` for a `toolCallId` creates the tool call"),
    ("plan", "plans are `plan_update`s with a `planId`"),
    ("current_mode_update", "modes are config options, reported with `config_option_update`"),
];

// ---- raw accessors (cheap enough for the wait predicates) -----------------------------------

pub fn session_of(update: &Update) -> Option<&str> {
    update.params["sessionId"].as_str()
}

pub fn kind_of(update: &Update) -> &str {
    update.params["update"]["sessionUpdate"].as_str().unwrap_or("?")
}

/// `running`, `idle`, ... for a `state_update`.
pub fn state_of(update: &Update) -> Option<&str> {
    (kind_of(update) == "state_update").then(|| update.params["update"]["state"].as_str()).flatten()
}

/// The stop reason of a `state_update`, when it has a string one.
pub fn stop_reason_of(update: &Update) -> Option<&str> {
    (kind_of(update) == "state_update").then(|| update.params["update"]["stopReason"].as_str()).flatten()
}

/// Whether a `state_update` ends a turn for want of a login: idle with stopReason `error` and
/// the `auth_required` error (-32000) beside it, as the v2 drafts after v1.7.0 report a turn
/// that failed.
pub fn stopped_for_auth(update: &Update) -> bool {
    state_of(update) == Some("idle")
        && stop_reason_of(update) == Some("error")
        && update.params["update"]["error"]["code"].as_i64() == Some(crate::checks::AUTH_REQUIRED)
}

fn message_id_of(update: &Update) -> Option<&str> {
    update.params["update"]["messageId"].as_str()
}

fn tool_call_id_of(update: &Update) -> Option<&str> {
    update.params["update"]["toolCallId"].as_str()
}

fn status_of(update: &Update) -> Option<&str> {
    update.params["update"]["status"].as_str()
}

pub fn is_output(update: &Update) -> bool {
    OUTPUT_KINDS.contains(&kind_of(update))
}

/// The index (into `o.updates`) of the idle that ends the turn of `session` started at
/// `since` (see the module docs), if it has come.
pub fn turn_end(o: &Observed, session: &str, since: Instant) -> Option<usize> {
    let mut active = false;
    o.updates.iter().position(|update| ends_turn(&mut active, update, session, since))
}

/// One step of [`turn_end`]: whether `update` ends the turn; `active` says whether a non-idle
/// state of the turn has been seen.
fn ends_turn(active: &mut bool, update: &Update, session: &str, since: Instant) -> bool {
    if update.at < since || session_of(update) != Some(session) {
        return false;
    }
    match state_of(update) {
        Some("idle") => *active || stop_reason_of(update).is_some(),
        None => false,
        Some(_) => {
            *active = true;
            false
        }
    }
}

/// [`turn_end`] for a wait predicate, which runs on every message read: it goes on from where
/// it stopped, so that a turn of many updates is not read again for each new one.
#[derive(Default)]
pub struct EndWatch {
    next: Cell<usize>,
    active: Cell<bool>,
    ended: Cell<bool>,
}

impl EndWatch {
    /// Whether the turn of `session` started at `since` has ended.
    pub fn ended(&self, o: &Observed, session: &str, since: Instant) -> bool {
        let mut active = self.active.get();
        for update in o.updates.iter().skip(self.next.get()) {
            self.next.set(self.next.get() + 1);
            if ends_turn(&mut active, update, session, since) {
                self.ended.set(true);
                break;
            }
        }
        self.active.set(active);
        self.ended.get()
    }
}

// ---- one turn -------------------------------------------------------------------------------

/// One prompt's turn as recorded.
pub struct Turn<'a> {
    pub prompt: &'a Sent,
    /// When and where (`seq`) the prompt's answer was read.
    pub answered: Option<(Instant, usize)>,
    /// The turn's updates: of its session, read once the prompt was written and before the
    /// next prompt for that session was; indexes into `o.updates`.
    pub updates: Vec<usize>,
    /// The position in `updates` of the idle that ended it.
    pub idle: Option<usize>,
    /// The updates of the turn after that idle and before the next `session/prompt` or
    /// `session/close` the checker wrote for the session; indexes into `o.updates`.
    pub after_idle: Vec<usize>,
}

impl<'a> Turn<'a> {
    /// The turn of `prompt` (a `session/prompt` the checker wrote) in `o`.
    pub fn of(o: &'a Observed, prompt: &'a Sent) -> Option<Turn<'a>> {
        let session = prompt.session.as_deref()?;
        let next_prompt = o
            .sent
            .iter()
            .filter(|s| s.at > prompt.at && s.session.as_deref() == Some(session) && s.method == "session/prompt")
            .map(|s| s.at)
            .min();
        let updates: Vec<usize> = (0..o.updates.len())
            .filter(|&i| {
                let u = &o.updates[i];
                u.at >= prompt.at && session_of(u) == Some(session) && next_prompt.is_none_or(|next| u.at < next)
            })
            .collect();
        let end = turn_end(o, session, prompt.at).filter(|end| updates.contains(end));
        let idle = end.and_then(|end| updates.iter().position(|&i| i == end));
        let after_idle = match end {
            Some(end) => {
                let idle_at = o.updates[end].at;
                let next = o
                    .sent
                    .iter()
                    .filter(|s| {
                        s.at >= idle_at
                            && s.session.as_deref() == Some(session)
                            && matches!(s.method.as_str(), "session/prompt" | "session/close")
                    })
                    .map(|s| s.at)
                    .min();
                updates.iter().copied().filter(|&i| i > end && next.is_none_or(|next| o.updates[i].at < next)).collect()
            }
            None => Vec::new(),
        };
        let answered = o.answer_to(prompt).map(|a| (a.at, a.seq));
        Some(Turn { prompt, answered, updates, idle, after_idle })
    }

    fn before_idle(&self) -> &[usize] {
        match self.idle {
            Some(idle) => &self.updates[..idle],
            None => &self.updates,
        }
    }

    fn idle_update<'o>(&self, o: &'o Observed) -> Option<&'o Update> {
        self.idle.map(|i| &o.updates[self.updates[i]])
    }

    /// The message and tool call ids the turn used before its idle.
    fn ids(&self, o: &Observed) -> (Vec<String>, Vec<String>) {
        let mut messages = Vec::new();
        let mut calls = Vec::new();
        for &i in self.before_idle() {
            let update = &o.updates[i];
            if let Some(id) = message_id_of(update).filter(|id| !messages.iter().any(|m| m == id)) {
                messages.push(id.to_owned());
            }
            if let Some(id) = tool_call_id_of(update).filter(|id| !calls.iter().any(|c| c == id)) {
                calls.push(id.to_owned());
            }
        }
        (messages, calls)
    }
}

/// `v2-prompt-accepted`: answered with a result, before the turn's idle, and before its output.
pub fn judge_accepted(o: &Observed, turn: &Turn, reply: &Reply) -> Outcome {
    let result = match reply {
        Reply::Result(result) => result,
        Reply::Error(e) => {
            return Outcome::Fail(format!(
                "session/prompt was refused with error {} ({})",
                e.code,
                truncate(&e.message, 80)
            ));
        }
        other => return Outcome::Fail(format!("session/prompt got {}", other.describe())),
    };
    let Some((at, seq)) = turn.answered else {
        return Outcome::Fail("the answer to session/prompt was not on record".into());
    };
    let ms = at.saturating_duration_since(turn.prompt.at).as_millis();
    if let Some(idle) = turn.idle_update(o).filter(|idle| idle.seq < seq) {
        let v1_style = result.get("stopReason").map_or(String::new(), |r| format!(", with stopReason {r} as in v1"));
        return Outcome::Fail(format!(
            "answered {ms} ms after the prompt, only after the turn's idle state_update (read {} ms after the \
             prompt){v1_style}: in v2 the answer acknowledges acceptance, and the turn's end is the idle update",
            idle.at.saturating_duration_since(turn.prompt.at).as_millis()
        ));
    }
    let output_before =
        turn.before_idle().iter().filter(|&&i| o.updates[i].seq < seq && is_output(&o.updates[i])).count();
    if output_before > 0 {
        return Outcome::Warn(format!(
            "answered {ms} ms after the prompt, after {output_before} update(s) of the turn's output: the answer is due \
             as soon as the prompt is accepted, before the work it starts"
        ));
    }
    match turn.idle {
        Some(_) => Outcome::Pass(format!("answered {ms} ms after the prompt, before the turn's output and its idle")),
        None => Outcome::Pass(format!(
            "answered {ms} ms after the prompt, before any output of the turn (which did not end with an idle \
             update: see v2-idle-stop-reason)"
        )),
    }
}

/// `v2-prompt-message-id`: the answer names the user message (`PromptResponse.messageId`,
/// required; the official SDK clients fail the prompt without it).
pub fn judge_message_id(o: &Observed, turn: &Turn, reply: &Reply) -> Outcome {
    let Reply::Result(result) = reply else {
        return Outcome::Skip("session/prompt was not answered with a result".into());
    };
    let user = turn
        .before_idle()
        .iter()
        .map(|&i| &o.updates[i])
        .find(|u| matches!(kind_of(u), "user_message" | "user_message_chunk"))
        .and_then(message_id_of);
    match (result.get("messageId").and_then(Value::as_str), user) {
        (None, _) => Outcome::Fail(format!(
            "the answer is {} without `messageId`, which the schema requires: the official SDK clients \
             (TypeScript @agentclientprotocol/sdk 2.x, Rust agent-client-protocol 5.x) fail the prompt without it",
            truncate(&result.to_string(), 80)
        )),
        (Some(id), Some(user)) if id != user => Outcome::Warn(format!(
            "the answer's messageId {id:?} is not the id of the turn's user message ({user:?}): clients match the \
             two"
        )),
        (Some(id), _) => Outcome::Pass(format!("messageId {id:?}")),
    }
}

/// `v2-user-message`: the prompt is reported as a user message of the history.
pub fn judge_user_message(o: &Observed, turn: &Turn) -> Outcome {
    let found = turn
        .before_idle()
        .iter()
        .map(|&i| &o.updates[i])
        .find(|u| matches!(kind_of(u), "user_message" | "user_message_chunk"));
    match found {
        Some(update) => Outcome::Pass(format!(
            "`{}` {}",
            kind_of(update),
            message_id_of(update).map_or("without a messageId".to_owned(), |id| format!("{id:?}"))
        )),
        None if turn.idle.is_none() && turn.updates.is_empty() => {
            Outcome::Fail("no session/update at all for the turn".into())
        }
        None => Outcome::Fail(
            "no `user_message` or `user_message_chunk` reported the prompt before the turn ended: a v2 agent reports \
             where the accepted prompt went in the session's history"
                .into(),
        ),
    }
}

/// `v2-running`: a `running` state_update once foreground work starts.
pub fn judge_running(o: &Observed, turn: &Turn) -> Outcome {
    let before = turn.before_idle();
    let running = before.iter().position(|&i| state_of(&o.updates[i]) == Some("running"));
    let first_output = before.iter().position(|&i| is_output(&o.updates[i]));
    match (running, first_output) {
        (None, _) => Outcome::Fail(format!(
            "no `state_update` with state `running` before the turn ended (states seen: {})",
            states(o, &turn.updates)
        )),
        (Some(r), Some(out)) if out < r => Outcome::Warn(format!(
            "`running` came only after {} update(s) of the turn's output: it is due when the work starts",
            before[..r].iter().filter(|&&i| is_output(&o.updates[i])).count()
        )),
        (Some(_), _) => Outcome::Pass("`running` before the turn's output".into()),
    }
}

fn states(o: &Observed, updates: &[usize]) -> String {
    let seen: Vec<String> = updates
        .iter()
        .filter_map(|&i| {
            let u = &o.updates[i];
            let state = state_of(u)?;
            Some(match stop_reason_of(u) {
                Some(reason) => format!("{state}/{reason}"),
                None => state.to_owned(),
            })
        })
        .collect();
    if seen.is_empty() { "none".into() } else { seen.join(", ") }
}

/// `v2-idle-stop-reason`: the turn ends with an idle state_update that carries its stop reason.
pub fn judge_idle(o: &Observed, turn: &Turn, waited: Duration, reply: &Reply) -> Outcome {
    let Some(idle) = turn.idle_update(o) else {
        let v1 = match reply {
            Reply::Result(r) if r.get("stopReason").is_some() => {
                format!("; the stop reason came in the session/prompt answer ({}), as in v1", r["stopReason"])
            }
            _ => String::new(),
        };
        return Outcome::Fail(format!(
            "no idle state_update ended the turn within {} ms of the prompt (states seen: {}){v1}",
            waited.as_millis(),
            states(o, &turn.updates)
        ));
    };
    let ms = idle.at.saturating_duration_since(turn.prompt.at).as_millis();
    match stop_reason_of(idle) {
        None => Outcome::Fail(format!(
            "the idle state_update that ended the turn ({ms} ms after the prompt) has no stopReason: the transition \
             that ends foreground work carries it"
        )),
        Some(reason) if !is_known_stop_reason(reason) && !reason.starts_with('_') => Outcome::Warn(format!(
            "idle after {ms} ms with stopReason {reason:?}, which the schema does not define: custom stop reasons start \
             with `_`, others are reserved for future versions"
        )),
        Some(reason) => Outcome::Pass(format!("idle, stopReason {reason}, {ms} ms after the prompt")),
    }
}

fn is_known_stop_reason(reason: &str) -> bool {
    // The reason is the tag of the union flattened into the idle update.
    let members = serde_json::json!({ "stopReason": reason });
    !matches!(serde_json::from_value::<StopReason>(members), Ok(StopReason::Other(_)) | Err(_))
}

/// The turn's updates after its idle that continue it: chunks or updates of its messages, and
/// (`with_tool_calls`) updates of its tool calls. Tool call updates may come while idle in
/// general (background work), but not those of a cancelled turn: they must precede its idle.
pub fn late_updates(o: &Observed, turn: &Turn, with_tool_calls: bool) -> Vec<String> {
    let (messages, calls) = turn.ids(o);
    turn.after_idle
        .iter()
        .map(|&i| &o.updates[i])
        .filter_map(|u| {
            if let Some(id) = message_id_of(u).filter(|id| messages.iter().any(|m| m == id)) {
                return Some(format!("`{}` of message {id:?}", kind_of(u)));
            }
            let id = tool_call_id_of(u).filter(|id| with_tool_calls && calls.iter().any(|c| c == id))?;
            Some(format!("`{}` of tool call {id:?}", kind_of(u)))
        })
        .collect()
}

/// `v2-idle-ends-turn` (SHOULD) and `v2-cancel-updates-before-idle` (MUST).
pub fn judge_after_idle(o: &Observed, turn: &Turn, cancelled: bool) -> Outcome {
    if turn.idle.is_none() {
        return Outcome::Skip("the turn did not end with an idle state_update".into());
    }
    let late = late_updates(o, turn, cancelled);
    match late.first() {
        None if cancelled => Outcome::Pass("no message or tool call update of the turn after its idle".into()),
        None => Outcome::Pass("no update of the turn's messages after its idle".into()),
        Some(first) => Outcome::Fail(format!(
            "{} update(s) of the turn after the idle state_update that ended it; the first: {first}",
            late.len()
        )),
    }
}

// ---- all updates of a process ---------------------------------------------------------------

/// The session updates of one process, decoded as v2 notifications.
pub fn decode(o: &Observed) -> Vec<Result<UpdateSessionNotification, String>> {
    o.updates
        .iter()
        .map(|u| serde_json::from_value::<UpdateSessionNotification>(u.params.clone()).map_err(|e| e.to_string()))
        .collect()
}

/// Message updates without a string `messageId`: `(kind, params)` of each.
fn without_message_id(o: &Observed) -> Vec<&Update> {
    o.updates.iter().filter(|u| MESSAGE_KINDS.contains(&kind_of(u)) && message_id_of(u).is_none()).collect()
}

/// `v2-message-ids` (MUST): every message update and chunk carries a `messageId`.
pub fn judge_message_ids(observed: &[&Observed]) -> Outcome {
    let total: usize =
        observed.iter().map(|o| o.updates.iter().filter(|u| MESSAGE_KINDS.contains(&kind_of(u))).count()).sum();
    let missing: Vec<&Update> = observed.iter().flat_map(|o| without_message_id(o)).collect();
    match missing.first() {
        None if total == 0 => Outcome::Pass("no message update or chunk (nothing to check)".into()),
        None => Outcome::Pass(format!("{total} message update(s) and chunk(s), each with a messageId")),
        Some(first) => Outcome::Fail(format!(
            "{} of {total} message update(s) and chunk(s) without a string messageId, which v2 requires on each; \
             the first: {}",
            missing.len(),
            truncate(&first.params["update"].to_string(), 160)
        )),
    }
}

/// `v2-update-shape` (MUST): every update decodes as a v2 `UpdateSessionNotification` of a
/// session of the connection, without losing anything. Message updates without a messageId
/// are `v2-message-ids`'s, and not counted twice.
pub fn judge_update_shape(observed: &[&Observed]) -> Outcome {
    let mut count = 0;
    let mut bad = Vec::new();
    let mut unknown: Vec<String> = Vec::new();
    let mut kinds: Vec<String> = Vec::new();
    let mut skipped = 0;
    for o in observed {
        for (update, decoded) in o.updates.iter().zip(decode(o)) {
            count += 1;
            let kind = kind_of(update).to_owned();
            if MESSAGE_KINDS.contains(&kind.as_str()) && message_id_of(update).is_none() {
                skipped += 1;
                continue;
            }
            if let Some((_, instead)) = V1_KINDS.iter().find(|(k, _)| *k == kind) {
                bad.push(format!("`{kind}` is a v1 update kind that v2 removed ({instead})"));
                continue;
            }
            match decoded {
                Err(e) => bad.push(format!("`{kind}`: {e}: {}", truncate(&update.params.to_string(), 160))),
                Ok(n) if !o.sessions.contains(&n.session_id.0) => {
                    bad.push(format!("`{kind}` for sessionId {:?}, not a session of this connection", n.session_id.0))
                }
                Ok(n) => {
                    if let Some(difference) = shape::first_difference_as(&update.params, &n) {
                        bad.push(format!("`{kind}` {difference}"));
                    } else if matches!(n.update, SessionUpdate::Other(_))
                        && !kind.starts_with('_')
                        && !unknown.contains(&kind)
                    {
                        unknown.push(kind.clone());
                    }
                }
            }
            if !kinds.contains(&kind) {
                kinds.push(kind);
            }
        }
    }
    let seen = format!("{count} update(s): {}", if kinds.is_empty() { "none".into() } else { kinds.join(", ") });
    let skipped =
        if skipped > 0 { format!(" ({skipped} without messageId: see v2-message-ids)") } else { String::new() };
    if let Some(first) = bad.first() {
        Outcome::Fail(format!(
            "{} of {count} update(s) are not v2 updates as sent{skipped}; the first: {first}",
            bad.len()
        ))
    } else if !unknown.is_empty() {
        Outcome::Warn(format!("{seen}{skipped}; not in the v2 schema: {}", unknown.join(", ")))
    } else {
        Outcome::Pass(format!("{seen}{skipped}"))
    }
}

/// `v2-upserts` (SHOULD): upserts in a sensible order, tracked per session with the runtime's
/// [`SessionState`]: a tool call is created by a `tool_call_update` (with a title, as the spec
/// asks of the first report) before content chunks are appended to it, a finished tool call is
/// not reopened, and a message id names messages of one role only.
pub fn judge_upserts(observed: &[&Observed]) -> Outcome {
    let mut flaws = Vec::new();
    let mut upserts = 0;
    for o in observed {
        let mut sessions: HashMap<String, SessionState> = HashMap::new();
        for decoded in decode(o).into_iter().flatten() {
            let state = sessions.entry(decoded.session_id.0.clone()).or_default();
            match &decoded.update {
                SessionUpdate::ToolCallContentChunk(chunk) => {
                    upserts += 1;
                    if state.tool_call_by_id(&chunk.tool_call_id).is_none() {
                        flaws.push(format!(
                            "a tool_call_content_chunk for tool call {:?} before any tool_call_update created it",
                            chunk.tool_call_id.0
                        ));
                    }
                }
                SessionUpdate::ToolCallUpdate(patch) => {
                    upserts += 1;
                    match state.tool_call_by_id(&patch.tool_call_id) {
                        None if !patch.title.has_value() => {
                            flaws.push(format!("tool call {:?} first reported without a title", patch.tool_call_id.0))
                        }
                        None => {}
                        Some(call) => {
                            let finished = matches!(
                                call.status,
                                Some(ToolCallStatus::Completed | ToolCallStatus::Failed | ToolCallStatus::Cancelled)
                            );
                            if let (true, Some(status @ (ToolCallStatus::Pending | ToolCallStatus::InProgress))) =
                                (finished, patch.status.value())
                            {
                                flaws.push(format!(
                                    "tool call {:?} reopened: {} → {}",
                                    patch.tool_call_id.0,
                                    call.status.as_ref().map_or("?", |s| s.as_str()),
                                    status.as_str()
                                ));
                            }
                        }
                    }
                }
                update => {
                    if let Some((id, role)) = message_role(update) {
                        upserts += 1;
                        if let Some(message) = state.message_by_id(&id.to_owned().into()).filter(|m| m.role != role) {
                            flaws.push(format!(
                                "message id {id:?} names a {} message and then a {} message",
                                role_name(message.role),
                                role_name(role)
                            ));
                        }
                    }
                }
            }
            state.apply(&decoded.update);
        }
    }
    match flaws.first() {
        None if upserts == 0 => Outcome::Pass("no message or tool call upsert (nothing to check)".into()),
        None => Outcome::Pass(format!("{upserts} message and tool call upsert(s), in order")),
        Some(first) => Outcome::Fail(format!("{} upsert(s) out of order; the first: {first}", flaws.len())),
    }
}

fn message_role(update: &SessionUpdate) -> Option<(&str, Role)> {
    Some(match update {
        SessionUpdate::UserMessage(m) => (m.message_id.0.as_str(), Role::User),
        SessionUpdate::UserMessageChunk(c) => (c.message_id.0.as_str(), Role::User),
        SessionUpdate::AgentMessage(m) => (m.message_id.0.as_str(), Role::Agent),
        SessionUpdate::AgentMessageChunk(c) => (c.message_id.0.as_str(), Role::Agent),
        SessionUpdate::AgentThought(m) => (m.message_id.0.as_str(), Role::Thought),
        SessionUpdate::AgentThoughtChunk(c) => (c.message_id.0.as_str(), Role::Thought),
        _ => return None,
    })
}

fn role_name(role: Role) -> &'static str {
    match role {
        Role::User => "user",
        Role::Agent => "agent",
        Role::Thought => "thought",
    }
}

/// `v2-requires-action` (SHOULD): while a permission request waits, the session reports
/// `requires_action` (just before or just after the request), and work that goes on after the
/// answer is preceded by `running` again.
pub fn judge_requires_action(observed: &[&Observed]) -> Outcome {
    let mut asked = 0;
    let mut flaws = Vec::new();
    for o in observed {
        for p in &o.permissions {
            let Some(session) = p.session.as_deref() else { continue };
            asked += 1;
            let states: Vec<&Update> =
                o.updates.iter().filter(|u| session_of(u) == Some(session) && state_of(u).is_some()).collect();
            let before = states.iter().rev().find(|u| u.seq < p.seq);
            let after = states.iter().find(|u| u.seq > p.seq);
            let waiting = [before, after].into_iter().flatten().find(|u| state_of(u) == Some("requires_action"));
            let Some(waiting) = waiting else {
                flaws
                    .push(format!("permission request {} came with no `requires_action` state_update around it", p.id));
                continue;
            };
            // Work after an allowing answer while the state still says requires_action (after
            // a `cancelled` one the turn winds down, and its idle follows).
            let next_state = states.iter().find(|u| u.seq > waiting.seq).map(|u| u.seq);
            let resumed = p.answered.is_some_and(|(answered, how)| {
                how == "selected"
                    && o.updates.iter().any(|u| {
                        session_of(u) == Some(session)
                            && u.seq > waiting.seq
                            && u.at > answered
                            && next_state.is_none_or(|next| u.seq < next)
                            && is_output(u)
                    })
            });
            if resumed {
                flaws.push(format!(
                    "after permission request {} was answered, the turn went on without a `running` state_update",
                    p.id
                ));
            }
        }
    }
    match flaws.first() {
        None if asked == 0 => Outcome::Pass("the agent asked no permission (nothing to check)".into()),
        None => Outcome::Pass(format!("{asked} permission request(s), each with `requires_action` while it waited")),
        Some(first) => Outcome::Fail(format!("{} of {asked} permission request(s): {first}", flaws.len())),
    }
}

/// `v2-cancel-permission` (SHOULD): a permission the checker answered `cancelled` (because it
/// was pending at the cancel) is no approval: its tool call is not run afterwards.
pub fn judge_cancelled_permissions(o: &Observed, cancel: &Sent) -> Outcome {
    let pending: Vec<_> = o
        .permissions
        .iter()
        .filter(|p| p.at <= cancel.at && p.answered.is_some_and(|(at, how)| how == "cancelled" && at >= cancel.at))
        .collect();
    if pending.is_empty() {
        return Outcome::Pass("no permission request was pending at the cancel (nothing to check)".into());
    }
    let mut run_anyway = Vec::new();
    for p in &pending {
        let (Some(call), Some((answered, _))) = (p.tool_call.as_deref(), p.answered) else { continue };
        let ran = o.updates.iter().find(|u| {
            u.at > answered
                && tool_call_id_of(u) == Some(call)
                && matches!(status_of(u), Some("in_progress" | "completed"))
        });
        if let Some(update) = ran {
            run_anyway.push(format!("tool call {call:?} became {}", status_of(update).unwrap_or("?")));
        }
    }
    let cascaded = pending
        .iter()
        .filter(|p| {
            o.agent_notifications.iter().any(|n| n.method == "$/cancel_request" && n.params["requestId"] == p.id)
        })
        .count();
    let cascade =
        if cascaded > 0 { format!("; the agent sent $/cancel_request for {cascaded}") } else { String::new() };
    match run_anyway.first() {
        None => Outcome::Pass(format!(
            "{} permission request(s) pending at the cancel, answered `cancelled`, none acted on{cascade}",
            pending.len()
        )),
        Some(first) => Outcome::Fail(format!(
            "a permission answered `cancelled` was treated as approval: {first} after the answer{cascade}"
        )),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::wire::{Answer, Sent};

    /// A process record: `entries` are updates (objects with `sessionUpdate`) and the prompt's
    /// answer (the string "answer"), in the order read, 10 ms apart, after a prompt at 0.
    fn record(entries: &[Value]) -> (Observed, Instant) {
        let t0 = Instant::now();
        let mut o = Observed::default();
        o.sessions.push("s".into());
        o.sent.push(Sent { method: "session/prompt".into(), id: Some(json!(1)), session: Some("s".into()), at: t0 });
        for (n, entry) in entries.iter().enumerate() {
            let at = t0 + Duration::from_millis(10 * (n as u64 + 1));
            if entry == "answer" {
                o.responses.push(Answer { id: json!(1), at, seq: n, code: None, batch: None });
            } else {
                let params = json!({"sessionId": "s", "update": entry});
                o.updates.push(Update { decoded: Err(String::new()), params, at, seq: n });
            }
        }
        (o, t0)
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

    fn user() -> Value {
        json!({"sessionUpdate": "user_message", "messageId": "u1", "content": [{"type": "text", "text": "hi"}]})
    }
    fn state(state: &str) -> Value {
        json!({"sessionUpdate": "state_update", "state": state})
    }
    fn idle(reason: &str) -> Value {
        json!({"sessionUpdate": "state_update", "state": "idle", "stopReason": reason})
    }
    fn chunk(id: &str) -> Value {
        json!({"sessionUpdate": "agent_message_chunk", "messageId": id, "content": {"type": "text", "text": "x"}})
    }

    #[test]
    fn a_well_ordered_turn_passes() {
        let (o, _) = record(&[json!("answer"), user(), state("running"), chunk("a1"), idle("end_turn")]);
        let turn = Turn::of(&o, &o.sent[0]).unwrap();
        let reply = Reply::Result(json!({"messageId": "u1"}));
        assert_eq!(is(&judge_accepted(&o, &turn, &reply)), "pass");
        assert_eq!(is(&judge_message_id(&o, &turn, &reply)), "pass");
        assert_eq!(is(&judge_user_message(&o, &turn)), "pass");
        assert_eq!(is(&judge_running(&o, &turn)), "pass");
        assert_eq!(is(&judge_idle(&o, &turn, Duration::from_secs(1), &reply)), "pass");
        assert_eq!(is(&judge_after_idle(&o, &turn, false)), "pass");
        assert_eq!(is(&judge_upserts(&[&o])), "pass");
        assert_eq!(is(&judge_update_shape(&[&o])), "pass");
    }

    #[test]
    fn an_answer_at_the_end_of_the_turn_fails_and_a_late_one_warns() {
        let (o, _) = record(&[user(), state("running"), chunk("a1"), idle("end_turn"), json!("answer")]);
        let turn = Turn::of(&o, &o.sent[0]).unwrap();
        let Outcome::Fail(detail) = judge_accepted(&o, &turn, &Reply::Result(json!({"stopReason": "end_turn"}))) else {
            panic!("not a failure")
        };
        assert!(detail.contains("only after the turn's idle") && detail.contains("as in v1"), "{detail}");
        let (o, _) = record(&[user(), state("running"), chunk("a1"), json!("answer"), idle("end_turn")]);
        let turn = Turn::of(&o, &o.sent[0]).unwrap();
        assert_eq!(is(&judge_accepted(&o, &turn, &Reply::Result(json!({})))), "warn");
        // `{}` was what v1.7.0 showed; the schema now requires the id, as the SDK clients did.
        let Outcome::Fail(detail) = judge_message_id(&o, &turn, &Reply::Result(json!({}))) else { panic!() };
        assert!(detail.contains("requires") && detail.contains("official SDK clients"), "{detail}");
    }

    #[test]
    fn a_bare_idle_before_work_does_not_end_the_turn() {
        let bare = json!({"sessionUpdate": "state_update", "state": "idle"});
        let (o, _) = record(&[bare, json!("answer"), user(), state("running"), idle("end_turn")]);
        let turn = Turn::of(&o, &o.sent[0]).unwrap();
        assert_eq!(turn.idle, Some(3));
        // Without a stop reason, the idle after `running` ends the turn and fails.
        let (o, _) = record(&[json!("answer"), user(), state("running"), state("idle")]);
        let turn = Turn::of(&o, &o.sent[0]).unwrap();
        let Outcome::Fail(detail) = judge_idle(&o, &turn, Duration::from_secs(1), &Reply::Result(json!({}))) else {
            panic!()
        };
        assert!(detail.contains("has no stopReason"), "{detail}");
        // No idle at all.
        let (o, _) = record(&[json!("answer"), user(), state("running"), chunk("a1")]);
        let turn = Turn::of(&o, &o.sent[0]).unwrap();
        let Outcome::Fail(detail) = judge_idle(&o, &turn, Duration::from_millis(500), &Reply::Result(json!({}))) else {
            panic!()
        };
        assert_eq!(detail, "no idle state_update ended the turn within 500 ms of the prompt (states seen: running)");
    }

    #[test]
    fn the_end_watch_agrees_with_turn_end_as_updates_come() {
        let (full, t0) =
            record(&[json!("answer"), user(), state("running"), chunk("a1"), idle("end_turn"), chunk("a2")]);
        let watch = EndWatch::default();
        let mut o = Observed::default();
        for update in full.updates {
            let idle = state_of(&update) == Some("idle");
            let ended_before = watch.ended(&o, "s", t0);
            o.updates.push(update);
            assert_eq!(watch.ended(&o, "s", t0), ended_before || idle);
        }
        assert!(watch.ended(&o, "s", t0));
        assert_eq!(turn_end(&o, "s", t0), Some(3));
        // Another session's idle ends nothing.
        assert!(!EndWatch::default().ended(&o, "other", t0));
    }

    #[test]
    fn output_after_the_idle_is_late() {
        let call =
            json!({"sessionUpdate": "tool_call_update", "toolCallId": "t1", "title": "Read", "status": "pending"});
        let cancelled = json!({"sessionUpdate": "tool_call_update", "toolCallId": "t1", "status": "cancelled"});
        let (o, _) =
            record(&[json!("answer"), user(), state("running"), chunk("a1"), call, idle("cancelled"), cancelled]);
        let turn = Turn::of(&o, &o.sent[0]).unwrap();
        // Tool call updates may come while idle, except after a cancelled turn's idle.
        assert_eq!(is(&judge_after_idle(&o, &turn, false)), "pass");
        let Outcome::Fail(detail) = judge_after_idle(&o, &turn, true) else { panic!() };
        assert!(detail.ends_with("the first: `tool_call_update` of tool call \"t1\""), "{detail}");
    }

    #[test]
    fn upserts_out_of_order_are_named() {
        let early = json!({"sessionUpdate": "tool_call_content_chunk", "toolCallId": "t1",
                           "content": {"type": "content", "content": {"type": "text", "text": "x"}}});
        let create =
            json!({"sessionUpdate": "tool_call_update", "toolCallId": "t1", "title": "Read", "status": "completed"});
        let reopen = json!({"sessionUpdate": "tool_call_update", "toolCallId": "t1", "status": "in_progress"});
        let (o, _) = record(&[early, create, reopen, user(), chunk("u1")]);
        let Outcome::Fail(detail) = judge_upserts(&[&o]) else { panic!() };
        assert!(detail.starts_with("3 upsert(s) out of order; the first: a tool_call_content_chunk"), "{detail}");
        let (o, _) =
            record(&[json!({"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": "x"}})]);
        assert_eq!(is(&judge_message_ids(&[&o])), "fail");
        // Counted once: the shape check leaves it to the message id check.
        let Outcome::Pass(detail) = judge_update_shape(&[&o]) else { panic!() };
        assert!(detail.contains("1 without messageId"), "{detail}");
        let (o, _) = record(&[json!({"sessionUpdate": "tool_call", "toolCallId": "t1", "title": "Read"})]);
        let Outcome::Fail(detail) = judge_update_shape(&[&o]) else { panic!() };
        assert!(detail.contains("`tool_call` is a v1 update kind"), "{detail}");
    }
}
