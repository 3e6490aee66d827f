//! Schema-driven property tests: instances generated from the pinned JSON Schema (v1.7.0,
//! stable) for every method, decoded through the generated envelope enums.
//!
//! - **Valid instances** (generated from the schema, checked against it by the small validator
//!   below) decode and re-encode to the same JSON value, for every method's params and result.
//!   The definitions the generator went through are counted; the test asserts that every
//!   definition reachable from a method is covered.
//! - **Invalid instances** (a valid one with a wrong JSON type at a random required path, or a
//!   required property removed) never panic, and decode exactly when the schema, read with the
//!   lenient annotations (`x-deserialize-default-on-error`: a malformed property reads as its
//!   default; `x-deserialize-skip-invalid-items`: malformed items are dropped) and the generated
//!   code's open-world fallbacks ([`open_union_accepts`]), still accepts them: otherwise
//!   decoding returns an error.
//! - **Through the runtime**: an agent served over the in-memory duplex answers invalid params
//!   with -32602 and valid params with anything but -32602.
//!
//! The generator and its PRNG are in `schema_gen/mod.rs` (shared with `lossless.rs`).
//! Everything is driven by a fixed seed (a small splitmix64 generator, no dependency), so a
//! failure replays; bump [`SEED`] locally to explore. The generator follows the schema's own
//! keywords: `$ref`, `allOf`, `anyOf` / `oneOf` (one alternative; catch-all alternatives that
//! use `not` are skipped, they are exercised by the open-world tests), `type` (arrays, `null`),
//! `const` / `enum`, `properties` / `required` (optional properties included at random),
//! `additionalProperties`, `items`, integer formats and `minimum` / `maximum`, and an object's
//! own properties merged with the chosen alternative (SessionConfigOption,
//! SetSessionConfigOptionRequest, CreateElicitationRequest, ...).
//!
//! One normalisation before comparing: `null` is dropped for the properties where the
//! generated type reads it as absent ([`NULL_READS_AS_ABSENT`], each with its reason: only
//! `_meta`).

use std::collections::{BTreeMap, BTreeSet};
use std::panic::{AssertUnwindSafe, catch_unwind};

use acp_types::{
    AgentNotification, AgentRequest, AgentResponse, ClientNotification, ClientRequest, ClientResponse,
    ProtocolLevelNotification,
};
use schema_gen::*;
use serde_json::Value;

mod schema_gen;

/// Valid instances generated per method.
const VALID_CASES: usize = 160;
/// Invalid instances generated per method.
const INVALID_CASES: usize = 160;

// ---- the validator (the test's oracle) ---------------------------------------------------------

