//! The typed layer end to end over the in-memory duplex: an agent written directly against
//! `acp_types::Agent<AgentContext>`, a client against `acp_types::Client<ClientContext>`.
//! A full prompt turn, cancellation mid-turn, and the terminal handle's lifecycle.

mod typed_common;

use std::time::{Duration, Instant};

use acp_types::*;
use typed_common::*;

fn kind(update: &SessionUpdate) -> String {
    match update {
        SessionUpdate::Plan(p) => format!("plan({})", p.entries.len()),
        SessionUpdate::AgentMessageChunk(c) => match &c.content {
            ContentBlock::Text(t) => format!("agent_message_chunk({})", t.text),
            other => format!("agent_message_chunk({other:?})"),
        },
        SessionUpdate::ToolCall(t) => format!("tool_call({}, {:?})", t.tool_call_id.0, t.status),
        SessionUpdate::ToolCallUpdate(t) => {
            format!("tool_call_update({}, {:?}, content: {})", t.tool_call_id.0, t.status, t.content.is_some())
        }
        other => format!("{other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn typed_full_prompt_turn_client_sees_every_update_in_order_when_prompt_returns() {
    let pair = pair();
    let session = start_session(&pair.agent).await;
    assert_eq!(session.0, SESSION);

    let response = tokio::time::timeout(LIMIT, pair.agent.prompt(prompt("full turn"))).await.unwrap().unwrap();
    assert_eq!(response.stop_reason, StopReason::EndTurn);

    // Contract 3: every update of the turn has been handled by the time `prompt` returns.
    let updates: Vec<String> = pair.client_log.updates.lock().unwrap().iter().map(kind).collect();
    assert_eq!(
        updates,
        [
            "plan(1)",
            "agent_message_chunk(Let me read it.)",
            "tool_call(call_1, Some(Pending))",
            "tool_call_update(call_1, Some(Some(InProgress)), content: false)",
            "tool_call_update(call_1, Some(Some(Completed)), content: true)",
        ]
    );
    let last = pair.client_log.updates.lock().unwrap().last().cloned().unwrap();
    let SessionUpdate::ToolCallUpdate(last) = last else { unreachable!() };
    let Some(content) = last.content.into_value() else { panic!("no content") };
    assert!(matches!(&content[0], ToolCallContent::Content(c) if c.content == text("contents of a.txt")));

    // The agent's calls reached the client in order (each awaited before the next).
    assert_eq!(*pair.client_log.requests.lock().unwrap(), ["permission call_1", "read /work/a.txt"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn typed_cancel_mid_turn_resolves_the_pending_permission_on_both_sides_and_prompt_returns_cancelled() {
    let mut pair = pair();
    let session = start_session(&pair.agent).await;

    let agent = pair.agent.clone();
    let turn = tokio::spawn(async move { agent.prompt(prompt("wait for permission")).await });
    // The permission request is pending on the client (its dialog is open).
    assert_eq!(next(&mut pair.client_events).await, ClientEvent::PermissionPending("call_wait".into()));

    let t0 = Instant::now();
    pair.agent.cancel(CancelNotification::new(session.clone())).await.unwrap();
    let response = tokio::time::timeout(LIMIT, turn).await.unwrap().unwrap().unwrap();
    let elapsed = t0.elapsed();
    assert_eq!(response.stop_reason, StopReason::Cancelled);
    assert!(elapsed < Duration::from_millis(100), "prompt took {elapsed:?} to return after session/cancel");

    // Client side: the dialog's token fired (the runtime answered `cancelled` for it).
    assert_eq!(next(&mut pair.client_events).await, ClientEvent::PermissionCancelled("call_wait".into()));
    // Agent side: the permission request resolved with the `cancelled` outcome.
    let mut outcome = None;
    let mut cancel_seen = false;
    while outcome.is_none() || !cancel_seen {
        match next(&mut pair.agent_events).await {
            AgentEvent::PermissionOutcome(o) => outcome = Some(o),
            AgentEvent::Cancel(s) => {
                assert_eq!(s, session.0);
                cancel_seen = true;
            }
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(outcome, Some(RequestPermissionOutcome::Cancelled));

    // The connection goes on: the next turn works.
    let response = pair.agent.prompt(prompt("full turn")).await.unwrap();
    assert_eq!(response.stop_reason, StopReason::EndTurn);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn typed_permission_request_through_a_cancelled_context_resolves_cancelled_at_once() {
    // The agent side alone: the handle bound to a cancelled token answers without asking.
    let pair = pair();
    start_session(&pair.agent).await;
    let token = tokio_util::sync::CancellationToken::new();
    let bound = pair.client_handle.bound_to(token.clone());
    let options = vec![PermissionOption::new("allow", "Allow", PermissionOptionKind::AllowOnce)];
    let request = RequestPermissionRequest::new(SESSION, ToolCallUpdate::new("call_wait"), options);
    let pending = tokio::spawn({
        let bound = bound.clone();
        let request = request.clone();
        async move { bound.request_permission(request).await }
    });
    let mut pair = pair;
    assert_eq!(next(&mut pair.client_events).await, ClientEvent::PermissionPending("call_wait".into()));
    token.cancel();
    let answer = tokio::time::timeout(LIMIT, pending).await.unwrap().unwrap().unwrap();
    assert_eq!(answer.outcome, RequestPermissionOutcome::Cancelled);
    // `$/cancel_request` reached the client: its handler's token fired.
    assert_eq!(next(&mut pair.client_events).await, ClientEvent::PermissionCancelled("call_wait".into()));
    // Already cancelled: resolved without bothering the client.
    let again = bound.request_permission(request).await.unwrap();
    assert_eq!(again.outcome, RequestPermissionOutcome::Cancelled);
    assert_eq!(pair.client_log.requests.lock().unwrap().len(), 1);
    // Other calls through the cancelled handle fail as cancelled; unbound ones go through.
    let read = bound.read_text_file(ReadTextFileRequest::new(SESSION, "/x")).await;
    assert!(matches!(read, Err(acp_rpc::Error::Cancelled)), "{read:?}");
    bound.unbound().read_text_file(ReadTextFileRequest::new(SESSION, "/x")).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn typed_terminal_lifecycle_and_release_on_drop() {
    let mut pair = pair();
    start_session(&pair.agent).await;
    let response = tokio::time::timeout(LIMIT, pair.agent.prompt(prompt("terminals"))).await.unwrap().unwrap();
    assert_eq!(response.stop_reason, StopReason::EndTurn);

    match next(&mut pair.agent_events).await {
        AgentEvent::Call(what, Ok(v)) if what == "terminal" => {
            assert_eq!(v, serde_json::json!({"id": "term_1", "output": "hello\n", "exitCode": Some(Some(0))}));
        }
        other => panic!("unexpected {other:?}"),
    }
    // The explicit release, then the one sent when the second handle was dropped.
    assert_eq!(next(&mut pair.client_events).await, ClientEvent::Released("term_1".into()));
    assert_eq!(next(&mut pair.client_events).await, ClientEvent::Released("term_2".into()));
    assert_eq!(
        *pair.client_log.requests.lock().unwrap(),
        [
            "terminal/create echo term_1",
            "terminal/output term_1",
            "terminal/wait_for_exit term_1",
            "terminal/kill term_1",
            "terminal/release term_1",
            "terminal/create echo term_2",
            "terminal/release term_2",
        ]
    );
}
