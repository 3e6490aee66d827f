//! The generator on small fixture schemas: the shapes it emits, and the errors it gives for
//! what it cannot handle (never a panic).

use std::path::{Path, PathBuf};

use serde_json::{Value, json};
use xtask::codegen::{self, CodegenError, Gating, Settings};

mod common;
use common::base_defs;

/// Writes a one-version release folder with the given `$defs` and method tables.
fn fixture(name: &str, defs: Value, meta: Value) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("fixtures").join(name);
    std::fs::create_dir_all(dir.join("v1")).unwrap();
    std::fs::write(dir.join("v1/schema.json"), json!({"$defs": defs}).to_string()).unwrap();
    std::fs::write(dir.join("v1/meta.json"), meta.to_string()).unwrap();
    dir
}

fn base_meta() -> Value {
    json!({
        "agentMethods": {"initialize": "initialize", "authenticate": "authenticate", "session_new": "session/new",
                         "session_prompt": "session/prompt", "session_cancel": "session/cancel"},
        "clientMethods": {"session_request_permission": "session/request_permission", "session_update": "session/update"}
    })
}

fn generate(name: &str, extra: Value) -> Result<String, CodegenError> {
    let mut defs = base_defs();
    defs.extend(extra.as_object().cloned().unwrap_or_default());
    let dir = fixture(name, Value::Object(defs), base_meta());
    let mut settings = Settings::new(&dir, "fixture");
    settings.gating = Gating::AllInOne;
    // What the generator cannot type is an error here, so that a test sees why.
    settings.strict = true;
    let files = codegen::generate(&settings)?;
    Ok(files.into_iter().find(|f| f.path.ends_with("v1/types.rs")).map(|f| f.contents).unwrap_or_default())
}

#[test]
fn tagged_union_wraps_payloads_and_keeps_unknown_kinds() {
    let types = generate(
        "tagged",
        json!({
            "Shape": {"oneOf": [
                {"type": "object", "properties": {"kind": {"type": "string", "const": "circle"}}, "required": ["kind"],
                 "allOf": [{"$ref": "#/$defs/Circle"}]},
                {"type": "object", "properties": {"kind": {"type": "string", "const": "dot"}}, "required": ["kind"]}
            ], "discriminator": {"propertyName": "kind"}},
            "Circle": {"type": "object", "properties": {"radius": {"type": "number"}}, "required": ["radius"]}
        }),
    )
    .expect("generates");
    assert!(types.contains("pub enum Shape {"), "{types}");
    assert!(types.contains("Circle(Circle),"));
    assert!(types.contains("Dot,"));
    assert!(types.contains("Other(serde_support::UnknownVariant),"));
    assert!(types.contains("pub const TAG: &'static str = \"kind\";"));
    assert!(types.contains("pub radius: f64,"));
    assert!(
        types.contains("#[serde(serialize_with = \"serde_support::number\")]"),
        "numbers are written as JavaScript writes them"
    );
}

#[test]
fn a_tagged_payload_is_decoded_without_its_tag() {
    // A payload with a flattened open union: its fallback keeps the members no variant knows,
    // which must not include the outer tag (the union writes that itself, so it would be
    // written twice). The shape of `elicitation/create`'s `mode` and `scope`.
    let types = generate(
        "tag-not-in-payload",
        json!({
            "Mode": {"oneOf": [
                {"type": "object", "properties": {"mode": {"type": "string", "const": "url"}}, "required": ["mode"],
                 "allOf": [{"$ref": "#/$defs/UrlMode"}]}
            ]},
            "UrlMode": {"type": "object", "properties": {"url": {"type": "string"}}, "required": ["url"],
                        "anyOf": [{"allOf": [{"$ref": "#/$defs/SessionScope"}]}, {"allOf": [{"$ref": "#/$defs/RequestScope"}]}]},
            "SessionScope": {"type": "object", "properties": {"sessionId": {"type": "string"}}, "required": ["sessionId"]},
            "RequestScope": {"type": "object", "properties": {"requestId": {"type": "string"}}, "required": ["requestId"]}
        }),
    )
    .expect("generates");
    assert!(types.contains("pub scope: Scope,"), "{types}");
    assert!(types.contains("Other(serde_json::Value),"), "the flattened union is open");
    assert!(
        types.contains("serde_support::payload(&value, \"mode\")"),
        "the payload is decoded without the tag: {types}"
    );
}

