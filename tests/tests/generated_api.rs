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
