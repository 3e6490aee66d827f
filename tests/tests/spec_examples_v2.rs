//! Every ```json example of the protocol v2 spec pages (../shared/acp-spec/v2) decodes into its
//! typed value and re-encodes to the same JSON value, without passing through a fallback
//! variant.
//!
//! Whole JSON-RPC messages are directed by their method, as in the v1 test (`spec_examples.rs`):
//! a response by the method of the request with the same id earlier on the page, or, without
//! one, by what its result holds (`protocolVersion` → `initialize`, `sessionId` →
//! `session/new`). The other blocks are payloads, typed by what they hold (see
//! `spec::payload_type`): a tagged value by its tag (`sessionUpdate`, or `type` with the values
//! of one union), a few objects by members only their type has, and an excerpt of a message's
//! params member by member ([`EXCERPT_MEMBERS`]). A block none of these rules types fails.
//!
//! The migration page shows v1 examples next to the v2 ones: a block labelled `v1` (```json
//! v1 request) or under a `v1: ...` heading is decoded with the v1 types instead.
//!
//! [`KNOWN_SPEC_ERRATA`] lists the examples that contradict the schema; the test asserts they
//! still fail, so a fix upstream shows up here.

use acp_types::v2;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;
use spec::{Content, Protocol, named_request, payload_type, protocol_of, reencode};

mod spec;

/// (page, example number, why): examples whose JSON does not match the schema.
const KNOWN_SPEC_ERRATA: &[(&str, usize, &str)] = &[
    ("authentication.mdx", 1, "an `initialize` result without `info`, which v2 requires"),
    ("authentication.mdx", 4, "an `initialize` request without `info`, which v2 requires"),
    (
        "extensibility.mdx",
        6,
        "an `initialize` result without `info`, which v2 requires, advertising `session.load`, which v2 removed \
         (with `session/load`)",
    ),
    ("session-delete.mdx", 1, "an `initialize` result without `info`, which v2 requires"),
    ("session-setup.mdx", 13, "an `initialize` result without `info`, which v2 requires"),
    // The pages predate the schema the bindings follow (npm-sdk-2.4.0), whose descriptions win.
    ("migration.mdx", 8, "a `session/prompt` result without `messageId`, which the schema now requires"),
    ("prompt-lifecycle.mdx", 2, "a `session/prompt` result without `messageId`, which the schema now requires"),
    ("migration.mdx", 26, "an available command without `type`: commands are a tagged union now"),
    (
        "slash-commands.mdx",
        1,
        "available commands without `type`, which the schema's lenient list drops: commands are a tagged union now",
    ),
];

/// Members of a params object that a page shows on their own (an excerpt of a message), with
/// the types they may have: the first that round-trips is the member's.
const EXCERPT_MEMBERS: &[(&str, &[&str])] = &[
    // `initialize`: the client's capabilities in the request, the agent's in the result.
    ("capabilities", &["ClientCapabilities", "AgentCapabilities"]),
    // `session/new`, `session/resume`.
    ("mcpServers", &["[McpServer]"]),
    // `session/request_permission`.
    ("title", &["string"]),
    ("description", &["string"]),
    ("subject", &["RequestPermissionSubject"]),
    ("options", &["[PermissionOption]"]),
];

/// Decodes `value` as `T` and re-encodes it.
fn roundtrip<T: DeserializeOwned + Serialize + std::fmt::Debug>(value: &Value) -> Result<Value, String> {
    let typed: T = serde_json::from_value(value.clone()).map_err(|e| e.to_string())?;
    reencode(&typed)
}

/// Decodes a payload as the v2 type named `ty` and re-encodes it.
fn payload_v2(ty: &str, value: &Value) -> Result<Value, String> {
    use v2::*;
    match ty {
        "SessionUpdate" => roundtrip::<SessionUpdate>(value),
        "AuthMethod" => roundtrip::<AuthMethod>(value),
        "SessionConfigOption" => roundtrip::<SessionConfigOption>(value),
        "ContentBlock" => roundtrip::<ContentBlock>(value),
        "ToolCallContent" => roundtrip::<ToolCallContent>(value),
        "McpServer" => roundtrip::<McpServer>(value),
        "[McpServer]" => roundtrip::<Vec<McpServer>>(value),
        "[PermissionOption]" => roundtrip::<Vec<PermissionOption>>(value),
        "RequestPermissionSubject" => roundtrip::<RequestPermissionSubject>(value),
        "AvailableCommand" => roundtrip::<AvailableCommand>(value),
        "ToolCallLocation" => roundtrip::<ToolCallLocation>(value),
        "ClientCapabilities" => roundtrip::<ClientCapabilities>(value),
        "AgentCapabilities" => roundtrip::<AgentCapabilities>(value),
        "string" => roundtrip::<String>(value),
        _ => Err(format!("no v2 type `{ty}` in this test")),
    }
}

