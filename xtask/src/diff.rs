//! `cargo xtask diff OLD NEW`: what changed between two versions of the schema, in the terms
//! of the generated API, with the changes that break users flagged.
//!
//! Both sides go through the generator's own classification, so "a field became required" or
//! "a union gained a variant" means exactly what it will mean for the generated code. Openness
//! (whether a union or enum admits values it does not list) is read from the raw schema.
//!
//! Every protocol version of a release is compared (v1, v2), each on two layers: the stable
//! schemas, and the unstable ones for what they add. A change says which protocol version it is
//! in and whether it is stable or unstable, and behind which cargo feature (from the merged
//! model `acp-types` is built from); what moved between the layers is reported as such
//! (`stabilised`, or "no longer stable"), not as an addition or a removal.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::Path;

use serde::Serialize;
use serde_json::Value;

use crate::codegen::ir::{Field, Gate, Item, ItemKind, Method, Model, Payload, Side, Ty};
use crate::codegen::load::{self, VersionFiles};
use crate::codegen::{self, CodegenError, Gating};

/// One change, as reported.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub struct Change {
    /// `protocol`, `method`, `definition`, `field`, `variant`.
    pub scope: &'static str,
    /// `added`, `removed`, `changed`, `stabilised` (unstable before, stable now).
    pub kind: &'static str,
    /// What changed: `PromptRequest`, `PromptRequest.prompt`, `session/prompt (agent)`,
    /// `$/cancel_request (protocol)`.
    pub target: String,
    /// How, in a few words (e.g. `new struct`).
    pub detail: String,
    /// The change breaks code written against the old generated API.
    pub breaking: bool,
    /// The protocol version whose schema changed: `v1`, `v2`.
    pub protocol: String,
    /// `stable`, or `unstable`: the change is to what only the unstable schema has, compiled
    /// behind [`Change::features`].
    pub stability: &'static str,
    /// The cargo features of `acp-types` that the changed item is behind (for an unstable
    /// change): the feature table's where it describes the release, else `unstable`. Empty for
    /// a stable change.
    pub features: Vec<String>,
}

/// A removed and an added definition of the same shape, in one protocol version.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub struct RenameHint {
    /// The protocol version: `v1`, `v2`.
    pub protocol: String,
    /// The removed definition.
    pub old: String,
    /// The added one.
    pub new: String,
}

/// What [`diff_dirs`] finds between two schema folders.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// The old folder, as given.
    pub old: String,
    /// The new folder, as given.
    pub new: String,
    /// Every change, sorted.
    pub changes: Vec<Change>,
    /// Definitions that look renamed, sorted.
    pub rename_hints: Vec<RenameHint>,
}

/// The protocol versions of a folder: `v1/` and `v2/` of a release folder, or a version folder
/// itself (named by its `meta.json`, else `v1`).
fn versions(dir: &Path) -> Result<Vec<(String, VersionFiles)>, CodegenError> {
    if !dir.join("v1/schema.json").exists() {
        let files = load::load_version(dir)?;
        let label = format!("v{}", files.protocol_version()?.unwrap_or(1));
        return Ok(vec![(label, files)]);
    }
    let mut out = vec![("v1".to_owned(), load::load_version(&dir.join("v1"))?)];
    if dir.join("v2/schema.json").exists() {
        out.push(("v2".to_owned(), load::load_version(&dir.join("v2"))?));
    }
    Ok(out)
}

/// Diffs two folders (release folders or version folders): every protocol version, its stable
/// and its unstable schema, and the protocol-level methods.
pub fn diff_dirs(old: &Path, new: &Path) -> Result<Report, CodegenError> {
    let (old_versions, new_versions) = (versions(old)?, versions(new)?);
    let mut changes = Vec::new();
    let mut rename_hints = Vec::new();
    let labels: BTreeSet<&String> = old_versions.iter().chain(&new_versions).map(|(l, _)| l).collect();
    for label in labels {
        let find = |vs: &'_ [(String, VersionFiles)]| vs.iter().find(|(l, _)| l == label).map(|(_, f)| f.clone());
        match (find(&old_versions), find(&new_versions)) {
            (Some(o), Some(n)) => {
                let (c, r) = diff_version(label, &Sides::load(&o)?, &Sides::load(&n)?);
                changes.extend(c);
                rename_hints.extend(r);
            }
            (None, Some(n)) => changes.push(whole_version(label, &Sides::load(&n)?, true)),
            (Some(o), None) => changes.push(whole_version(label, &Sides::load(&o)?, false)),
            (None, None) => {}
        }
    }
    changes.sort();
    rename_hints.sort();
    rename_hints.dedup();
    Ok(Report { old: old.display().to_string(), new: new.display().to_string(), changes, rename_hints })
}

