//! A vendored file's helpers, used as a project would.
use CRATE::acp::{decode, lossless, ClientCapabilities, Nullable, PromptRequest};

fn main() {
    let caps: ClientCapabilities = decode::from_str(r#"{"session": null}"#).expect("decodes");
    assert!(caps.session.is_null() && caps.session.value().is_none());
    let text = "{\n  \"sessionId\": \"s\",\n  \"prompt\": [{\"type\": \"text\", \"text\": \"hi\"}, {\"text\": \"no type\"}]\n}";
    let error = decode::from_str::<PromptRequest>(text).expect_err("the second block has no type");
    assert_eq!(error.path(), Some("prompt[1]"), "{error}");
    assert_eq!(error.line(), 3, "{error}");
    // A proxy's change keeps the members the types do not know.
    let params = r#"{"sessionId":"s","prompt":[{"type":"text","text":"hi","x-hint":1}],"x-editor":"zed"}"#;
    let changed = lossless::Lossless::<PromptRequest>::map(params, |request| request.session_id = "t".into())
        .expect("a prompt request");
    assert_eq!(
        changed.get(),
        r#"{"sessionId":"t","prompt":[{"type":"text","text":"hi","x-hint":1}],"x-editor":"zed"}"#
    );
}
