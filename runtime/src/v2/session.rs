//! [`SessionState`]: what a v2 client knows of one session, kept by applying the session's
//! `session/update`s in arrival order with the spec's merge rules, so that no client has to
//! re-implement them.
//!
//! The rules (`v2/prompt-lifecycle.mdx`, `v2/tool-calls.mdx`, `v2/agent-plan.mdx`):
//!
//! - messages (`user_message`, `agent_message`, `agent_thought` and their `_chunk`s) are
//!   upserts keyed by `messageId`: a whole update's `content` replaces the content (chunks
//!   included), `null` or `[]` clears it, an omitted `content` leaves it; a chunk appends;
//! - tool calls are upserts keyed by `toolCallId`, created by the first update that names
//!   them: each field of a `tool_call_update` is a patch (omitted = unchanged, `null` =
//!   cleared, a value replaces; for `content` and `locations`, `[]` clears too), and a
//!   `tool_call_content_chunk` appends one content item;
//! - plans are keyed by `planId`, whatever their content type (`items`, or a type this schema
//!   does not know, which the spec requires to carry a `planId` too): each `plan_update`
//!   replaces that plan's content, and `plan_removed` (a draft kind) removes the plan;
//! - display terminals are keyed by `terminalId`: `terminal_update` patches `command`, `cwd`
//!   and `exitStatus`, and its `output` replaces the stored bytes; a `terminal_output_chunk`
//!   appends its own base64-decoded bytes (never concatenating the encoded text);
//! - `state_update` sets the foreground state; an idle one with a stop reason sets the stop
//!   reason, and `running` / `requires_action` clear it (a new turn has no reason yet), so a
//!   bare idle snapshot between turns keeps the last turn's;
//! - `available_commands_update` and `config_option_update` replace their lists,
//!   `session_info_update` patches title and update time, `usage_update` replaces the usage;
//! - an update kind this schema does not know is kept, unchanged, in [`SessionState::unknown`]
//!   (as is a plan update whose plan has no `planId`); drain it if you do not need it;
//! - `_meta` follows the update's own rule: on the upserts (messages, `tool_call_update`,
//!   `terminal_update`, `session_info_update`) it is a patch field like the others, kept on the
//!   item (or the session); on chunks, plans and the rest it is scoped to that one update and
//!   not kept.
//!
//! Updates for ids never seen before create them (the reference and its updates may arrive in
//! either order); nothing here fails, also after the caller edited the public lists.

use std::collections::HashMap;
use std::hash::Hash;

use serde_json::{Map, Value};

use acp_types::serde_support::UnknownVariant;
use acp_types::v2::{
    AbsolutePath, AvailableCommand, BackgroundWork, ContentBlock, Cost, IdleStateUpdateStopReason as StopReason,
    MessageId, Nullable, PlanEntry, PlanId, PlanUpdateContent, SessionConfigOption, SessionUpdate, StateUpdate,
    TerminalCapabilities, TerminalExitStatus, TerminalId, TerminalSize, ToolCallCapabilities, ToolCallContent,
    ToolCallId, ToolCallLocation, ToolCallStatus, ToolCallUpdate, ToolKind, UpdateSessionNotification,
};

/// Who a message is from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// A user message (`user_message`, `user_message_chunk`).
    User,
    /// An agent message (`agent_message`, `agent_message_chunk`).
    Agent,
    /// The agent's reasoning (`agent_thought`, `agent_thought_chunk`).
    Thought,
}

/// One message of the session.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct Message {
    /// Its id.
    pub id: MessageId,
    /// Who it is from (as the first update that named it said).
    pub role: Role,
    /// Its content, whole updates and chunks applied.
    pub content: Vec<ContentBlock>,
    /// Its `_meta`, as the message updates left it.
    pub meta: Option<Map<String, Value>>,
}

/// One tool call of the session: every field as the patches so far left it.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct ToolCall {
    /// Its id.
    pub id: ToolCallId,
    /// The programmatic name of the tool, if set.
    pub name: Option<String>,
    /// The title, if set.
    pub title: Option<String>,
    /// The kind, if set.
    pub kind: Option<ToolKind>,
    /// The status, if set (clients show a new call as pending).
    pub status: Option<ToolCallStatus>,
    /// The content, chunks appended.
    pub content: Vec<ToolCallContent>,
    /// The locations it touches.
    pub locations: Vec<ToolCallLocation>,
    /// The raw input, if set.
    pub raw_input: Option<serde_json::Value>,
    /// The raw output, if set.
    pub raw_output: Option<serde_json::Value>,
    /// Its `_meta`, as the patches left it.
    pub meta: Option<Map<String, Value>>,
    /// What the client may do with it (`cancel`: `tool_call/cancel`), as the patches left it.
    pub capabilities: Option<ToolCallCapabilities>,
}