#[test]
fn optional_fields_get_setters_and_required_ones_the_constructor() {
    let types = generate(
        "setters",
        json!({"Point": {"type": "object", "properties": {
            "x": {"type": "integer", "format": "int64"},
            "label": {"type": ["string", "null"]},
            "raw": {"description": "Any JSON value."}
        }, "required": ["x"]}}),
    )
    .expect("generates");
    // No `type`: any JSON value, `null` included, so absent and `null` are `None` and `Some(Value::Null)`.
    assert!(types.contains("pub raw: Option<serde_json::Value>,"), "{types}");
    assert!(types.contains("raw: \"raw\" => optional(Present),"), "a present null is kept: {types}");
    assert!(types.contains("pub fn new(x: i64) -> Self"), "{types}");
    assert!(types.contains("pub label: Option<Option<String>>,"), "optional + nullable keeps null apart from absent");
    // A value, `Some(value)` or `None` (written as `null`).
    assert!(types.contains("pub fn label(mut self, label: impl Into<Option<String>>) -> Self"), "{types}");
}

#[test]
fn a_required_session_id_is_the_first_constructor_argument() {
    // As in `LoadSessionRequest`: the schema lists `cwd` (a string too) before `sessionId`.
    let types = generate(
        "session_first",
        json!({
            "SessionId": {"type": "string"},
            "Load": {"type": "object", "properties": {
                "cwd": {"type": "string"},
                "sessionId": {"$ref": "#/$defs/SessionId"}
            }, "required": ["cwd", "sessionId"]}
        }),
    )
    .expect("generates");
    let flat: String = types.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(flat.contains("pub fn new(session_id: impl Into<SessionId>, cwd: impl Into<String>) -> Self"), "{types}");
}

#[test]
fn unsupported_constructs_name_the_definition() {
    let err = generate(
        "unsupported",
        json!({"Weird": {"type": "object", "properties": {"p": {"type": ["string", "integer"]}}}}),
    )
    .expect_err("two non-null types cannot be generated");
    let message = err.to_string();
    assert!(message.contains("`Weird`") && message.contains("property `p`"), "{message}");

    let err =
        generate("dangling", json!({"Holder": {"type": "object", "properties": {"p": {"$ref": "#/$defs/Nowhere"}}}}))
            .expect_err("a dangling $ref is an error");
    assert!(err.to_string().contains("missing `Nowhere`"), "{err}");
}

#[test]
fn meta_json_is_cross_checked_against_the_schema() {
    let mut meta = base_meta();
    meta["agentMethods"]["session_fly"] = json!("session/fly");
    let dir = fixture("meta", Value::Object(base_defs()), meta);
    let err = codegen::generate(&Settings::new(&dir, "fixture")).expect_err("meta names a method the schema lacks");
    assert!(err.to_string().contains("session/fly"), "{err}");
}

#[test]
fn the_feature_table_must_name_things_in_the_schema() {
    // The pinned table run against a schema without any of its unstable methods.
    let dir = fixture("table", Value::Object(base_defs()), base_meta());
    std::fs::copy(dir.join("v1/schema.json"), dir.join("v1/schema.unstable.json")).unwrap();
    std::fs::copy(dir.join("v1/meta.json"), dir.join("v1/meta.unstable.json")).unwrap();
    let err = codegen::generate(&Settings::new(&dir, "fixture")).expect_err("table entries name nothing");
    assert!(err.to_string().contains("names nothing in the unstable schema"), "{err}");
}

#[test]
fn output_is_deterministic() {
    let extra = json!({"Id": {"type": "string"}});
    assert_eq!(generate("det-a", extra.clone()).unwrap(), generate("det-b", extra).unwrap());
}

#[test]
fn vendoring_selects_features_and_adds_derives() {
    let (release, tag) = common::pinned_release();
    let settings = Settings::new(&release, &tag);
    let stable = codegen::vendor(&settings, &[], true, &["Eq".into()]).expect("vendors").text;
    assert!(stable.contains("pub struct SessionId"), "types are in");
    assert!(stable.contains("pub trait Agent"), "traits are in");
    assert!(
        !stable.contains("cfg(feature") && !stable.contains("schemars"),
        "no cargo features left in a vendored file"
    );
    assert!(!stable.contains("ForkSessionRequest"), "unstable types are out by default");
    assert!(stable.contains("PartialEq, Eq,") || stable.contains("PartialEq, Eq)"), "extra derives are added");
    // The helpers a types-only user needs come along: decoding with a JSON path, `Nullable`.
    assert!(stable.contains("pub mod decode {") && stable.contains("pub fn from_str<"), "decode is in");
    assert!(stable.contains("pub use decode::DecodeError;"));
    assert!(
        stable.contains("pub trait Nullable") && stable.contains("pub use serde_support::{Nullable, UnknownVariant};")
    );

    // The struct decoder is the safe one: no `unsafe` (nor the field tables' tests) in a file
    // that lands in crates whose lints it cannot know.
    assert!(!stable.contains("unsafe") && !stable.contains("decode_fields"), "no field-table decoder");
    assert!(!stable.contains("cfg(test)"), "no tests of acp-types");
    assert!(stable.contains("macro_rules! deserialize_struct") && stable.contains("pub fn next_lenient<"));

    let unstable = codegen::vendor(&settings, &["unstable_session_fork".into()], false, &[]).expect("vendors").text;
    assert!(unstable.contains("pub struct ForkSessionRequest"));
    assert!(!unstable.contains("pub trait Agent"), "types only");
    assert!(!unstable.contains("NesCapabilities"), "only the chosen feature");

    let err = codegen::vendor(&settings, &["unstable_teleport".into()], true, &[]).expect_err("unknown feature");
    assert!(err.to_string().contains("unstable_teleport"));
}

