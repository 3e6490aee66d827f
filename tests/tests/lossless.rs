//! `acp_types::lossless`: a proxy's typed view writes back every member it did not change.
//!
//! The corpus is every spec example of v1 and v2 that is a whole message or a typed payload
//! (found and classified as `spec_examples.rs` and `spec_examples_v2.rs` do, through
//! `spec/mod.rs`) and schema-generated valid instances of every v1 method (the generator of
//! `properties.rs`, in `schema_gen/mod.rs`). Each value first gets members the types do not
//! know (`x-lossless-N` with random JSON) and `_meta`, at random depths, and is written compact
//! or pretty; an addition is kept only if the value still decodes, to the same typed value (an
//! unknown member) or to one that holds the addition (a known `_meta`, an entry of a free-form
//! map). Then:
//!
//! - **forwarded**: a view never borrowed mutably writes the input byte for byte, and so does
//!   one borrowed mutably without a change;
//! - **changed**: a view changed through its type writes the input with that change and
//!   nothing else, the change applied to the input's JSON independently: a content block
//!   prepended to a `session/prompt`, a new session id in a `session/update`, and for every
//!   value a string or boolean member changed, an array element removed and one inserted.
//!
//! Seeded (the PRNG of `schema_gen`), so a failure replays. The other tests pin the merge's
//! rules one by one on small messages.

use acp_types::lossless::{Lossless, LosslessError};
use acp_types::{ContentBlock, DecodeError, PromptRequest, TextContent, ToolCallUpdate, v2};
use schema_gen::{Gen, Kind, Rng, SEED, Schema};
use serde::Serialize;
use serde_json::value::RawValue;
use serde_json::{Map, Value, json};
use spec::{Content, Protocol, payload_type};

mod schema_gen;
mod spec;

/// Generated instances per v1 method.
const CASES_PER_METHOD: usize = 40;
/// The text block a proxy prepends to prompts.
const INJECTED: &str = "Context from the proxy: the project builds with cargo.";

// ---- the typed values under test -------------------------------------------------------------

/// A type the corpus decodes into, with the change specific to it, if any.
trait Typed: Serialize + Clone + Sized {
    /// Changes `self` as a proxy would and `expected` (the input's JSON) the same way; the
    /// change's name, or `None` when the type has no specific change (or not this variant).
    fn specific_edit(&mut self, _expected: &mut Value) -> Option<&'static str> {
        None
    }
}

macro_rules! typed {
    ($($ty:ty),* $(,)?) => { $(impl Typed for $ty {})* };
}

typed!(
    acp_types::AgentRequest,
    acp_types::ClientNotification,
    acp_types::ProtocolLevelNotification,
    acp_types::AgentResponse,
    acp_types::ClientResponse,
    acp_types::Error,
    acp_types::SessionUpdate,
    acp_types::AuthMethod,
    acp_types::SessionConfigOption,
    acp_types::ContentBlock,
    acp_types::ToolCallContent,
    acp_types::McpServer,
    acp_types::AvailableCommand,
    acp_types::ToolCallLocation,
    v2::AgentRequest,
    v2::ClientNotification,
    v2::ProtocolLevelNotification,
    v2::AgentResponse,
    v2::ClientResponse,
    v2::Error,
    v2::SessionUpdate,
    v2::AuthMethod,
    v2::SessionConfigOption,
    v2::ContentBlock,
    v2::ToolCallContent,
    v2::McpServer,
    v2::RequestPermissionSubject,
    v2::AvailableCommand,
    v2::ToolCallLocation,
    Vec<v2::McpServer>,
    Vec<v2::PermissionOption>,
    v2::ClientCapabilities,
    v2::AgentCapabilities,
);

/// The prompt's first block, as the input's JSON has it after the change.
fn prepend_injected(expected: &mut Value) {
    let block = json!({"type": "text", "text": INJECTED});
    expected["prompt"].as_array_mut().expect("a prompt request has a prompt array").insert(0, block);
}

impl Typed for acp_types::ClientRequest {
    fn specific_edit(&mut self, expected: &mut Value) -> Option<&'static str> {
        let acp_types::ClientRequest::SessionPrompt(request) = self else { return None };
        request.prompt.insert(0, ContentBlock::from(TextContent::new(INJECTED)));
        prepend_injected(expected);
        Some("prepend a text block to the prompt")
    }
}

