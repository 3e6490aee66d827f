//! Every ```json example of a whole JSON-RPC message in the spec pages (../shared/acp-spec/v1)
//! decodes into its typed message and re-encodes to the same JSON value.
//!
//! Requests and notifications are directed by their method; a response by the method of the
//! request with the same id earlier on the same page. Where a page shows a response without its
//! request, the method is inferred from the result: `protocolVersion` → `initialize`,
//! `sessionId` → `session/new`. The pages elide long arrays as `[...]`; those are read as
//! empty arrays. A `null` result (the pages' way of writing "nothing") is re-encoded as `{}`,
//! the empty result object the schema defines.
//!
//! A message that round-trips only because part of it fell into a union's fallback variant (an
//! unknown kind, value or shape, kept whole) fails too: the spec's own examples must decode
//! into the variants the schema defines.
//!
//! [`KNOWN_SPEC_ERRATA`] lists the examples that contradict the schema; the test asserts they
//! still fail, so a fix upstream shows up here.

use acp_types::{
    AgentNotification, AgentRequest, AgentResponse, ClientNotification, ClientRequest, ClientResponse, Error,
    ProtocolLevelNotification,
};
use serde_json::Value;
use spec::{Content, Protocol, no_fallback, reencode};

mod spec;

/// (page, example number, why): examples whose JSON does not match the schema.
const KNOWN_SPEC_ERRATA: &[(&str, usize, &str)] = &[
    ("session-modes.mdx", 3, "`current_mode_update` written with `modeId`; the schema requires `currentModeId`"),
    ("file-system.mdx", 1, "client capabilities shown inside an `initialize` result (they belong to the request)"),
    ("terminals.mdx", 1, "client capabilities shown inside an `initialize` result (they belong to the request)"),
    (
        "session-modes.mdx",
        4,
        "a bare content block `{\"type\": \"text\", ...}` as tool call content; the schema wraps it as \
         `{\"type\": \"content\", \"content\": {...}}` (decodes only as `ToolCallContent::Other`)",
    ),
];

/// Decodes the params of a request or notification by method, trying both directions.
fn roundtrip_call(method: &str, params: &Value, is_request: bool) -> Result<Value, String> {
    let err = |e: serde_json::Error| format!("{method}: {e}");
    let decoded: Vec<Option<Result<Value, String>>> = if is_request {
        vec![
            ClientRequest::decode(method, params).map_err(err)?.map(|r| reencode(&r)),
            AgentRequest::decode(method, params).map_err(err)?.map(|r| reencode(&r)),
        ]
    } else {
        vec![
            ClientNotification::decode(method, params).map_err(err)?.map(|r| reencode(&r)),
            AgentNotification::decode(method, params).map_err(err)?.map(|r| reencode(&r)),
            ProtocolLevelNotification::decode(method, params).map_err(err)?.map(|r| reencode(&r)),
        ]
    };
    decoded.into_iter().flatten().next().unwrap_or_else(|| Err(format!("no typed message knows method `{method}`")))
}

fn roundtrip_result(method: &str, result: &Value) -> Result<Value, String> {
    let agent = AgentResponse::decode(method, result).map_err(|e| format!("result of {method}: {e}"))?;
    let client = ClientResponse::decode(method, result).map_err(|e| format!("result of {method}: {e}"))?;
    match (agent, client) {
        (Some(r), _) => reencode(&r),
        (None, Some(r)) => reencode(&r),
        (None, None) => Err(format!("no typed response knows method `{method}`")),
    }
}

