//! `cargo xtask diff`: snapshot reports for each consecutive pair of upstream releases, and each
//! kind of change on small hand-made schemas.

use std::path::{Path, PathBuf};

use serde_json::{Value, json};
use xtask::diff::{Change, Report, diff_dirs};

mod common;

fn releases() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/acp-schema/releases")
}

/// Compares with `tests/snapshots/NAME`; `UPDATE_SNAPSHOTS=1` rewrites it.
fn snapshot(name: &str, actual: &str) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/snapshots").join(name);
    if std::env::var_os("UPDATE_SNAPSHOTS").is_some() {
        std::fs::write(&path, actual).unwrap();
        return;
    }
    let expected = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e} (run with UPDATE_SNAPSHOTS=1 to create it)", path.display()));
    assert!(
        expected == actual,
        "{} differs from the report; run with UPDATE_SNAPSHOTS=1 and review the diff",
        path.display()
    );
}

#[test]
fn consecutive_releases() {
    // The last one is the first published schema outside the repository's releases.
    let tags = ["v0.6.3", "v0.10.8", "v1.3.0", "v1.7.0", "npm-sdk-2.4.0"];
    for pair in tags.windows(2) {
        let mut report = diff_dirs(&common::release_dir(pair[0]), &common::release_dir(pair[1])).expect("diffs");
        report.old = pair[0].into();
        report.new = pair[1].into();
        assert!(!report.changes.is_empty(), "{} → {} has changes", pair[0], pair[1]);
        snapshot(&format!("diff-{}-{}.md", pair[0], pair[1]), &report.markdown());
    }
}

fn release_diff(old: &str, new: &str) -> Report {
    diff_dirs(&releases().join(old), &releases().join(new)).expect("diffs")
}

/// The one change of `report` to `target` (in `scope`, of protocol `protocol`).
fn one<'r>(report: &'r Report, protocol: &str, scope: &str, target: &str) -> &'r Change {
    let found: Vec<&Change> =
        report.changes.iter().filter(|c| c.protocol == protocol && c.scope == scope && c.target == target).collect();
    assert_eq!(found.len(), 1, "{protocol} {scope} `{target}`: {found:#?}");
    found[0]
}

#[test]
fn protocol_methods_and_moves_between_the_stable_and_unstable_schemas() {
    // `$/cancel_request` arrives in v0.10.8's unstable schema and is stable from v1.3.0 on.
    let r = release_diff("v0.6.3", "v0.10.8");
    let c = one(&r, "v1", "method", "$/cancel_request (protocol)");
    assert_eq!(
        (c.kind, c.stability, &c.features[..], c.breaking),
        ("added", "unstable", &["unstable".to_owned()][..], false)
    );
    assert!(c.detail.contains("`CancelRequestNotification`"), "{}", c.detail);
    // `session/set_model` went the other way: stable in v0.6.3, unstable in v0.10.8.
    let c = one(&r, "v1", "method", "session/set_model (agent)");
    assert_eq!((c.kind, c.stability, c.breaking), ("changed", "unstable", true), "{c:?}");

    let r = release_diff("v0.10.8", "v1.3.0");
    for (scope, target) in [("method", "$/cancel_request (protocol)"), ("definition", "CancelRequestNotification")] {
        let c = one(&r, "v1", scope, target);
        assert_eq!((c.kind, c.stability, c.breaking), ("stabilised", "stable", false), "{c:?}");
        assert!(c.detail.contains("unstable before (feature `unstable`)"), "{}", c.detail);
    }
    assert!(r.markdown().contains("- stabilised `$/cancel_request (protocol)`: "), "{}", r.markdown());
}

