//! The generated types describe the schema they came from: the JSON Schema that schemars emits
//! from them (feature `schemars`) is compared with the input `schema.json` (v1.7.0, stable),
//! definition by definition: every definition, property, required set and enum value. Every
//! difference is listed; the test fails on any that is not explained in [`EXPLAINED`].

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use serde_json::{Map, Value};

/// Differences that are deliberate, each with its reason.
const EXPLAINED: &[(&str, &str)] = &[
    // Only with `unstable_mcp_over_acp`, which `cargo test --workspace` turns on (see `MCP_OVER_ACP`).
    ("MessageMcpResult", "the inline `Result` alternative of MessageMcpResponse, a struct of its own"),
    ("MessageMcpError", "the inline `Error` alternative of MessageMcpResponse, a struct of its own"),
    ("CreateElicitationAction", "the inline union of CreateElicitationResponse, given a name so it can be a Rust enum"),
    ("CreateElicitationMode", "the inline union of CreateElicitationRequest, given a name so it can be a Rust enum"),
    ("ElicitationScope", "the inline union shared by ElicitationFormMode and ElicitationUrlMode, given a name"),
    ("SessionConfigOptionType", "the inline union of SessionConfigOption, given a name so it can be a Rust enum"),
    (
        "SetSessionConfigOptionType",
        "the inline union of SetSessionConfigOptionRequest, given a name so it can be a Rust enum",
    ),
];

fn input_defs() -> Map<String, Value> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/acp-schema/next/npm-sdk-2.4.0/v1/schema.json");
    let schema: Value =
        serde_json::from_slice(&std::fs::read(&path).expect("the pinned schema is readable")).expect("JSON");
    schema["$defs"].as_object().cloned().unwrap_or_default()
}

fn unstable_input_defs() -> Map<String, Value> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../shared/acp-schema/next/npm-sdk-2.4.0/v1/schema.unstable.json");
    let schema: Value =
        serde_json::from_slice(&std::fs::read(&path).expect("the pinned schema is readable")).expect("JSON");
    schema["$defs"].as_object().cloned().unwrap_or_default()
}

fn our_defs() -> Map<String, Value> {
    let mut generator = schemars::generate::SchemaSettings::draft2020_12().into_generator();
    acp_types::json_schemas(&mut generator);
    generator.definitions().clone()
}

/// Follows a single `allOf`/`$ref` wrapper and `anyOf[X, null]` to the interesting schema.
fn props(def: &Value) -> BTreeSet<String> {
    def.get("properties").and_then(Value::as_object).map(|p| p.keys().cloned().collect()).unwrap_or_default()
}

fn required(def: &Value) -> BTreeSet<String> {
    def.get("required")
        .and_then(Value::as_array)
        .map(|r| r.iter().filter_map(Value::as_str).map(str::to_owned).collect())
        .unwrap_or_default()
}

/// The constant values a union or enum lists: `const`s of its alternatives, or of their tag.
fn constants(def: &Value) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    if let Some(values) = def.get("enum").and_then(Value::as_array) {
        out.extend(values.iter().map(|v| v.to_string()));
    }
    for key in ["oneOf", "anyOf"] {
        for alt in def.get(key).and_then(Value::as_array).into_iter().flatten() {
            if let Some(c) = alt.get("const") {
                out.insert(c.to_string());
            }
            for p in alt.get("properties").and_then(Value::as_object).into_iter().flat_map(|p| p.values()) {
                if let Some(c) = p.get("const") {
                    out.insert(c.to_string());
                }
            }
        }
    }
    out
}

/// Every difference between `input`'s definitions and `ours`, by what differs.
fn compare(input: &Map<String, Value>, ours: &Map<String, Value>) -> BTreeMap<String, String> {
    let mut differences: BTreeMap<String, String> = BTreeMap::new();
    let envelopes =
        ["AgentRequest", "AgentResponse", "AgentNotification", "ClientRequest", "ClientResponse", "ClientNotification"];
    for (name, def) in input {
        if envelopes.contains(&name.as_str()) {
            continue; // decoded by method name, not by shape: no schema of their own
        }
        let Some(mine) = ours.get(name) else {
            differences.insert(name.clone(), "missing from the generated schema".into());
            continue;
        };
        let (a, b) = (props(def), props(mine));
        if a != b {
            differences.insert(format!("{name} properties"), format!("input {a:?}, generated {b:?}"));
        }
        let (a, b) = (required(def), required(mine));
        if a != b {
            differences.insert(format!("{name} required"), format!("input {a:?}, generated {b:?}"));
        }
        let (a, b) = (constants(def), constants(mine));
        if a != b {
            differences.insert(format!("{name} values"), format!("input {a:?}, generated {b:?}"));
        }
    }
    for name in ours.keys() {
        if !input.contains_key(name) {
            differences.insert(name.clone(), "only in the generated schema".into());
        }
    }
    differences
}

/// Whether this build of `acp-types` has the unstable MCP-over-ACP types. In `cargo test
/// --workspace` it does: features are unified across the workspace, and the runtime's and the
/// conductor's MCP-over-ACP tests turn it on.
const MCP_OVER_ACP: bool = acp_types::feature_gates::unstable_mcp_over_acp!({ true } { false });

#[test]
fn generated_types_describe_the_input_schema() {
    let input = input_defs();
    let ours = our_defs();
    let mut differences = compare(&input, &ours);
    if MCP_OVER_ACP {
        // What the unstable feature adds is explained by the unstable schema, where the
        // generated definitions agree with it.
        let unstable = compare(&unstable_input_defs(), &ours);
        let before = differences.len();
        differences.retain(|key, _| unstable.contains_key(key));
        println!(
            "{} differences explained by the unstable schema (unstable_mcp_over_acp is on)",
            before - differences.len()
        );
    }
    let unexplained: Vec<String> = differences
        .iter()
        .filter(|(k, _)| !EXPLAINED.iter().any(|(e, _)| e == k))
        .map(|(k, v)| format!("{k}: {v}"))
        .collect();
    println!(
        "{} input definitions, {} generated, {} differences ({} explained)",
        input.len(),
        ours.len(),
        differences.len(),
        differences.len() - unexplained.len()
    );
    for (k, why) in EXPLAINED {
        assert!(differences.contains_key(*k), "explained difference `{k}` ({why}) no longer occurs; remove it");
    }
    assert!(unexplained.is_empty(), "{} unexplained differences:\n{}", unexplained.len(), unexplained.join("\n"));
}