/// One protocol version of one folder, seen three ways.
struct Sides {
    /// The stable schema alone, and its JSON (for openness).
    stable: (Model, Value),
    /// The unstable schema alone (the stable one when there is none).
    unstable: (Model, Value),
    /// Both merged as `acp-types` compiles them, for the features of unstable items: gated by
    /// the feature table where it describes the release, else all behind `unstable`.
    gated: Model,
}

impl Sides {
    fn load(files: &VersionFiles) -> Result<Sides, CodegenError> {
        let alone = |schema: &Value, meta: Option<&Value>| -> Result<(Model, Value), CodegenError> {
            let files = VersionFiles {
                schema: schema.clone(),
                meta: meta.cloned(),
                schema_unstable: None,
                meta_unstable: None,
                ..files.clone()
            };
            Ok((codegen::build_model(&files, Gating::AllInOne)?, schema.clone()))
        };
        let stable = alone(&files.schema, files.meta.as_ref())?;
        let unstable = match &files.schema_unstable {
            Some(schema) => alone(schema, files.meta_unstable.as_ref())?,
            None => stable.clone(),
        };
        let gated =
            codegen::build_model(files, Gating::Table).or_else(|_| codegen::build_model(files, Gating::AllInOne))?;
        Ok(Sides { stable, unstable, gated })
    }
}

/// A protocol version that only one side has, as one change.
fn whole_version(label: &str, sides: &Sides, added: bool) -> Change {
    let (stable, unstable) = (&sides.stable.0, &sides.unstable.0);
    let extra_items = unstable.items.len().saturating_sub(stable.items.len());
    let extra_methods = unstable.methods.len().saturating_sub(stable.methods.len());
    let size = format!(
        "{} definitions and {} methods in its stable schema, {extra_items} more definitions and {extra_methods} more \
         methods in its unstable one",
        stable.items.len(),
        stable.methods.len()
    );
    let (kind, detail) = if added {
        ("added", format!("new protocol version: {size}"))
    } else {
        ("removed", format!("protocol version removed ({size})"))
    };
    let mut c = change("protocol", kind, label, &detail, !added);
    c.protocol = label.to_owned();
    c
}

/// The changes of one protocol version: the stable schemas' changes are stable; what the
/// unstable schemas add to them is unstable, named with its features; what moved from one
/// schema to the other says so.
fn diff_version(label: &str, old: &Sides, new: &Sides) -> (Vec<Change>, Vec<RenameHint>) {
    let stable = diff(&old.stable.0, &new.stable.0, &old.stable.1, &new.stable.1);
    let unstable = diff(&old.unstable.0, &new.unstable.0, &old.unstable.1, &new.unstable.1);
    let mut out = Vec::new();
    for mut c in stable.changes.iter().cloned() {
        c.protocol = label.to_owned();
        match c.kind {
            // New to the stable schema, but the unstable one had it: stabilised.
            "added" if exists(&old.unstable.0, c.scope, &c.target) => {
                let before = gate_features(&old.gated, c.scope, &c.target);
                c.kind = "stabilised";
                c.detail = format!("{}; unstable before{}", c.detail, features_note(&before));
            }
            // Gone from the stable schema, but the unstable one keeps it.
            "removed" if exists(&new.unstable.0, c.scope, &c.target) => {
                c.kind = "changed";
                c.stability = "unstable";
                c.features = gate_features(&new.gated, c.scope, &c.target);
                c.detail = "no longer stable: only the unstable schema has it now".to_owned();
            }
            _ => {}
        }
        out.push(c);
    }
    for mut c in unstable.changes {
        if stable.changes.contains(&c) {
            continue;
        }
        // A change to what stays: the stable report has it. To what is unstable on both
        // sides or only on one: unstable.
        c.protocol = label.to_owned();
        // Named by the side that has it; a change to what was unstable and is stable now
        // concerns the users of the old feature.
        c.stability = "unstable";
        let (first, then) = if c.kind == "removed" { (old, new) } else { (new, old) };
        c.features = gate_features(&first.gated, c.scope, &c.target);
        if c.features.is_empty() {
            c.features = gate_features(&then.gated, c.scope, &c.target);
        }
        out.push(c);
    }
    let hints = stable
        .rename_hints
        .into_iter()
        .chain(unstable.rename_hints)
        .map(|(old, new)| RenameHint { protocol: label.to_owned(), old, new })
        .collect();
    (out, hints)
}