#[test]
fn protocol_v2_changes_are_named_like_v1_changes() {
    // v1.3.0 is the first release with protocol v2: one change says so, with its size.
    let r = release_diff("v0.10.8", "v1.3.0");
    let c = one(&r, "v2", "protocol", "v2");
    assert_eq!((c.kind, c.breaking), ("added", false));
    assert!(c.detail.contains("definitions") && c.detail.contains("unstable"), "{}", c.detail);
    assert_eq!(r.changes.iter().filter(|c| c.protocol == "v2").count(), 1);

    let r = release_diff("v1.3.0", "v1.7.0");
    let c = one(&r, "v2", "variant", "SessionUpdate.terminal_update");
    assert_eq!((c.kind, c.stability, c.breaking), ("added", "stable", false));
    // Unstable in v1.7.0, which the feature table no longer describes: behind `unstable`.
    let c = one(&r, "v1", "variant", "SessionUpdate.compaction_update");
    assert_eq!((c.kind, c.stability, c.features.as_slice()), ("added", "unstable", ["unstable".to_owned()].as_slice()));
    // Stable in v2 from v1.7.0 on, unstable (in v1.3.0, all behind `unstable`) before.
    let c = one(&r, "v2", "variant", "AuthMethod.terminal");
    assert_eq!((c.kind, c.stability), ("stabilised", "stable"));
    let md = r.markdown();
    assert!(md.contains("## Protocol v2 (module `v2`, feature `unstable_protocol_v2`)"), "{md}");
    assert!(md.contains("- added `SessionUpdate.terminal_update`: new variant (`TerminalUpdate`) (stable)\n"), "{md}");

    // One capability, unstable in both versions of the pinned release: the same feature names
    // it in both (the pin is what the feature table describes).
    let (pinned, tag) = common::pinned_release();
    let r = diff_dirs(&releases().join("v1.7.0"), &pinned).expect("diffs");
    for protocol in ["v1", "v2"] {
        let c = one(&r, protocol, "variant", "SessionUpdate.subagent_update");
        assert_eq!((c.kind, c.stability), ("added", "unstable"));
        assert_eq!(c.features, ["unstable_subagents"], "{tag}");
        let c = one(&r, protocol, "field", "SessionCapabilities.archive");
        assert_eq!(c.features, ["unstable_session_archive"]);
    }
    let md = r.markdown();
    assert!(
        md.contains("- added `SessionUpdate.subagent_update`: new variant (`SubagentUpdate`) (unstable, feature `unstable_subagents`)\n"),
        "{md}"
    );
}

#[test]
fn a_release_against_itself_has_no_changes() {
    let dir = releases().join("v1.7.0");
    let report = diff_dirs(&dir, &dir).expect("diffs");
    assert!(report.changes.is_empty(), "{:?}", report.changes);
}

// ----------------------------------------------------------------------------------------------
// Fixtures: a minimal valid schema (the baseline methods) plus the definitions under test.

fn base_defs() -> serde_json::Map<String, Value> {
    let mut defs = common::baseline_methods();
    defs.insert(
        "ErrorCode".into(),
        json!({"anyOf": [{"title": "Method not found", "type": "integer", "format": "int32", "const": -32601}]}),
    );
    defs
}

fn meta(extra_agent: &[(&str, &str)]) -> Value {
    let mut agent = json!({"initialize": "initialize", "authenticate": "authenticate", "session_new": "session/new",
                           "session_prompt": "session/prompt", "session_cancel": "session/cancel"});
    for (k, v) in extra_agent {
        agent[*k] = json!(v);
    }
    json!({"agentMethods": agent, "clientMethods": {"session_request_permission": "session/request_permission", "session_update": "session/update"}})
}

fn write(name: &str, defs: Value, meta: Value) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("diff-fixtures").join(name);
    std::fs::create_dir_all(&dir).unwrap();
    let mut all = base_defs();
    all.extend(defs.as_object().cloned().unwrap_or_default());
    std::fs::write(dir.join("schema.json"), json!({"$defs": all}).to_string()).unwrap();
    std::fs::write(dir.join("meta.json"), meta.to_string()).unwrap();
    dir
}

/// A version folder with a stable and an unstable schema: the unstable one is the stable one
/// with `unstable_only`'s definitions added (or replacing those of the same name).
fn write_layers(name: &str, stable: Value, unstable_only: Value) -> PathBuf {
    let dir = write(name, stable.clone(), meta(&[]));
    let mut all = base_defs();
    all.extend(stable.as_object().cloned().unwrap_or_default());
    all.extend(unstable_only.as_object().cloned().unwrap_or_default());
    std::fs::write(dir.join("schema.unstable.json"), json!({"$defs": all}).to_string()).unwrap();
    std::fs::write(dir.join("meta.unstable.json"), meta(&[]).to_string()).unwrap();
    dir
}

