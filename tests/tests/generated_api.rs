//! The generated API as a user meets it: derived traits that setters must not shadow, and
//! how values the schema leaves loose (numbers, maps, tags) are written back.

use acp_types::{IntegerPropertySchema, NumberPropertySchema, StringPropertySchema};

#[test]
fn property_schemas_have_their_derived_default() {
    // Each has a `default` property; its setter is `default_value`, so `Type::default()` is
    // `Default::default()` (the generated crate's own test covers every such type).
    assert_eq!(NumberPropertySchema::default(), NumberPropertySchema::new());
    assert_eq!(IntegerPropertySchema::default(), IntegerPropertySchema::new());
    assert_eq!(StringPropertySchema::default(), StringPropertySchema::new());
    let with_default = NumberPropertySchema::default().default_value(Some(0.5));
    assert_eq!(with_default.default, Some(Some(0.5)));
    assert_eq!(serde_json::to_value(&with_default).unwrap(), serde_json::json!({"default": 0.5}));
}

#[test]
fn integral_numbers_are_written_as_javascript_writes_them() {
    use acp_types::{Annotations, ElicitationContentValue};
    use serde_json::json;
    // `number` fields are `f64`; a peer's `1` comes back as `1`, not `1.0`.
    for text in [r#"{"priority":1}"#, r#"{"priority":0.25}"#, r#"{"priority":-3}"#, r#"{"priority":null}"#, "{}"] {
        let decoded: Annotations = serde_json::from_str(text).expect("decodes");
        assert_eq!(serde_json::to_string(&decoded).unwrap(), text);
    }
    let write = |x: f64| serde_json::to_string(&Annotations::new().priority(Some(x))).unwrap();
    assert_eq!(write(1.0), r#"{"priority":1}"#);
    assert_eq!(write(-0.0), r#"{"priority":0}"#, "as JSON.stringify(-0)");
    assert_eq!(write(9_007_199_254_740_992.0), r#"{"priority":9007199254740992}"#, "2^53 is still an integer");
    assert_eq!(write(18_014_398_509_481_984.0), r#"{"priority":1.8014398509481984e+16}"#, "beyond 2^53 a float");
    assert_eq!(write(1.5), r#"{"priority":1.5}"#);
    let cost: acp_types::Cost = serde_json::from_value(json!({"amount": 2.0, "currency": "USD"})).unwrap();
    assert_eq!(serde_json::to_string(&cost).unwrap(), r#"{"amount":2,"currency":"USD"}"#);
    // In an untagged union too (`1.0` then reads back as the integer alternative, as it would
    // from a JavaScript peer).
    assert_eq!(serde_json::to_string(&ElicitationContentValue::Number(3.0)).unwrap(), "3");
    assert_eq!(serde_json::to_string(&ElicitationContentValue::Number(3.5)).unwrap(), "3.5");
}
