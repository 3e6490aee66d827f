//! The checks of work the client can stop and work that runs beside the turn: `tool_call/cancel`
//! and `terminal/cancel` (`v2-tool-call-cancel`, `v2-terminal-cancel`,
//! `v2-cancel-capability-withdrawn`) and background work (`v2-background-work`).
//!
//! No agent has to offer cancellable work, and no prompt makes every agent offer it: the user
//! names prompts that do (`--work-prompt`), each sent on a session of its own. Each tool call or
//! terminal its turn advertises as cancellable is cancelled, first by an id the agent never made
//! (the schema asks for -32602), then by its own. Without such prompts, or when their turns
//! offer nothing cancellable, the checks are skipped, never passed. Background work is judged
//! on every state update the suite saw, whichever turn sent it.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use serde_json::{Value, json};

use super::judge::{kind_of, session_of, state_of, stop_reason_of};
use crate::checks::{Auth, CANCEL_BOUND, Outcome, new_session, prompt_params};
use crate::wire::{Agent, Observed, Reply};

/// The id the checker cancels first: one no agent made.
const UNKNOWN_ID: &str = "acp-check-work-nobody-started";

/// Which cancellable thing a turn offered.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Kind {
    ToolCall,
    Terminal,
}

impl Kind {
    const ALL: [Kind; 2] = [Kind::ToolCall, Kind::Terminal];

    pub fn check(self) -> &'static str {
        match self {
            Kind::ToolCall => "v2-tool-call-cancel",
            Kind::Terminal => "v2-terminal-cancel",
        }
    }

    fn update(self) -> &'static str {
        match self {
            Kind::ToolCall => "tool_call_update",
            Kind::Terminal => "terminal_update",
        }
    }

    fn key(self) -> &'static str {
        match self {
            Kind::ToolCall => "toolCallId",
            Kind::Terminal => "terminalId",
        }
    }

    fn method(self) -> &'static str {
        match self {
            Kind::ToolCall => "tool_call/cancel",
            Kind::Terminal => "terminal/cancel",
        }
    }

    fn name(self) -> &'static str {
        match self {
            Kind::ToolCall => "tool call",
            Kind::Terminal => "terminal",
        }
    }

    /// Whether `update` (the inner `update` object) ends this kind's work: a tool call's final
    /// status, a terminal's `exitStatus`.
    fn finished(self, update: &Value) -> bool {
        match self {
            Kind::ToolCall => ["cancelled", "completed", "failed"].iter().any(|s| update["status"] == *s),
            Kind::Terminal => update["exitStatus"].is_object(),
        }
    }
}

/// What cancelling the work of the `--work-prompt` turns found, per kind.
#[derive(Debug, Default)]
pub struct Found {
    pub cancelled: HashMap<Kind, Outcome>,
    /// Whether each cancelled piece of work stopped advertising `capabilities.cancel`.
    pub withdrawn: Vec<(Kind, String, bool)>,
    /// Why prompts gave nothing to judge (a session/new that failed, say).
    pub notes: Vec<String>,
}

impl Found {
    /// The outcome of `kind`'s check: skipped when nothing of the kind was offered.
    pub fn outcome(&self, kind: Kind, prompts: &[String]) -> Outcome {
        if let Some(outcome) = self.cancelled.get(&kind) {
            return outcome.clone();
        }
        let why = if prompts.is_empty() {
            "no --work-prompt was given (the prompt that makes the agent start cancellable work)".to_owned()
        } else {
            format!("the --work-prompt turns offered no cancellable {}", kind.name())
        };
        Outcome::Skip(self.with_notes(why))
    }

    /// `v2-cancel-capability-withdrawn`.
    pub fn withdrawal(&self, prompts: &[String]) -> Outcome {
        if self.withdrawn.is_empty() {
            let why = if prompts.is_empty() { "no --work-prompt was given" } else { "nothing was cancelled" };
            return Outcome::Skip(self.with_notes(why.to_owned()));
        }
        let kept: Vec<String> = self
            .withdrawn
            .iter()
            .filter(|(.., gone)| !gone)
            .map(|(kind, id, _)| format!("{} {id}", kind.name()))
            .collect();
        if kept.is_empty() {
            Outcome::Pass(format!("{} cancelled piece(s) of work stopped advertising cancel", self.withdrawn.len()))
        } else {
            Outcome::Fail(format!(
                "still advertises capabilities.cancel after its final status or exit (an upsert keeps an omitted \
                 member; `capabilities: null` withdraws it): {}",
                kept.join(", ")
            ))
        }
    }

    fn with_notes(&self, why: String) -> String {
        if self.notes.is_empty() { why } else { format!("{why}; {}", self.notes.join("; ")) }
    }
}