/// Every struct and enum of a vendored file (also inside `serde_support`) → its derives, by
/// last path segment. Panics on a derive list that does not parse or names a derive twice.
fn derives_of(text: &str) -> std::collections::BTreeMap<String, Vec<String>> {
    use syn::punctuated::Punctuated;
    fn walk(items: &[syn::Item], out: &mut std::collections::BTreeMap<String, Vec<String>>) {
        for item in items {
            let (ident, attrs) = match item {
                syn::Item::Struct(s) => (&s.ident, &s.attrs),
                syn::Item::Enum(e) => (&e.ident, &e.attrs),
                syn::Item::Mod(syn::ItemMod { content: Some((_, inner)), .. }) => {
                    walk(inner, out);
                    continue;
                }
                _ => continue,
            };
            let mut names = Vec::new();
            for attr in attrs.iter().filter(|a| a.path().is_ident("derive")) {
                let list = attr
                    .parse_args_with(Punctuated::<syn::Path, syn::Token![,]>::parse_terminated)
                    .unwrap_or_else(|e| panic!("derive list of {ident} does not parse: {e}"));
                names.extend(list.iter().map(|p| p.segments.last().unwrap().ident.to_string()));
            }
            let unique: std::collections::BTreeSet<&String> = names.iter().collect();
            assert_eq!(unique.len(), names.len(), "{ident} derives something twice: {names:?}");
            out.insert(ident.to_string(), names);
        }
    }
    let file = syn::parse_file(text).expect("vendored file parses");
    let mut out = std::collections::BTreeMap::new();
    walk(&file.items, &mut out);
    out
}

#[test]
fn vendored_derives_go_only_where_they_compile() {
    let mut defs = base_defs();
    defs.extend(
        json!({
            "Score": {"type": "object", "properties": {"value": {"type": "number"}}, "required": ["value"]},
            "Scored": {"type": "object", "properties": {"score": {"$ref": "#/$defs/Score"}}, "required": ["score"]},
            "Tree": {"type": "object", "properties": {
                "label": {"type": "string"},
                "children": {"type": "array", "items": {"$ref": "#/$defs/Tree"}}
            }, "required": ["label"]},
        })
        .as_object()
        .cloned()
        .unwrap(),
    );
    let dir = fixture("vendor-derives", Value::Object(defs), base_meta());
    let mut settings = Settings::new(&dir, "fixture");
    settings.gating = Gating::AllInOne;
    let vendored =
        codegen::vendor(&settings, &[], true, &["Eq".into(), "std::hash::Hash".into(), "my_crate::Marker".into()])
            .expect("vendors");
    let derives = derives_of(&vendored.text);
    let has = |ty: &str, d: &str| derives[ty].iter().any(|x| x == d);
    // An `f64` is neither `Eq` nor `Hash`, and neither is a type holding one.
    for ty in ["Score", "Scored"] {
        assert!(!has(ty, "Eq") && !has(ty, "Hash"), "{ty}: {:?}", derives[ty]);
        assert!(has(ty, "Marker"), "a derive xtask does not know goes everywhere: {ty}");
    }
    // A type holding itself qualifies; so do the error types and the helper they rely on.
    for ty in ["Tree", "Error", "UnknownVariant"] {
        assert!(has(ty, "Eq") && has(ty, "Hash") && has(ty, "Marker"), "{ty}: {:?}", derives[ty]);
    }
    assert!(vendored.notes.iter().any(|n| n.contains("`Eq`") && n.contains("Score")), "{:?}", vendored.notes);

    let err = codegen::vendor(&settings, &[], true, &["Default".into()]).expect_err("Default is refused");
    assert!(err.to_string().contains("--derive Default"), "{err}");
    let err = codegen::vendor(&settings, &[], true, &["serde::Deserialize".into()]).expect_err("serde is refused");
    assert!(err.to_string().contains("--derive Deserialize"), "{err}");
}

#[test]
fn vendored_derives_on_the_pinned_release_are_well_formed() {
    // The review's case: `--derive Eq` once gave `serde::Serialize, , Eq` and `Eq, ..., Eq`.
    let (release, tag) = common::pinned_release();
    let settings = Settings::new(&release, &tag);
    let text =
        codegen::vendor(&settings, &["unstable_session_archive".into()], false, &["Eq".into()]).expect("vendors").text;
    let derives = derives_of(&text);
    let has = |ty: &str, d: &str| derives[ty].iter().any(|x| x == d);
    assert!(has("CancelNotification", "Eq") && has("SessionId", "Eq"));
    assert!(!has("NumberPropertySchema", "Eq"), "it holds an f64");
}