/// One display terminal of the session.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct Terminal {
    /// Its id.
    pub id: TerminalId,
    /// The command, if known.
    pub command: Option<String>,
    /// The working directory, if known.
    pub cwd: Option<AbsolutePath>,
    /// The bytes to show: the last snapshot with the chunks after it appended. A chunk or a
    /// snapshot that is not valid base64 is skipped (and logged).
    pub output: Vec<u8>,
    /// Set once the terminal has exited.
    pub exit_status: Option<TerminalExitStatus>,
    /// Its `_meta`, as the `terminal_update`s left it.
    pub meta: Option<Map<String, Value>>,
    /// What the client may do with it (`cancel`: `terminal/cancel`), if the agent said.
    pub capabilities: Option<TerminalCapabilities>,
    /// Its size in columns and rows, if the agent said.
    pub size: Option<TerminalSize>,
}

/// One plan of the session: its latest content.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct Plan {
    /// Its id.
    pub id: PlanId,
    /// The content of the last `plan_update` for it: `items`, or a type this schema does not
    /// know, kept whole.
    pub content: PlanUpdateContent,
}

impl Plan {
    /// The entries of an `items` plan (`None` for other content types).
    pub fn entries(&self) -> Option<&[PlanEntry]> {
        match &self.content {
            PlanUpdateContent::Items(items) => Some(&items.entries),
            _ => None,
        }
    }
}

/// The foreground state of the session (`state_update`).
#[derive(Clone, Debug, Default, PartialEq)]
pub enum RunState {
    /// No foreground work (also the state before any `state_update`).
    #[default]
    Idle,
    /// Foreground work in progress.
    Running,
    /// Foreground work waits for the user.
    RequiresAction,
    /// A state this schema does not know, by name.
    Other(String),
}

/// What a client knows of one session; apply each of its updates in arrival order.
#[derive(Clone, Debug, Default, PartialEq)]
#[non_exhaustive]
pub struct SessionState {
    /// The foreground state.
    pub state: RunState,
    /// The stop reason of the last idle `state_update` that carried one, until the next turn
    /// starts (`running` or `requires_action`).
    pub stop_reason: Option<StopReason>,
    /// Messages, in the order they first appeared.
    pub messages: Vec<Message>,
    /// Tool calls, in the order they first appeared.
    pub tool_calls: Vec<ToolCall>,
    /// Plans, in the order they first appeared.
    pub plans: Vec<Plan>,
    /// Display terminals, in the order they first appeared.
    pub terminals: Vec<Terminal>,
    /// The commands the agent offers.
    pub available_commands: Vec<AvailableCommand>,
    /// The session's configuration options.
    pub config_options: Vec<SessionConfigOption>,
    /// The session's title, if set.
    pub title: Option<String>,
    /// When the session was last updated (as the agent wrote it), if set.
    pub updated_at: Option<String>,
    /// The session's own metadata (`session_info_update`'s `_meta`), if set.
    pub meta: Option<Map<String, Value>>,
    /// Context usage: tokens used, context size, and the cost if reported.
    pub usage: Option<(u64, u64, Option<Cost>)>,
    /// The background work of the latest `state_update`: a complete snapshot (`Some(vec![])`
    /// means none runs), or `None` when that update did not report it (which says nothing
    /// about what runs).
    pub background: Option<Vec<BackgroundWork>>,
    /// Updates of kinds this schema does not know, kept as they came.
    pub unknown: Vec<UnknownVariant>,
    /// Where each id is in `messages` / `tool_calls`: checked on use, since the caller may
    /// edit those lists.
    message_index: HashMap<MessageId, usize>,
    tool_call_index: HashMap<ToolCallId, usize>,
    terminal_index: HashMap<TerminalId, usize>,
}

impl SessionState {
    /// An empty session.
    pub fn new() -> Self {
        Self::default()
    }

    /// Applies a notification's update (the session id is not checked: keep one state per
    /// session id).
    pub fn apply_notification(&mut self, notification: &UpdateSessionNotification) {
        self.apply(&notification.update);
    }