/// ` (feature `x`)`, or nothing when the features are not known.
fn features_note(features: &[String]) -> String {
    match features {
        [] => String::new(),
        [one] => format!(" (feature `{one}`)"),
        more => format!(" (features {})", more.iter().map(|f| format!("`{f}`")).collect::<Vec<_>>().join(", ")),
    }
}

/// The method a change's target names: (name, side) or (name, `None`) for a protocol method.
fn method_target(target: &str) -> (&str, Option<Side>) {
    let (name, side) = target.rsplit_once(" (").unwrap_or((target, ""));
    let side = match side.trim_end_matches(')') {
        "agent" => Some(Side::Agent),
        "client" => Some(Side::Client),
        "proxy" => Some(Side::Proxy),
        _ => None,
    };
    (name, side)
}

/// The item a definition, field or variant change is about, and the member name if any.
/// A definition whose shape differs between the schemas is in a merged model twice; the
/// unstable shape is the one an unstable change is about.
fn item_of<'m>(model: &'m Model, scope: &str, target: &'m str) -> (Option<&'m Item>, Option<&'m str>) {
    let (name, member) = match scope {
        "definition" => (target, None),
        _ => match target.split_once('.') {
            Some((name, member)) => (name, Some(member)),
            None => (target, None),
        },
    };
    let mut found = model.items.iter().filter(|i| i.name == name);
    let first = found.next();
    let item = found.find(|i| matches!(i.gate, Gate::Features(_))).or(first);
    (item, member)
}

/// Whether `model` has what a change's target names.
fn exists(model: &Model, scope: &str, target: &str) -> bool {
    match scope {
        "method" => match method_target(target) {
            (name, Some(side)) => model.methods.iter().any(|m| m.name == name && m.side == side),
            (name, None) => model.protocol_methods.iter().any(|(m, _)| m == name),
        },
        _ => match item_of(model, scope, target) {
            (Some(_), None) => true,
            (Some(item), Some(member)) => member_gate(item, member).is_some(),
            (None, _) => false,
        },
    }
}

/// The gate of a member of an item, if the item has it.
fn member_gate(item: &Item, member: &str) -> Option<Gate> {
    match &item.kind {
        ItemKind::Struct(s) => s.fields.iter().find(|f| f.wire == member).map(|f| f.gate.clone()),
        ItemKind::Tagged(t) => t
            .variants
            .iter()
            .find(|v| v.wire == member)
            .map(|v| v.gate.clone())
            .or_else(|| t.untagged_default.as_ref().filter(|d| d.name == member).map(|_| Gate::Stable)),
        ItemKind::StringEnum(vs) => vs.iter().find(|v| v.wire == member).map(|v| v.gate.clone()),
        ItemKind::Untagged(vs) => vs.iter().find(|v| v.name == member).map(|_| Gate::Stable),
        ItemKind::IntConsts { consts, .. } => consts.iter().find(|c| c.name == member).map(|_| Gate::Stable),
        ItemKind::Newtype(_) | ItemKind::Any | ItemKind::Alias(_) | ItemKind::Untyped { .. } => None,
    }
}

/// The cargo features behind which `model` (a merged one) compiles what a change's target names.
fn gate_features(model: &Model, scope: &str, target: &str) -> Vec<String> {
    let gate = match scope {
        "method" => match method_target(target) {
            (name, Some(side)) => {
                model.methods.iter().find(|m| m.name == name && m.side == side).map(|m| m.gate.clone())
            }
            // A protocol method is as gated as its params type.
            (name, None) => model
                .protocol_methods
                .iter()
                .find(|(m, _)| m == name)
                .and_then(|(_, params)| model.items.iter().find(|i| &i.name == params))
                .map(|i| i.gate.clone()),
        },
        _ => match item_of(model, scope, target) {
            (Some(item), Some(member)) => match member_gate(item, member) {
                Some(gate @ Gate::Features(_)) => Some(gate),
                _ => Some(item.gate.clone()),
            },
            (Some(item), None) => Some(item.gate.clone()),
            (None, _) => None,
        },
    };
    match gate {
        Some(Gate::Features(fs)) => fs.into_iter().collect(),
        Some(Gate::WithoutFeature(f)) => vec![f],
        Some(Gate::Stable) | None => Vec::new(),
    }
}