#[test]
fn setters_never_shadow_methods_the_type_already_has() {
    // `NumberPropertySchema` has a `default` property and derives `Default`: a setter named
    // `default` would make `NumberPropertySchema::default()` call it (E0061).
    let types = generate(
        "setter-names",
        json!({"Knob": {"type": "object", "properties": {
            "default": {"type": ["number", "null"]},
            "new": {"type": "string"},
            "clone": {"type": "boolean"},
            "title": {"type": "string"}
        }}}),
    )
    .expect("generates");
    assert!(types.contains("pub fn default_value(mut self, default: impl Into<Option<f64>>) -> Self"), "{types}");
    assert!(types.contains("pub fn new_value(mut self, new: impl Into<String>) -> Self"));
    assert!(types.contains("pub fn clone_value(mut self, clone: bool) -> Self"));
    assert!(types.contains("pub fn title(mut self, title: impl Into<String>) -> Self"));
    assert!(types.contains("assert_eq!(super::Knob::default(), super::Knob::new());"), "the generated test covers it");
}

#[test]
fn two_schema_names_for_one_rust_name_are_errors() {
    let cases = [
        (
            "props",
            json!({"Holder": {"type": "object", "properties": {"fooBar": {"type": "string"}, "foo_bar": {"type": "string"}}}}),
            "properties `fooBar` and `foo_bar`, which both become the Rust field `foo_bar`",
        ),
        (
            "meta",
            json!({"Holder": {"type": "object", "properties": {"meta": {"type": "string"}, "_meta": {"type": "object"}}}}),
            "properties `meta` and `_meta`, which both become the Rust field `meta`",
        ),
        (
            "values",
            json!({"Holder": {"type": "string", "enum": ["end_turn", "endTurn"]}}),
            "values `end_turn` and `endTurn`, which both become the Rust variant `EndTurn`",
        ),
        (
            "tags",
            json!({"Holder": {"oneOf": [
                {"type": "object", "properties": {"kind": {"type": "string", "const": "end_turn"}}, "required": ["kind"]},
                {"type": "object", "properties": {"kind": {"type": "string", "const": "end-turn"}}, "required": ["kind"]}
            ]}}),
            "variants `end_turn` and `end-turn`, which both become the Rust variant `EndTurn`",
        ),
        (
            "setters",
            json!({"Holder": {"type": "object", "properties": {"default": {"type": "string"}, "defaultValue": {"type": "string"}}}}),
            "properties `default` and `defaultValue`, which both become the Rust method `default_value`",
        ),
    ];
    for (name, defs, expected) in cases {
        let err = generate(&format!("clash-{name}"), defs).expect_err("a name clash is an error");
        let message = err.to_string();
        assert!(message.contains("definition `Holder`") && message.contains(expected), "{name}: {message}");
    }
}

#[test]
fn the_tagless_variant_also_reads_its_title_as_tag() {
    let types = generate(
        "tagless",
        json!({
            "Server": {"anyOf": [
                {"type": "object", "properties": {"type": {"type": "string", "const": "http"}}, "required": ["type"],
                 "allOf": [{"$ref": "#/$defs/Http"}]},
                {"title": "stdio", "allOf": [{"$ref": "#/$defs/Stdio"}]}
            ]},
            "Http": {"type": "object", "properties": {"url": {"type": "string"}}, "required": ["url"]},
            "Stdio": {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}
        }),
    )
    .expect("generates");
    assert!(types.contains("None | Some(\"stdio\") => {"), "{types}");
    assert!(
        types.contains("Server::Stdio(payload) => serde::Serialize::serialize(payload, serializer)"),
        "written without the tag"
    );
}

#[test]
fn an_optional_or_nullable_single_property_of_a_variant_stays_optional() {
    let types = generate(
        "variant-optional-property",
        json!({"Shape": {"oneOf": [
            {"type": "object", "properties": {"kind": {"type": "string", "const": "dot"}, "label": {"type": ["string", "null"]}},
             "required": ["kind"]},
            {"type": "object", "properties": {"kind": {"type": "string", "const": "line"}, "length": {"type": "integer", "format": "int32"}},
             "required": ["kind", "length"]}
        ]}}),
    )
    .expect("generates");
    // `label` may be absent or null: a struct field keeps the three cases apart.
    assert!(!types.contains("serde_support::property(&value, \"label\")"), "{types}");
    assert!(types.contains("Dot(ShapeDot),"), "{types}");
    assert!(types.contains("pub struct ShapeDot {") && types.contains("pub label: Option<Option<String>>,"), "{types}");
    // A required, non-null single property is still the variant's value.
    assert!(types.contains("Line(i32),") && types.contains("serde_support::property(&value, \"length\")"), "{types}");
}