/// Whether `v` is an instance of `s`. With `lenient`, a property marked
/// `x-deserialize-default-on-error` accepts any value, one marked
/// `x-deserialize-default-on-null` accepts `null`, and an array marked
/// `x-deserialize-skip-invalid-items` accepts any items: what the decoder is meant to do.
fn valid(schema: &Schema, s: &Value, v: &Value, lenient: bool) -> bool {
    let s = match s {
        Value::Bool(b) => return *b,
        Value::Object(_) => s,
        _ => panic!("not a schema: {s}"),
    };
    let sub = |s: &Value, v: &Value| valid(schema, s, v, lenient);
    if let Some(r) = s.get("$ref")
        && !sub(schema.def(r).1, v)
    {
        return false;
    }
    if s.get("const").is_some_and(|c| v != c) {
        return false;
    }
    if let Some(Value::Array(e)) = s.get("enum")
        && !e.contains(v)
    {
        return false;
    }
    let types = types_of(s);
    if !types.is_empty() && !types.iter().any(|t| type_matches(t, v)) {
        return false;
    }
    if (v.is_i64() || v.is_u64()) && types.contains(&"integer") {
        let (lo, hi) = integer_range(s);
        let n = v.as_i64().map(i128::from).or(v.as_u64().map(i128::from)).unwrap_or_default();
        if n < lo || n > hi {
            return false;
        }
    }
    if let Some(obj) = v.as_object() {
        let props = s.get("properties").and_then(Value::as_object);
        let required = s.get("required").and_then(Value::as_array).into_iter().flatten().filter_map(Value::as_str);
        if required.into_iter().any(|name| !obj.contains_key(name)) {
            return false;
        }
        for (k, item) in obj {
            let ok = match (props.and_then(|p| p.get(k)), s.get("additionalProperties")) {
                (Some(ps), _) => {
                    sub(ps, item)
                        || (lenient && flag(ps, "x-deserialize-default-on-error"))
                        || (lenient && item.is_null() && flag(ps, "x-deserialize-default-on-null"))
                }
                (None, Some(extra)) => sub(extra, item),
                (None, None) => true,
            };
            if !ok {
                return false;
            }
        }
    }
    if let (Some(items), Some(arr)) = (s.get("items"), v.as_array()) {
        let skip = lenient && flag(s, "x-deserialize-skip-invalid-items");
        if !skip && !arr.iter().all(|item| sub(items, item)) {
            return false;
        }
    }
    if s.get("allOf").and_then(Value::as_array).is_some_and(|all| !all.iter().all(|a| sub(a, v))) {
        return false;
    }
    let open = lenient && open_union_accepts(s, v);
    if !open && s.get("anyOf").and_then(Value::as_array).is_some_and(|any| !any.iter().any(|a| sub(a, v))) {
        return false;
    }
    if !open
        && s.get("oneOf").and_then(Value::as_array).is_some_and(|one| one.iter().filter(|a| sub(a, v)).count() != 1)
    {
        return false;
    }
    !s.get("not").is_some_and(|not| sub(not, v))
}

/// The open-world rule of the generated code (README: every union and string enum has a
/// fallback variant): a string enum (alternatives that are all string `const`s) accepts any
/// string, and a tagged union (alternatives told apart by a required `const` property) accepts
/// any object whose tag is a string it does not know, kept whole.
fn open_union_accepts(s: &Value, v: &Value) -> bool {
    let alts = alternatives(s);
    if alts.is_empty() {
        return false;
    }
    if alts.iter().all(|a| a.get("const").is_some_and(Value::is_string)) {
        return v.is_string();
    }
    // An untagged union of named shapes (EmbeddedResourceResource, ElicitationScope,
    // AvailableCommandInput): its `Other(serde_json::Value)` keeps any value.
    if alts.iter().all(|a| a.get("properties").is_none() && single_ref(a)) {
        return true;
    }
    let mut tags: BTreeMap<&str, Vec<&Value>> = BTreeMap::new();
    for a in &alts {
        let required: Vec<&str> =
            a.get("required").and_then(Value::as_array).into_iter().flatten().filter_map(Value::as_str).collect();
        for (name, p) in a.get("properties").and_then(Value::as_object).into_iter().flatten() {
            if let Some(c) = p.get("const").filter(|_| required.contains(&name.as_str())) {
                tags.entry(name.as_str()).or_default().push(c);
            }
        }
    }
    tags.iter().any(|(tag, known)| match v.get(*tag) {
        Some(Value::String(t)) => !known.iter().any(|k| k.as_str() == Some(t)),
        _ => false,
    })
}

/// `{"$ref": ...}` or `{"allOf": [{"$ref": ...}]}` (with a title or description at most).
fn single_ref(a: &Value) -> bool {
    a.get("$ref").is_some()
        || a.get("allOf").and_then(Value::as_array).is_some_and(|all| all.len() == 1 && all[0].get("$ref").is_some())
}

fn type_matches(t: &str, v: &Value) -> bool {
    match t {
        "null" => v.is_null(),
        "boolean" => v.is_boolean(),
        "integer" => v.is_i64() || v.is_u64(),
        "number" => v.is_number(),
        "string" => v.is_string(),
        "array" => v.is_array(),
        "object" => v.is_object(),
        other => panic!("unknown type {other}"),
    }
}

// ---- decoding through the envelope enums -------------------------------------------------------

