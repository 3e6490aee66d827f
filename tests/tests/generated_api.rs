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

#[test]
fn maps_keep_the_order_they_came_in() {
    use acp_types::ElicitationSchema;
    use acp_types::serde_support::OrderedMap;
    // Form fields are shown in the order of `properties`: not alphabetical on re-encode.
    let text = r#"{"type":"object","properties":{"zip":{"type":"string"},"name":{"type":"string"},"age":{"type":"integer"}},"required":["name"]}"#;
    let schema: ElicitationSchema = serde_json::from_str(text).expect("decodes");
    let properties = schema.properties.as_ref().expect("properties");
    assert_eq!(properties.keys().collect::<Vec<_>>(), ["zip", "name", "age"]);
    assert_eq!(serde_json::to_string(&schema).unwrap(), text);

    // A repeated key keeps its first place and its last value, as serde_json::Map does.
    let map: OrderedMap<u8> = serde_json::from_str(r#"{"b":1,"a":2,"b":3,"c":4,"a":5}"#).unwrap();
    assert_eq!(serde_json::to_string(&map).unwrap(), r#"{"b":3,"a":5,"c":4}"#);

    // Built by hand: insertion order; equality ignores the order, as for any JSON object.
    let mut built: OrderedMap<u8> = [("b", 3), ("a", 5)].into();
    assert_eq!(built.insert("c", 4), None);
    assert_eq!(built.insert("b", 3), Some(3), "in place");
    assert_eq!(built, map);
    assert_eq!(built.remove("a"), Some(5));
    assert_eq!(built.iter().collect::<Vec<_>>(), [("b", &3), ("c", &4)]);
    let sorted: OrderedMap<u8> = std::collections::BTreeMap::from([("y".to_owned(), 1), ("x".to_owned(), 2)]).into();
    assert_eq!(serde_json::to_string(&sorted).unwrap(), r#"{"x":2,"y":1}"#);
    let schema =
        ElicitationSchema::new().properties([("b", acp_types::ElicitationPropertySchema::Boolean(Default::default()))]);
    assert_eq!(serde_json::to_value(&schema).unwrap()["properties"], serde_json::json!({"b": {"type": "boolean"}}));

    // Used like the `BTreeMap` it replaces: borrowed iteration, indexing, mutation in place.
    let mut env: OrderedMap<String> =
        [("PATH", "/bin"), ("HOME", "/root")].into_iter().map(|(k, v)| (k, v.to_owned())).collect();
    let mut seen = Vec::new();
    for (key, value) in &env {
        seen.push(format!("{key}={value}"));
    }
    assert_eq!(seen, ["PATH=/bin", "HOME=/root"]);
    assert_eq!(env["HOME"], "/root");
    for (_, value) in env.iter_mut() {
        value.push('/');
    }
    env.values_mut().for_each(|v| v.insert(0, '='));
    assert_eq!(env.values().collect::<Vec<_>>(), ["=/bin/", "=/root/"]);
    assert!(std::panic::catch_unwind(|| env["USER"].len()).is_err(), "indexing an absent key panics");
}

#[test]
fn the_tagless_variant_also_reads_its_own_tag() {
    use acp_types::{AuthMethod, McpServer, SetSessionConfigOptionRequest, SetSessionConfigOptionType};
    use serde_json::json;
    // `McpServer` stdio has no `type` const in the schema (title "stdio"); some clients send
    // `type: "stdio"` anyway. Both decode as `Stdio`, which is written without the tag.
    let tagless = json!({"name": "fs", "command": "mcp-fs", "args": [], "env": []});
    let tagged = json!({"type": "stdio", "name": "fs", "command": "mcp-fs", "args": [], "env": []});
    for input in [&tagless, &tagged] {
        let server: McpServer = serde_json::from_value(input.clone()).expect("decodes");
        assert!(matches!(server, McpServer::Stdio(_)), "{input} → {server:?}");
        assert_eq!(server.tag(), None);
        assert_eq!(serde_json::to_value(&server).unwrap(), tagless, "re-encoded without the tag");
    }
    let unknown: McpServer = serde_json::from_value(json!({"type": "carrier-pigeon", "name": "fs"})).unwrap();
    assert!(matches!(unknown, McpServer::Other(_)));

    let agent: AuthMethod = serde_json::from_value(json!({"type": "agent", "id": "a", "name": "Agent"})).unwrap();
    assert!(matches!(agent, AuthMethod::Agent(_)), "{agent:?}");

    // `SetSessionConfigOptionRequest`: the value-id alternative is titled `value_id`.
    let set = |ty: Option<&str>| {
        let mut params = json!({"sessionId": "s", "configId": "model", "value": "fast"});
        if let Some(ty) = ty {
            params["type"] = json!(ty);
        }
        serde_json::from_value::<SetSessionConfigOptionRequest>(params).expect("decodes").kind
    };
    assert!(matches!(set(None), SetSessionConfigOptionType::ValueId(v) if v.0 == "fast"));
    assert!(matches!(set(Some("value_id")), SetSessionConfigOptionType::ValueId(v) if v.0 == "fast"));
    // Another `type` with a string `value` is a value id, as the variant's description says
    // and its structure allows (it leaves `type` open); the unknown `type` is not written back.
    // Another `type` with another value is kept whole.
    assert!(matches!(set(Some("select")), SetSessionConfigOptionType::ValueId(v) if v.0 == "fast"));
    let other = json!({"sessionId": "s", "configId": "model", "type": "select", "value": 5});
    let other = serde_json::from_value::<SetSessionConfigOptionRequest>(other).expect("decodes").kind;
    assert!(matches!(other, SetSessionConfigOptionType::Other(_)));
}