#[test]
fn the_schemas_discriminator_names_the_tag() {
    // Both variants pin `shape` and `kind`; the first shared const (`shape`) would be the tag
    // by the shape alone, but the schema says `kind`.
    let union = |discriminator: Value| {
        let mut shape = json!({"oneOf": [
            {"type": "object", "properties": {"shape": {"type": "string", "const": "round"}, "kind": {"type": "string", "const": "circle"}},
             "required": ["shape", "kind"]},
            {"type": "object", "properties": {"shape": {"type": "string", "const": "round"}, "kind": {"type": "string", "const": "disc"}},
             "required": ["shape", "kind"]}
        ]});
        if !discriminator.is_null() {
            shape["discriminator"] = discriminator;
        }
        json!({"Shape": shape})
    };
    let types = generate("discriminator", union(json!({"propertyName": "kind"}))).expect("generates");
    assert!(types.contains("pub const TAG: &'static str = \"kind\";"), "{types}");
    assert!(types.contains("Some(\"circle\") =>") && types.contains("Some(\"disc\") =>"), "{types}");

    let err =
        generate("discriminator-none", union(Value::Null)).expect_err("by shape, `shape` is the tag: two `round`s");
    assert!(err.to_string().contains("`round` and `round`"), "{err}");

    let err =
        generate("discriminator-missing", union(json!({"propertyName": "colour"}))).expect_err("no variant pins it");
    assert!(
        err.to_string().contains("definition `Shape`") && err.to_string().contains("`colour`, which no variant pins"),
        "{err}"
    );
}

#[test]
fn integer_formats_map_to_their_rust_types_and_constants_must_fit() {
    let int = |format: &str| json!({"type": "integer", "format": format});
    let types = generate(
        "int-formats",
        json!({"Sizes": {"type": "object", "properties": {
            "a": int("int8"), "b": int("int16"), "c": int("uint8"), "d": int("uint"), "e": int("int"), "f": {"type": "integer"}
        }, "required": ["a", "b", "c", "d", "e", "f"]}}),
    )
    .expect("generates");
    for field in ["pub a: i8,", "pub b: i16,", "pub c: u8,", "pub d: u64,", "pub e: i64,", "pub f: i64,"] {
        assert!(types.contains(field), "{field}: {types}");
    }

    let codes = |format: &str, value: i64| {
        json!({"Code": {"anyOf": [
            {"title": "Small", "type": "integer", "format": format, "const": value},
            {"title": "Other", "type": "integer", "format": format}
        ]}})
    };
    let types = generate("int-const-fits", codes("uint8", 255)).expect("255 fits a u8");
    assert!(
        types.contains("pub struct Code(pub u8);") && types.contains("pub const SMALL: Code = Code(255);"),
        "{types}"
    );
    let types = generate("int-const-i32", codes("int32", -32601)).expect("fits an i32");
    assert!(types.contains("pub const SMALL: Code = Code(-32601);"), "{types}");
    for (name, format, value) in
        [("int-const-u8", "uint8", 300), ("int-const-neg", "uint16", -1), ("int-const-i32-over", "int32", 1 << 40)]
    {
        let err = generate(name, codes(format, value)).expect_err("out of range");
        let message = err.to_string();
        assert!(
            message.contains("definition `Code`") && message.contains(&format!("`Small` = {value}, out of the range")),
            "{message}"
        );
    }

    let err = generate("int-format-unknown", json!({"Big": {"type": "object", "properties": {"n": int("int128")}}}))
        .expect_err("an unknown format is not guessed");
    assert!(err.to_string().contains("`Big`") && err.to_string().contains("integer format `int128`"), "{err}");
}

/// Every file generated from the base schema plus `extra`, with `meta` for `meta.json`.
fn generate_files(name: &str, extra: Value, meta: Value) -> Result<Vec<codegen::OutputFile>, CodegenError> {
    let mut defs = base_defs();
    defs.extend(extra.as_object().cloned().unwrap_or_default());
    let dir = fixture(name, Value::Object(defs), meta);
    let mut settings = Settings::new(&dir, "fixture");
    settings.gating = Gating::AllInOne;
    settings.strict = true;
    codegen::generate(&settings)
}

fn file<'a>(files: &'a [codegen::OutputFile], path: &str) -> &'a str {
    files.iter().find(|f| f.path.ends_with(path)).map(|f| f.contents.as_str()).unwrap_or_default()
}

