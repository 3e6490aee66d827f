//! Whether a message that decoded did so without losing anything: a `session/update`, or the
//! params of the agent's calls to the client (`fs/*`, `terminal/*`).
//!
//! The generated types decode leniently (a malformed value becomes the default, malformed
//! array items are dropped), so a successful decode proves little. The typed value is encoded
//! again and compared with what was received: a member present on both sides must be equal;
//! a member only received is fine when the schema does not know it (an extension field, or
//! one from a newer version) and a failure when it does (its value was dropped as invalid);
//! a member only in the encoding is a default.

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};

use acp_rpc::acp_types::SessionNotification;
use schemars::JsonSchema;
use serde::Serialize;
use serde_json::{Map, Value};

/// The first place where `received` and the re-encoded `decoded` differ: the path and why.
pub fn first_difference(received: &Value, decoded: &SessionNotification) -> Option<String> {
    first_difference_as(received, decoded)
}

/// [`first_difference`] for any generated type.
pub fn first_difference_as<T: Serialize + JsonSchema>(received: &Value, decoded: &T) -> Option<String> {
    let encoded = match serde_json::to_value(decoded) {
        Ok(encoded) => encoded,
        Err(e) => return Some(format!("cannot be encoded again: {e}")),
    };
    let schema = schema::<T>();
    diff(received, &encoded, &[schema], schema, "params").map(|(path, why)| format!("{path}: {why}"))
}

/// The JSON Schema of `T`, with its definitions; made once per type (a handful of types).
fn schema<T: JsonSchema>() -> &'static Value {
    static SCHEMAS: OnceLock<Mutex<HashMap<&'static str, &'static Value>>> = OnceLock::new();
    let mut schemas = SCHEMAS.get_or_init(Mutex::default).lock().expect("schemas");
    schemas.entry(std::any::type_name::<T>()).or_insert_with(|| {
        let schema = schemars::generate::SchemaSettings::draft2020_12().into_generator().into_root_schema_for::<T>();
        Box::leak(Box::new(serde_json::to_value(schema).unwrap_or_default()))
    })
}

fn diff(received: &Value, encoded: &Value, schemas: &[&Value], root: &Value, path: &str) -> Option<(String, String)> {
    match (received, encoded) {
        (Value::Object(received), Value::Object(encoded)) => {
            let known = Properties::of(schemas, received, root);
            for (key, value) in received {
                let at = format!("{path}.{key}");
                match encoded.get(key) {
                    Some(again) => {
                        if let Some(found) = diff(value, again, &known.schemas(key), root, &at) {
                            return Some(found);
                        }
                    }
                    // Absent and `null` say the same of an optional member.
                    None if value.is_null() || key == "_meta" => {}
                    None if known.knows(key) => {
                        return Some((at, format!("{} is not a valid value (decoding dropped it)", short(value))));
                    }
                    None => {}
                }
            }
            None
        }
        (Value::Array(received), Value::Array(encoded)) => {
            if received.len() != encoded.len() {
                return Some((
                    path.to_owned(),
                    format!("{} item(s), of which {} decode", received.len(), encoded.len()),
                ));
            }
            let items: Vec<&Value> = expand(schemas, root).into_iter().filter_map(|s| s.get("items")).collect();
            received
                .iter()
                .zip(encoded)
                .enumerate()
                .find_map(|(i, (received, encoded))| diff(received, encoded, &items, root, &format!("{path}[{i}]")))
        }
        (Value::Number(a), Value::Number(b)) => {
            let equal = match (a.as_i64(), b.as_i64(), a.as_u64(), b.as_u64()) {
                (Some(a), Some(b), _, _) => a == b,
                (_, _, Some(a), Some(b)) => a == b,
                _ => a.as_f64() == b.as_f64(),
            };
            (!equal).then(|| (path.to_owned(), format!("{a} decodes as {b}")))
        }
        (received, encoded) if received == encoded => None,
        (received, Value::Array(items)) if items.is_empty() => {
            Some((path.to_owned(), format!("{} is not an array (decoding read it as empty)", short(received))))
        }
        (received, encoded) => Some((path.to_owned(), format!("{} decodes as {}", short(received), short(encoded)))),
    }
}

fn short(value: &Value) -> String {
    crate::wire::truncate(&value.to_string(), 60)
}

/// The members an object may have, by the schemas that describe it.
struct Properties<'a> {
    by_name: Vec<(&'a str, &'a Value)>,
    /// `additionalProperties`: any other name is known too.
    others: Vec<&'a Value>,
}