#[test]
fn stable_and_unstable_schemas() {
    let extra = json!({"Extra": {"type": "object", "properties": {"a": {"type": "string"}}}});
    let point = |props: Value| json!({"Point": {"type": "object", "properties": props}});
    let x = json!({"x": {"type": "integer"}});
    let xy = json!({"x": {"type": "integer"}, "y": {"type": "integer"}});
    let layers = |name: &str, old: (Value, Value), new: (Value, Value)| {
        let a = write_layers(&format!("{name}-old"), old.0, old.1);
        let b = write_layers(&format!("{name}-new"), new.0, new.1);
        diff_dirs(&a, &b).expect("diffs")
    };
    // Unstable, then stable: stabilised (and nothing else).
    let r = layers("stabilised", (json!({}), extra.clone()), (extra.clone(), json!({})));
    let c = &r.changes[..];
    assert_eq!(c.len(), 1, "{c:#?}");
    assert_eq!(
        (c[0].scope, c[0].kind, c[0].target.as_str(), c[0].stability, c[0].breaking),
        ("definition", "stabilised", "Extra", "stable", false)
    );
    // Stable, then unstable only: breaking for who does not turn the feature on.
    let r = layers("destabilised", (extra.clone(), json!({})), (json!({}), extra.clone()));
    assert_eq!(only(&r), ("definition", "changed", "Extra", true));
    assert_eq!((r.changes[0].stability, &r.changes[0].features[..]), ("unstable", &["unstable".to_owned()][..]));
    // A field only the unstable schema adds to a stable struct (the unstable schema's `Point`
    // replaces the stable one): an unstable change.
    let r = layers("unstable-field", (point(x.clone()), json!({})), (point(x.clone()), point(xy)));
    assert_eq!(only(&r), ("field", "added", "Point.y", false));
    assert_eq!((r.changes[0].stability, r.changes[0].protocol.as_str()), ("unstable", "v1"));
    assert!(
        r.markdown().contains("- added `Point.y`: new field (i64, optional) (unstable, feature `unstable`)"),
        "{}",
        r.markdown()
    );
}

fn diff(name: &str, old: Value, new: Value) -> Report {
    diff_meta(name, old, new, meta(&[]), meta(&[]))
}

fn diff_meta(name: &str, old: Value, new: Value, old_meta: Value, new_meta: Value) -> Report {
    let a = write(&format!("{name}-old"), old, old_meta);
    let b = write(&format!("{name}-new"), new, new_meta);
    diff_dirs(&a, &b).expect("diffs")
}

/// The one change of a report, as (scope, kind, target, breaking).
fn only(report: &Report) -> (&str, &str, &str, bool) {
    assert_eq!(report.changes.len(), 1, "{:#?}", report.changes);
    let c = &report.changes[0];
    (c.scope, c.kind, c.target.as_str(), c.breaking)
}

fn hints(report: &Report) -> Vec<(&str, &str)> {
    report.rename_hints.iter().map(|h| (h.old.as_str(), h.new.as_str())).collect()
}

fn point(props: Value, required: &[&str]) -> Value {
    json!({"Point": {"type": "object", "properties": props, "required": required}})
}

#[test]
fn fields() {
    let x = json!({"x": {"type": "integer"}});
    let xy = json!({"x": {"type": "integer"}, "y": {"type": "integer"}});
    assert_eq!(
        only(&diff("opt-field", point(x.clone(), &["x"]), point(xy.clone(), &["x"]))),
        ("field", "added", "Point.y", false)
    );
    assert_eq!(
        only(&diff("req-field", point(x.clone(), &["x"]), point(xy.clone(), &["x", "y"]))),
        ("field", "added", "Point.y", true)
    );
    assert_eq!(
        only(&diff("rm-field", point(xy.clone(), &["x"]), point(x.clone(), &["x"]))),
        ("field", "removed", "Point.y", true)
    );
    let r = diff("type", point(x.clone(), &["x"]), point(json!({"x": {"type": "string"}}), &["x"]));
    assert_eq!(only(&r), ("field", "changed", "Point.x", true));
    assert!(r.changes[0].detail.contains("i64 → string"), "{}", r.changes[0].detail);
    let r = diff("req-to-opt", point(x.clone(), &["x"]), point(x.clone(), &[]));
    assert_eq!(only(&r), ("field", "changed", "Point.x", true));
    assert_eq!(r.changes[0].detail, "required → optional");
    let r = diff("opt-to-req", point(x.clone(), &[]), point(x, &["x"]));
    assert_eq!(r.changes[0].detail, "optional → required");
}