/// Decodes `text` as `m`'s params or result through the envelope enum of its direction and
/// re-encodes it.
fn decode(m: &Method, text: &str) -> Result<Value, String> {
    let mut de = serde_json::Deserializer::from_str(text);
    macro_rules! go {
        ($ty:ty) => {{
            let decoded = <$ty>::decode(&m.method, &mut de).map_err(|e| e.to_string())?;
            let Some(decoded) = decoded else { panic!("{} does not know {}", stringify!($ty), m.method) };
            de.end().map_err(|e| e.to_string())?;
            serde_json::to_value(&decoded).map_err(|e| format!("cannot encode: {e}"))
        }};
    }
    match (m.kind, m.side.as_str()) {
        (Kind::Request, "agent") => go!(ClientRequest),
        (Kind::Response, "agent") => go!(AgentResponse),
        (Kind::Notification, "agent") => go!(ClientNotification),
        (Kind::Request, "client") => go!(AgentRequest),
        (Kind::Response, "client") => go!(ClientResponse),
        (Kind::Notification, "client") => go!(AgentNotification),
        (Kind::Notification, "protocol") => go!(ProtocolLevelNotification),
        other => panic!("{}: no envelope for {other:?}", m.def),
    }
}

/// Properties whose `null` re-encodes as absent, each with its reason. Everything else must
/// re-encode exactly.
const NULL_READS_AS_ABSENT: &[(&str, &str)] =
    &[("_meta", "the spec defines absent and `null` as the same; the field is a plain `Option`")];

/// Drops the [`NULL_READS_AS_ABSENT`] properties that are `null`, everywhere.
fn normalise(v: &mut Value) {
    match v {
        Value::Object(m) => {
            for (name, _) in NULL_READS_AS_ABSENT {
                if m.get(*name) == Some(&Value::Null) {
                    m.remove(*name);
                }
            }
            m.values_mut().for_each(normalise);
        }
        Value::Array(a) => a.iter_mut().for_each(normalise),
        _ => {}
    }
}

fn decode_no_panic(m: &Method, text: &str) -> Result<Result<Value, String>, String> {
    catch_unwind(AssertUnwindSafe(|| decode(m, text))).map_err(|p| {
        p.downcast_ref::<String>().cloned().or(p.downcast_ref::<&str>().map(|s| s.to_string())).unwrap_or_default()
    })
}

fn report(failures: &[String]) -> String {
    let shown: Vec<&str> = failures.iter().take(15).map(String::as_str).collect();
    format!("{} failures, first {}:\n{}", failures.len(), shown.len(), shown.join("\n"))
}

// ---- the tests -----------------------------------------------------------------------------------

#[test]
fn valid_instances_of_every_method_round_trip_losslessly() {
    let schema = Schema::load();
    let methods = schema.methods();
    assert!(methods.len() >= 40, "only {} methods in the schema", methods.len());
    let mut covered = BTreeSet::new();
    let mut reachable = BTreeSet::new();
    let mut failures = Vec::new();
    let mut cases = 0;
    for m in &methods {
        reachable.insert(m.def.clone());
        schema.reachable(&schema.defs[&m.def], &mut reachable);
        let mut g = Gen::new(&schema, seed_for(m, 1));
        for case in 0..VALID_CASES {
            let v = g.instance(&m.def);
            assert!(valid(&schema, &schema.defs[&m.def], &v, false), "the generator made an invalid {}: {v}", m.def);
            let text = v.to_string();
            cases += 1;
            match decode_no_panic(m, &text) {
                Err(panic) => failures.push(format!("{} #{case}: PANIC {panic}\n  {text}", m.def)),
                Ok(Err(e)) => failures.push(format!("{} #{case}: rejected: {e}\n  {text}", m.def)),
                Ok(Ok(mut encoded)) => {
                    let mut expected = v.clone();
                    normalise(&mut expected);
                    normalise(&mut encoded);
                    if encoded != expected {
                        failures.push(format!(
                            "{} #{case}: re-encoded differently\n  in:  {expected}\n  out: {encoded}",
                            m.def
                        ));
                    }
                }
            }
        }
        covered.extend(g.covered);
    }
    let envelopes =
        ["AgentRequest", "AgentResponse", "AgentNotification", "ClientRequest", "ClientResponse", "ClientNotification"];
    let missing: Vec<&String> =
        reachable.iter().filter(|d| !covered.contains(*d) && !envelopes.contains(&d.as_str())).collect();
    let unreachable: Vec<&String> = schema.defs.keys().filter(|d| !reachable.contains(*d)).collect();
    eprintln!(
        "{} methods, {cases} valid instances; definitions covered: {} of {} reachable from a method ({} in the schema; not reachable: {})",
        methods.len(),
        covered.len(),
        reachable.len(),
        schema.defs.len(),
        unreachable.iter().map(|s| s.as_str()).collect::<Vec<_>>().join(", ")
    );
    assert!(failures.is_empty(), "{}", report(&failures));
    assert!(missing.is_empty(), "definitions reachable from a method but never generated: {missing:?}");
}

