//! Messages from a newer peer decode and re-encode unchanged: unknown session-update kinds,
//! content-block types and enum values, and extra `_meta`. Malformed values under
//! `x-deserialize-default-on-error` fields fall back to their default instead of failing.

use acp_types::{AgentNotification, ContentBlock, SessionUpdate, StopReason, ToolCallStatus, ToolKind};
use serde_json::{Value, json};

fn roundtrip_notification(params: &Value) -> (AgentNotification, Value) {
    let decoded = AgentNotification::decode("session/update", params)
        .expect("decodes")
        .expect("session/update is a known method");
    let reencoded = serde_json::to_value(&decoded).expect("encodes");
    (decoded, reencoded)
}

#[test]
fn unknown_session_update_kind_is_kept_whole() {
    let params = json!({
        "sessionId": "sess_1",
        "update": {
            "sessionUpdate": "hologram_chunk",
            "frames": [1, 2, 3],
            "nested": {"deep": [true, null]},
            "_meta": {"vendor": "x"}
        },
        "_meta": {"trace": "abc"}
    });
    let (decoded, reencoded) = roundtrip_notification(&params);
    assert_eq!(reencoded, params);
    let AgentNotification::SessionUpdate(n) = decoded else { panic!("wrong variant: {decoded:?}") };
    assert_eq!(n.update.tag(), Some("hologram_chunk"));
    assert!(matches!(n.update, SessionUpdate::Other(_)));
    assert_eq!(n.meta.as_ref().and_then(|m| m.get("trace")), Some(&json!("abc")));
}

#[test]
fn unknown_content_block_type_is_kept_whole() {
    let params = json!({
        "sessionId": "sess_1",
        "update": {
            "sessionUpdate": "agent_message_chunk",
            "content": {"type": "video", "uri": "file:///a.mp4", "durationMs": 1200}
        }
    });
    let (decoded, reencoded) = roundtrip_notification(&params);
    assert_eq!(reencoded, params);
    let AgentNotification::SessionUpdate(n) = decoded else { panic!("wrong variant") };
    let SessionUpdate::AgentMessageChunk(chunk) = n.update else { panic!("wrong update") };
    assert!(matches!(chunk.content, ContentBlock::Other(_)));
    assert_eq!(chunk.content.tag(), Some("video"));
}

#[test]
fn unknown_enum_values_are_kept() {
    let params = json!({
        "sessionId": "sess_1",
        "update": {
            "sessionUpdate": "tool_call",
            "toolCallId": "call_1",
            "title": "Teleport",
            "kind": "teleport",
            "status": "paused"
        }
    });
    let (decoded, reencoded) = roundtrip_notification(&params);
    assert_eq!(reencoded, params);
    let AgentNotification::SessionUpdate(n) = decoded else { panic!("wrong variant") };
    let SessionUpdate::ToolCall(call) = n.update else { panic!("wrong update") };
    // `ToolKind` has a value named `other`, so its fallback variant is `Unknown`.
    assert_eq!(call.kind, Some(ToolKind::Unknown("teleport".into())));
    assert_eq!(call.status, Some(ToolCallStatus::Other("paused".into())));

    let reason: StopReason = serde_json::from_value(json!("out_of_coffee")).expect("decodes");
    assert_eq!(reason.as_str(), "out_of_coffee");
    assert_eq!(serde_json::to_value(&reason).expect("encodes"), json!("out_of_coffee"));
}

#[test]
fn malformed_lenient_fields_fall_back_to_default() {
    // `kind` and `status` are `x-deserialize-default-on-error`; `locations` also skips invalid items.
    let params = json!({
        "sessionId": "sess_1",
        "update": {
            "sessionUpdate": "tool_call",
            "toolCallId": "call_1",
            "title": "Read",
            "kind": 42,
            "status": {"not": "a status"},
            "locations": [{"path": "/a.rs"}, "garbage", {"path": "/b.rs", "line": 3}],
            "_meta": "not an object"
        }
    });
    let (decoded, _) = roundtrip_notification(&params);
    let AgentNotification::SessionUpdate(n) = decoded else { panic!("wrong variant") };
    let SessionUpdate::ToolCall(call) = n.update else { panic!("wrong update") };
    assert_eq!(call.kind, None);
    assert_eq!(call.status, None);
    assert_eq!(call.meta, None);
    let paths: Vec<&str> = call.locations.iter().flatten().map(|l| l.path.as_str()).collect();
    assert_eq!(paths, ["/a.rs", "/b.rs"]);
}