/// Decodes a payload as the v1 type named `ty` and re-encodes it.
fn payload_v1(ty: &str, value: &Value) -> Result<Value, String> {
    use acp_types::*;
    match ty {
        "SessionUpdate" => roundtrip::<SessionUpdate>(value),
        "AvailableCommand" => roundtrip::<AvailableCommand>(value),
        _ => Err(format!("no v1 type `{ty}` in this test")),
    }
}

/// Round-trips a payload block: by its type, or member by member as an excerpt of params.
fn roundtrip_payload(protocol: Protocol, value: &Value) -> Result<Value, String> {
    let decode = |ty: &str, v: &Value| match protocol {
        Protocol::V1 => payload_v1(ty, v),
        Protocol::V2 => payload_v2(ty, v),
    };
    if let Some(ty) = payload_type(value) {
        return decode(ty, value).map_err(|e| format!("as `{ty}`: {e}"));
    }
    let obj = value.as_object().ok_or("a payload that is not an object")?;
    let mut out = serde_json::Map::new();
    for (key, member) in obj {
        let Some((_, types)) = EXCERPT_MEMBERS.iter().find(|(k, _)| k == key) else {
            return Err(format!("no rule types this payload (member `{key}`)"));
        };
        // The first type the member round-trips through exactly.
        let mut errors = Vec::new();
        let typed = types.iter().find_map(|ty| match decode(ty, member) {
            Ok(re) if &re == member => Some(re),
            Ok(re) => {
                errors.push(format!("as `{ty}` re-encoded as {re}"));
                None
            }
            Err(e) => {
                errors.push(format!("as `{ty}`: {e}"));
                None
            }
        });
        out.insert(key.clone(), typed.ok_or_else(|| format!("member `{key}`: {}", errors.join("; ")))?);
    }
    Ok(Value::Object(out))
}

/// Decodes the params of a request or notification by method, trying both directions.
fn roundtrip_call(protocol: Protocol, method: &str, params: &Value, is_request: bool) -> Result<Value, String> {
    let err = |e: serde_json::Error| format!("{method}: {e}");
    macro_rules! decode {
        ($($ty:path),*) => {
            vec![$(<$ty>::decode(method, params).map_err(err)?.map(|r| reencode(&r))),*]
        };
    }
    let decoded: Vec<Option<Result<Value, String>>> = match (protocol, is_request) {
        (Protocol::V2, true) => decode!(v2::ClientRequest, v2::AgentRequest),
        (Protocol::V2, false) => decode!(v2::ClientNotification, v2::AgentNotification, v2::ProtocolLevelNotification),
        (Protocol::V1, true) => decode!(acp_types::ClientRequest, acp_types::AgentRequest),
        (Protocol::V1, false) => {
            decode!(acp_types::ClientNotification, acp_types::AgentNotification, acp_types::ProtocolLevelNotification)
        }
    };
    decoded.into_iter().flatten().next().unwrap_or_else(|| Err(format!("no typed message knows method `{method}`")))
}

fn roundtrip_result(protocol: Protocol, method: &str, result: &Value) -> Result<Value, String> {
    let err = |e: serde_json::Error| format!("result of {method}: {e}");
    let decoded = match protocol {
        Protocol::V2 => vec![
            v2::AgentResponse::decode(method, result).map_err(err)?.map(|r| reencode(&r)),
            v2::ClientResponse::decode(method, result).map_err(err)?.map(|r| reencode(&r)),
        ],
        Protocol::V1 => vec![
            acp_types::AgentResponse::decode(method, result).map_err(err)?.map(|r| reencode(&r)),
            acp_types::ClientResponse::decode(method, result).map_err(err)?.map(|r| reencode(&r)),
        ],
    };
    decoded.into_iter().flatten().next().unwrap_or_else(|| Err(format!("no typed response knows method `{method}`")))
}

/// An error object's round trip.
fn roundtrip_error(protocol: Protocol, error: &Value) -> Result<Value, String> {
    match protocol {
        Protocol::V2 => roundtrip::<v2::Error>(error),
        Protocol::V1 => roundtrip::<acp_types::Error>(error),
    }
}

#[test]
fn payloads_are_typed_by_what_they_hold() {
    let ty = |v: Value| payload_type(&v);
    assert_eq!(ty(serde_json::json!({"sessionUpdate": "plan_update", "plan": {}})), Some("SessionUpdate"));
    assert_eq!(ty(serde_json::json!({"type": "terminal", "terminalId": "t"})), Some("ToolCallContent"));
    assert_eq!(ty(serde_json::json!({"type": "terminal", "methodId": "m", "name": "n"})), Some("AuthMethod"));
    assert_eq!(ty(serde_json::json!({"path": "/a", "line": 1})), Some("ToolCallLocation"));
    assert_eq!(ty(serde_json::json!({"path": "/a", "operation": "add"})), None, "a change is not a location");
    // An excerpt is typed member by member; a member no rule knows fails.
    let excerpt = serde_json::json!({"title": "Run?", "subject": {"type": "command", "command": "ls", "cwd": "/"}});
    assert_eq!(roundtrip_payload(Protocol::V2, &excerpt), Ok(excerpt.clone()));
    let unknown = serde_json::json!({"title": "Run?", "colour": "red"});
    assert!(roundtrip_payload(Protocol::V2, &unknown).is_err_and(|e| e.contains("`colour`")));
    // A known tag whose payload does not fit fails; it does not fall back to `Other`.
    let malformed = serde_json::json!({"sessionUpdate": "tool_call_update", "title": "no id"});
    assert!(roundtrip_payload(Protocol::V2, &malformed).is_err_and(|e| e.contains("toolCallId")));
    // An unknown one decodes, into the fallback variant, which the test counts as a failure.
    let unknown = serde_json::json!({"sessionUpdate": "hologram"});
    assert!(roundtrip_payload(Protocol::V2, &unknown).is_err_and(|e| e.contains("fallback")));
}

