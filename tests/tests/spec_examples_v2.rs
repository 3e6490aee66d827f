//! Every ```json example of the protocol v2 spec pages (../shared/acp-spec/v2) decodes into its
//! typed value and re-encodes to the same JSON value, without passing through a fallback
//! variant.
//!
//! Whole JSON-RPC messages are directed by their method, as in the v1 test (`spec_examples.rs`):
//! a response by the method of the request with the same id earlier on the page, or, without
//! one, by what its result holds (`protocolVersion` → `initialize`, `sessionId` →
//! `session/new`). The other blocks are payloads, typed by what they hold (see
//! [`payload_type`]): a tagged value by its tag (`sessionUpdate`, or `type` with the values
//! of one union), a few objects by members only their type has, and an excerpt of a message's
//! params member by member ([`EXCERPT_MEMBERS`]). A block none of these rules types fails.
//!
//! The migration page shows v1 examples next to the v2 ones: a block labelled `v1` (```json
//! v1 request) or under a `v1: ...` heading is decoded with the v1 types instead.
//!
//! [`KNOWN_SPEC_ERRATA`] lists the examples that contradict the schema; the test asserts they
//! still fail, so a fix upstream shows up here.

use std::path::{Path, PathBuf};

use acp_types::v2;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;
use spec::{json_blocks, reencode};

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

#[derive(Debug, Clone, Copy, PartialEq)]
enum Protocol {
    V1,
    V2,
}

/// v1 when the block's label or heading says so (the migration page's comparisons).
fn protocol_of(block: &spec::Block) -> Protocol {
    let v1_label = block.label.split_whitespace().any(|w| w == "v1");
    let v1_heading = block.heading.strip_prefix("v1").is_some_and(|rest| rest.starts_with([':', ' ']));
    if v1_label || v1_heading { Protocol::V1 } else { Protocol::V2 }
}

/// Decodes `value` as `T` and re-encodes it.
fn roundtrip<T: DeserializeOwned + Serialize + std::fmt::Debug>(value: &Value) -> Result<Value, String> {
    let typed: T = serde_json::from_value(value.clone()).map_err(|e| e.to_string())?;
    reencode(&typed)
}

/// The type of a payload block, by what it holds; `None` when no rule applies.
fn payload_type(value: &Value) -> Option<&'static str> {
    let obj = value.as_object()?;
    let has = |key: &str| obj.contains_key(key);
    let only = |keys: &[&str]| obj.keys().all(|k| keys.contains(&k.as_str()) || k == "_meta");
    let kind = obj.get("type").and_then(Value::as_str);
    Some(match kind {
        _ if has("sessionUpdate") => "SessionUpdate",
        // Auth method descriptors are the objects with a `methodId`.
        _ if has("methodId") => "AuthMethod",
        _ if has("configId") => "SessionConfigOption",
        Some("text" | "image" | "audio" | "resource" | "resource_link") => "ContentBlock",
        Some("content" | "diff" | "terminal") => "ToolCallContent",
        Some("stdio" | "http" | "sse") => "McpServer",
        Some("command" | "tool_call") => "RequestPermissionSubject",
        None if has("name") && has("description") && only(&["name", "description", "input"]) => "AvailableCommand",
        None if has("path") && only(&["path", "line"]) => "ToolCallLocation",
        _ => return None,
    })
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

/// The method of a response whose request the page does not show, by what the result holds.
fn infer_method(result: &Value) -> Option<&'static str> {
    if result.get("protocolVersion").is_some() {
        Some("initialize")
    } else if result.get("sessionId").is_some() {
        Some("session/new")
    } else if result.get("stopReason").is_some() {
        Some("session/prompt")
    } else {
        None
    }
}

/// The request the prose before a response names last (`` `session/prompt` ``): a result that
/// holds nothing telling (`{}`) is the answer to the request the text is about. Names that
/// are no request of `protocol` (notifications, fields) are passed over.
fn named_request(protocol: Protocol, prose: &str) -> Option<String> {
    let spans: Vec<&str> = prose.split('`').skip(1).step_by(2).collect();
    spans.into_iter().rev().find(|name| is_request(protocol, name)).map(str::to_owned)
}

/// Whether a response enum knows `method` (decoding `{}` fails or succeeds, but does not say
/// "no such method").
fn is_request(protocol: Protocol, method: &str) -> bool {
    let empty = Value::Object(Default::default());
    match protocol {
        Protocol::V2 => {
            !matches!(v2::AgentResponse::decode(method, &empty), Ok(None))
                || !matches!(v2::ClientResponse::decode(method, &empty), Ok(None))
        }
        Protocol::V1 => {
            !matches!(acp_types::AgentResponse::decode(method, &empty), Ok(None))
                || !matches!(acp_types::ClientResponse::decode(method, &empty), Ok(None))
        }
    }
}