#[test]
fn a_malformed_required_field_still_fails() {
    let params = json!({"sessionId": "sess_1", "update": {"sessionUpdate": "agent_message_chunk"}});
    let err = AgentNotification::decode("session/update", &params).expect_err("content is required");
    assert!(err.to_string().contains("content"), "{err}");
}

#[test]
fn absent_and_null_stay_distinct() {
    // `signal` is optional and nullable: absent and `null` re-encode as they came.
    for status in [json!({"exitCode": 0}), json!({"exitCode": 0, "signal": null}), json!({"signal": "SIGTERM"})] {
        let decoded: acp_types::TerminalExitStatus = serde_json::from_value(status.clone()).expect("decodes");
        assert_eq!(serde_json::to_value(&decoded).expect("encodes"), status);
    }
}

#[test]
fn null_stays_apart_from_absent_for_free_form_values() {
    // `rawInput` / `rawOutput` / `Error.data` have no `type` (any JSON value): `null` is a value
    // (in an update it can mean "clear"), absent is `None`.
    use acp_types::{Error, ToolCallUpdate};
    for update in [
        json!({"toolCallId": "c1", "rawOutput": null}),
        json!({"toolCallId": "c1", "rawInput": null, "rawOutput": {"ok": true}}),
        json!({"toolCallId": "c1"}),
    ] {
        let decoded: ToolCallUpdate = serde_json::from_value(update.clone()).expect("decodes");
        assert_eq!(decoded.raw_output.is_some(), update.get("rawOutput").is_some());
        assert_eq!(serde_json::to_value(&decoded).expect("encodes"), update);
    }
    let cleared: ToolCallUpdate = serde_json::from_value(json!({"toolCallId": "c1", "rawOutput": null})).unwrap();
    assert_eq!(cleared.raw_output, Some(Value::Null));
    assert_eq!(
        serde_json::to_value(ToolCallUpdate::new("c1").raw_output(Value::Null)).unwrap(),
        json!({"toolCallId": "c1", "rawOutput": null})
    );

    for error in [json!({"code": -32603, "message": "m", "data": null}), json!({"code": -32603, "message": "m"})] {
        let decoded: Error = serde_json::from_value(error.clone()).expect("decodes");
        assert_eq!(serde_json::to_value(&decoded).expect("encodes"), error);
    }
}

#[test]
fn unknown_elicitation_scope_is_kept_without_the_mode_tag() {
    use acp_types::{CreateElicitationMode, CreateElicitationRequest, ElicitationScope};
    let scope = |r: &CreateElicitationRequest| match &r.mode {
        CreateElicitationMode::Form(form) => Some(form.scope.clone()),
        CreateElicitationMode::Url(url) => Some(url.scope.clone()),
        _ => None,
    };
    // A scope from a newer peer (neither `sessionId` nor `requestId`) inside a tagged union
    // (`mode`) flattened into the request: the fallback keeps the scope's members only, since
    // the tag belongs to the union that writes it.
    let params = json!({"message": "Sign in", "mode": "url", "elicitationId": "e1", "url": "https://example.com/a", "taskId": "t1"});
    let request: CreateElicitationRequest = serde_json::from_value(params.clone()).expect("decodes");
    assert_eq!(scope(&request), Some(ElicitationScope::Other(json!({"taskId": "t1"}))));
    assert_eq!(serde_json::to_value(&request).expect("encodes"), params);

    // The known scopes still round-trip, and so does an unknown mode (kept whole, tag included).
    let session = json!({"message": "Pick", "mode": "form", "requestedSchema": {"type": "object"}, "sessionId": "s1", "toolCallId": "c1"});
    let request_scoped = json!({"message": "Pick", "mode": "url", "elicitationId": "e2", "url": "https://example.com/b", "requestId": 7});
    let unknown_mode = json!({"message": "Pick", "mode": "hologram", "sessionId": "s1", "beam": true});
    for params in [session, request_scoped, unknown_mode] {
        let request: CreateElicitationRequest = serde_json::from_value(params.clone()).expect("decodes");
        match (params["mode"].as_str(), scope(&request)) {
            (Some("form"), Some(ElicitationScope::Session(_))) | (Some("url"), Some(ElicitationScope::Request(_))) => {}
            (Some("hologram"), None) => assert_eq!(request.mode.tag(), Some("hologram")),
            other => panic!("decoded as {other:?}"),
        }
        assert_eq!(serde_json::to_value(&request).expect("encodes"), params);
    }
}