#[test]
fn v1_examples_are_told_apart_by_label_or_heading() {
    let block = |label: &str, heading: &str| spec::Block {
        label: label.into(),
        heading: heading.into(),
        prose: String::new(),
        text: String::new(),
    };
    assert_eq!(protocol_of(&block("v1 request", "Role-agnostic `info`")), Protocol::V1);
    assert_eq!(protocol_of(&block("", "v1: the response is the turn")), Protocol::V1);
    assert_eq!(protocol_of(&block("v2 request", "Role-agnostic `info`")), Protocol::V2);
    assert_eq!(protocol_of(&block("", "v2: the response is an acknowledgment")), Protocol::V2);
    assert_eq!(protocol_of(&block("", "v1.5 notes")), Protocol::V2);
}

#[test]
fn a_bare_response_answers_the_request_the_prose_names() {
    let prose = "The Agent **MUST** respond to `session/prompt` once it accepted it, before any `session/update`:";
    assert_eq!(named_request(Protocol::V2, prose).as_deref(), Some("session/prompt"));
    assert_eq!(named_request(Protocol::V2, "Send `session/update` and `session/cancel`."), None, "notifications");
    assert_eq!(named_request(Protocol::V2, "`session/set_mode` is gone."), None, "not a v2 method");
    assert_eq!(named_request(Protocol::V1, "`session/set_mode` is gone.").as_deref(), Some("session/set_mode"));
}

#[test]
fn every_v2_example_round_trips() {
    let (pages, examples) = spec::examples(Protocol::V2);
    let (mut blocks, mut messages, mut payloads, mut v1, mut errata, mut failures) = (0, 0, 0, 0, 0, Vec::new());
    for example in &examples {
        blocks += 1;
        let where_ = example.place();
        let protocol = example.protocol;
        if protocol == Protocol::V1 {
            v1 += 1;
        }
        let outcome = match &example.content {
            Content::NotJson(e) => {
                failures.push(format!("{where_}: not JSON even after eliding `[...]`: {e}"));
                continue;
            }
            Content::Payload(value) => {
                payloads += 1;
                roundtrip_payload(protocol, value).map(|re| (value.clone(), re))
            }
            Content::Call { method, params, request } => {
                messages += 1;
                roundtrip_call(protocol, method, params, *request).map(|re| (params.clone(), re))
            }
            Content::Error(error) => {
                messages += 1;
                roundtrip_error(protocol, error).map(|re| (error.clone(), re))
            }
            Content::Result { id, method, result } => {
                messages += 1;
                match method {
                    // `null` is the pages' way of writing "nothing": the empty result.
                    Some(method) => {
                        let original =
                            if result.is_null() { Value::Object(Default::default()) } else { result.clone() };
                        roundtrip_result(protocol, method, result).map(|re| (original, re))
                    }
                    None => Err(format!("a response to id {id} with no request before it")),
                }
            }
            Content::Neither => {
                messages += 1;
                Err("neither a method nor an id".to_owned())
            }
        };
        let erratum = KNOWN_SPEC_ERRATA.iter().find(|(p, n, _)| *p == example.page && *n == example.number);
        match (outcome, erratum) {
            (Ok((original, reencoded)), Some((_, _, why))) if original == reencoded => failures
                .push(format!("{where_}: listed as an erratum ({why}) but now round-trips; remove it from the list")),
            (Ok(_) | Err(_), Some(_)) => errata += 1,
            (Ok((original, reencoded)), None) if original == reencoded => {}
            (Ok((original, reencoded)), None) => {
                failures.push(format!("{where_}: re-encoded differently\n  spec:  {original}\n  typed: {reencoded}"))
            }
            (Err(e), None) => failures.push(format!("{where_} ({protocol:?}): {e}")),
        }
    }
    println!(
        "v2 spec examples: {blocks} blocks on {pages} pages ({messages} whole messages, {payloads} payloads; {v1} of \
         them v1 examples); {} round-trip, {errata} known errata, {} failed",
        blocks - errata - failures.len(),
        failures.len()
    );
    assert_eq!(errata, KNOWN_SPEC_ERRATA.len(), "every listed erratum is still in the pages");
    assert!(blocks >= 100, "expected the v2 pages' ~107 examples, found {blocks}");
    assert!(failures.is_empty(), "{} examples failed:\n{}", failures.len(), failures.join("\n"));
}
