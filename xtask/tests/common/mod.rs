//! What the generator's tests share: the smallest schema it accepts.
// Each test file uses a part of it.
#![allow(dead_code)]

use serde_json::{Value, json};

/// The smallest schema the generator accepts: the baseline methods and the error types.
pub fn base_defs() -> serde_json::Map<String, Value> {
    let mut defs = baseline_methods();
    defs.insert(
        "ErrorCode".into(),
        json!({"anyOf": [
            {"title": "Method not found", "type": "integer", "format": "int32", "const": -32601},
            {"title": "Other", "type": "integer", "format": "int32"}
        ]}),
    );
    defs.insert(
        "Error".into(),
        json!({"type": "object", "properties": {"code": {"$ref": "#/$defs/ErrorCode"}, "message": {"type": "string"}, "data": {}},
               "required": ["code", "message"]}),
    );
    defs
}

/// The spec's baseline methods (their params and results empty objects), nothing else.
pub fn baseline_methods() -> serde_json::Map<String, Value> {
    let mut defs = serde_json::Map::new();
    let empty =
        |method: &str, side: &str| json!({"type": "object", "properties": {}, "x-method": method, "x-side": side});
    for (name, method, side) in [
        ("InitializeRequest", "initialize", "agent"),
        ("InitializeResponse", "initialize", "agent"),
        ("AuthenticateRequest", "authenticate", "agent"),
        ("AuthenticateResponse", "authenticate", "agent"),
        ("NewSessionRequest", "session/new", "agent"),
        ("NewSessionResponse", "session/new", "agent"),
        ("PromptRequest", "session/prompt", "agent"),
        ("PromptResponse", "session/prompt", "agent"),
        ("CancelNotification", "session/cancel", "agent"),
        ("RequestPermissionRequest", "session/request_permission", "client"),
        ("RequestPermissionResponse", "session/request_permission", "client"),
        ("SessionNotification", "session/update", "client"),
    ] {
        defs.insert(name.into(), empty(method, side));
    }
    defs
}