impl<'a> Properties<'a> {
    fn of(schemas: &[&'a Value], object: &Map<String, Value>, root: &'a Value) -> Self {
        let mut known = Properties { by_name: Vec::new(), others: Vec::new() };
        for schema in schemas {
            known.collect(schema, object, root, 0);
        }
        known
    }

    fn collect(&mut self, schema: &'a Value, object: &Map<String, Value>, root: &'a Value, depth: u32) {
        // Definitions may refer to themselves; real nesting within one object is shallow.
        if depth > 32 {
            return;
        }
        let schema = resolve(schema, root);
        if let Some(properties) = schema.get("properties").and_then(Value::as_object) {
            for (name, sub) in properties {
                self.by_name.push((name, sub));
            }
        }
        if let Some(other) = schema.get("additionalProperties").filter(|a| a.is_object()) {
            self.others.push(other);
        }
        for sub in schema.get("allOf").and_then(Value::as_array).into_iter().flatten() {
            self.collect(sub, object, root, depth + 1);
        }
        // Of a union, only the alternatives whose tags (`const` members) match the object.
        for key in ["oneOf", "anyOf"] {
            for alt in schema.get(key).and_then(Value::as_array).into_iter().flatten() {
                if tags_match(resolve(alt, root), object) {
                    self.collect(alt, object, root, depth + 1);
                }
            }
        }
    }

    fn knows(&self, name: &str) -> bool {
        self.by_name.iter().any(|(n, _)| *n == name) || !self.others.is_empty()
    }

    /// The schemas of member `name`.
    fn schemas(&self, name: &str) -> Vec<&'a Value> {
        let named: Vec<&Value> = self.by_name.iter().filter(|(n, _)| *n == name).map(|(_, s)| *s).collect();
        if named.is_empty() { self.others.clone() } else { named }
    }
}

/// Whether every `const` member of the alternative `alt` has that value in `object`, and the
/// alternative is one for objects at all.
fn tags_match(alt: &Value, object: &Map<String, Value>) -> bool {
    if alt.get("type").and_then(Value::as_str).is_some_and(|t| t != "object") {
        return false;
    }
    alt.get("properties")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
        .filter_map(|(name, sub)| sub.get("const").map(|c| (name, c)))
        .all(|(name, constant)| object.get(name) == Some(constant))
}

/// A schema with its `$ref` followed (local references only).
fn resolve<'a>(schema: &'a Value, root: &'a Value) -> &'a Value {
    let mut schema = schema;
    for _ in 0..32 {
        let Some(reference) = schema.get("$ref").and_then(Value::as_str) else { break };
        let Some(pointer) = reference.strip_prefix('#') else { break };
        match root.pointer(pointer) {
            Some(target) => schema = target,
            None => break,
        }
    }
    schema
}

/// The schemas with their `$ref`s followed and their `allOf`/`oneOf`/`anyOf` members added.
fn expand<'a>(schemas: &[&'a Value], root: &'a Value) -> Vec<&'a Value> {
    let mut out = Vec::new();
    let mut todo: Vec<(&Value, u32)> = schemas.iter().map(|s| (*s, 0)).collect();
    while let Some((schema, depth)) = todo.pop() {
        let schema = resolve(schema, root);
        out.push(schema);
        if depth < 32 {
            for key in ["allOf", "oneOf", "anyOf"] {
                for sub in schema.get(key).and_then(Value::as_array).into_iter().flatten() {
                    todo.push((sub, depth + 1));
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use serde::Deserialize;
    use serde_json::json;

    use super::*;

    fn check(params: Value) -> Option<String> {
        let decoded = SessionNotification::deserialize(&params).expect("decodes (leniently)");
        first_difference(&params, &decoded)
    }

    fn tool_call(extra: Value) -> Value {
        let mut update = json!({"sessionUpdate": "tool_call", "toolCallId": "c1", "title": "Read"});
        update.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
        json!({"sessionId": "s", "update": update})
    }

    #[test]
    fn well_formed_updates_have_no_difference() {
        assert_eq!(check(tool_call(json!({"kind": "read", "status": "pending", "content": []}))), None);
        let content = json!([{"type": "content", "content": {"type": "text", "text": "hi"}}]);
        assert_eq!(check(tool_call(json!({"content": content, "locations": [{"path": "/a", "line": 3}]}))), None);
        let plan = json!({"sessionUpdate": "plan", "entries": [
            {"content": "Read", "priority": "high", "status": "pending"}]});
        assert_eq!(check(json!({"sessionId": "s", "update": plan})), None);
        let chunk = json!({"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": "x"}});
        assert_eq!(check(json!({"sessionId": "s", "update": chunk})), None);
    }

    #[test]
    fn unknown_members_variants_and_nulls_are_not_differences() {
        let extension = json!({"x-vendor": {"a": 1}, "_meta": {"k": [1, 2]}, "kind": null});
        assert_eq!(check(tool_call(extension)), None);
        let newer = json!({"sessionUpdate": "hologram", "depth": 3});
        assert_eq!(check(json!({"sessionId": "s", "update": newer})), None);
    }

    #[test]
    fn wrongly_typed_members_are_found_with_their_path() {
        let found = check(tool_call(json!({"kind": 42}))).expect("kind 42");
        assert!(found.starts_with("params.update.kind: 42 is not a valid value"), "{found}");
        let found = check(tool_call(json!({"content": "not an array"}))).expect("content string");
        assert!(found.starts_with("params.update.content: \"not an array\""), "{found}");
        let plan = json!({"sessionUpdate": "plan", "entries": "nope"});
        let found = check(json!({"sessionId": "s", "update": plan})).expect("entries string");
        assert!(found.starts_with("params.update.entries: \"nope\" is not an array"), "{found}");
        let found =
            check(tool_call(json!({"content": [{"type": "content", "content": {"type": "text", "text": "a"}}, 7]})))
                .expect("an invalid item");
        assert!(found.starts_with("params.update.content: 2 item(s), of which 1 decode"), "{found}");
        let found = check(tool_call(json!({"locations": [{"path": "/a", "line": "three"}]}))).expect("line");
        assert!(found.starts_with("params.update.locations[0].line:"), "{found}");
    }
}
