//! The constructs of the newer schemas (upstream's releases after v1.7.0, as the official SDK
//! 2.4 package ships them): the schema fragment, the Rust it becomes, and a round trip of valid
//! and unknown values in a crate generated from it and run. Also: a release read without its
//! `meta.json` gets the method tables it gets with one.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::{Value, json};
use xtask::codegen::{self, CodegenError, Gating, Settings, load};

mod common;
use common::base_defs;

fn shared() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/acp-schema")
}

/// The smallest schema the generator accepts (`common::base_defs`), with `extra` added;
/// written without `meta.json`, as the published packages ship a schema.
fn fixture(name: &str, extra: Value) -> PathBuf {
    let mut defs = base_defs();
    defs.extend(extra.as_object().cloned().unwrap_or_default());
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("constructs").join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("v1")).unwrap();
    std::fs::write(dir.join("v1/schema.json"), json!({"$defs": defs}).to_string()).unwrap();
    dir
}

fn settings(dir: &Path) -> Settings {
    let mut settings = Settings::new(dir, "fixture");
    settings.gating = Gating::AllInOne;
    settings.package = "acp-types-constructs".into();
    settings.standalone = true;
    settings
}

fn types(files: &[codegen::OutputFile]) -> &str {
    files.iter().find(|f| f.path.ends_with("v1/types.rs")).map(|f| f.contents.as_str()).unwrap_or_default()
}

/// `IdleStateUpdate`'s shape: an object whose `stopReason` member selects a variant, some of
/// which add members; an open variant for other values (written with `not`) and one for `null`.
fn member_selected() -> Value {
    let reason = |value: &str| json!({"type": "object", "properties": {"stopReason": {"type": "string", "const": value}}, "required": ["stopReason"]});
    let mut error = reason("error");
    error["allOf"] = json!([{"$ref": "#/$defs/Failure"}]);
    json!({
        "IdleUpdate": {
            "description": "Nothing is running.",
            "type": "object",
            "properties": {
                "note": {"type": "string"},
                "stopReason": {"description": "Why work stopped.", "type": ["string", "null"],
                               "x-deserialize-default-on-error": true}
            },
            "anyOf": [
                reason("end_turn"), reason("max_tokens"), error,
                {"title": "other", "type": "object", "properties": {"stopReason": {"type": "string"}},
                 "required": ["stopReason"], "additionalProperties": true,
                 "not": {"anyOf": [reason("end_turn"), reason("max_tokens"), reason("error")]}},
                {"title": "none", "type": "object", "properties": {"stopReason": {"type": "null"}}}
            ]
        },
        "Failure": {"type": "object", "properties": {"message": {"type": "string"}}}
    })
}

/// `proxy/initialize` and `proxy/successor`: one-`$ref` `allOf` aliases, and `x-side: "proxy"`.
fn proxy_side() -> Value {
    json!({
        "ProxyInitializeRequest": {"description": "Initializes a proxy.", "x-method": "proxy/initialize",
                                   "x-side": "proxy", "allOf": [{"$ref": "#/$defs/InitializeRequest"}]},
        "ProxyInitializeResponse": {"x-method": "proxy/initialize", "x-side": "proxy",
                                    "allOf": [{"$ref": "#/$defs/InitializeResponse"}]},
        "ProxySuccessorRequest": {"type": "object", "x-method": "proxy/successor", "x-side": "proxy",
                                  "properties": {"method": {"type": "string"}, "params": {}}, "required": ["method"]},
        "ProxySuccessorResponse": {"description": "The wrapped result.", "x-method": "proxy/successor", "x-side": "proxy"},
        "ProxySuccessorNotification": {"type": "object", "x-method": "proxy/successor", "x-side": "proxy",
                                       "properties": {"method": {"type": "string"}, "params": {}}, "required": ["method"]}
    })
}

/// `x-deserialize-default-on-null` on a required list (`mcpServers`): `null` reads as empty.
fn default_on_null() -> Value {
    json!({"Launch": {"type": "object", "required": ["args"],
                      "properties": {"args": {"type": "array", "items": {"type": "string"},
                                              "x-deserialize-default-on-null": true}}}})
}

/// A definition with a keyword no rule covers.
fn invented_keyword() -> Value {
    json!({"Hologram": {"description": "A projection.", "type": "object", "frobnicate": {"depth": 3},
                        "properties": {"beams": {"type": "array", "items": {"type": "number"}}}}})
}