/// The changes between two models of one schema each, all labelled stable (see
/// [`diff_version`] for the labels), and the rename hints.
fn diff(old: &Model, new: &Model, old_schema: &Value, new_schema: &Value) -> LayerDiff {
    let mut changes = Vec::new();
    methods(&old.methods, &new.methods, &mut changes);
    protocol_methods(&old.protocol_methods, &new.protocol_methods, &mut changes);

    let old_items: BTreeMap<&str, &Item> = old.items.iter().map(|i| (i.name.as_str(), i)).collect();
    let new_items: BTreeMap<&str, &Item> = new.items.iter().map(|i| (i.name.as_str(), i)).collect();
    for (name, item) in &new_items {
        match old_items.get(name) {
            None => changes.push(change("definition", "added", name, &format!("new {}", kind_name(&item.kind)), false)),
            Some(old_item) => item_changes(name, old_item, item, &mut changes),
        }
    }
    for (name, item) in &old_items {
        if !new_items.contains_key(name) {
            changes.push(change("definition", "removed", name, &format!("{} removed", kind_name(&item.kind)), true));
        }
    }
    for name in old_items.keys().filter(|n| new_items.contains_key(*n)) {
        let (was, is) = (openness(old_schema, name), openness(new_schema, name));
        if let (Some(was), Some(is)) = (was, is)
            && was != is
        {
            let detail = if is {
                "closed → open (accepts unlisted values)"
            } else {
                "open → closed (unlisted values now rejected)"
            };
            changes.push(change("definition", "changed", name, detail, !is));
        }
    }

    // A removed definition and an added one of the same shape: probably a rename.
    // Only when the pair is the one removal and the one addition of that shape: identifiers are
    // all newtypes of `String`, and pairing every removed one with every added one is noise.
    let removed: Vec<(&str, &Item)> =
        old_items.iter().filter(|(n, _)| !new_items.contains_key(*n)).map(|(n, i)| (*n, *i)).collect();
    let added: Vec<(&str, &Item)> =
        new_items.iter().filter(|(n, _)| !old_items.contains_key(*n)).map(|(n, i)| (*n, *i)).collect();
    let mut rename_hints = Vec::new();
    for (old_name, old_item) in &removed {
        let same_shape = |(_, item): &&(&str, &Item)| item.kind == old_item.kind;
        let (olds, news): (Vec<_>, Vec<_>) =
            (removed.iter().filter(same_shape).collect(), added.iter().filter(same_shape).collect());
        if let ([_], [(new_name, _)]) = (olds.as_slice(), news.as_slice()) {
            rename_hints.push((old_name.to_string(), new_name.to_string()));
        }
    }
    changes.sort();
    LayerDiff { changes, rename_hints }
}

/// What [`diff`] finds between two models.
struct LayerDiff {
    changes: Vec<Change>,
    /// Removed + added definitions of the same shape: (old, new).
    rename_hints: Vec<(String, String)>,
}

fn change(scope: &'static str, kind: &'static str, target: &str, detail: &str, breaking: bool) -> Change {
    Change {
        scope,
        kind,
        target: target.to_owned(),
        detail: detail.to_owned(),
        breaking,
        protocol: String::new(),
        stability: "stable",
        features: Vec::new(),
    }
}

fn side(s: Side) -> &'static str {
    match s {
        Side::Agent => "agent",
        Side::Client => "client",
        Side::Proxy => "proxy",
    }
}