#[test]
fn a_message_without_params_decodes_as_empty_params() {
    // JSON-RPC lets a request leave `params` out; the harness above decodes it from `null`.
    let list = ClientRequest::decode("session/list", &Value::Null).expect("null params read as {}");
    assert!(matches!(list, Some(ClientRequest::SessionList(_))), "{list:?}");
    let logout = ClientRequest::decode("logout", &Value::Null).expect("null params read as {}");
    assert!(matches!(logout, Some(ClientRequest::Logout(_))), "{logout:?}");
    let err = ClientRequest::decode("session/prompt", &Value::Null).expect_err("required members are still required");
    assert!(err.to_string().contains("missing field"), "{err}");
    // An error object reads as its code and message.
    let error: Error =
        serde_json::from_value(serde_json::json!({"code": -32602, "message": "Invalid params"})).unwrap();
    assert_eq!(error.to_string(), "-32602 Invalid params");
    let _: &dyn std::error::Error = &error;
}

#[test]
fn fallback_variants_are_found_in_the_debug_text() {
    use acp_types::{Content, TextContent, ToolCallContent};
    // A payload converts into the union variant that holds it (`From<TextContent> for
    // ContentBlock`, `From<Content> for ToolCallContent`).
    let content: ToolCallContent = Content::new(TextContent::new("Other(\"not a fallback\")")).into();
    assert!(no_fallback(&content).is_ok(), "{content:?}");
    let bare: ToolCallContent = serde_json::from_value(serde_json::json!({"type": "text", "text": "hi"})).unwrap();
    assert!(no_fallback(&vec![bare]).is_err(), "an unknown kind is a fallback");
    let kind: acp_types::ToolKind = serde_json::from_value(serde_json::json!("teleport")).unwrap();
    assert!(no_fallback(&Some(kind)).is_err(), "an unknown string value is a fallback");
}

#[test]
fn every_whole_message_example_round_trips() {
    let (pages, examples) = spec::examples(Protocol::V1);
    let (mut messages, mut fragments, mut errata, mut failures) = (0, 0, 0, Vec::new());
    for example in &examples {
        let where_ = example.place();
        let outcome = match &example.content {
            Content::NotJson(e) => {
                failures.push(format!("{where_}: not JSON even after eliding `[...]`: {e}"));
                continue;
            }
            Content::Payload(_) => {
                fragments += 1;
                continue;
            }
            Content::Call { method, params, request } => {
                roundtrip_call(method, params, *request).map(|re| (params.clone(), re))
            }
            Content::Error(error) => serde_json::from_value::<Error>(error.clone())
                .map_err(|e| format!("error object: {e}"))
                .and_then(|e| reencode(&e))
                .map(|re| (error.clone(), re)),
            Content::Result { id, method, result } => {
                let original = if result.is_null() { Value::Object(Default::default()) } else { result.clone() };
                match method {
                    Some(method) => roundtrip_result(method, result).map(|re| (original, re)),
                    None => Err(format!("a response to id {id} with no request before it")),
                }
            }
            Content::Neither => Err("neither a method nor an id".to_owned()),
        };
        messages += 1;
        let erratum = KNOWN_SPEC_ERRATA.iter().find(|(p, n, _)| *p == example.page && *n == example.number);
        match (outcome, erratum) {
            (Ok((original, reencoded)), Some((_, _, why))) if original == reencoded => failures
                .push(format!("{where_}: listed as an erratum ({why}) but now round-trips; remove it from the list")),
            (Ok(_) | Err(_), Some(_)) => errata += 1,
            (Ok((original, reencoded)), None) if original == reencoded => {}
            (Ok((original, reencoded)), None) => {
                failures.push(format!("{where_}: re-encoded differently\n  spec:  {original}\n  typed: {reencoded}"))
            }
            (Err(e), None) => failures.push(format!("{where_}: {e}")),
        }
    }
    println!(
        "spec examples: {messages} whole messages on {pages} pages ({fragments} fragments are not messages); \
         {} round-trip, {errata} known errata, {} failed",
        messages - errata - failures.len(),
        failures.len()
    );
    assert_eq!(errata, KNOWN_SPEC_ERRATA.len(), "every listed erratum is still in the pages");
    assert!(messages >= 75, "expected the spec's ~79 whole-message examples, found {messages}");
    assert!(failures.is_empty(), "{} examples failed:\n{}", failures.len(), failures.join("\n"));
}
