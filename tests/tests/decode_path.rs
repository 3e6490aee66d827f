//! `acp_types::decode`: a decoding failure names the JSON path of the value that did not fit,
//! from acp-types alone (no runtime), for one-line wire messages and multi-line files alike.

use std::collections::BTreeMap;

use acp_types::decode::{self, DecodeError};
use acp_types::{ClientRequest, PromptRequest};
use serde_json::error::Category;

fn error<T: for<'a> serde::Deserialize<'a> + std::fmt::Debug>(text: &str) -> DecodeError {
    let from_str = decode::from_str::<T>(text).expect_err(text);
    // Bytes decode (and fail) the same way.
    let from_slice = decode::from_slice::<T>(text.as_bytes()).expect_err(text);
    assert_eq!((from_str.path(), from_str.to_string()), (from_slice.path(), from_slice.to_string()));
    from_str
}

#[test]
fn nested_objects_and_arrays() {
    let e = error::<PromptRequest>(r#"{"sessionId": 5, "prompt": []}"#);
    assert_eq!(e.path(), Some("sessionId"));
    assert!(e.message().starts_with("invalid type: integer `5`, expected"), "{}", e.message());
    assert!(!e.message().contains("column"), "the position is not in the message: {}", e.message());
    assert_eq!(e.classify(), Category::Data);

    // The second block of the prompt lacks its tag: the path of the object that misses it.
    let e = error::<PromptRequest>(r#"{"sessionId":"s","prompt":[{"type":"text","text":"a"},{"text":"b"}]}"#);
    assert_eq!(e.path(), Some("prompt[1]"));
    assert!(e.to_string().starts_with("at prompt[1]: "), "{e}");
    assert!(e.to_string().ends_with(" (line 1, column 66)"), "{e}");

    // Deeper: a map of arrays of objects.
    type Deep = BTreeMap<String, Vec<BTreeMap<String, BTreeMap<String, u8>>>>;
    let e = error::<Deep>(r#"{"a": [{}, {"b": {"c": 1, "d": 300}}]}"#);
    assert_eq!(e.path(), Some("a[1].b.d"));
}

#[test]
fn keys_that_are_not_identifiers_are_quoted() {
    type Env = BTreeMap<String, Vec<u8>>;
    let e = error::<Env>(r#"{"PATH": [1], "API KEY": [1, -1]}"#);
    assert_eq!(e.path(), Some(r#"["API KEY"][1]"#));
    let e = error::<Env>(r#"{"say \"hi\"\n": ["x"]}"#);
    assert_eq!(e.path(), Some(r#"["say \"hi\"\n"][0]"#));
    let e = error::<Env>(r#"{"1st": [true]}"#);
    assert_eq!(e.path(), Some(r#"["1st"][0]"#));
    let e = error::<Env>(r#"{"": [true]}"#);
    assert_eq!(e.path(), Some(r#"[""][0]"#));
    // Not a path character, yet it must not confuse the scan: brackets and commas in keys.
    let e = error::<Env>(r#"{"a,[b]{": [1], "c": [null]}"#);
    assert_eq!(e.path(), Some("c[0]"));
}

#[test]
fn multi_line_text_is_located_by_line_and_column() {
    let text = "{\n  \"sessionId\": \"s\",\n  \"prompt\": [\n    {\"type\": \"text\", \"text\": \"a\"},\n    {\"type\": \"text\", \"text\": 7}\n  ]\n}\n";
    let e = error::<PromptRequest>(text);
    assert_eq!(e.path(), Some("prompt[1]"));
    assert_eq!(e.line(), 5);
    assert!(e.to_string().contains("(line 5, column "), "{e}");

    // An error in the middle of a line that is not the first.
    type Deep = BTreeMap<String, BTreeMap<String, u8>>;
    let e = error::<Deep>("{\n \"a\": {\"x\": 1},\n \"b\": {\"y\": 2, \"z\": \"three\", \"w\": 4}\n}");
    assert_eq!(e.path(), Some("b.z"));
    assert_eq!((e.line(), e.column()), (3, 27), "just after `\"three\"`");

    // Windows line ends.
    let e = error::<Deep>("{\r\n \"a\": {\r\n  \"x\": -1\r\n }\r\n}");
    assert_eq!(e.path(), Some("a.x"));
}

#[test]
fn trailing_input_and_top_level_errors_have_the_empty_path() {
    let e = error::<PromptRequest>(r#"{"sessionId":"s","prompt":[]} {"#);
    assert_eq!(e.path(), Some(""));
    assert_eq!(e.message(), "trailing characters");
    assert_eq!(e.to_string(), "trailing characters (line 1, column 31)", "no `at` for the top level");

    let e = error::<PromptRequest>("5");
    assert_eq!(e.path(), Some(""));
    assert!(e.message().starts_with("invalid type: integer `5`"), "{}", e.message());

    let e = error::<Vec<Vec<u8>>>("[[1], [2");
    assert_eq!(e.path(), Some("[1][0]"), "inside the unfinished array");
    assert_eq!(e.classify(), Category::Eof);

    let e = error::<PromptRequest>("");
    assert_eq!(e.path(), Some(""));
    assert_eq!(e.classify(), Category::Eof);

    let e = error::<PromptRequest>(r#"{"sessionId": "s", "prompt": [}"#);
    assert_eq!(e.classify(), Category::Syntax);
    assert_eq!(e.path(), Some("prompt[0]"), "a value was expected there");
    let e = error::<Vec<u8>>("[1,,2]");
    assert_eq!((e.classify(), e.path()), (Category::Syntax, Some("[1]")));
    let e = error::<BTreeMap<String, u8>>(r#"{"a": 1, "b" 2}"#);
    assert_eq!((e.classify(), e.path()), (Category::Syntax, Some("b")));
}

#[test]
fn a_decoder_of_ones_own_and_an_error_already_in_hand() {
    // A request decoded by its method name, as a transport does.
    let text = r#"{"sessionId": "s", "prompt": [{"type": "image"}]}"#;
    let e = decode::from_str_with(text, |de| ClientRequest::decode("session/prompt", de)).unwrap_err();
    assert_eq!(e.path(), Some("prompt[0]"));
    assert!(e.message().contains("missing field `data`"), "{e}");
    let ok = decode::from_str_with(r#"{"x": 1}"#, |de| ClientRequest::decode("_vendor/unknown", de)).unwrap();
    assert!(matches!(ok, Some(ClientRequest::ExtMethod { .. })) || ok.is_none());

    // serde_json's own error, located afterwards.
    let text = r#"{"sessionId": "s", "prompt": [{"type": "text"}]}"#;
    let raw = serde_json::from_str::<PromptRequest>(text).unwrap_err();
    let e = DecodeError::locate(text, raw);
    assert_eq!(e.path(), Some("prompt[0]"));
    // Without a position (decoded from a `Value`) there is no path, and the message is whole.
    let raw = serde_json::from_value::<PromptRequest>(serde_json::json!({"sessionId": 1})).unwrap_err();
    let e = DecodeError::locate("", raw);
    assert_eq!((e.path(), e.line()), (None, 0));
    assert!(!e.to_string().contains("line"), "{e}");
    // The error chain reaches serde_json's error.
    let e = error::<PromptRequest>("{");
    let source = std::error::Error::source(&e).expect("a source");
    assert!(source.to_string().contains("line 1 column 1"), "{source}");
}

#[test]
fn a_valid_value_decodes_as_serde_json_decodes_it() {
    let text = "\n {\"sessionId\": \"s\", \"prompt\": [{\"type\": \"text\", \"text\": \"hi\"}]} \n";
    let ours: PromptRequest = decode::from_str(text).unwrap();
    let theirs: PromptRequest = serde_json::from_str(text).unwrap();
    assert_eq!(ours, theirs);
    assert_eq!(decode::from_slice::<PromptRequest>(text.as_bytes()).unwrap(), theirs);
}