fn methods(old: &[Method], new: &[Method], out: &mut Vec<Change>) {
    let key = |m: &Method| (m.name.clone(), m.side, m.is_request());
    let form = |m: &Method| if m.is_request() { "request" } else { "notification" };
    for m in new {
        let target = format!("{} ({})", m.name, side(m.side));
        match old.iter().find(|o| key(o) == key(m)) {
            None => {
                out.push(change("method", "added", &target, &format!("new {}, params `{}`", form(m), m.params), false))
            }
            Some(o) => {
                if o.params != m.params {
                    out.push(change(
                        "method",
                        "changed",
                        &target,
                        &format!("params `{}` → `{}`", o.params, m.params),
                        true,
                    ));
                }
                if o.response != m.response {
                    out.push(change(
                        "method",
                        "changed",
                        &target,
                        &format!(
                            "result `{}` → `{}`",
                            o.response.as_deref().unwrap_or("-"),
                            m.response.as_deref().unwrap_or("-")
                        ),
                        true,
                    ));
                }
                if o.baseline != m.baseline {
                    let detail = if m.baseline {
                        "became a baseline method (handlers now required)"
                    } else {
                        "no longer a baseline method"
                    };
                    out.push(change("method", "changed", &target, detail, m.baseline));
                }
            }
        }
    }
    for o in old {
        if !new.iter().any(|m| key(m) == key(o)) {
            out.push(change(
                "method",
                "removed",
                &format!("{} ({})", o.name, side(o.side)),
                &format!("{} removed", form(o)),
                true,
            ));
        }
    }
}

/// `$/cancel_request` and the other methods the connection itself handles.
fn protocol_methods(old: &[(String, String)], new: &[(String, String)], out: &mut Vec<Change>) {
    for (name, params) in new {
        let target = format!("{name} (protocol)");
        match old.iter().find(|(o, _)| o == name) {
            None => out.push(change(
                "method",
                "added",
                &target,
                &format!("new protocol-level notification, params `{params}`"),
                false,
            )),
            Some((_, was)) if was != params => {
                out.push(change("method", "changed", &target, &format!("params `{was}` → `{params}`"), true))
            }
            Some(_) => {}
        }
    }
    for (name, _) in old.iter().filter(|(o, _)| !new.iter().any(|(n, _)| n == o)) {
        out.push(change(
            "method",
            "removed",
            &format!("{name} (protocol)"),
            "protocol-level notification removed",
            true,
        ));
    }
}

fn kind_name(kind: &ItemKind) -> &'static str {
    match kind {
        ItemKind::Struct(_) => "struct",
        ItemKind::Newtype(_) => "newtype",
        ItemKind::Any => "any-JSON type",
        ItemKind::Alias(_) => "alias",
        ItemKind::Untyped { .. } => "untyped (raw JSON) definition",
        ItemKind::StringEnum(_) => "string enum",
        ItemKind::IntConsts { .. } => "integer with named values",
        ItemKind::Tagged(_) => "tagged union",
        ItemKind::Untagged(_) => "untagged union",
    }
}

fn ty_name(ty: &Ty) -> String {
    match ty {
        Ty::Prim(p) => format!("{p:?}").to_ascii_lowercase(),
        Ty::Value => "any".into(),
        Ty::Object => "object".into(),
        Ty::Vec(t) => format!("[{}]", ty_name(t)),
        Ty::Map(t) => format!("{{string: {}}}", ty_name(t)),
        Ty::Named(n) => n.clone(),
    }
}

fn field_desc(f: &Field) -> String {
    let req = if f.required { "required" } else { "optional" };
    let null = if f.nullable { ", nullable" } else { "" };
    format!("{}, {req}{null}", ty_name(&f.ty))
}