#[test]
fn definitions_and_shapes() {
    let shape = json!({"Shape": {"type": "object", "properties": {"r": {"type": "number"}}}});
    let union = json!({"Shape": {"oneOf": [{"type": "string", "const": "a"}, {"type": "string", "const": "b"}]}});
    assert_eq!(only(&diff("def-added", json!({}), shape.clone())), ("definition", "added", "Shape", false));
    assert_eq!(only(&diff("def-removed", shape.clone(), json!({}))), ("definition", "removed", "Shape", true));
    let r = diff("struct-to-union", shape, union);
    assert_eq!(only(&r), ("definition", "changed", "Shape", true));
    assert!(r.changes[0].detail.contains("struct → string enum"), "{}", r.changes[0].detail);
}

#[test]
fn variants_and_openness() {
    let closed = json!({"Mode": {"oneOf": [{"type": "string", "const": "a"}, {"type": "string", "const": "b"}]}});
    let more = json!({"Mode": {"oneOf": [{"type": "string", "const": "a"}, {"type": "string", "const": "b"}, {"type": "string", "const": "c"}]}});
    let fewer = json!({"Mode": {"oneOf": [{"type": "string", "const": "a"}]}});
    let open = json!({"Mode": {"anyOf": [{"type": "string", "const": "a"}, {"type": "string", "const": "b"}, {"title": "other", "type": "string"}]}});
    assert_eq!(only(&diff("variant-added", closed.clone(), more)), ("variant", "added", "Mode.c", false));
    assert_eq!(only(&diff("variant-removed", closed.clone(), fewer)), ("variant", "removed", "Mode.b", true));
    let r = diff("closed-to-open", closed.clone(), open.clone());
    assert_eq!(only(&r), ("definition", "changed", "Mode", false));
    assert!(r.changes[0].detail.contains("closed → open"));
    let r = diff("open-to-closed", open, closed);
    assert_eq!(only(&r), ("definition", "changed", "Mode", true));

    let tagged = |extra: Value| {
        let mut variants = vec![
            json!({"type": "object", "properties": {"kind": {"type": "string", "const": "circle"}}, "required": ["kind"]}),
        ];
        if !extra.is_null() {
            variants.push(extra);
        }
        json!({"Shape": {"oneOf": variants, "discriminator": {"propertyName": "kind"}}})
    };
    let square =
        json!({"type": "object", "properties": {"kind": {"type": "string", "const": "square"}}, "required": ["kind"]});
    assert_eq!(
        only(&diff("tagged-added", tagged(Value::Null), tagged(square))),
        ("variant", "added", "Shape.square", false)
    );
}

#[test]
fn methods_and_renames() {
    let fork = json!({
        "ForkRequest": {"type": "object", "properties": {}, "x-method": "session/fork", "x-side": "agent"},
        "ForkResponse": {"type": "object", "properties": {}, "x-method": "session/fork", "x-side": "agent"}
    });
    let r = diff_meta("method-added", json!({}), fork.clone(), meta(&[]), meta(&[("session_fork", "session/fork")]));
    let methods: Vec<_> = r.changes.iter().filter(|c| c.scope == "method").collect();
    assert_eq!(methods.len(), 1, "{methods:#?}");
    assert_eq!(
        (methods[0].kind, methods[0].target.as_str(), methods[0].breaking),
        ("added", "session/fork (agent)", false)
    );
    let r = diff_meta("method-removed", fork, json!({}), meta(&[("session_fork", "session/fork")]), meta(&[]));
    assert!(r.changes.iter().any(|c| c.scope == "method" && c.kind == "removed" && c.breaking), "{:#?}", r.changes);

    let old = json!({"Colour": {"type": "object", "properties": {"hex": {"type": "string"}}, "required": ["hex"]}});
    let new = json!({"Color": {"type": "object", "properties": {"hex": {"type": "string"}}, "required": ["hex"]}});
    let r = diff("rename", old, new);
    assert_eq!(hints(&r), vec![("Colour", "Color")]);
    assert!(r.markdown().contains("v1: `Colour` → `Color`"));

    // Two ids gone and two new ones, all `String` newtypes: no pairing is more likely than
    // another, so none is hinted (the unambiguous `Colour` → `Color` still is).
    let id = json!({"type": "string"});
    let old = json!({"AuthMethodId": id, "ModeId": id, "Colour": {"type": "object", "properties": {"hex": id}}});
    let new =
        json!({"SessionConfigGroupId": id, "ProviderId": id, "Color": {"type": "object", "properties": {"hex": id}}});
    let r = diff("ambiguous-renames", old, new);
    assert_eq!(hints(&r), vec![("Colour", "Color")]);
}

