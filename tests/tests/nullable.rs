//! `acp_types::Nullable`: the fields that may be absent, `null` or a value (`Option<Option<T>>`)
//! read in one call, keep the three apart, and are written back as they came.

use acp_types::{ClientCapabilities, ClientSessionCapabilities, Nullable, ReadTextFileRequest, ToolCallUpdate};
use serde_json::json;

fn decode<T: serde::de::DeserializeOwned + serde::Serialize>(text: &str) -> T {
    let value: T = serde_json::from_str(text).unwrap_or_else(|e| panic!("{text}: {e}"));
    let written = serde_json::to_value(&value).unwrap();
    let read: serde_json::Value = serde_json::from_str(text).unwrap();
    assert_eq!(written, read, "re-encoded unchanged");
    value
}

#[test]
fn absent_null_and_a_value_decode_apart_and_are_written_back_unchanged() {
    let absent: ClientCapabilities = decode("{}");
    let null: ClientCapabilities = decode(r#"{"session": null}"#);
    let set: ClientCapabilities = decode(r#"{"session": {}}"#);

    assert!(absent.session.is_absent() && !absent.session.is_null() && !absent.session.has_value());
    assert!(!null.session.is_absent() && null.session.is_null() && !null.session.has_value());
    assert!(!set.session.is_absent() && !set.session.is_null() && set.session.has_value());

    assert_eq!(absent.session.value(), None);
    assert_eq!(null.session.value(), None);
    assert_eq!(set.session.value(), Some(&ClientSessionCapabilities::new()));
    assert_eq!(set.session.into_value(), Some(ClientSessionCapabilities::new()));

    // A number field, read by value.
    let request: ReadTextFileRequest = decode(r#"{"sessionId": "s", "path": "/a", "line": 3, "limit": null}"#);
    assert_eq!(request.line.value(), Some(&3));
    assert_eq!(request.limit.value(), None);
    assert!(request.limit.is_null());
}

#[test]
fn the_constructors_write_what_they_say() {
    let mut update = ToolCallUpdate::new("call_1");
    update.title = Nullable::of("Read".to_owned());
    update.kind = Nullable::null();
    update.status = Nullable::absent();
    assert_eq!(serde_json::to_value(&update).unwrap(), json!({"toolCallId": "call_1", "title": "Read", "kind": null}));
    if let Some(title) = update.title.value_mut() {
        title.push_str(" a.txt");
    }
    assert_eq!(update.title.value().map(String::as_str), Some("Read a.txt"));
    // The same as the setters write.
    let built = ToolCallUpdate::new("call_1").title("Read a.txt".to_owned()).kind(None);
    assert_eq!(built, update);
}

#[test]
fn apply_to_leaves_on_absent_clears_on_null_and_replaces_on_a_value() {
    let mut title = Some("old".to_owned());
    Option::<Option<String>>::absent().apply_to(&mut title);
    assert_eq!(title.as_deref(), Some("old"));
    Option::<Option<String>>::of("new".into()).apply_to(&mut title);
    assert_eq!(title.as_deref(), Some("new"));
    Option::<Option<String>>::null().apply_to(&mut title);
    assert_eq!(title, None);
}

/// Every optional nullable field's description points at `Nullable`, so a reader of the docs
/// finds the call (the generator adds the paragraph).
#[test]
fn every_optional_nullable_field_is_documented_with_nullable() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../generated/src");
    let mut fields = 0;
    for file in ["v1/types.rs", "v2/types.rs"] {
        let text = std::fs::read_to_string(root.join(file)).expect("generated types");
        let lines: Vec<&str> = text.lines().collect();
        for (at, line) in lines.iter().enumerate() {
            if !(line.trim_start().starts_with("pub ") && line.contains(": Option<Option<")) {
                continue;
            }
            fields += 1;
            // The doc comment above the field, past its attributes (which may span lines).
            let doc: Vec<&str> = lines[..at]
                .iter()
                .rev()
                .skip_while(|l| !l.trim_start().starts_with("///") && !l.trim_start().starts_with("pub "))
                .take_while(|l| l.trim_start().starts_with("///"))
                .copied()
                .collect();
            assert!(
                doc.iter().any(|l| l.contains("[`Nullable`](serde_support::Nullable)")),
                "{file}:{}: `{}` has no word of `Nullable`",
                at + 1,
                line.trim()
            );
        }
    }
    assert!(fields > 300, "the pinned release has over 300 such fields, found {fields}");
}