fn item_changes(name: &str, old: &Item, new: &Item, out: &mut Vec<Change>) {
    match (&old.kind, &new.kind) {
        (ItemKind::Struct(o), ItemKind::Struct(n)) => {
            for f in &n.fields {
                let target = format!("{name}.{}", f.wire);
                match o.fields.iter().find(|of| of.wire == f.wire) {
                    None => out.push(change(
                        "field",
                        "added",
                        &target,
                        &format!("new field ({})", field_desc(f)),
                        f.required,
                    )),
                    Some(of) => {
                        if of.ty != f.ty {
                            out.push(change(
                                "field",
                                "changed",
                                &target,
                                &format!("type {} → {}", ty_name(&of.ty), ty_name(&f.ty)),
                                true,
                            ));
                        }
                        if of.required != f.required {
                            let detail = if f.required { "optional → required" } else { "required → optional" };
                            out.push(change("field", "changed", &target, detail, true));
                        }
                        if of.nullable != f.nullable {
                            let detail = if f.nullable { "now nullable" } else { "no longer nullable" };
                            out.push(change("field", "changed", &target, detail, true));
                        }
                    }
                }
            }
            for of in &o.fields {
                if !n.fields.iter().any(|f| f.wire == of.wire) {
                    out.push(change("field", "removed", &format!("{name}.{}", of.wire), "field removed", true));
                }
            }
            if o.flatten.as_ref().map(|f| &f.ty) != n.flatten.as_ref().map(|f| &f.ty) {
                out.push(change("definition", "changed", name, "the union flattened into it changed", true));
            }
        }
        (ItemKind::Tagged(o), ItemKind::Tagged(n)) => {
            let payload = |p: &Payload| match p {
                Payload::Unit => "no payload".to_owned(),
                Payload::Type(t) => format!("`{t}`"),
                Payload::Property { wire, ty } => format!("`{wire}: {}`", ty_name(ty)),
            };
            for v in &n.variants {
                let target = format!("{name}.{}", v.wire);
                match o.variants.iter().find(|ov| ov.wire == v.wire) {
                    None => out.push(change(
                        "variant",
                        "added",
                        &target,
                        &format!("new variant ({})", payload(&v.payload)),
                        false,
                    )),
                    Some(ov) if ov.payload != v.payload => out.push(change(
                        "variant",
                        "changed",
                        &target,
                        &format!("payload {} → {}", payload(&ov.payload), payload(&v.payload)),
                        true,
                    )),
                    Some(_) => {}
                }
            }
            for ov in &o.variants {
                if !n.variants.iter().any(|v| v.wire == ov.wire) {
                    out.push(change("variant", "removed", &format!("{name}.{}", ov.wire), "variant removed", true));
                }
            }
            if o.tag != n.tag {
                out.push(change("definition", "changed", name, &format!("tag `{}` → `{}`", o.tag, n.tag), true));
            }
            if o.untagged_default.as_ref().map(|d| &d.payload) != n.untagged_default.as_ref().map(|d| &d.payload) {
                out.push(change(
                    "definition",
                    "changed",
                    name,
                    "the variant used when the tag is absent changed",
                    true,
                ));
            }
        }
        (ItemKind::StringEnum(o), ItemKind::StringEnum(n)) => {
            let (ov, nv): (BTreeSet<&str>, BTreeSet<&str>) =
                (o.iter().map(|v| v.wire.as_str()).collect(), n.iter().map(|v| v.wire.as_str()).collect());
            for v in nv.difference(&ov) {
                out.push(change("variant", "added", &format!("{name}.{v}"), "new value", false));
            }
            for v in ov.difference(&nv) {
                out.push(change("variant", "removed", &format!("{name}.{v}"), "value removed", true));
            }
        }
        (ItemKind::Untagged(o), ItemKind::Untagged(n)) => {
            for v in n.iter().filter(|v| !o.iter().any(|ov| ov.name == v.name)) {
                out.push(change(
                    "variant",
                    "added",
                    &format!("{name}.{}", v.name),
                    &format!("new shape {}", ty_name(&v.ty)),
                    false,
                ));
            }
            for v in o.iter().filter(|ov| !n.iter().any(|v| v.name == ov.name)) {
                out.push(change("variant", "removed", &format!("{name}.{}", v.name), "shape removed", true));
            }
        }
        // By name: a code whose description changed is the same code.
        (ItemKind::IntConsts { consts: o, .. }, ItemKind::IntConsts { consts: n, .. }) => {
            for c in n {
                let target = format!("{name}.{}", c.name);
                match o.iter().find(|oc| oc.name == c.name) {
                    None => out.push(change("variant", "added", &target, &format!("new code {}", c.value), false)),
                    Some(oc) if oc.value != c.value => out.push(change(
                        "variant",
                        "changed",
                        &target,
                        &format!("code {} → {}", oc.value, c.value),
                        true,
                    )),
                    Some(_) => {}
                }
            }
            for c in o.iter().filter(|oc| !n.iter().any(|c| c.name == oc.name)) {
                out.push(change("variant", "removed", &format!("{name}.{}", c.name), "code removed", true));
            }
        }
        (o, n) if o == n => {}
        (o, n) if std::mem::discriminant(o) == std::mem::discriminant(n) => {
            out.push(change("definition", "changed", name, &format!("{} changed shape", kind_name(n)), true));
        }
        (o, n) => {
            out.push(change("definition", "changed", name, &format!("{} → {}", kind_name(o), kind_name(n)), true))
        }
    }
}