    /// Applies one update.
    pub fn apply(&mut self, update: &SessionUpdate) {
        match update {
            SessionUpdate::UserMessageChunk(c) => {
                self.message(&c.message_id, Role::User).content.push(c.content.clone())
            }
            SessionUpdate::AgentMessageChunk(c) => {
                self.message(&c.message_id, Role::Agent).content.push(c.content.clone())
            }
            SessionUpdate::AgentThoughtChunk(c) => {
                self.message(&c.message_id, Role::Thought).content.push(c.content.clone())
            }
            SessionUpdate::UserMessage(m) => self.upsert_message(&m.message_id, Role::User, &m.content, &m.meta),
            SessionUpdate::AgentMessage(m) => self.upsert_message(&m.message_id, Role::Agent, &m.content, &m.meta),
            SessionUpdate::AgentThought(m) => self.upsert_message(&m.message_id, Role::Thought, &m.content, &m.meta),
            SessionUpdate::StateUpdate(s) => match s {
                StateUpdate::Running(running) => {
                    self.state = RunState::Running;
                    self.stop_reason = None;
                    self.background = running.background.clone().flatten();
                }
                StateUpdate::RequiresAction(waiting) => {
                    self.state = RunState::RequiresAction;
                    self.stop_reason = None;
                    self.background = waiting.background.clone().flatten();
                }
                StateUpdate::Idle(idle) => {
                    self.state = RunState::Idle;
                    self.background = idle.background.clone().flatten();
                    if let Some(reason) = &idle.stop_reason {
                        self.stop_reason = Some(reason.clone());
                    }
                }
                StateUpdate::Other(other) => {
                    self.state = RunState::Other(other.tag("state").unwrap_or_default().to_owned())
                }
                other => self.state = RunState::Other(tag_of(other, "state")),
            },
            SessionUpdate::ToolCallUpdate(patch) => self.patch_tool_call(patch),
            SessionUpdate::ToolCallContentChunk(chunk) => {
                self.tool_call(&chunk.tool_call_id).content.push(chunk.content.clone())
            }
            SessionUpdate::TerminalUpdate(t) => {
                let terminal = self.terminal(&t.terminal_id);
                t.command.apply_to(&mut terminal.command);
                t.cwd.apply_to(&mut terminal.cwd);
                t.exit_status.apply_to(&mut terminal.exit_status);
                t.meta.apply_to(&mut terminal.meta);
                t.capabilities.apply_to(&mut terminal.capabilities);
                t.size.apply_to(&mut terminal.size);
                match &t.output {
                    Some(Some(snapshot)) => match decode_base64(&snapshot.data) {
                        Some(bytes) => terminal.output = bytes,
                        // Kept, as an invalid chunk is skipped: a bad snapshot loses nothing.
                        None => {
                            tracing::warn!(terminal = %t.terminal_id.0, "acp session: terminal output snapshot is not base64; output kept")
                        }
                    },
                    Some(None) => terminal.output.clear(),
                    None => {}
                }
            }
            SessionUpdate::TerminalOutputChunk(chunk) => match decode_base64(&chunk.data) {
                Some(bytes) => self.terminal(&chunk.terminal_id).output.extend(bytes),
                None => {
                    tracing::warn!(terminal = %chunk.terminal_id.0, "acp session: terminal output chunk is not base64; skipped")
                }
            },
            SessionUpdate::PlanUpdate(p) => match plan_id(&p.plan) {
                Some(id) => match self.plans.iter_mut().find(|plan| plan.id == id) {
                    Some(plan) => plan.content.clone_from(&p.plan),
                    None => self.plans.push(Plan { id, content: p.plan.clone() }),
                },
                // A plan without an id cannot be kept apart from the others.
                None => self.keep_unknown(update),
            },
            SessionUpdate::AvailableCommandsUpdate(u) => self.available_commands.clone_from(&u.available_commands),
            SessionUpdate::ConfigOptionUpdate(u) => self.config_options.clone_from(&u.config_options),
            SessionUpdate::SessionInfoUpdate(u) => {
                u.title.apply_to(&mut self.title);
                u.updated_at.apply_to(&mut self.updated_at);
                u.meta.apply_to(&mut self.meta);
            }
            SessionUpdate::UsageUpdate(u) => self.usage = Some((u.used, u.size, u.cost.value().cloned())),
            SessionUpdate::Other(other) if other.tag("sessionUpdate") == Some("plan_removed") => {
                self.remove_plan(other)
            }
            SessionUpdate::Other(other) => self.unknown.push(other.clone()),
            // A kind of an unstable feature this state does not model (e.g. compaction), or
            // `plan_removed` when the schema's draft kinds are on.
            other => {
                if let Ok(Value::Object(map)) = serde_json::to_value(other) {
                    let update = UnknownVariant(map);
                    match update.tag("sessionUpdate") {
                        Some("plan_removed") => self.remove_plan(&update),
                        _ => self.unknown.push(update),
                    }
                }
            }
        }
    }

    fn keep_unknown(&mut self, value: &impl serde::Serialize) {
        if let Ok(Value::Object(map)) = serde_json::to_value(value) {
            self.unknown.push(UnknownVariant(map));
        }
    }

    /// `plan_removed` (a draft kind): the plan named by `planId` goes.
    fn remove_plan(&mut self, update: &UnknownVariant) {
        match update.0.get("planId").and_then(Value::as_str) {
            Some(id) => self.plans.retain(|plan| plan.id.0 != id),
            None => self.unknown.push(update.clone()),
        }
    }

    /// The message with this id, if any.
    pub fn message_by_id(&self, id: &MessageId) -> Option<&Message> {
        find_by_id(&self.messages, &self.message_index, id, |m| &m.id).map(|i| &self.messages[i])
    }

    /// The tool call with this id, if any.
    pub fn tool_call_by_id(&self, id: &ToolCallId) -> Option<&ToolCall> {
        find_by_id(&self.tool_calls, &self.tool_call_index, id, |c| &c.id).map(|i| &self.tool_calls[i])
    }

    /// The display terminal with this id, if any.
    pub fn terminal_by_id(&self, id: &TerminalId) -> Option<&Terminal> {
        find_by_id(&self.terminals, &self.terminal_index, id, |t| &t.id).map(|i| &self.terminals[i])
    }

    fn terminal(&mut self, id: &TerminalId) -> &mut Terminal {
        let new = |id: &TerminalId| Terminal {
            id: id.clone(),
            command: None,
            cwd: None,
            output: Vec::new(),
            exit_status: None,
            meta: None,
            capabilities: None,
            size: None,
        };
        get_or_add(&mut self.terminals, &mut self.terminal_index, id, |t| &t.id, new)
    }