/// Sends each prompt on a new session and cancels what its turn offers as cancellable, one
/// piece of work per kind in all.
pub async fn cancel_work(agent: &Agent, prompts: &[String], cwd: &str, auth: &Auth, limit: Duration) -> Found {
    let mut found = Found::default();
    for prompt in prompts {
        if Kind::ALL.iter().all(|kind| found.cancelled.contains_key(kind)) {
            break;
        }
        let session = match new_session(agent, cwd, limit, auth).await {
            Ok(session) => session,
            Err(crate::checks::SessionError::AuthRequired(why) | crate::checks::SessionError::Failed(why)) => {
                found.notes.push(format!("session/new for {prompt:?} failed: {why}"));
                continue;
            }
        };
        let from = agent.observed(|o| o.updates.len());
        let call = agent.call_in_background("session/prompt", prompt_params(&session, prompt), limit + CANCEL_BOUND);
        let mut tried: HashSet<(Kind, String)> = HashSet::new();
        loop {
            let judged: Vec<Kind> = found.cancelled.keys().copied().collect();
            let next = |o: &Observed| offered(o, from, &session, &tried, &judged);
            agent.wait_for(limit, |o| next(o).is_some() || idle_after(o, from, &session).is_some()).await;
            let Some((kind, id)) = agent.observed(next) else { break };
            tried.insert((kind, id.clone()));
            let outcome = cancel_one(agent, &mut found, &session, kind, &id, from, limit).await;
            found.cancelled.insert(kind, outcome);
        }
        agent.wait_for(limit, |o| idle_after(o, from, &session).is_some()).await;
        let _ = tokio::time::timeout(limit, call).await;
    }
    found
}

/// The first piece of work of `session`'s turn (its updates from index `from`) that is
/// advertised as cancellable now, of a kind not judged yet and not tried yet.
fn offered(
    o: &Observed,
    from: usize,
    session: &str,
    tried: &HashSet<(Kind, String)>,
    judged: &[Kind],
) -> Option<(Kind, String)> {
    let mut advertised: Vec<(Kind, String)> = Vec::new();
    for update in o.updates.iter().skip(from).filter(|u| session_of(u) == Some(session)) {
        let inner = &update.params["update"];
        let Some(kind) = Kind::ALL.into_iter().find(|k| kind_of(update) == k.update()) else { continue };
        let Some(id) = inner[kind.key()].as_str() else { continue };
        let entry = (kind, id.to_owned());
        // An upsert keeps what it does not name: only a `capabilities` member changes them.
        if let Some(capabilities) = inner.get("capabilities") {
            advertised.retain(|e| *e != entry);
            if capabilities["cancel"].is_object() {
                advertised.push(entry.clone());
            }
        }
        if kind.finished(inner) {
            advertised.retain(|e| *e != entry);
        }
    }
    advertised.into_iter().find(|entry| !tried.contains(entry) && !judged.contains(&entry.0))
}

/// The stop reason of the first idle state_update of `session` from update `from` on (`""`
/// when it gives none).
fn idle_after<'a>(o: &'a Observed, from: usize, session: &str) -> Option<&'a str> {
    o.updates
        .iter()
        .skip(from)
        .find(|u| session_of(u) == Some(session) && state_of(u) == Some("idle"))
        .map(|u| stop_reason_of(u).unwrap_or(""))
}

/// Cancels one piece of work and judges what follows.
async fn cancel_one(
    agent: &Agent,
    found: &mut Found,
    session: &str,
    kind: Kind,
    id: &str,
    from: usize,
    limit: Duration,
) -> Outcome {
    let method = kind.method();
    let unknown = agent.call(method, json!({"sessionId": session, kind.key(): UNKNOWN_ID}), limit).await;
    let refused = matches!(&unknown, Reply::Error(e) if e.code == -32602);
    let before = agent.observed(|o| o.updates.len());
    let real = agent.call(method, json!({"sessionId": session, kind.key(): id}), limit).await;
    let answered = matches!(real, Reply::Result(_));
    let finished = answered
        && agent.wait_for(limit + CANCEL_BOUND, |o| final_update(o, before, session, kind, id).is_some()).await;
    // Later updates may still withdraw the capability or end the turn; give them a moment.
    if finished {
        agent.wait_for(CANCEL_BOUND, |o| idle_after(o, from, session).is_some()).await;
        let advertising = agent.observed(|o| still_advertised(o, from, session, kind, id));
        found.withdrawn.push((kind, id.to_owned(), !advertising));
    }
    let stop = agent.observed(|o| idle_after(o, from, session).map(str::to_owned));
    if !refused {
        return Outcome::Fail(format!(
            "{method} of an id the agent never made got {}; the schema asks for -32602",
            unknown.describe()
        ));
    }
    if !answered {
        return Outcome::Fail(format!("{method} of the advertised {} {id} got {}", kind.name(), real.describe()));
    }
    if !finished {
        let what = match kind {
            Kind::ToolCall => "a final status (cancelled, completed or failed)",
            Kind::Terminal => "its exitStatus",
        };
        return Outcome::Fail(format!(
            "{method} of {} {id} was answered, but no {} reported {what} within {} ms",
            kind.name(),
            kind.update(),
            (limit + CANCEL_BOUND).as_millis()
        ));
    }
    let ending = agent.observed(|o| final_update(o, before, session, kind, id).cloned()).unwrap_or(Value::Null);
    let status = match kind {
        Kind::ToolCall => format!("status {}", ending["status"]),
        Kind::Terminal => format!("exitStatus {}", ending["exitStatus"]),
    };
    match stop.as_deref() {
        Some("cancelled") => Outcome::Fail(format!(
            "cancelling {} {id} ended the turn `cancelled`: cancelling one piece of work does not change the \
             foreground state by itself",
            kind.name()
        )),
        Some(reason) => Outcome::Pass(format!(
            "-32602 for an unknown id; {} {id} answered, then {status}; the turn went on to `{reason}`",
            kind.name()
        )),
        None => Outcome::Pass(format!(
            "-32602 for an unknown id; {} {id} answered, then {status}; the turn was still running",
            kind.name()
        )),
    }
}