/// A wrong-typed replacement for `current`, invalid for its schema if one can be found.
const WRONG: &[&str] = &["null", "true", "7", "-1.5", "\"x\"", "[]", "{}", "[1]", "{\"a\":1}"];

#[test]
fn invalid_instances_are_rejected_or_decoded_leniently_never_panic() {
    let schema = Schema::load();
    let mut failures = Vec::new();
    let (mut rejected, mut lenient, mut still_valid) = (0, 0, 0);
    for m in schema.methods() {
        let def = &schema.defs[&m.def];
        let mut g = Gen::new(&schema, seed_for(&m, 2));
        for case in 0..INVALID_CASES {
            let Some((v, what)) = mutate(&mut g, &m.def) else { continue };
            let expect_ok = valid(&schema, def, &v, true);
            if valid(&schema, def, &v, false) {
                still_valid += 1;
            } else if expect_ok {
                lenient += 1;
            } else {
                rejected += 1;
            }
            let text = v.to_string();
            match decode_no_panic(&m, &text) {
                Err(panic) => failures.push(format!("{} #{case} ({what}): PANIC {panic}\n  {text}", m.def)),
                Ok(Ok(_)) if !expect_ok => {
                    failures.push(format!("{} #{case} ({what}): accepted, schema says invalid\n  {text}", m.def))
                }
                Ok(Err(e)) if expect_ok => failures
                    .push(format!("{} #{case} ({what}): rejected ({e}), schema (lenient) says valid\n  {text}", m.def)),
                Ok(_) => {}
            }
        }
    }
    eprintln!(
        "invalid instances: {rejected} must be rejected, {lenient} decode leniently (annotations or open-world fallbacks), {still_valid} still valid"
    );
    assert!(failures.is_empty(), "{}", report(&failures));
    assert!(rejected > 1000, "too few invalid instances: {rejected}");
    assert!(lenient > 100, "too few lenient cases: {lenient}");
}

/// A valid instance of `def` with one required property removed or given a wrong type; `None`
/// when the instance has no required property.
fn mutate(g: &mut Gen<'_>, def: &str) -> Option<(Value, String)> {
    let mut v = g.instance(def);
    if g.required.is_empty() {
        return None;
    }
    let path = g.rng.pick(&g.required).clone();
    let (parent, last) = path.split_at(path.len() - 1);
    let Seg::Key(key) = &last[0] else { unreachable!("required paths end in a key") };
    if g.rng.percent(30) {
        get_mut(&mut v, parent).as_object_mut().expect("parent object").remove(key);
        return Some((v, format!("removed {}", show(&path))));
    }
    // A wrong type: the first replacement, in random order, that makes the instance invalid.
    let start = g.rng.below(WRONG.len());
    let schema = g.schema;
    let def_schema = &schema.defs[def];
    let mut first = None;
    for i in 0..WRONG.len() {
        let replacement: Value = serde_json::from_str(WRONG[(start + i) % WRONG.len()]).unwrap();
        let mut candidate = v.clone();
        *get_mut(&mut candidate, &path) = replacement.clone();
        if !valid(schema, def_schema, &candidate, false) {
            return Some((candidate, format!("{} := {replacement}", show(&path))));
        }
        first.get_or_insert((candidate, format!("{} := {replacement} (still valid)", show(&path))));
    }
    first
}