#[test]
fn protocol_version_has_constants_up_to_the_version_meta_json_states() {
    let version = json!({"ProtocolVersion": {"type": "integer", "format": "uint16", "minimum": 0, "maximum": 65535}});
    let mut meta = base_meta();
    meta["version"] = json!(1);
    let files = generate_files("protocol-version", version.clone(), meta.clone()).expect("generates");
    let types = file(&files, "v1/types.rs");
    assert!(types.contains("pub const V1: ProtocolVersion = ProtocolVersion(1);"), "{types}");
    assert!(types.contains("pub const LATEST: ProtocolVersion = ProtocolVersion(1);"), "{types}");
    assert!(types.contains("/// The latest protocol version this schema describes"));

    // Without `version` (early releases), the folder name says it.
    let files = generate_files("protocol-version-folder", version.clone(), base_meta()).expect("generates");
    assert!(file(&files, "v1/types.rs").contains("pub const LATEST: ProtocolVersion = ProtocolVersion(1);"));

    // A `version` that disagrees with the folder is an error, not a silently stale constant.
    meta["version"] = json!(2);
    let err = generate_files("protocol-version-mismatch", version, meta).expect_err("v1/ says 2");
    assert!(err.to_string().contains("disagrees with the folder name"), "{err}");
}

#[test]
fn object_params_decode_from_null_and_errors_display() {
    let files = generate_files("null-params", json!({}), base_meta()).expect("generates");
    let methods = file(&files, "v1/methods.rs");
    // Every method's params are an object here: each decodes `null` (params left out) as `{}`.
    let object_params = methods.matches("serde_support::null_as_empty(params)").count();
    assert_eq!(object_params, 7, "5 agent methods and 2 client methods: {methods}");
    assert!(!methods.contains("serde::Deserialize::deserialize(params).map(ClientRequest"), "{methods}");
    assert!(methods.contains("impl std::fmt::Display for Error {"), "{methods}");
    assert!(methods.contains("write!(f, \"{} {}\", self.code.0, self.message)"), "{methods}");
    assert!(methods.contains("impl std::error::Error for Error {}"), "{methods}");
}

#[test]
fn unions_convert_from_a_payload_type_only_one_variant_holds() {
    let object = |tag: &str, payload: Option<&str>| {
        let mut v =
            json!({"type": "object", "properties": {"kind": {"type": "string", "const": tag}}, "required": ["kind"]});
        if let Some(p) = payload {
            v["allOf"] = json!([{"$ref": format!("#/$defs/{p}")}]);
        }
        v
    };
    let types = generate(
        "from-payload",
        json!({
            "Shape": {"oneOf": [object("circle", Some("Circle")), object("ring", Some("Circle")),
                                object("square", Some("Square")), object("dot", None)]},
            "Circle": {"type": "object", "properties": {"r": {"type": "integer"}}, "required": ["r"]},
            "Square": {"type": "object", "properties": {"side": {"type": "integer"}}, "required": ["side"]},
            "Either": {"anyOf": [{"$ref": "#/$defs/Circle"}, {"$ref": "#/$defs/Square"}]}
        }),
    )
    .expect("generates");
    assert!(types.contains("impl From<Square> for Shape {"), "{types}");
    assert!(types.contains("Shape::Square(value)"), "{types}");
    assert!(!types.contains("impl From<Circle> for Shape"), "two variants hold a `Circle`: {types}");
    assert!(types.contains("impl From<Circle> for Either {") && types.contains("impl From<Square> for Either {"));
}

#[test]
fn a_tagless_variant_takes_unknown_tags_only_where_its_description_says_so() {
    let union = |doc: &str| {
        json!({"Setting": {"type": "object", "properties": {"id": {"type": "string"}}, "required": ["id"], "anyOf": [
            {"type": "object", "properties": {"type": {"type": "string", "const": "boolean"}, "value": {"type": "boolean"}},
             "required": ["type", "value"]},
            {"title": "value_id", "description": doc, "type": "object",
             "properties": {"value": {"type": "string"}}, "required": ["value"]}
        ]}})
    };
    let open = generate(
        "unknown-tag-open",
        union("The default when `type` is absent. Unknown `type`\nvalues with string payloads also gracefully deserialize into this\nvariant."),
    )
    .expect("generates");
    assert!(open.contains("Ok(payload) => SettingType::ValueId(payload),"), "{open}");
    assert!(open.contains("and when it has another value"), "the note agrees with the code: {open}");

    let closed = generate("unknown-tag-closed", union("The default when `type` is absent.")).expect("generates");
    assert!(!closed.contains("Ok(payload) =>"), "{closed}");
    assert!(closed.contains("(another value is kept in `Other`)"), "{closed}");

    let err = generate("unknown-tag-unclear", union("Unknown `type` values are rejected.")).expect_err("unclear");
    assert!(err.to_string().contains("unknown `type` values"), "{err}");
}