impl Typed for v2::ClientRequest {
    fn specific_edit(&mut self, expected: &mut Value) -> Option<&'static str> {
        let v2::ClientRequest::SessionPrompt(request) = self else { return None };
        request.prompt.insert(0, v2::ContentBlock::from(v2::TextContent::new(INJECTED)));
        prepend_injected(expected);
        Some("prepend a text block to the prompt")
    }
}

impl Typed for acp_types::AgentNotification {
    fn specific_edit(&mut self, expected: &mut Value) -> Option<&'static str> {
        let acp_types::AgentNotification::SessionUpdate(notification) = self else { return None };
        notification.session_id = "sess_rewritten_by_proxy".into();
        expected["sessionId"] = json!("sess_rewritten_by_proxy");
        Some("change the session id of a session/update")
    }
}

impl Typed for v2::AgentNotification {
    fn specific_edit(&mut self, expected: &mut Value) -> Option<&'static str> {
        let v2::AgentNotification::SessionUpdate(notification) = self else { return None };
        notification.session_id = "sess_rewritten_by_proxy".into();
        expected["sessionId"] = json!("sess_rewritten_by_proxy");
        Some("change the session id of a session/update")
    }
}

/// How a case's text becomes a view.
type Decoder<'a, T> = &'a dyn Fn(&str) -> Result<Lossless<T>, DecodeError>;

/// A decoder through an envelope enum, by method.
macro_rules! by_method {
    ($ty:ty, $method:expr) => {
        &|text: &str| {
            Lossless::<$ty>::decode_with(text, |de| {
                <$ty>::decode($method, de)?.ok_or_else(|| serde::de::Error::custom("no such method"))
            })
        }
    };
}

// ---- the checks --------------------------------------------------------------------------------

#[derive(Default)]
struct Tally {
    /// Values checked (a case that does not decode as its type is not one).
    cases: usize,
    not_decoded: usize,
    /// Additions kept, as unknown members and as members the type holds.
    unknown_added: usize,
    known_added: usize,
    /// Changes checked, by name.
    edits: std::collections::BTreeMap<&'static str, usize>,
    failures: Vec<String>,
}

impl Tally {
    fn fail(&mut self, place: &str, what: &str, detail: String) {
        self.failures.push(format!("{place}: {what}\n{detail}"));
    }
}

fn clip(text: &str) -> String {
    match text.char_indices().nth(700) {
        Some((end, _)) => format!("{}...", &text[..end]),
        None => text.to_owned(),
    }
}