/// Whether a union or enum definition admits values it does not list (`None` if it is
/// neither): a variant that names the tag (or is a string) without pinning a `const`.
fn openness(schema: &Value, name: &str) -> Option<bool> {
    let def = schema.get("$defs").or_else(|| schema.get("definitions"))?.get(name)?;
    if def.get("enum").is_some() {
        return Some(false);
    }
    let variants = def.get("oneOf").or_else(|| def.get("anyOf"))?.as_array()?;
    let pinned = |v: &Value| {
        v.get("const").is_some()
            || v.get("properties")
                .and_then(Value::as_object)
                .is_some_and(|p| p.values().any(|s| s.get("const").is_some()))
    };
    let unions_of_constants = variants.iter().any(pinned);
    if !unions_of_constants {
        return None;
    }
    Some(
        variants
            .iter()
            .any(|v| !pinned(v) && (v.get("title").and_then(Value::as_str) == Some("other") || v.get("not").is_some())),
    )
}

impl Change {
    /// `stable`, or `unstable, feature `x``: where the changed thing lives.
    fn stability_note(&self) -> String {
        match (self.stability, &self.features[..]) {
            ("stable", _) => "stable".to_owned(),
            (_, []) => "unstable".to_owned(),
            (_, [one]) => format!("unstable, feature `{one}`"),
            (_, more) => {
                let names: Vec<String> = more.iter().map(|f| format!("`{f}`")).collect();
                format!("unstable, features {}", names.join(", "))
            }
        }
    }
}

impl Report {
    /// How many changes break users.
    pub(crate) fn breaking(&self) -> usize {
        self.changes.iter().filter(|c| c.breaking).count()
    }

    /// The Markdown report: one section per protocol version, each change saying whether it
    /// is to the stable schema or to an unstable part (and behind which feature).
    pub fn markdown(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(out, "# Schema changes\n");
        let _ = writeln!(out, "From `{}` to `{}`.\n", self.old, self.new);
        let unstable = self.changes.iter().filter(|c| c.stability != "stable").count();
        let _ = writeln!(
            out,
            "{} changes: **{} breaking**, {} additive; {unstable} of them to unstable parts (behind cargo features).\n",
            self.changes.len(),
            self.breaking(),
            self.changes.len() - self.breaking()
        );
        if self.changes.is_empty() {
            let _ = writeln!(out, "No changes.");
            return out;
        }
        let protocols: BTreeSet<&str> = self.changes.iter().map(|c| c.protocol.as_str()).collect();
        for protocol in protocols {
            let heading = match protocol {
                "v1" => "Protocol v1".to_owned(),
                "v2" => format!("Protocol v2 (module `v2`, feature `{}`)", codegen::V2_FEATURE),
                other => format!("Protocol {other}"),
            };
            let _ = writeln!(out, "## {heading}\n");
            for (scope, title) in [
                ("protocol", "Protocol version"),
                ("method", "Methods"),
                ("definition", "Definitions"),
                ("field", "Fields"),
                ("variant", "Variants"),
            ] {
                let rows: Vec<&Change> =
                    self.changes.iter().filter(|c| c.protocol == protocol && c.scope == scope).collect();
                if rows.is_empty() {
                    continue;
                }
                let _ = writeln!(out, "### {title}\n");
                // Breaking first, then additive.
                for c in rows.iter().filter(|c| c.breaking).chain(rows.iter().filter(|c| !c.breaking)) {
                    let flag = if c.breaking { "**breaking** " } else { "" };
                    // A whole protocol version has a stable and an unstable schema; its line says so.
                    let note = if c.scope == "protocol" { String::new() } else { format!(" ({})", c.stability_note()) };
                    let _ = writeln!(out, "- {flag}{} `{}`: {}{note}", c.kind, c.target, c.detail);
                }
                let _ = writeln!(out);
            }
        }
        if !self.rename_hints.is_empty() {
            let _ = writeln!(out, "## Possible renames\n");
            for h in &self.rename_hints {
                let _ = writeln!(
                    out,
                    "- {}: `{}` → `{}` (removed and added with the same shape)",
                    h.protocol, h.old, h.new
                );
            }
            let _ = writeln!(out);
        }
        out
    }
}