// ----------------------------------------------------------------------------------------------
// `cargo xtask schema update`, on a scratch copy of the workspace's pinned files.

fn scratch_workspace(name: &str) -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let ws = Path::new(env!("CARGO_TARGET_TMPDIR")).join("update").join(name);
    let _ = std::fs::remove_dir_all(&ws);
    std::fs::create_dir_all(ws.join("schema")).unwrap();
    std::fs::create_dir_all(ws.join("generated")).unwrap();
    // The manifests the API report reads the crate's version from.
    for file in ["schema/lock.json", "Cargo.toml", "generated/Cargo.toml"] {
        std::fs::copy(root.join(file), ws.join(file)).unwrap();
    }
    let lock = xtask::schema::Lock::read(&root.join("schema/lock.json")).unwrap();
    xtask::schema::fetch(&lock, Some(&common::release_dir(&lock.tag)), &ws.join("schema/json")).unwrap();
    ws
}

#[test]
fn update_to_the_pinned_release_regenerates_the_checked_in_code() {
    let ws = scratch_workspace("same");
    let (pinned, tag) = common::pinned_release();
    xtask::schema::update(&ws, &tag, &pinned, &Default::default()).expect("updates");
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    for file in ["generated/src/v1/types.rs", "generated/Cargo.toml", "macros/src/table.rs"] {
        assert_eq!(
            std::fs::read_to_string(ws.join(file)).unwrap(),
            std::fs::read_to_string(root.join(file)).unwrap(),
            "{file}"
        );
    }
    let changes = std::fs::read_to_string(ws.join("schema/CHANGES.md")).unwrap();
    assert!(changes.starts_with("# Schema changes") && changes.contains("No changes."), "{changes}");
    assert!(changes.contains("# Rust API of `acp-types`") && changes.contains("No public item changed."), "{changes}");
    let lock = std::fs::read_to_string(ws.join("schema/lock.json")).unwrap();
    assert_eq!(
        lock,
        std::fs::read_to_string(root.join("schema/lock.json")).unwrap(),
        "same tag, same lock (commit kept)"
    );
    // The update leaves a stamp that vouches for what it wrote, so the next `codegen --check`
    // answers from it instead of regenerating.
    let stamp = std::fs::read_to_string(ws.join(xtask::codegen::stamp::STAMP_PATH)).expect("a stamp is written");
    assert!(xtask::codegen::stamp::Stamp::vouches(&ws, lock.as_bytes()), "{stamp}");
}

#[test]
fn update_that_cannot_generate_changes_nothing() {
    // v1.3.0's unstable schema lacks what the feature table (written for the pin) names.
    let ws = scratch_workspace("refused");
    let before = std::fs::read_to_string(ws.join("schema/lock.json")).unwrap();
    let options = xtask::schema::UpdateOptions {
        commit: Some("abc".into()),
        schema_version: Some("1.18.0".into()),
        release_url: None,
        semver_checks: Default::default(),
        npm: None,
    };
    let err =
        xtask::schema::update(&ws, "v1.3.0", &releases().join("v1.3.0"), &options).expect_err("the table does not fit");
    assert!(err.contains("does not generate") && err.contains("names nothing"), "{err}");
    assert_eq!(std::fs::read_to_string(ws.join("schema/lock.json")).unwrap(), before);
    assert!(!ws.join("generated/src").exists() && !ws.join("schema/CHANGES.md").exists());
}