/// One value through forwarding and changing views (see the module documentation).
fn check<T: Typed>(place: &str, input: &Value, decode: Decoder<'_, T>, rng: &mut Rng, tally: &mut Tally) {
    let project = |text: &str| decode(text).ok().map(|view| serde_json::to_value(&*view).expect("typed values encode"));
    if project(&input.to_string()).is_none() {
        tally.not_decoded += 1;
        return;
    }
    tally.cases += 1;
    let augmented = add_members(input, rng, &project, tally);
    let text = if rng.percent(30) {
        serde_json::to_string_pretty(&augmented).unwrap()
    } else {
        serde_json::to_string(&augmented).unwrap()
    };

    // Forwarded: the same bytes, through every way of writing a view.
    let view = decode(&text).unwrap_or_else(|e| panic!("{place}: the augmented value stopped decoding: {e}"));
    let outputs = [
        view.to_raw().map(|raw| raw.get().to_owned()),
        view.to_json_string(),
        serde_json::to_string(&view),
        view.clone().into_raw().map(|raw| raw.get().to_owned()),
    ];
    for output in outputs {
        match output {
            Ok(out) if out == text => {}
            Ok(out) => tally.fail(
                place,
                "forwarded, but not byte for byte",
                format!("  in:  {}\n  out: {}", clip(&text), clip(&out)),
            ),
            Err(e) => tally.fail(place, "forwarded, but not encoded", e.to_string()),
        }
    }
    let mut touched = decode(&text).unwrap();
    let _: &mut T = touched.edit();
    match touched.to_raw() {
        Ok(out) if out.get() == text => {}
        Ok(out) => tally.fail(place, "borrowed mutably without a change, not byte for byte", clip(out.get())),
        Err(e) => tally.fail(place, "borrowed mutably, not encoded", e.to_string()),
    }

    // Changed: the input with the change, and nothing else.
    let projection = serde_json::to_value(&*view).unwrap();
    let mut changes: Vec<(&'static str, T, Value)> = Vec::new();
    let mut specific = decode(&text).unwrap().into_inner();
    let mut expected = augmented.clone();
    if let Some(name) = specific.specific_edit(&mut expected) {
        changes.push((name, specific, expected));
    }
    for (name, change) in [
        ("change a string or boolean member", Change::Leaf),
        ("remove an array element", Change::Remove),
        ("insert an array element", Change::Insert),
    ] {
        if let Some((new, expected)) =
            change.pick(&projection, &augmented, rng, &|text| decode(text).ok().map(Lossless::into_inner))
        {
            changes.push((name, new, expected));
        }
    }
    for (name, new, expected) in changes {
        *tally.edits.entry(name).or_default() += 1;
        let mut view = decode(&text).unwrap();
        *view = new;
        let out = match view.to_raw() {
            Ok(out) => out,
            Err(e) => {
                tally.fail(place, name, format!("  not encoded: {e}"));
                continue;
            }
        };
        match serde_json::from_str::<Value>(out.get()) {
            Ok(got) if got == expected => {}
            Ok(_) => tally.fail(
                place,
                name,
                format!(
                    "  in:       {}\n  out:      {}\n  expected: {}",
                    clip(&text),
                    clip(out.get()),
                    clip(&expected.to_string())
                ),
            ),
            Err(e) => tally.fail(place, name, format!("  not JSON ({e}): {}", clip(out.get()))),
        }
    }
}

/// `input` with up to five members added at random objects: unknown ones (`x-lossless-N`,
/// random JSON) and `_meta`. An addition stays when the value still decodes and its typed
/// value is the same (the member is unknown) or the same plus the addition (the type holds it).
fn add_members(input: &Value, rng: &mut Rng, project: &dyn Fn(&str) -> Option<Value>, tally: &mut Tally) -> Value {
    let mut current = input.clone();
    let Some(mut projection) = project(&current.to_string()) else { return current };
    for n in 0..1 + rng.below(5) {
        let mut objects = Vec::new();
        objects_in(&current, String::new(), &mut objects);
        if objects.is_empty() {
            break;
        }
        let at = rng.pick(&objects).clone();
        let object = current.pointer(&at).and_then(Value::as_object).expect("an object's pointer");
        let (key, value) = if !object.contains_key("_meta") && rng.percent(35) {
            (
                "_meta".to_owned(),
                json!({"traceparent": format!("00-{:016x}-01", rng.next_u64()), "x-depth": at.matches('/').count()}),
            )
        } else {
            (format!("x-lossless-{n}"), any_json(rng, 0))
        };
        let mut candidate = current.clone();
        candidate.pointer_mut(&at).and_then(Value::as_object_mut).unwrap().insert(key.clone(), value.clone());
        let Some(typed) = project(&candidate.to_string()) else { continue };
        if typed == projection {
            tally.unknown_added += 1;
        } else {
            let mut holding = projection.clone();
            match holding.pointer_mut(&at).and_then(Value::as_object_mut) {
                Some(object) => {
                    object.insert(key, value);
                }
                None => continue,
            }
            if typed != holding {
                continue;
            }
            tally.known_added += 1;
            projection = typed;
        }
        current = candidate;
    }
    current
}

/// The JSON pointers of every object in `value` (itself included).
fn objects_in(value: &Value, at: String, out: &mut Vec<String>) {
    match value {
        Value::Object(members) => {
            for (k, v) in members {
                objects_in(v, format!("{at}/{}", k.replace('~', "~0").replace('/', "~1")), out);
            }
            out.push(at);
        }
        Value::Array(items) => {
            for (i, v) in items.iter().enumerate() {
                objects_in(v, format!("{at}/{i}"), out);
            }
        }
        _ => {}
    }
}

/// Random JSON for an unknown member: nested values, escapes, big and fractional numbers.
fn any_json(rng: &mut Rng, depth: usize) -> Value {
    const STRINGS: &[&str] = &["", "plain", "é ß 😀", "quote \" and \\ backslash", "line\nbreak\ttab", "\u{0}\u{1f}"];
    match rng.below(if depth > 2 { 5 } else { 7 }) {
        0 => Value::Null,
        1 => Value::Bool(rng.percent(50)),
        2 => json!(*rng.pick(&[0, -1, i64::MIN, i64::MAX]) ^ (rng.below(1000) as i64)),
        3 => json!(*rng.pick(&[0.5, -1.25, 1e300, 2.5e-8, u64::MAX as f64])),
        4 => Value::String(rng.pick(STRINGS).to_string()),
        5 => Value::Array((0..rng.below(4)).map(|_| any_json(rng, depth + 1)).collect()),
        _ => Value::Object((0..rng.below(4)).map(|i| (format!("k{i}"), any_json(rng, depth + 1))).collect()),
    }
}

/// A generic change, made on the typed value's JSON and decoded back (the same as changing
/// the field in Rust), and made the same way on the input's JSON.
#[derive(Clone, Copy)]
enum Change {
    /// A string gets a suffix, a boolean flips.
    Leaf,
    /// An element of an array goes (the last of a run of equal ones: of equal elements, the
    /// merge takes the first ones as kept).
    Remove,
    /// A copy of an array's element that differs from its first goes in front.
    Insert,
}

impl Change {
    /// The changed typed value and the input changed the same way, if a place for the change
    /// is found that the type can hold (up to eight tries).
    fn pick<T: Serialize>(
        self,
        projection: &Value,
        input: &Value,
        rng: &mut Rng,
        decode: &dyn Fn(&str) -> Option<T>,
    ) -> Option<(T, Value)> {
        let mut places = Vec::new();
        places_in(projection, String::new(), self, &mut places);
        // Only where the input has the same thing (not a default the type writes).
        places.retain(|at| match (projection.pointer(at), input.pointer(at)) {
            (Some(Value::Array(p)), Some(Value::Array(i))) => p.len() == i.len(),
            (Some(p), Some(i)) => std::mem::discriminant(p) == std::mem::discriminant(i),
            _ => false,
        });
        for _ in 0..8 {
            if places.is_empty() {
                return None;
            }
            let at = places.swap_remove(rng.below(places.len()));
            let mut new = projection.clone();
            let mut expected = input.clone();
            match self {
                Change::Leaf => {
                    for target in [&mut new, &mut expected] {
                        match target.pointer_mut(&at)? {
                            Value::String(s) => s.push_str(" (changed)"),
                            Value::Bool(b) => *b = !*b,
                            _ => return None,
                        }
                    }
                }
                Change::Remove => {
                    let items = new.pointer(&at)?.as_array()?;
                    let mut k = rng.below(items.len());
                    while k + 1 < items.len() && items[k + 1] == items[k] {
                        k += 1;
                    }
                    new.pointer_mut(&at)?.as_array_mut()?.remove(k);
                    expected.pointer_mut(&at)?.as_array_mut()?.remove(k);
                }
                Change::Insert => {
                    let items = new.pointer(&at)?.as_array()?;
                    let others: Vec<&Value> = items.iter().filter(|v| **v != items[0]).collect();
                    if others.is_empty() {
                        continue;
                    }
                    let copy = (*rng.pick(&others)).clone();
                    new.pointer_mut(&at)?.as_array_mut()?.insert(0, copy.clone());
                    expected.pointer_mut(&at)?.as_array_mut()?.insert(0, copy);
                }
            }
            // The type must hold the change exactly (a string enum's unknown value is kept
            // whole; a constrained one may not be).
            let Some(typed) = decode(&new.to_string()) else { continue };
            if serde_json::to_value(&typed).ok().as_ref() == Some(&new) {
                return Some((typed, expected));
            }
        }
        None
    }
}

/// The pointers of the places where `change` applies.
fn places_in(value: &Value, at: String, change: Change, out: &mut Vec<String>) {
    let applies = match (change, value) {
        (Change::Leaf, Value::String(_) | Value::Bool(_)) => true,
        (Change::Remove, Value::Array(items)) => !items.is_empty(),
        (Change::Insert, Value::Array(items)) => items.len() >= 2,
        _ => false,
    };
    if applies {
        out.push(at.clone());
    }
    match value {
        Value::Object(members) => {
            for (k, v) in members {
                places_in(v, format!("{at}/{}", k.replace('~', "~0").replace('/', "~1")), change, out);
            }
        }
        Value::Array(items) => {
            for (i, v) in items.iter().enumerate() {
                places_in(v, format!("{at}/{i}"), change, out);
            }
        }
        _ => {}
    }
}

/// Each generic change was checked at least `least` times.
fn assert_generic_changes(tally: &Tally, least: usize) {
    for name in ["change a string or boolean member", "remove an array element", "insert an array element"] {
        assert!(tally.edits.get(name).is_some_and(|n| *n >= least), "{name}: {:?}", tally.edits);
    }
}

fn report(tally: &Tally) -> String {
    let shown: Vec<&str> = tally.failures.iter().take(8).map(String::as_str).collect();
    format!("{} failures, first {}:\n{}", tally.failures.len(), shown.len(), shown.join("\n\n"))
}

// ---- the corpus ------------------------------------------------------------------------------

/// One spec example through [`check`], by what it holds; `false` when no type takes it (an
/// excerpt of params, a response whose request is unknown).
fn check_example(example: &spec::Example, rng: &mut Rng, tally: &mut Tally) -> bool {
    let place = example.place();
    let place = place.as_str();
    macro_rules! envelopes {
        ($method:expr, $value:expr, $($ty:ty),*) => {{
            let mut found = false;
            $(
                if !found && matches!(<$ty>::decode($method, $value), Ok(Some(_))) {
                    check::<$ty>(place, $value, by_method!($ty, $method), rng, tally);
                    found = true;
                }
            )*
            found
        }};
    }
    macro_rules! payload {
        ($value:expr, $($name:literal => $ty:ty),*) => {
            match payload_type($value) {
                $(Some($name) => {
                    check::<$ty>(place, $value, &|text: &str| Lossless::<$ty>::from_raw(text), rng, tally);
                    true
                })*
                _ => false,
            }
        };
    }
    use acp_types as v1;
    match (&example.content, example.protocol) {
        (Content::Call { method, params, request: true }, Protocol::V1) => {
            envelopes!(method, params, v1::ClientRequest, v1::AgentRequest)
        }
        (Content::Call { method, params, request: false }, Protocol::V1) => {
            envelopes!(method, params, v1::ClientNotification, v1::AgentNotification, v1::ProtocolLevelNotification)
        }
        (Content::Call { method, params, request: true }, Protocol::V2) => {
            envelopes!(method, params, v2::ClientRequest, v2::AgentRequest)
        }
        (Content::Call { method, params, request: false }, Protocol::V2) => {
            envelopes!(method, params, v2::ClientNotification, v2::AgentNotification, v2::ProtocolLevelNotification)
        }
        (Content::Result { method: Some(method), result, .. }, Protocol::V1) => {
            envelopes!(method, result, v1::AgentResponse, v1::ClientResponse)
        }
        (Content::Result { method: Some(method), result, .. }, Protocol::V2) => {
            envelopes!(method, result, v2::AgentResponse, v2::ClientResponse)
        }
        (Content::Error(error), Protocol::V1) => {
            check::<v1::Error>(place, error, &|text: &str| Lossless::from_raw(text), rng, tally);
            true
        }
        (Content::Error(error), Protocol::V2) => {
            check::<v2::Error>(place, error, &|text: &str| Lossless::from_raw(text), rng, tally);
            true
        }
        (Content::Payload(value), Protocol::V1) => payload!(value,
            "SessionUpdate" => v1::SessionUpdate, "AuthMethod" => v1::AuthMethod,
            "SessionConfigOption" => v1::SessionConfigOption, "ContentBlock" => v1::ContentBlock,
            "ToolCallContent" => v1::ToolCallContent, "McpServer" => v1::McpServer,
            "AvailableCommand" => v1::AvailableCommand, "ToolCallLocation" => v1::ToolCallLocation),
        (Content::Payload(value), Protocol::V2) => payload!(value,
            "SessionUpdate" => v2::SessionUpdate, "AuthMethod" => v2::AuthMethod,
            "SessionConfigOption" => v2::SessionConfigOption, "ContentBlock" => v2::ContentBlock,
            "ToolCallContent" => v2::ToolCallContent, "McpServer" => v2::McpServer,
            "RequestPermissionSubject" => v2::RequestPermissionSubject,
            "AvailableCommand" => v2::AvailableCommand, "ToolCallLocation" => v2::ToolCallLocation),
        _ => false,
    }
}

#[test]
fn every_spec_example_keeps_what_a_proxy_does_not_change() {
    let mut rng = Rng(SEED ^ 0x1055_1e55);
    let mut tally = Tally::default();
    let mut untyped = 0;
    for protocol in [Protocol::V1, Protocol::V2] {
        let (_, examples) = spec::examples(protocol);
        for example in &examples {
            if !check_example(example, &mut rng, &mut tally) {
                untyped += 1;
            }
        }
    }
    eprintln!(
        "spec examples: {} checked ({} did not decode as their type, {untyped} have none); members added: {} \
         unknown, {} held by the type; changes: {:?}",
        tally.cases, tally.not_decoded, tally.unknown_added, tally.known_added, tally.edits
    );
    assert!(tally.failures.is_empty(), "{}", report(&tally));
    // v1: ~79 whole messages; v2: ~107 blocks, most of them messages or typed payloads.
    assert!(tally.cases >= 150, "only {} examples checked", tally.cases);
    assert!(tally.unknown_added >= 150 && tally.known_added >= 20, "too few additions");
    assert_generic_changes(&tally, 30);
    assert!(tally.edits.get("prepend a text block to the prompt").is_some_and(|n| *n >= 5), "{:?}", tally.edits);
    assert!(
        tally.edits.get("change the session id of a session/update").is_some_and(|n| *n >= 30),
        "{:?}",
        tally.edits
    );
}

#[test]
fn every_generated_instance_keeps_what_a_proxy_does_not_change() {
    use acp_types::*;
    let schema = Schema::load();
    let mut tally = Tally::default();
    for m in schema.methods() {
        let mut g = Gen::new(&schema, schema_gen::seed_for(&m, 0x1055));
        let mut rng = Rng(schema_gen::seed_for(&m, 0x1055_0001));
        for case in 0..CASES_PER_METHOD {
            let input = g.instance(&m.def);
            let place = format!("{} #{case}", m.def);
            let method = m.method.as_str();
            match (m.kind, m.side.as_str()) {
                (Kind::Request, "agent") => {
                    check(&place, &input, by_method!(ClientRequest, method), &mut rng, &mut tally)
                }
                (Kind::Response, "agent") => {
                    check(&place, &input, by_method!(AgentResponse, method), &mut rng, &mut tally)
                }
                (Kind::Notification, "agent") => {
                    check(&place, &input, by_method!(ClientNotification, method), &mut rng, &mut tally)
                }
                (Kind::Request, "client") => {
                    check(&place, &input, by_method!(AgentRequest, method), &mut rng, &mut tally)
                }
                (Kind::Response, "client") => {
                    check(&place, &input, by_method!(ClientResponse, method), &mut rng, &mut tally)
                }
                (Kind::Notification, "client") => {
                    check(&place, &input, by_method!(AgentNotification, method), &mut rng, &mut tally)
                }
                (Kind::Notification, "protocol") => {
                    check(&place, &input, by_method!(ProtocolLevelNotification, method), &mut rng, &mut tally)
                }
                other => panic!("{}: no envelope for {other:?}", m.def),
            }
        }
    }
    eprintln!(
        "generated instances: {} checked ({} did not decode); members added: {} unknown, {} held by the type; \
         changes: {:?}",
        tally.cases, tally.not_decoded, tally.unknown_added, tally.known_added, tally.edits
    );
    assert!(tally.failures.is_empty(), "{}", report(&tally));
    assert_eq!(tally.not_decoded, 0, "valid instances decode");
    assert!(tally.cases >= 1500, "only {} instances", tally.cases);
    assert_generic_changes(&tally, 400);
    assert_eq!(tally.edits.get("prepend a text block to the prompt"), Some(&CASES_PER_METHOD), "{:?}", tally.edits);
}

// ---- the rules, one by one -----------------------------------------------------------------------

fn prompt(text: &str) -> Lossless<PromptRequest> {
    Lossless::from_raw(text).expect("a prompt request")
}

fn value(raw: &RawValue) -> Value {
    serde_json::from_str(raw.get()).unwrap()
}

#[test]
fn an_unchanged_view_is_the_input_byte_for_byte() {
    // Odd spellings that a decode and re-encode would normalise: whitespace, escapes, `1E2`.
    let text =
        "{ \"sessionId\" : \"s\\u0031\",\n  \"prompt\": [ {\"type\":\"text\",\"text\":\"\\u00e9\", \"x\": 1E2} ] }";
    let view = prompt(text);
    assert_eq!(view.session_id.0, "s1");
    assert_eq!(view.to_raw().unwrap().get(), text);
    assert_eq!(serde_json::to_string(&view).unwrap(), text);
    // `edit()` without a change, and a change undone: the original too.
    let mut view = prompt(text);
    view.edit();
    assert!(view.is_edited());
    assert_eq!(view.to_json_string().unwrap(), text);
    let mut view = prompt(text);
    view.prompt.push(ContentBlock::from(TextContent::new("more")));
    view.prompt.pop();
    assert_eq!(view.into_raw().unwrap().get(), text);
    // Whitespace around the value is not part of it.
    assert_eq!(prompt(&format!("  {text}\n")).to_raw().unwrap().get(), text);
}

#[test]
fn a_change_keeps_the_untouched_parts_as_written() {
    let text = r#"{"prompt":[{"type":"text","text":"a","x":1E2,"_meta":{"k":"\u00e9"}}],"sessionId":"s","z":[1.0,2]}"#;
    let mut view = prompt(text);
    view.session_id = "t".into();
    let out = view.to_raw().unwrap();
    // The block and the unknown `z` are copied as written; only `sessionId` is re-encoded.
    assert_eq!(
        out.get(),
        r#"{"prompt":[{"type":"text","text":"a","x":1E2,"_meta":{"k":"\u00e9"}}],"sessionId":"t","z":[1.0,2]}"#
    );
}

#[test]
fn blocks_inserted_removed_changed_and_moved_keep_their_neighbours_unknown_members() {
    let text = r#"{"sessionId":"s","prompt":[
        {"type":"text","text":"a","xa":1},
        {"type":"text","text":"b","xb":2},
        {"type":"text","text":"c","xc":3}]}"#;
    let block = |t: &str| ContentBlock::from(TextContent::new(t));
    type Change = Box<dyn Fn(&mut Vec<ContentBlock>)>;
    let cases: Vec<(&str, Change, Value)> = vec![
        (
            "insert in the middle",
            Box::new(move |p| p.insert(1, block("new"))),
            json!([{"type":"text","text":"a","xa":1},{"type":"text","text":"new"},{"type":"text","text":"b","xb":2},{"type":"text","text":"c","xc":3}]),
        ),
        (
            "remove the first",
            Box::new(|p| {
                p.remove(0);
            }),
            json!([{"type":"text","text":"b","xb":2},{"type":"text","text":"c","xc":3}]),
        ),
        (
            "change the middle one in place",
            Box::new(|p| {
                if let ContentBlock::Text(t) = &mut p[1] {
                    t.text = "B".into();
                }
            }),
            json!([{"type":"text","text":"a","xa":1},{"type":"text","text":"B","xb":2},{"type":"text","text":"c","xc":3}]),
        ),
        (
            "move the last to the front",
            Box::new(|p| {
                let last = p.pop().unwrap();
                p.insert(0, last);
            }),
            json!([{"type":"text","text":"c","xc":3},{"type":"text","text":"a","xa":1},{"type":"text","text":"b","xb":2}]),
        ),
        (
            "replace all with one changed and one new",
            Box::new(move |p| *p = vec![block("c"), block("z")]),
            json!([{"type":"text","text":"c","xc":3},{"type":"text","text":"z"}]),
        ),
    ];
    for (what, change, expected) in cases {
        let mut view = prompt(text);
        change(&mut view.prompt);
        let out = value(&view.to_raw().unwrap());
        assert_eq!(out["prompt"], expected, "{what}");
        assert_eq!(out["sessionId"], "s", "{what}");
    }
}