#[test]
fn docs_link_fields_name_features_and_describe_flattened_unions() {
    let types = generate(
        "docs",
        json!({
            "Knob": {"type": "object", "properties": {"default": {"type": "boolean"}}},
            "Setting": {"type": "object", "properties": {"id": {"type": "string"}}, "required": ["id"], "oneOf": [
                {"type": "object", "properties": {"type": {"type": "string", "const": "flag"}}, "required": ["type"]}
            ]}
        }),
    )
    .expect("generates");
    assert!(types.contains("/// Sets [`Self::default`](field@Self::default)."), "{types}");
    assert!(types.contains("/// What varies with `type`: a [`SettingType`]"), "{types}");

    // The pinned release: unstable items name their feature; the internal helpers are hidden.
    let (release, tag) = common::pinned_release();
    let files = codegen::generate(&Settings::new(&release, &tag)).expect("generates");
    let types = file(&files, "v1/types.rs");
    let fork = &types[types.find("pub struct ForkSessionRequest").expect("there")..];
    let before = &types[..types.len() - fork.len()];
    let doc_start = before.rfind("\n\n").unwrap_or(0).max(before.rfind("}\n").unwrap_or(0));
    assert!(
        before[doc_start..].contains("Available with the cargo feature `unstable_session_fork`."),
        "{}",
        &before[doc_start..]
    );
    let support = file(&files, "serde_support.rs");
    assert!(support.contains("#[doc(hidden)]\npub fn tag_of"), "internal helpers are hidden");
    assert!(!support.contains("#[doc(hidden)]\npub fn null_as_empty"), "the runtime uses it");
}

#[test]
fn vendored_files_allow_dead_code_and_list_every_type_a_derive_left_off() {
    let (release, tag) = common::pinned_release();
    let settings = Settings::new(&release, &tag);
    let vendored = codegen::vendor(&settings, &[], false, &["Eq".into()]).expect("vendors");
    assert!(vendored.text.contains("#![allow(\n    dead_code,"), "a private `mod acp;` uses a few of the types");
    let note = &vendored.notes[0];
    assert!(note.contains(", ...)"), "the printed note stays short: {note}");
    let preamble: String = vendored.text.lines().take_while(|l| l.starts_with("//")).collect::<Vec<_>>().join("\n");
    for ty in ["NumberPropertySchema", "ElicitationSchema", "RequestPermissionRequest"] {
        assert!(preamble.contains(ty), "{ty} is left off and named: {preamble}");
    }
    assert!(preamble.lines().all(|l| l.len() <= 100), "{preamble}");
    assert!(vendored.text.contains("impl From<TextContent> for ContentBlock {"), "conversions are vendored too");

    let err = codegen::vendor(&settings, &[], false, &["eq".into()]).expect_err("`eq` is a typo for `Eq`");
    assert!(err.to_string().contains("did you mean `Eq`?"), "{err}");
    let hash_only = codegen::vendor(&settings, &[], false, &["Ord".into()]).expect("vendors");
    assert!(hash_only.warnings.iter().any(|w| w.contains("Ord")) == hash_only.notes[0].contains("added to 0 types"));
}

#[test]
fn arc_and_box_forward_every_handler_method_under_its_gate() {
    // The base schema, and an unstable file adding `session/fork` (a request outside the
    // baseline) for the agent.
    let dir = fixture("forwarding", Value::Object(base_defs()), base_meta());
    let mut unstable = base_defs();
    let fork = |kind: &str| json!({"type": "object", "properties": {}, "x-method": "session/fork", "x-side": "agent", "description": kind});
    unstable.insert("ForkSessionRequest".into(), fork("request"));
    unstable.insert("ForkSessionResponse".into(), fork("response"));
    let mut meta = base_meta();
    meta["agentMethods"]["session_fork"] = json!("session/fork");
    std::fs::write(dir.join("v1/schema.unstable.json"), json!({"$defs": unstable}).to_string()).unwrap();
    std::fs::write(dir.join("v1/meta.unstable.json"), meta.to_string()).unwrap();
    let mut settings = Settings::new(&dir, "fixture");
    settings.gating = Gating::AllInOne;
    let files = codegen::generate(&settings).expect("generates");
    let methods = file(&files, "v1/methods.rs");

    let block = |header: &str| -> &str {
        let start = methods.find(header).unwrap_or_else(|| panic!("no `{header}`: {methods}"));
        let len = methods[start..].find("\n}\n").expect("the impl ends");
        &methods[start..start + len]
    };
    for (handler, forwarded) in [("Agent", 5 + 1), ("Client", 2)] {
        for wrapper in ["std::sync::Arc<T>", "Box<T>"] {
            let header = format!("impl<Cx: Send, T: {handler}<Cx> + ?Sized> {handler}<Cx> for {wrapper} {{");
            let block = block(&header);
            // Every method, required or provided, and the two extension methods.
            assert_eq!(block.matches("(**self).").count(), forwarded + 2, "{block}");
            assert!(block.contains("(**self).ext_method(method, params, cx)"), "{block}");
        }
    }
    let agent_arc = block("impl<Cx: Send, T: Agent<Cx> + ?Sized> Agent<Cx> for std::sync::Arc<T> {");
    assert!(agent_arc.contains("    #[cfg(feature = \"unstable\")]\n    fn session_fork(\n"), "{agent_arc}");
    assert!(agent_arc.contains("(**self).session_fork(params, cx)"), "{agent_arc}");
    assert!(!agent_arc.contains("async"), "the futures are forwarded as they are: {agent_arc}");
}