// ---- through the runtime -------------------------------------------------------------------------

mod runtime_agent {
    use acp_rpc::Connection;
    use acp_rpc::agent::AgentContext;
    use acp_types::*;

    /// An agent with the required handlers only; everything else answers -32601.
    pub struct Minimal;

    impl Agent<AgentContext> for Minimal {
        async fn initialize(&self, p: InitializeRequest, _: AgentContext) -> Result<InitializeResponse, Error> {
            Ok(InitializeResponse::new(p.protocol_version))
        }
        async fn authenticate(&self, _: AuthenticateRequest, _: AgentContext) -> Result<AuthenticateResponse, Error> {
            Ok(AuthenticateResponse::new())
        }
        async fn session_new(&self, _: NewSessionRequest, _: AgentContext) -> Result<NewSessionResponse, Error> {
            Ok(NewSessionResponse::new("sess_1"))
        }
        async fn session_prompt(&self, _: PromptRequest, _: AgentContext) -> Result<PromptResponse, Error> {
            Ok(PromptResponse::new(StopReason::EndTurn))
        }
        async fn session_cancel(&self, _: CancelNotification, _: AgentContext) -> Result<(), Error> {
            Ok(())
        }
    }

    /// The agent on one end of a duplex, a raw peer (no handler) on the other.
    pub fn serve() -> (acp_rpc::Peer, Vec<tokio::task::JoinHandle<Result<(), acp_rpc::Error>>>) {
        let (agent_end, client_end) = acp_rpc::transport::duplex(64 * 1024);
        let (_client, agent_serve) = acp_rpc::serve_agent(Minimal, agent_end.0, agent_end.1);
        let (peer, raw_serve) = Connection::new().serve(client_end.0, client_end.1, ());
        (peer, vec![tokio::spawn(agent_serve), tokio::spawn(raw_serve)])
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_runtime_answers_invalid_params_with_32602() {
    use acp_rpc::{Error, RawValue, codes};
    let schema = Schema::load();
    let (peer, _tasks) = runtime_agent::serve();
    let mut checked = BTreeMap::new();
    for m in schema.methods().iter().filter(|m| m.kind == Kind::Request && m.side == "agent") {
        let def = &schema.defs[&m.def];
        let mut g = Gen::new(&schema, seed_for(m, 3));
        let (mut invalid, mut valid_sent) = (0, 0);
        for _ in 0..60 {
            let (v, what) = match g.rng.percent(20) {
                true => (g.instance(&m.def), "valid".to_owned()),
                false => match mutate(&mut g, &m.def) {
                    Some(x) => x,
                    None => continue,
                },
            };
            let is_valid = valid(&schema, def, &v, true);
            let raw = RawValue::from_string(v.to_string()).unwrap();
            let answer =
                tokio::time::timeout(std::time::Duration::from_secs(10), peer.request_raw(&m.method, Some(&raw)))
                    .await
                    .unwrap_or_else(|_| panic!("{}: no answer within 10 s", m.method));
            let code = match &answer {
                Err(Error::Rpc(e)) => Some(e.code),
                Ok(_) => None,
                Err(other) => panic!("{} ({what}): {other:?}", m.method),
            };
            if is_valid {
                valid_sent += 1;
                assert_ne!(
                    code,
                    Some(codes::INVALID_PARAMS),
                    "{} ({what}): valid params answered {answer:?}\n  {v}",
                    m.method
                );
            } else {
                invalid += 1;
                assert_eq!(
                    code,
                    Some(codes::INVALID_PARAMS),
                    "{} ({what}): invalid params answered {answer:?}\n  {v}",
                    m.method
                );
            }
        }
        checked.insert(m.method.clone(), (invalid, valid_sent));
    }
    eprintln!("through the runtime (method: invalid answered -32602, valid not): {checked:?}");
    assert!(checked.len() >= 10, "{checked:?}");
    assert!(checked.values().map(|(i, _)| i).sum::<usize>() > 200, "{checked:?}");
}
