//! Protocol v2's upsert updates patch what they name: an omitted field leaves the stored value
//! unchanged, `null` clears it, a value replaces it (the migration page's "three-state fields").
//! The v2 types must keep the three apart through a decode and an encode, `_meta` included
//! where the schema gives it patch semantics; and a known `sessionUpdate` whose payload does not
//! fit fails instead of passing as an unknown kind.

use std::collections::BTreeSet;
use std::path::Path;

use acp_types::v2::{Nullable, SessionUpdate, ToolCallStatus, ToolCallUpdate, UserMessage};
use serde_json::{Value, json};

/// (`sessionUpdate`, definition, the required members, a value for every patch field).
const UPSERTS: &[(&str, &str, &str, &str)] = &[
    (
        "tool_call_update",
        "ToolCallUpdate",
        r#"{"toolCallId": "call_1"}"#,
        r#"{"title": "Read", "kind": "read", "status": "pending", "content": [], "locations": [{"path": "/a"}],
            "rawInput": {"path": "/a"}, "rawOutput": "done", "name": "read_file", "capabilities": {"cancel": {}},
            "_meta": {"x": 1}}"#,
    ),
    ("user_message", "UserMessage", r#"{"messageId": "m1"}"#, r#"{"content": [], "_meta": {"x": 1}}"#),
    ("agent_message", "AgentMessage", r#"{"messageId": "m1"}"#, r#"{"content": [], "_meta": {"x": 1}}"#),
    ("agent_thought", "AgentThought", r#"{"messageId": "m1"}"#, r#"{"content": [], "_meta": {"x": 1}}"#),
    (
        "terminal_update",
        "TerminalUpdate",
        r#"{"terminalId": "term_1"}"#,
        r#"{"command": "ls", "cwd": "/work", "output": {"data": "aGk="}, "exitStatus": {"exitCode": 0},
            "capabilities": {"cancel": {}}, "size": {"cols": 80, "rows": 24}, "_meta": {"x": 1}}"#,
    ),
    (
        "session_info_update",
        "SessionInfoUpdate",
        "{}",
        r#"{"title": "Fix", "updatedAt": "2026-01-01T00:00:00Z", "_meta": {"x": 1}}"#,
    ),
];

fn parse(text: &str) -> serde_json::Map<String, Value> {
    serde_json::from_str::<Value>(text).expect("valid JSON").as_object().cloned().expect("an object")
}

/// The optional members of a v2 definition, from the stable schema (the unstable features are
/// off here).
fn optional_members(definition: &str) -> BTreeSet<String> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/acp-schema/next/npm-sdk-2.4.0/v2/schema.json");
    let schema: Value = serde_json::from_str(&std::fs::read_to_string(&path).expect("the v2 schema")).expect("JSON");
    let def = &schema["$defs"][definition];
    let required: Vec<&str> =
        def["required"].as_array().map(|r| r.iter().filter_map(Value::as_str).collect()).unwrap_or_default();
    def["properties"]
        .as_object()
        .expect("properties")
        .keys()
        .filter(|k| !required.contains(&k.as_str()))
        .cloned()
        .collect()
}

fn round_trip(update: &Value) -> SessionUpdate {
    let typed: SessionUpdate = serde_json::from_value(update.clone()).unwrap_or_else(|e| panic!("{update}: {e}"));
    assert!(!matches!(typed, SessionUpdate::Other(_)), "a known kind: {update}");
    assert_eq!(&serde_json::to_value(&typed).unwrap(), update, "re-encoded unchanged");
    typed
}

#[test]
fn every_patch_field_keeps_omitted_null_and_a_value_apart() {
    for (kind, definition, required, fields) in UPSERTS {
        let fields = parse(fields);
        let covered: BTreeSet<String> = fields.keys().cloned().collect();
        assert_eq!(covered, optional_members(definition), "{definition}: every optional member is a patch field here");
        for (name, value) in &fields {
            let mut base = parse(required);
            base.insert("sessionUpdate".into(), json!(kind));
            let omitted = Value::Object(base.clone());
            let mut null = base.clone();
            null.insert(name.clone(), Value::Null);
            let mut set = base;
            set.insert(name.clone(), value.clone());
            let typed = [omitted, Value::Object(null), Value::Object(set)].map(|u| round_trip(&u));
            assert!(
                typed[0] != typed[1] && typed[1] != typed[2] && typed[0] != typed[2],
                "{kind}.{name}: omitted, null and a value decode to three different values: {typed:#?}"
            );
        }
    }
}

#[test]
fn the_three_states_read_as_nested_options() {
    let SessionUpdate::ToolCallUpdate(update) = round_trip(&json!({
        "sessionUpdate": "tool_call_update", "toolCallId": "call_1", "title": null, "status": "completed"
    })) else {
        panic!("a tool call update")
    };
    assert_eq!(update.title, Some(None), "null clears");
    assert!(update.status.as_ref().is_some_and(|s| s.is_some()), "a value replaces");
    assert_eq!(update.kind, None, "omitted leaves unchanged");
    // The same three, read through `Nullable`.
    assert!(update.title.is_null());
    assert_eq!(update.status.value(), Some(&ToolCallStatus::Completed));
    assert!(update.kind.is_absent());
    // Built the other way: a setter takes a value, or `None` for `null`.
    let patch = ToolCallUpdate::new("call_1").title(None).meta(None);
    assert_eq!(serde_json::to_value(&patch).unwrap(), json!({"toolCallId": "call_1", "title": null, "_meta": null}));
    let message = UserMessage::new("m1").meta(serde_json::Map::new());
    assert_eq!(serde_json::to_value(&message).unwrap(), json!({"messageId": "m1", "_meta": {}}));
}

#[test]
fn a_known_kind_whose_payload_does_not_fit_fails() {
    // Strict where it counts: the fallback is for kinds this version does not know.
    for bad in [
        json!({"sessionUpdate": "tool_call_update", "title": "no id"}),
        json!({"sessionUpdate": "user_message", "messageId": 7}),
        json!({"sessionUpdate": "terminal_output_chunk", "terminalId": "term_1"}),
    ] {
        assert!(serde_json::from_value::<SessionUpdate>(bad.clone()).is_err(), "{bad}");
    }
    let unknown: SessionUpdate = serde_json::from_value(json!({"sessionUpdate": "_vendor_thing", "x": 1})).unwrap();
    assert!(matches!(unknown, SessionUpdate::Other(_)));
}