#[test]
fn a_member_that_selects_the_variant_becomes_an_optional_flattened_union() {
    let files = codegen::generate(&settings(&fixture("member", member_selected()))).expect("generates");
    let types = types(&files);
    assert!(types.contains("pub stop_reason: Option<IdleUpdateStopReason>,"), "{types}");
    assert!(!types.contains("pub stop_reason: Option<Option<String>>"), "the member is the union's tag: {types}");
    assert!(types.contains("pub enum IdleUpdateStopReason {"), "{types}");
    for variant in ["EndTurn,", "MaxTokens,", "Error(Failure),", "Other(serde_support::UnknownVariant),"] {
        assert!(types.contains(variant), "{variant}: {types}");
    }
    assert!(types.contains("Why work stopped."), "the member's description goes on the field");
    assert!(types.contains("pub fn stop_reason("), "an optional union gets a setter");
}

#[test]
fn a_required_member_that_defaults_on_null_decodes_null_as_its_default() {
    let files = codegen::generate(&settings(&fixture("on-null", default_on_null()))).expect("generates");
    let types = types(&files);
    assert!(types.contains("pub args: Vec<String>,"), "still required, not an Option: {types}");
    assert!(types.contains(r#"args: "args" => required(DefaultOnNull),"#), "{types}");
}

#[test]
fn an_allof_of_one_ref_is_an_alias_and_proxy_methods_have_a_side_of_their_own() {
    let files = codegen::generate(&settings(&fixture("proxy", proxy_side()))).expect("generates");
    let types = types(&files);
    assert!(types.contains("pub type ProxyInitializeRequest = InitializeRequest;"), "{types}");
    assert!(types.contains("/// Initializes a proxy."), "{types}");
    let methods = files.iter().find(|f| f.path.ends_with("v1/methods.rs")).unwrap().contents.as_str();
    for expected in [
        "pub mod proxy_method {",
        "pub enum ProxyRequest {",
        "ProxyInitialize(ProxyInitializeRequest),",
        "pub enum ProxyNotification {",
        "pub trait Proxy<Cx: Send = ()>: Send + Sync {",
        "one method per request and notification the conductor sends",
        "fn proxy_successor(",
    ] {
        assert!(methods.contains(expected), "{expected}: {methods}");
    }
    assert!(!methods.contains("ProxyInitialize(ProxyInitializeRequest),\n    /// `initialize`"), "not the agent's");
}

#[test]
fn a_construct_without_a_rule_is_raw_json_reported_and_refused_by_strict() {
    let dir = fixture("invented", invented_keyword());
    let (files, untyped) = codegen::generate_reported(&settings(&dir)).expect("the run succeeds");
    assert_eq!(untyped.len(), 1, "{untyped:?}");
    assert!(untyped[0].starts_with("v1 definition `Hologram`") && untyped[0].contains("`frobnicate`"), "{untyped:?}");
    let types = types(&files);
    assert!(types.contains("pub struct Hologram(pub serde_json::Value);"), "{types}");
    assert!(types.contains("Not typed: the generator has no rule for the keyword `frobnicate`"), "{types}");

    // Nested keywords count too, with where they are.
    let nested = json!({"Holder": {"type": "object", "properties": {"p": {"type": "string", "if": {"const": "a"}}}}});
    let (_, untyped) = codegen::generate_reported(&settings(&fixture("nested", nested))).expect("succeeds");
    assert!(untyped.iter().any(|u| u.contains("`if` (at `properties.p`)")), "{untyped:?}");

    let strict = Settings { strict: true, ..settings(&dir) };
    match codegen::generate(&strict) {
        Err(CodegenError::Untyped(list)) => assert!(list[0].contains("Hologram"), "{list:?}"),
        other => panic!("--strict refuses an untyped definition: {other:?}"),
    }
}

#[test]
fn the_new_constructs_round_trip_in_a_compiled_crate() {
    let mut extra = member_selected();
    let extra_map = extra.as_object_mut().unwrap();
    extra_map.extend(proxy_side().as_object().unwrap().clone());
    extra_map.extend(invented_keyword().as_object().unwrap().clone());
    extra_map.extend(default_on_null().as_object().unwrap().clone());
    let dir = fixture("roundtrip", extra);
    let files = codegen::generate(&settings(&dir)).expect("generates");
    let crate_dir = dir.join("crate");
    codegen::write_or_check(&crate_dir, &files, false).unwrap();
    std::fs::create_dir_all(crate_dir.join("examples")).unwrap();
    std::fs::write(crate_dir.join("examples/roundtrip.rs"), include_str!("fixtures/constructs_roundtrip.rs")).unwrap();
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    std::fs::copy(workspace.join("Cargo.lock"), crate_dir.join("Cargo.lock")).unwrap();
    let out = Command::new(env!("CARGO"))
        .current_dir(&crate_dir)
        .args(["run", "--quiet", "--offline", "--example", "roundtrip"])
        .env("RUSTFLAGS", "-D warnings")
        // Shared with `check-releases`, whose builds of serde it reuses.
        .env("CARGO_TARGET_DIR", workspace.join("target/release-check/target"))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "constructs round-trip");
}

/// Copies a release folder without its `meta*.json` files.
fn without_meta(release: &Path, name: &str) -> PathBuf {
    let out = Path::new(env!("CARGO_TARGET_TMPDIR")).join("without-meta").join(name);
    let _ = std::fs::remove_dir_all(&out);
    for version in ["v1", "v2"] {
        let Ok(entries) = std::fs::read_dir(release.join(version)) else { continue };
        std::fs::create_dir_all(out.join(version)).unwrap();
        for entry in entries {
            let path = entry.unwrap().path();
            let file = path.file_name().unwrap().to_string_lossy().into_owned();
            if file.starts_with("schema") {
                std::fs::copy(&path, out.join(version).join(&file)).unwrap();
            }
        }
    }
    out
}

#[test]
fn every_release_without_meta_json_gets_the_same_method_tables() {
    let releases = shared().join("releases");
    let tags = xtask::releases::tags(&releases).unwrap();
    assert!(tags.len() >= 4, "{tags:?}");
    for tag in tags {
        let bare = without_meta(&releases.join(&tag), &tag);
        for version in ["v1", "v2"] {
            let with = releases.join(&tag).join(version);
            if !with.join("meta.json").exists() {
                continue;
            }
            let model = |dir: &Path| codegen::build_model(&load::load_version(dir).unwrap(), Gating::AllInOne).unwrap();
            let (a, b) = (model(&with), model(&bare.join(version)));
            assert_eq!(a.methods, b.methods, "{tag} {version}: the method tables");
            assert_eq!(a.protocol_methods, b.protocol_methods, "{tag} {version}: the protocol methods");
            assert_eq!(a.protocol_version, b.protocol_version, "{tag} {version}: the protocol version");
            assert_eq!(a, b, "{tag} {version}: the whole model");
        }
    }
}

#[test]
fn a_meta_json_that_names_a_method_otherwise_is_refused_naming_both() {
    let dir = fixture("meta-mismatch", json!({}));
    let meta = json!({
        "agentMethods": {"initialize": "initialize", "authenticate": "authenticate", "session_new": "session/new",
                         "prompt": "session/prompt", "session_cancel": "session/cancel"},
        "clientMethods": {"session_request_permission": "session/request_permission", "session_update": "session/update"}
    });
    std::fs::write(dir.join("v1/meta.json"), meta.to_string()).unwrap();
    let err = codegen::generate(&settings(&dir)).expect_err("the names disagree").to_string();
    assert!(err.contains("`prompt`") && err.contains("`session_prompt`") && err.contains("session/prompt"), "{err}");
}

#[test]
fn the_official_sdk_2_4_schema_is_typed_whole() {
    let dir = shared().join("next/npm-sdk-2.4.0");
    assert!(!dir.join("v1/meta.json").exists(), "published without meta.json");
    let settings = Settings { strict: true, ..Settings::new(&dir, "npm-sdk-2.4.0") };
    let settings = Settings { gating: Gating::AllInOne, ..settings };
    let files = codegen::generate(&settings).expect("every definition typed");
    let v2 = files.iter().find(|f| f.path.ends_with("v2/types.rs")).unwrap().contents.as_str();
    assert!(v2.contains("pub stop_reason: Option<IdleStateUpdateStopReason>,"), "the idle state's stop reason");
    let v1 = files.iter().find(|f| f.path.ends_with("v1/methods.rs")).unwrap().contents.as_str();
    assert!(v1.contains("pub trait Proxy<Cx: Send = ()>"), "the proxy side");
    let v1_types = files.iter().find(|f| f.path.ends_with("v1/types.rs")).unwrap().contents.as_str();
    assert!(v1_types.contains("pub type InitializeProxyRequest = InitializeRequest;"), "proxy/initialize's params");
}