/// The update (inner object) that ended the work `id`, read from index `from` on.
fn final_update<'a>(o: &'a Observed, from: usize, session: &str, kind: Kind, id: &str) -> Option<&'a Value> {
    o.updates
        .iter()
        .skip(from)
        .filter(|u| session_of(u) == Some(session) && kind_of(u) == kind.update())
        .map(|u| &u.params["update"])
        .find(|inner| inner[kind.key()] == id && kind.finished(inner))
}

/// Whether the work `id` advertises `capabilities.cancel` after all the updates read so far.
fn still_advertised(o: &Observed, from: usize, session: &str, kind: Kind, id: &str) -> bool {
    o.updates
        .iter()
        .skip(from)
        .filter(|u| session_of(u) == Some(session) && kind_of(u) == kind.update())
        .map(|u| &u.params["update"])
        .filter(|inner| inner[kind.key()] == id)
        .rev()
        .find_map(|inner| inner.get("capabilities"))
        .is_some_and(|capabilities| capabilities["cancel"].is_object())
}

// ---- background work ------------------------------------------------------------------------

/// `v2-background-work`: every `background` snapshot, on every process the suite ran. Once a
/// session reports one, each later state update of it carries one; an item names a tool call or
/// terminal announced before it, once; an item leaves the list only after its final status (a
/// terminal's `exitStatus`).
pub fn judge_background(observed: &[&Observed]) -> Outcome {
    let mut snapshots = 0;
    let mut problems: Vec<String> = Vec::new();
    for o in observed {
        let mut sessions: HashMap<&str, Session> = HashMap::new();
        for update in &o.updates {
            let Some(id) = session_of(update) else { continue };
            let session = sessions.entry(id).or_default();
            let inner = &update.params["update"];
            for kind in Kind::ALL {
                let work = inner[kind.key()].as_str().filter(|_| kind_of(update) == kind.update());
                if let Some(work) = work {
                    session.announced.insert((kind, work.to_owned()));
                    if kind.finished(inner) {
                        session.finished.insert((kind, work.to_owned()));
                    }
                }
            }
            if state_of(update).is_none() {
                continue;
            }
            match inner.get("background").filter(|b| !b.is_null()) {
                None if session.listed.is_some() => {
                    problems.push(format!("session {id}: a state_update without `background` after one with it"))
                }
                None => {}
                Some(Value::Array(items)) => {
                    snapshots += 1;
                    let listed = session.judge(items, id, &mut problems);
                    session.listed = Some(listed);
                }
                Some(other) => problems.push(format!("session {id}: `background` is not a list: {other}")),
            }
        }
    }
    problems.dedup();
    match (snapshots, problems.is_empty()) {
        (0, true) => Outcome::Skip("the agent reported no background work (no `background` on a state_update)".into()),
        (n, true) => Outcome::Pass(format!("{n} background snapshot(s), each complete and consistent")),
        (_, false) => Outcome::Fail(problems.into_iter().take(3).collect::<Vec<_>>().join("; ")),
    }
}

/// What one session has shown of its work.
#[derive(Default)]
struct Session {
    announced: HashSet<(Kind, String)>,
    finished: HashSet<(Kind, String)>,
    /// The last snapshot: `None` until the session reports one.
    listed: Option<HashSet<(Kind, String)>>,
}