#[test]
fn protocol_v2_unstable_items_are_gated_like_the_same_capability_in_v1() {
    use std::collections::{BTreeMap, BTreeSet};
    use xtask::codegen::ir::Gate;
    let (release, tag) = common::pinned_release();
    let model = |version: &str| {
        let files = codegen::load::load_version(&release.join(version)).expect("loads");
        codegen::build_model(&files, Gating::Table).expect("the feature table covers the release")
    };
    let (v1, v2) = (model("v1"), model("v2"));
    let defs = |file: &str| -> BTreeSet<String> {
        let text = std::fs::read_to_string(release.join("v2").join(file)).expect("readable");
        let schema: Value = serde_json::from_str(&text).expect("JSON");
        schema["$defs"].as_object().expect("$defs").keys().cloned().collect()
    };
    let unstable_only: BTreeSet<String> =
        defs("schema.unstable.json").difference(&defs("schema.json")).cloned().collect();
    assert!(unstable_only.len() >= 60, "the pinned v2 has 66 unstable-only definitions: {}", unstable_only.len());

    // Every one of them is emitted, behind a feature.
    let mut per_feature: BTreeMap<String, usize> = BTreeMap::new();
    // The side's envelope unions become the method enums of `methods.rs`, not items.
    let envelope = |name: &str| {
        ["Proxy"]
            .iter()
            .any(|side| ["Request", "Response", "Notification"].iter().any(|k| name == format!("{side}{k}")))
    };
    for name in unstable_only.iter().filter(|name| !envelope(name)) {
        let item = v2.items.iter().find(|i| &i.name == name).unwrap_or_else(|| panic!("`{name}` is not emitted"));
        let Gate::Features(features) = &item.gate else { panic!("`{name}` is not behind a feature: {:?}", item.gate) };
        for f in features {
            *per_feature.entry(f.clone()).or_default() += 1;
        }
    }
    println!("v2 unstable-only definitions per feature: {per_feature:?}");

    // A method unstable in both versions is behind the same feature in both.
    let gated: Vec<_> = v2.methods.iter().filter(|m| !m.gate.is_stable()).collect();
    assert!(gated.iter().any(|m| m.name == "session/archive"), "{gated:?}");
    for m in gated {
        let same = v1.methods.iter().find(|o| o.name == m.name && o.side == m.side);
        let same = same.unwrap_or_else(|| panic!("`{}` is unstable in v2 only: it needs a feature of its own", m.name));
        assert_eq!(m.gate, same.gate, "`{}` is gated differently in v1 and v2", m.name);
    }

    // The v2 traits and envelopes carry them under their feature, as v1's do.
    let files = codegen::generate(&Settings::new(&release, &tag)).expect("generates");
    let methods = file(&files, "v2/methods.rs");
    let agent = &methods[methods.find("pub trait Agent<").expect("the Agent trait")..];
    assert!(agent.contains("#[cfg(feature = \"unstable_session_fork\")]\n    fn session_fork("), "{agent}");
    let requests = &methods[methods.find("pub enum ClientRequest").expect("the request enum")..];
    assert!(
        requests.contains("#[cfg(feature = \"unstable_session_archive\")]\n    SessionArchive(ArchiveSessionRequest),"),
        "{requests}"
    );
}

#[test]
fn a_free_form_object_keeps_null_apart_where_the_schema_says_null_clears_it() {
    let meta = |doc: &str| json!({"type": ["object", "null"], "additionalProperties": true, "description": doc});
    let types = generate(
        "null-clears",
        json!({
            "Snapshot": {"type": "object", "properties": {"_meta": meta("Scoped metadata.")}},
            "Upsert": {"type": "object", "properties": {
                "_meta": meta("Metadata. Omitted means no metadata update; `null` is an explicit clear signal.")
            }},
            "Compaction": {
                "description": "An upsert. `error` and `_meta` have patch semantics: omission leaves the stored value unchanged.",
                "type": "object", "properties": {"_meta": meta("Metadata patch.")}
            }
        }),
    )
    .expect("generates");
    let body = |name: &str| {
        let start = types.find(&format!("pub struct {name} {{")).unwrap_or_else(|| panic!("no {name}: {types}"));
        &types[start..start + types[start..].find("\n}").unwrap()]
    };
    let map = "serde_json::Map<String, serde_json::Value>";
    // Where absent and `null` mean the same, one `Option`; where `null` clears, two.
    assert!(body("Snapshot").contains(&format!("pub meta: Option<{map}>,")), "{}", body("Snapshot"));
    assert!(body("Upsert").contains(&format!("pub meta: Option<Option<{map}>>,")), "{}", body("Upsert"));
    assert!(body("Compaction").contains(&format!("pub meta: Option<Option<{map}>>,")), "{}", body("Compaction"));
}