#[test]
fn a_removed_member_goes_and_a_set_one_comes() {
    let text = r#"{"sessionId":"s","prompt":[],"_meta":{"a":1},"x":true}"#;
    let mut view = prompt(text);
    view.meta = None;
    assert_eq!(value(&view.to_raw().unwrap()), json!({"sessionId":"s","prompt":[],"x":true}));
    let mut view = prompt(r#"{"sessionId":"s","prompt":[],"x":true}"#);
    view.meta = Some(Map::from_iter([("b".to_owned(), json!(2))]));
    assert_eq!(value(&view.to_raw().unwrap()), json!({"sessionId":"s","prompt":[],"x":true,"_meta":{"b":2}}));
}

#[test]
fn a_new_variant_does_not_inherit_the_old_ones_unknown_members() {
    let text = r#"{"sessionId":"s","prompt":[{"type":"text","text":"a","x-text-only":1}],"x":2}"#;
    let mut view = prompt(text);
    view.prompt[0] = ContentBlock::from(acp_types::ResourceLink::new("notes", "file:///notes.md"));
    let out = value(&view.to_raw().unwrap());
    assert_eq!(out["prompt"], json!([{"type":"resource_link","name":"notes","uri":"file:///notes.md"}]));
    assert_eq!(out["x"], 2, "members outside the changed union stay");
    // A change inside the variant keeps them.
    let mut view = prompt(text);
    if let ContentBlock::Text(t) = &mut view.prompt[0] {
        t.text = "b".into();
    }
    assert_eq!(value(&view.to_raw().unwrap())["prompt"][0], json!({"type":"text","text":"b","x-text-only":1}));
}

#[test]
fn items_and_values_the_type_dropped_while_decoding_are_kept() {
    // `content` skips invalid items and `kind` reads a malformed value as its default: the
    // type cannot see them, a change elsewhere must not lose them.
    let text = r#"{"toolCallId":"t","status":"pending","kind":{"bad":1},"content":[
        {"type":"content","content":{"type":"text","text":"one","x":1}},
        {"type":"content"},
        {"type":"content","content":{"type":"text","text":"two"}},
        "garbage"]}"#;
    let mut view = Lossless::<ToolCallUpdate>::from_raw(text).unwrap();
    assert_eq!(view.content.as_ref().and_then(|c| c.as_ref()).map(Vec::len), Some(2));
    view.status = Some(Some(acp_types::ToolCallStatus::Completed));
    let out = value(&view.to_raw().unwrap());
    let mut expected: Value = serde_json::from_str(text).unwrap();
    expected["status"] = json!("completed");
    assert_eq!(out, expected);
    // Removing the first valid item keeps the invalid ones, after the item before them.
    let mut view = Lossless::<ToolCallUpdate>::from_raw(text).unwrap();
    view.content.as_mut().and_then(|c| c.as_mut()).unwrap().remove(1);
    let out = value(&view.to_raw().unwrap());
    assert_eq!(
        out["content"],
        json!([{"type":"content","content":{"type":"text","text":"one","x":1}},{"type":"content"},"garbage"])
    );
}