/// An error object's round trip.
fn roundtrip_error(protocol: Protocol, error: &Value) -> Result<Value, String> {
    match protocol {
        Protocol::V2 => roundtrip::<v2::Error>(error),
        Protocol::V1 => roundtrip::<acp_types::Error>(error),
    }
}

fn spec_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/acp-spec/v2")
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
    let dir = spec_dir();
    let mut pages: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("cannot read the spec pages at {}: {e}", dir.display()))
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "mdx"))
        .collect();
    pages.sort();

    let (mut blocks, mut messages, mut payloads, mut v1, mut errata, mut failures) = (0, 0, 0, 0, 0, Vec::new());
    for page in &pages {
        let name = page.file_name().unwrap_or_default().to_string_lossy().into_owned();
        let text = std::fs::read_to_string(page).expect("spec page is readable");
        // id → method of the latest request on this page.
        let mut pending: Vec<(Value, String)> = Vec::new();
        for (i, block) in json_blocks(&text).iter().enumerate() {
            blocks += 1;
            let where_ = format!("{name} example {}", i + 1);
            let protocol = protocol_of(block);
            if protocol == Protocol::V1 {
                v1 += 1;
            }
            let value: Value = match serde_json::from_str(&block.text.replace("[...]", "[]")) {
                Ok(v) => v,
                Err(e) => {
                    failures.push(format!("{where_}: not JSON even after eliding `[...]`: {e}"));
                    continue;
                }
            };
            let outcome = if value.get("jsonrpc").is_none() {
                payloads += 1;
                roundtrip_payload(protocol, &value).map(|re| (value.clone(), re))
            } else {
                messages += 1;
                let id = value.get("id").cloned();
                match (value.get("method").and_then(Value::as_str), id) {
                    (Some(method), id) => {
                        let params = value.get("params").cloned().unwrap_or(Value::Null);
                        if let Some(id) = &id {
                            pending.push((id.clone(), method.to_owned()));
                        }
                        roundtrip_call(protocol, method, &params, id.is_some()).map(|re| (params, re))
                    }
                    (None, Some(id)) => match value.get("error") {
                        Some(error) => roundtrip_error(protocol, error).map(|re| (error.clone(), re)),
                        None => {
                            let result = value.get("result").cloned().unwrap_or(Value::Null);
                            let method = pending
                                .iter()
                                .rev()
                                .find(|(pid, _)| *pid == id)
                                .map(|(_, m)| m.clone())
                                .or_else(|| infer_method(&result).map(str::to_owned))
                                .or_else(|| named_request(protocol, &block.prose));
                            match method {
                                // `null` is the pages' way of writing "nothing": the empty result.
                                Some(method) => {
                                    let original = if result.is_null() {
                                        Value::Object(Default::default())
                                    } else {
                                        result.clone()
                                    };
                                    roundtrip_result(protocol, &method, &result).map(|re| (original, re))
                                }
                                None => Err(format!("a response to id {id} with no request before it")),
                            }
                        }
                    },
                    (None, None) => Err("neither a method nor an id".to_owned()),
                }
            };
            let erratum = KNOWN_SPEC_ERRATA.iter().find(|(p, n, _)| *p == name && *n == i + 1);
            match (outcome, erratum) {
                (Ok((original, reencoded)), Some((_, _, why))) if original == reencoded => failures.push(format!(
                    "{where_}: listed as an erratum ({why}) but now round-trips; remove it from the list"
                )),
                (Ok(_) | Err(_), Some(_)) => errata += 1,
                (Ok((original, reencoded)), None) if original == reencoded => {}
                (Ok((original, reencoded)), None) => failures
                    .push(format!("{where_}: re-encoded differently\n  spec:  {original}\n  typed: {reencoded}")),
                (Err(e), None) => failures.push(format!("{where_} ({protocol:?}): {e}")),
            }
        }
    }
    println!(
        "v2 spec examples: {blocks} blocks on {} pages ({messages} whole messages, {payloads} payloads; {v1} of \
         them v1 examples); {} round-trip, {errata} known errata, {} failed",
        pages.len(),
        blocks - errata - failures.len(),
        failures.len()
    );
    assert_eq!(errata, KNOWN_SPEC_ERRATA.len(), "every listed erratum is still in the pages");
    assert!(blocks >= 100, "expected the v2 pages' ~107 examples, found {blocks}");
    assert!(failures.is_empty(), "{} examples failed:\n{}", failures.len(), failures.join("\n"));
}