    fn message(&mut self, id: &MessageId, role: Role) -> &mut Message {
        let new = |id: &MessageId| Message { id: id.clone(), role, content: Vec::new(), meta: None };
        get_or_add(&mut self.messages, &mut self.message_index, id, |m| &m.id, new)
    }

    fn upsert_message(
        &mut self,
        id: &MessageId,
        role: Role,
        content: &Option<Option<Vec<ContentBlock>>>,
        meta: &Option<Option<Map<String, Value>>>,
    ) {
        let message = self.message(id, role);
        match content {
            Some(Some(content)) => message.content.clone_from(content),
            Some(None) => message.content.clear(),
            None => {}
        }
        meta.apply_to(&mut message.meta);
    }

    fn tool_call(&mut self, id: &ToolCallId) -> &mut ToolCall {
        let new = |id: &ToolCallId| ToolCall {
            id: id.clone(),
            name: None,
            title: None,
            kind: None,
            status: None,
            content: Vec::new(),
            locations: Vec::new(),
            raw_input: None,
            raw_output: None,
            meta: None,
            capabilities: None,
        };
        get_or_add(&mut self.tool_calls, &mut self.tool_call_index, id, |c| &c.id, new)
    }

    fn patch_tool_call(&mut self, p: &ToolCallUpdate) {
        let call = self.tool_call(&p.tool_call_id);
        p.name.apply_to(&mut call.name);
        p.title.apply_to(&mut call.title);
        p.capabilities.apply_to(&mut call.capabilities);
        p.kind.apply_to(&mut call.kind);
        p.status.apply_to(&mut call.status);
        patch_list(&mut call.content, &p.content);
        patch_list(&mut call.locations, &p.locations);
        patch_value(&mut call.raw_input, &p.raw_input);
        patch_value(&mut call.raw_output, &p.raw_output);
        p.meta.apply_to(&mut call.meta);
    }
}

/// Where the item with `id` is in `items`: by `index` while it matches the list (the usual
/// case, also for a new id), else by a scan, as the caller may have edited the list.
fn find_by_id<T, K: Eq + Hash>(
    items: &[T],
    index: &HashMap<K, usize>,
    id: &K,
    id_of: impl Fn(&T) -> &K,
) -> Option<usize> {
    match index.get(id) {
        Some(&i) if items.get(i).is_some_and(|item| id_of(item) == id) => Some(i),
        // Every item is indexed: an id the index does not know is in no item.
        None if index.len() == items.len() => None,
        _ => items.iter().position(|item| id_of(item) == id),
    }
}

/// [`find_by_id`], indexing the list again when the caller's edits left the index behind, so
/// that only the first lookup after an edit scans.
fn locate<T, K: Eq + Hash + Clone>(
    items: &[T],
    index: &mut HashMap<K, usize>,
    id: &K,
    id_of: impl Fn(&T) -> &K,
) -> Option<usize> {
    let found = find_by_id(items, index, id, &id_of);
    let current = index.len() == items.len() && found.is_none_or(|i| index.get(id) == Some(&i));
    if !current {
        index.clear();
        for (i, item) in items.iter().enumerate() {
            index.entry(id_of(item).clone()).or_insert(i);
        }
    }
    found
}

/// The item with `id`, added at the end of `items` (made by `new`) when there is none.
fn get_or_add<'a, T, K: Eq + Hash + Clone>(
    items: &'a mut Vec<T>,
    index: &mut HashMap<K, usize>,
    id: &K,
    id_of: impl Fn(&T) -> &K,
    new: impl FnOnce(&K) -> T,
) -> &'a mut T {
    let at = match locate(items, index, id, id_of) {
        Some(at) => at,
        None => {
            items.push(new(id));
            index.insert(id.clone(), items.len() - 1);
            items.len() - 1
        }
    };
    &mut items[at]
}

/// A plan content's `planId` (every content type has one, known or not).
fn plan_id(content: &PlanUpdateContent) -> Option<PlanId> {
    let id = match content {
        PlanUpdateContent::Items(items) => return Some(items.plan_id.clone()),
        PlanUpdateContent::Other(other) => other.0.get("planId")?.as_str()?.to_owned(),
        // A draft content type (`file`, `markdown`).
        other => serde_json::to_value(other).ok()?.get("planId")?.as_str()?.to_owned(),
    };
    Some(PlanId::from(id))
}

/// The string member `tag` of a value's JSON (empty if there is none).
fn tag_of(value: &impl serde::Serialize, tag: &str) -> String {
    serde_json::to_value(value).ok().and_then(|v| v.get(tag)?.as_str().map(str::to_owned)).unwrap_or_default()
}

/// A collection patch: omitted leaves, `null` or `[]` clears, an array replaces.
fn patch_list<T: Clone>(field: &mut Vec<T>, update: &Option<Option<Vec<T>>>) {
    match update {
        Some(Some(items)) => field.clone_from(items),
        Some(None) => field.clear(),
        None => {}
    }
}

/// An any-value patch: omitted leaves, `null` clears, a value replaces.
fn patch_value(field: &mut Option<serde_json::Value>, update: &Option<serde_json::Value>) {
    match update {
        Some(serde_json::Value::Null) => *field = None,
        Some(value) => *field = Some(value.clone()),
        None => {}
    }
}