impl Session {
    /// Judges one snapshot; what it lists (tool calls and terminals; other kinds are custom).
    fn judge(&self, items: &[Value], id: &str, problems: &mut Vec<String>) -> HashSet<(Kind, String)> {
        let mut listed = HashSet::new();
        for item in items {
            let kind = match item["type"].as_str() {
                Some("tool_call") => Kind::ToolCall,
                Some("terminal") => Kind::Terminal,
                _ => continue,
            };
            let Some(work) = item[kind.key()].as_str() else {
                problems.push(format!("session {id}: a background {} without its {}: {item}", kind.name(), kind.key()));
                continue;
            };
            let entry = (kind, work.to_owned());
            if !self.announced.contains(&entry) {
                problems.push(format!("session {id}: background lists {} {work}, never announced before", kind.name()));
            }
            if !listed.insert(entry) {
                problems.push(format!("session {id}: background lists {} {work} twice", kind.name()));
            }
        }
        for gone in self.listed.iter().flatten().filter(|entry| !listed.contains(*entry)) {
            if !self.finished.contains(gone) {
                let (kind, work) = gone;
                problems.push(format!(
                    "session {id}: {} {work} left the background list before its {}",
                    kind.name(),
                    if *kind == Kind::ToolCall { "final status" } else { "exitStatus" }
                ));
            }
        }
        listed
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::Update;

    fn observed(updates: &[Value]) -> Observed {
        let mut o = Observed::default();
        for (seq, update) in updates.iter().enumerate() {
            o.updates.push(Update {
                params: json!({"sessionId": "s", "update": update}),
                decoded: Err("not decoded in this test".into()),
                at: std::time::Instant::now(),
                seq,
            });
        }
        o
    }

    fn state(background: Value) -> Value {
        json!({"sessionUpdate": "state_update", "state": "running", "background": background})
    }

    fn call(id: &str, status: &str) -> Value {
        json!({"sessionUpdate": "tool_call_update", "toolCallId": id, "status": status})
    }

    #[test]
    fn background_work_is_judged_only_when_reported() {
        let o = observed(&[json!({"sessionUpdate": "state_update", "state": "idle", "stopReason": "end_turn"})]);
        assert!(matches!(judge_background(&[&o]), Outcome::Skip(_)));
    }

    #[test]
    fn consistent_background_snapshots_pass() {
        let o = observed(&[
            state(json!([])),
            call("watch", "in_progress"),
            state(json!([{"type": "tool_call", "toolCallId": "watch"}, {"type": "_custom"}])),
            call("watch", "completed"),
            state(json!([])),
        ]);
        let outcome = judge_background(&[&o]);
        assert!(matches!(&outcome, Outcome::Pass(d) if d.starts_with("3 background")), "{outcome:?}");
    }

    #[test]
    fn each_broken_rule_of_background_work_fails() {
        let cases = [
            (vec![state(json!([{"type": "tool_call", "toolCallId": "ghost"}]))], "never announced"),
            (
                vec![
                    call("w", "in_progress"),
                    state(json!([{"type": "tool_call", "toolCallId": "w"}])),
                    state(json!([])),
                ],
                "left the background list before its final status",
            ),
            (vec![state(json!([])), json!({"sessionUpdate": "state_update", "state": "idle"})], "without `background`"),
            (
                vec![
                    call("w", "in_progress"),
                    state(json!([{"type": "tool_call", "toolCallId": "w"}, {"type": "tool_call", "toolCallId": "w"}])),
                ],
                "twice",
            ),
            (vec![state(json!({"type": "tool_call"}))], "not a list"),
        ];
        for (updates, expected) in cases {
            let outcome = judge_background(&[&observed(&updates)]);
            assert!(matches!(&outcome, Outcome::Fail(d) if d.contains(expected)), "{expected}: {outcome:?}");
        }
    }

    #[test]
    fn the_offered_work_follows_the_upserts() {
        let cancellable = |id: &str| {
            json!({"sessionUpdate": "tool_call_update", "toolCallId": id, "status": "in_progress",
                   "capabilities": {"cancel": {}}})
        };
        let none = HashSet::new();
        let o = observed(&[cancellable("a"), json!({"sessionUpdate": "tool_call_update", "toolCallId": "a"})]);
        assert_eq!(offered(&o, 0, "s", &none, &[]), Some((Kind::ToolCall, "a".into())), "an omitted member keeps it");
        let o = observed(&[
            cancellable("a"),
            json!({"sessionUpdate": "tool_call_update", "toolCallId": "a",
                                                    "capabilities": null}),
        ]);
        assert_eq!(offered(&o, 0, "s", &none, &[]), None, "null withdraws it");
        let o = observed(&[cancellable("a"), call("a", "completed")]);
        assert_eq!(offered(&o, 0, "s", &none, &[]), None, "a final status ends it");
        let o = observed(&[cancellable("a")]);
        assert_eq!(offered(&o, 0, "s", &none, &[Kind::ToolCall]), None, "one per kind");
        assert!(still_advertised(&o, 0, "s", Kind::ToolCall, "a"));
    }
}