#[test]
fn decoding_fails_with_the_path_and_encoding_errors_are_reported() {
    let err = Lossless::<PromptRequest>::from_raw(r#"{"sessionId":"s","prompt":[{"type":"text"}]}"#).unwrap_err();
    assert_eq!(err.path(), Some("prompt[0]"), "{err}");
    // Not JSON: located the same way.
    let err = Lossless::<PromptRequest>::from_raw(r#"{"sessionId":"s","prompt":[1,,]}"#).unwrap_err();
    assert_eq!(err.path(), Some("prompt[1]"), "{err}");
    assert!(Lossless::<PromptRequest>::from_raw(r#"{"sessionId":"s","prompt":[]} x"#).is_err(), "trailing input");
    let err = Lossless::<PromptRequest>::map("{}", |_| {}).unwrap_err();
    assert!(matches!(err, LosslessError::Decode(_)), "{err}");
    assert!(err.to_string().starts_with("cannot decode: missing field"), "{err}");
    // A type whose encoding fails reports it when the view is written, not when it is changed.
    #[derive(serde::Deserialize, Serialize)]
    struct Keys(std::collections::BTreeMap<Vec<u8>, u8>);
    let mut view = Lossless::<Keys>::from_raw("{}").unwrap();
    view.0.insert(vec![1], 1);
    assert!(view.to_raw().is_err());
}

#[test]
fn views_come_from_raw_json_text_and_values_and_sit_inside_other_messages() {
    let text = r#"{"sessionId":"s","prompt":[],"x":1}"#;
    let raw = RawValue::from_string(text.to_owned()).unwrap();
    let from_raw = Lossless::<PromptRequest>::from_raw(&*raw).unwrap();
    let from_box = Lossless::<PromptRequest>::from_raw(raw.clone()).unwrap();
    let from_string = Lossless::<PromptRequest>::from_raw(text.to_owned()).unwrap();
    let from_value = Lossless::<PromptRequest>::from_raw(&serde_json::from_str::<Value>(text).unwrap()).unwrap();
    for view in [from_raw, from_box, from_string] {
        assert_eq!(view.original().get(), text);
    }
    assert_eq!(value(from_value.original()), serde_json::from_str::<Value>(text).unwrap());
    // As a member of an envelope of one's own.
    #[derive(serde::Deserialize, Serialize)]
    struct Envelope {
        method: String,
        params: Lossless<PromptRequest>,
    }
    let message = format!(r#"{{"method":"session/prompt","params":{text}}}"#);
    let mut envelope: Envelope = serde_json::from_str(&message).unwrap();
    assert_eq!(serde_json::to_string(&envelope).unwrap(), message);
    envelope.params.prompt.push(ContentBlock::from(TextContent::new("hi")));
    let out: Value = serde_json::to_value(&envelope).unwrap();
    assert_eq!(out["params"], json!({"sessionId":"s","prompt":[{"type":"text","text":"hi"}],"x":1}));
    // An error inside names its path within the message.
    let bad = r#"{"method":"session/prompt","params":{"sessionId":"s","prompt":[{"type":7}]}}"#;
    let err = serde_json::from_str::<Envelope>(bad).err().unwrap().to_string();
    assert!(err.contains("prompt[0]"), "{err}");
    // By method, through an envelope enum.
    let view = Lossless::<acp_types::ClientRequest>::decode_with(text, |de| {
        acp_types::ClientRequest::decode("session/prompt", de)?
            .ok_or_else(|| serde::de::Error::custom("no such method"))
    })
    .unwrap();
    assert!(matches!(&*view, acp_types::ClientRequest::SessionPrompt(_)));
}