/// Decodes standard base64 (RFC 4648; padding may be left out, but if present it is one or two
/// `=` completing the last group of four); `None` if it is not base64.
fn decode_base64(text: &str) -> Option<Vec<u8>> {
    fn value(c: u8) -> Option<u32> {
        Some(match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            _ => return None,
        } as u32)
    }
    let unpadded = text.trim_end_matches('=');
    let padding = text.len() - unpadded.len();
    if padding > 2 || (padding > 0 && text.len() % 4 != 0) {
        return None;
    }
    let text = unpadded.as_bytes();
    if text.len() % 4 == 1 {
        return None;
    }
    let mut out = Vec::with_capacity(text.len() * 3 / 4);
    for group in text.chunks(4) {
        let mut bits = 0u32;
        for (i, c) in group.iter().enumerate() {
            bits |= value(*c)? << (18 - 6 * i);
        }
        let bytes = bits.to_be_bytes();
        out.extend_from_slice(&bytes[1..group.len()]);
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn apply_all(updates: serde_json::Value) -> SessionState {
        let mut state = SessionState::new();
        for update in updates.as_array().unwrap() {
            let update: SessionUpdate = serde_json::from_value(update.clone()).unwrap();
            state.apply(&update);
        }
        state
    }

    fn text(block: &ContentBlock) -> String {
        serde_json::to_value(block).unwrap()["text"].as_str().unwrap().to_owned()
    }

    #[test]
    fn messages_replace_append_and_clear_as_the_spec_says() {
        // The spec's own example: [A], then chunk B → [A, B]; then whole [C] → [C]; chunk D → [C, D].
        let state = apply_all(json!([
            {"sessionUpdate": "agent_message", "messageId": "m", "content": [{"type": "text", "text": "A"}]},
            {"sessionUpdate": "agent_message_chunk", "messageId": "m", "content": {"type": "text", "text": "B"}},
            {"sessionUpdate": "user_message", "messageId": "u", "content": [{"type": "text", "text": "hi"}]},
        ]));
        let m = state.message_by_id(&"m".to_owned().into()).unwrap();
        assert_eq!(m.content.iter().map(text).collect::<Vec<_>>(), ["A", "B"]);
        assert_eq!(m.role, Role::Agent);
        let mut state = state;
        for update in [
            json!({"sessionUpdate": "agent_message", "messageId": "m", "content": [{"type": "text", "text": "C"}]}),
            json!({"sessionUpdate": "agent_message_chunk", "messageId": "m", "content": {"type": "text", "text": "D"}}),
            json!({"sessionUpdate": "agent_message", "messageId": "m"}),
        ] {
            state.apply(&serde_json::from_value(update).unwrap());
        }
        let m = state.message_by_id(&"m".to_owned().into()).unwrap();
        assert_eq!(m.content.iter().map(text).collect::<Vec<_>>(), ["C", "D"], "omitted content leaves it");
        for clear in [json!(null), json!([])] {
            let mut state = state.clone();
            state.apply(
                &serde_json::from_value(json!({"sessionUpdate": "agent_message", "messageId": "m", "content": clear}))
                    .unwrap(),
            );
            assert!(state.message_by_id(&"m".to_owned().into()).unwrap().content.is_empty());
        }
        assert_eq!(state.messages.iter().map(|m| m.id.0.as_str()).collect::<Vec<_>>(), ["m", "u"], "first-seen order");
    }

    #[test]
    fn tool_calls_are_patched_field_by_field() {
        let state = apply_all(json!([
            {"sessionUpdate": "tool_call_update", "toolCallId": "t", "title": "Read", "kind": "read", "status": "pending", "rawInput": {"path": "/a"}},
            {"sessionUpdate": "tool_call_content_chunk", "toolCallId": "t", "content": {"type": "content", "content": {"type": "text", "text": "1"}}},
            {"sessionUpdate": "tool_call_content_chunk", "toolCallId": "t", "content": {"type": "content", "content": {"type": "text", "text": "2"}}},
            {"sessionUpdate": "tool_call_update", "toolCallId": "t", "status": "completed", "title": null, "rawInput": null},
        ]));
        let call = state.tool_call_by_id(&"t".to_owned().into()).unwrap();
        assert_eq!(call.status, Some(ToolCallStatus::Completed));
        assert_eq!(call.kind, Some(ToolKind::Read), "omitted: unchanged");
        assert_eq!(call.title, None, "null: cleared");
        assert_eq!(call.raw_input, None);
        assert_eq!(call.content.len(), 2, "chunks append");
        let mut state = state;
        state.apply(&serde_json::from_value(json!({"sessionUpdate": "tool_call_update", "toolCallId": "t", "content": [{"type": "content", "content": {"type": "text", "text": "3"}}]})).unwrap());
        assert_eq!(state.tool_calls[0].content.len(), 1, "a whole content replaces the chunks");
        state.apply(
            &serde_json::from_value(json!({"sessionUpdate": "tool_call_update", "toolCallId": "t", "content": []}))
                .unwrap(),
        );
        assert!(state.tool_calls[0].content.is_empty(), "[] clears");
        // A chunk for a call never seen creates it.
        state.apply(&serde_json::from_value(json!({"sessionUpdate": "tool_call_content_chunk", "toolCallId": "new", "content": {"type": "content", "content": {"type": "text", "text": "x"}}})).unwrap());
        assert_eq!(state.tool_calls.len(), 2);
        assert_eq!(state.tool_calls[1].status, None);
    }

    #[test]
    fn background_work_is_the_latest_state_updates_snapshot() {
        let running = json!({"sessionUpdate": "state_update", "state": "running",
            "background": [{"type": "terminal", "terminalId": "t1"}, {"type": "tool_call", "toolCallId": "c1"}]});
        let state = apply_all(json!([running]));
        let background = state.background.as_deref().expect("reported");
        assert!(matches!(&background[0], BackgroundWork::Terminal(t) if t.terminal_id.0 == "t1"), "{background:?}");
        assert!(matches!(&background[1], BackgroundWork::ToolCall(c) if c.tool_call_id.0 == "c1"), "{background:?}");
        // `[]`: nothing runs; omitted: not reported, so not known.
        let idle =
            json!({"sessionUpdate": "state_update", "state": "idle", "stopReason": "end_turn", "background": []});
        assert_eq!(apply_all(json!([running, idle])).background, Some(vec![]));
        let idle = json!({"sessionUpdate": "state_update", "state": "idle", "stopReason": "end_turn"});
        assert_eq!(apply_all(json!([running, idle])).background, None);
    }

    #[test]
    fn cancel_capabilities_and_terminal_sizes_are_kept_as_patched() {
        let state = apply_all(json!([
            {"sessionUpdate": "tool_call_update", "toolCallId": "c1", "capabilities": {"cancel": {}}},
            {"sessionUpdate": "terminal_update", "terminalId": "t1", "capabilities": {"cancel": {}}, "size": {"cols": 80, "rows": 24}},
        ]));
        let cancel = state.tool_calls[0].capabilities.as_ref().and_then(|c| c.cancel.clone().flatten());
        assert!(cancel.is_some(), "{:?}", state.tool_calls[0]);
        let terminal = &state.terminals[0];
        assert!(terminal.capabilities.as_ref().and_then(|c| c.cancel.clone().flatten()).is_some());
        assert_eq!(terminal.size.as_ref().map(|s| (s.cols, s.rows)), Some((80, 24)));
        // `null` clears what a patch set.
        let cleared = apply_all(json!([
            {"sessionUpdate": "tool_call_update", "toolCallId": "c1", "capabilities": {"cancel": {}}},
            {"sessionUpdate": "tool_call_update", "toolCallId": "c1", "capabilities": null},
        ]));
        assert_eq!(cleared.tool_calls[0].capabilities, None);
    }

    #[test]
    fn the_stop_reason_of_an_error_keeps_its_error() {
        let state = apply_all(json!([
            {"sessionUpdate": "state_update", "state": "idle", "stopReason": "error", "error": {"code": -32603, "message": "boom"}},
        ]));
        let Some(StopReason::Error(reason)) = &state.stop_reason else { panic!("{:?}", state.stop_reason) };
        assert_eq!(reason.error.clone().flatten().map(|e| e.message), Some("boom".to_owned()));
    }

    #[test]
    fn a_tool_calls_name_is_a_patch_field_like_the_others() {
        let mut state = apply_all(json!([
            {"sessionUpdate": "tool_call_update", "toolCallId": "t", "name": "read_file", "title": "Read"},
            {"sessionUpdate": "tool_call_update", "toolCallId": "t", "status": "completed"},
        ]));
        assert_eq!(state.tool_calls[0].name.as_deref(), Some("read_file"), "omitted: unchanged");
        state.apply(
            &serde_json::from_value(json!({"sessionUpdate": "tool_call_update", "toolCallId": "t", "name": null}))
                .unwrap(),
        );
        assert_eq!(state.tool_calls[0].name, None, "null: cleared");
    }

    #[test]
    fn terminals_are_kept_in_the_order_they_first_appeared() {
        let state = apply_all(json!([
            {"sessionUpdate": "terminal_update", "terminalId": "zeta", "command": "make"},
            {"sessionUpdate": "terminal_output_chunk", "terminalId": "alpha", "data": "aGk="},
            {"sessionUpdate": "terminal_update", "terminalId": "mid", "command": "ls"},
            {"sessionUpdate": "terminal_update", "terminalId": "zeta", "command": "make all"},
        ]));
        let ids: Vec<&str> = state.terminals.iter().map(|t| t.id.0.as_str()).collect();
        assert_eq!(ids, ["zeta", "alpha", "mid"]);
        assert_eq!(state.terminal_by_id(&"zeta".into()).unwrap().command.as_deref(), Some("make all"));
        assert!(state.terminal_by_id(&"nope".into()).is_none());
    }

    #[test]
    fn terminals_take_snapshots_and_decode_each_chunk_on_its_own() {
        // "é" split across two chunks: each chunk is valid base64 of its own bytes.
        let state = apply_all(json!([
            {"sessionUpdate": "terminal_output_chunk", "terminalId": "term", "data": "aMM="},
            {"sessionUpdate": "terminal_output_chunk", "terminalId": "term", "data": "qQ=="},
            {"sessionUpdate": "terminal_update", "terminalId": "term", "command": "echo", "cwd": "/tmp"},
        ]));
        let term = &state.terminal_by_id(&"term".into()).unwrap();
        assert_eq!(term.output, "hé".as_bytes());
        assert_eq!(term.command.as_deref(), Some("echo"));
        let mut state = state;
        state.apply(&serde_json::from_value(json!({"sessionUpdate": "terminal_update", "terminalId": "term", "output": {"data": "b2s="}, "exitStatus": {"exitCode": 0}, "command": null})).unwrap());
        let term = &state.terminal_by_id(&"term".into()).unwrap();
        assert_eq!(term.output, b"ok", "a snapshot replaces every byte before it");
        assert_eq!(term.command, None);
        assert!(term.exit_status.is_some());
        state.apply(
            &serde_json::from_value(
                json!({"sessionUpdate": "terminal_output_chunk", "terminalId": "term", "data": "not base64!"}),
            )
            .unwrap(),
        );
        assert_eq!(state.terminal_by_id(&"term".into()).unwrap().output, b"ok", "an invalid chunk is skipped");
    }

    #[test]
    fn plans_state_and_the_rest() {
        let state = apply_all(json!([
            {"sessionUpdate": "plan_update", "plan": {"type": "items", "planId": "p", "entries": [{"content": "a", "priority": "high", "status": "pending"}]}},
            {"sessionUpdate": "plan_update", "plan": {"type": "items", "planId": "p", "entries": []}},
            {"sessionUpdate": "state_update", "state": "running"},
            {"sessionUpdate": "state_update", "state": "idle", "stopReason": "end_turn"},
            {"sessionUpdate": "state_update", "state": "idle"},
            {"sessionUpdate": "session_info_update", "title": "T"},
            {"sessionUpdate": "usage_update", "used": 5, "size": 10},
            {"sessionUpdate": "hologram", "x": 1},
        ]));
        assert_eq!(state.plans.len(), 1);
        assert_eq!(state.plans[0].entries(), Some(&[][..]), "a plan update replaces the entries");
        assert_eq!(state.state, RunState::Idle);
        assert_eq!(state.stop_reason, Some(StopReason::EndTurn), "a bare idle keeps the last stop reason");
        assert_eq!(state.title.as_deref(), Some("T"));
        assert_eq!(state.usage, Some((5, 10, None)));
        assert_eq!(state.unknown.len(), 1);
        assert_eq!(state.unknown[0].tag("sessionUpdate"), Some("hologram"));
    }

    #[test]
    fn an_invalid_terminal_snapshot_keeps_the_output() {
        let mut state = SessionState::new();
        for update in [
            json!({"sessionUpdate": "terminal_output_chunk", "terminalId": "t", "data": "b2s="}),
            json!({"sessionUpdate": "terminal_update", "terminalId": "t", "output": {"data": "not base64!"}}),
        ] {
            state.apply(&serde_json::from_value(update).unwrap());
        }
        assert_eq!(state.terminal_by_id(&"t".into()).unwrap().output, b"ok");
    }

    #[test]
    fn base64_is_decoded_strictly() {
        assert_eq!(decode_base64("aGVsbG8=").unwrap(), b"hello");
        assert_eq!(decode_base64("aGVsbG8").unwrap(), b"hello");
        assert_eq!(decode_base64("").unwrap(), b"");
        assert!(decode_base64("a").is_none());
        assert!(decode_base64("a$==").is_none());
        for bad_padding in ["aGk==", "aGVsbG8===", "aGVsbG8==", "=", "aGk=a"] {
            assert!(decode_base64(bad_padding).is_none(), "{bad_padding}");
        }
    }

    fn apply(state: &mut SessionState, updates: serde_json::Value) {
        for update in updates.as_array().unwrap() {
            state.apply(&serde_json::from_value(update.clone()).unwrap());
        }
    }

    #[test]
    fn plans_of_any_content_type_are_keyed_by_id_and_removed_by_id() {
        let mut state = SessionState::new();
        apply(
            &mut state,
            json!([
                {"sessionUpdate": "plan_update", "plan": {"type": "items", "planId": "p", "entries": [{"content": "a", "priority": "high", "status": "pending"}]}},
                {"sessionUpdate": "plan_update", "plan": {"type": "_acme_markdown", "planId": "q", "text": "v1"}},
                {"sessionUpdate": "plan_update", "plan": {"type": "_acme_markdown", "planId": "q", "text": "v2"}},
                {"sessionUpdate": "plan_update", "plan": {"type": "_acme_markdown", "planId": "p", "text": "p as text"}},
            ]),
        );
        assert_eq!(state.plans.iter().map(|p| p.id.0.as_str()).collect::<Vec<_>>(), ["p", "q"]);
        assert_eq!(state.plans[0].entries(), None, "p's entries were replaced by its new content");
        let PlanUpdateContent::Other(q) = &state.plans[1].content else { panic!("{:?}", state.plans[1]) };
        assert_eq!(q.0["text"], "v2", "one copy of q, the latest");
        assert!(state.unknown.is_empty(), "{:?}", state.unknown);
        // A plan without an id cannot be told apart: the whole update is kept as it came.
        apply(&mut state, json!([{"sessionUpdate": "plan_update", "plan": {"type": "_acme"}, "_meta": {"k": 1}}]));
        assert_eq!(state.unknown.len(), 1);
        assert_eq!(state.unknown[0].tag("sessionUpdate"), Some("plan_update"));
        assert_eq!(state.unknown[0].0["_meta"]["k"], 1);
        // `plan_removed` (a draft kind, known or not to this build of the schema).
        apply(&mut state, json!([{"sessionUpdate": "plan_removed", "planId": "p"}]));
        assert_eq!(state.plans.iter().map(|p| p.id.0.as_str()).collect::<Vec<_>>(), ["q"]);
        assert_eq!(state.unknown.len(), 1, "a removal is not kept as an unknown update");
    }

    #[test]
    fn meta_is_a_patch_field_of_the_upserts_and_scoped_to_the_rest() {
        let mut state = SessionState::new();
        apply(
            &mut state,
            json!([
                {"sessionUpdate": "agent_message", "messageId": "m", "_meta": {"m": 1}},
                {"sessionUpdate": "agent_message_chunk", "messageId": "m", "content": {"type": "text", "text": "a"}, "_meta": {"chunk": 1}},
                {"sessionUpdate": "agent_message", "messageId": "m", "content": [{"type": "text", "text": "b"}]},
                {"sessionUpdate": "tool_call_update", "toolCallId": "t", "_meta": {"t": 1}},
                {"sessionUpdate": "tool_call_update", "toolCallId": "t", "title": "x"},
                {"sessionUpdate": "terminal_update", "terminalId": "x", "_meta": {"x": 1}},
                {"sessionUpdate": "session_info_update", "title": "T", "_meta": {"tags": ["a"]}},
                {"sessionUpdate": "session_info_update", "title": "T2"},
            ]),
        );
        let meta = |m: &Option<Map<String, Value>>| m.as_ref().map(|m| Value::Object(m.clone()));
        assert_eq!(meta(&state.messages[0].meta), Some(json!({"m": 1})), "omitted: unchanged; a chunk's is its own");
        assert_eq!(meta(&state.tool_calls[0].meta), Some(json!({"t": 1})));
        assert_eq!(meta(&state.terminal_by_id(&"x".into()).unwrap().meta), Some(json!({"x": 1})));
        assert_eq!(meta(&state.meta), Some(json!({"tags": ["a"]})));
        apply(
            &mut state,
            json!([
                {"sessionUpdate": "agent_message", "messageId": "m", "_meta": null},
                {"sessionUpdate": "tool_call_update", "toolCallId": "t", "_meta": null},
                {"sessionUpdate": "terminal_update", "terminalId": "x", "_meta": null},
                {"sessionUpdate": "session_info_update", "_meta": null},
            ]),
        );
        assert_eq!(state.messages[0].meta, None, "null clears");
        assert_eq!(state.tool_calls[0].meta, None);
        assert_eq!(state.terminal_by_id(&"x".into()).unwrap().meta, None);
        assert_eq!(state.meta, None);
    }

    #[test]
    fn a_new_turn_clears_the_last_stop_reason_and_a_bare_idle_keeps_it() {
        let mut state = SessionState::new();
        apply(
            &mut state,
            json!([
                {"sessionUpdate": "state_update", "state": "running"},
                {"sessionUpdate": "state_update", "state": "idle", "stopReason": "cancelled"},
                {"sessionUpdate": "state_update", "state": "idle"},
            ]),
        );
        assert_eq!(state.stop_reason, Some(StopReason::Cancelled));
        apply(&mut state, json!([{"sessionUpdate": "state_update", "state": "running"}]));
        assert_eq!(state.stop_reason, None, "the new turn has no reason yet");
        apply(&mut state, json!([{"sessionUpdate": "state_update", "state": "idle"}]));
        assert_eq!(state.stop_reason, None, "not the earlier turn's `cancelled`");
    }

    #[test]
    fn lists_edited_by_the_caller_neither_panic_nor_misdirect() {
        let mut state = SessionState::new();
        let chunk = |id: &str, text: &str| json!({"sessionUpdate": "agent_message_chunk", "messageId": id, "content": {"type": "text", "text": text}});
        apply(&mut state, json!([chunk("m1", "one"), chunk("m2", "two"), chunk("m3", "three")]));
        state.messages.remove(0);
        let m2 = state.message_by_id(&"m2".to_owned().into()).unwrap();
        assert_eq!(m2.id.0, "m2");
        apply(&mut state, json!([chunk("m3", "!")]));
        assert_eq!(state.messages[1].content.iter().map(text).collect::<Vec<_>>(), ["three", "!"]);
        state.messages.clear();
        apply(&mut state, json!([chunk("m1", "again")]));
        assert_eq!(state.messages.len(), 1);
        assert_eq!(state.message_by_id(&"m1".to_owned().into()).unwrap().content.len(), 1);
        apply(&mut state, json!([{"sessionUpdate": "tool_call_update", "toolCallId": "t", "title": "a"}]));
        state.tool_calls.clear();
        apply(&mut state, json!([{"sessionUpdate": "tool_call_update", "toolCallId": "t", "title": "b"}]));
        assert_eq!(state.tool_call_by_id(&"t".to_owned().into()).unwrap().title.as_deref(), Some("b"));
    }
}
