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

/// The folder of schema release `tag` under `../shared/acp-schema`: `releases/<tag>`, or
/// `next/<tag>` for a published schema that is not an upstream repository release (the pin
/// may be either).
pub fn release_dir(tag: &str) -> std::path::PathBuf {
    let shared = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/acp-schema");
    let roots = [shared.join("releases"), shared.join("next")];
    xtask::releases::resolve_in(tag, &roots).unwrap_or_else(|e| panic!("release {tag}: {e}"))
}

/// The release the project pins (`schema/lock.json`'s tag) and its folder: the one the
/// feature table describes.
pub fn pinned_release() -> (std::path::PathBuf, String) {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let tag = xtask::schema::Lock::read(&root.join("schema/lock.json")).expect("the lock").tag;
    (release_dir(&tag), tag)
}
