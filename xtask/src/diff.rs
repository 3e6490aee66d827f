//! `cargo xtask diff OLD NEW`: what changed between two versions of the schema, in the terms
//! of the generated API, with the changes that break users flagged.
//!
//! Both sides go through the generator's own classification, so "a field became required" or
//! "a union gained a variant" means exactly what it will mean for the generated code. Openness
//! (whether a union or enum admits values it does not list) is read from the raw schema.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::Path;

use serde::Serialize;
use serde_json::Value;

use crate::codegen::ir::{Field, Item, ItemKind, Method, Model, Payload, Side, Ty};
use crate::codegen::{self, CodegenError, load};

/// One change, as reported.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub struct Change {
    /// `method`, `definition`, `field`, `variant`.
    pub scope: &'static str,
    /// `added`, `removed`, `changed`.
    pub kind: &'static str,
    /// What changed: `PromptRequest`, `PromptRequest.prompt`, `session/prompt (agent)`.
    pub target: String,
    pub detail: String,
    pub breaking: bool,
}

#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub old: String,
    pub new: String,
    pub changes: Vec<Change>,
    /// Removed + added definitions of the same shape.
    pub rename_hints: Vec<(String, String)>,
}

/// A schema version folder (holding `schema.json` and `meta.json`): a release folder's `v1/`,
/// or the folder itself.
fn version_dir(dir: &Path) -> std::path::PathBuf {
    if dir.join("v1/schema.json").exists() { dir.join("v1") } else { dir.to_owned() }
}

/// Diffs the stable schemas of two folders (release folders or version folders).
pub fn diff_dirs(old: &Path, new: &Path) -> Result<Report, CodegenError> {
    let load_side = |dir: &Path| -> Result<(Model, Value), CodegenError> {
        let mut files = load::load_version(&version_dir(dir))?;
        files.schema_unstable = None;
        files.meta_unstable = None;
        let model = codegen::build_model(&files, codegen::Gating::AllInOne)?;
        Ok((model, files.schema))
    };
    let (old_model, old_schema) = load_side(old)?;
    let (new_model, new_schema) = load_side(new)?;
    let mut report = diff(&old_model, &new_model, &old_schema, &new_schema);
    report.old = old.display().to_string();
    report.new = new.display().to_string();
    Ok(report)
}

pub fn diff(old: &Model, new: &Model, old_schema: &Value, new_schema: &Value) -> Report {
    let mut changes = Vec::new();
    methods(&old.methods, &new.methods, &mut changes);

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
    Report { old: String::new(), new: String::new(), changes, rename_hints }
}

fn change(scope: &'static str, kind: &'static str, target: &str, detail: &str, breaking: bool) -> Change {
    Change { scope, kind, target: target.to_owned(), detail: detail.to_owned(), breaking }
}

fn side(s: Side) -> &'static str {
    match s {
        Side::Agent => "agent",
        Side::Client => "client",
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

fn kind_name(kind: &ItemKind) -> &'static str {
    match kind {
        ItemKind::Struct(_) => "struct",
        ItemKind::Newtype(_) => "newtype",
        ItemKind::Any => "any-JSON type",
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
        (ItemKind::IntConsts { consts: o, .. }, ItemKind::IntConsts { consts: n, .. }) => {
            for c in n.iter().filter(|c| !o.contains(c)) {
                out.push(change(
                    "variant",
                    "added",
                    &format!("{name}.{}", c.name),
                    &format!("new code {}", c.value),
                    false,
                ));
            }
            for c in o.iter().filter(|c| !n.contains(c)) {
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

impl Report {
    pub fn breaking(&self) -> usize {
        self.changes.iter().filter(|c| c.breaking).count()
    }

    /// The Markdown report.
    pub fn markdown(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(out, "# Schema changes\n");
        let _ = writeln!(out, "From `{}` to `{}`.\n", self.old, self.new);
        let _ = writeln!(
            out,
            "{} changes: **{} breaking**, {} additive.\n",
            self.changes.len(),
            self.breaking(),
            self.changes.len() - self.breaking()
        );
        if self.changes.is_empty() {
            let _ = writeln!(out, "No changes.");
            return out;
        }
        for (scope, title) in
            [("method", "Methods"), ("definition", "Definitions"), ("field", "Fields"), ("variant", "Variants")]
        {
            let rows: Vec<&Change> = self.changes.iter().filter(|c| c.scope == scope).collect();
            if rows.is_empty() {
                continue;
            }
            let _ = writeln!(out, "## {title}\n");
            // Breaking first, then additive.
            for c in rows.iter().filter(|c| c.breaking).chain(rows.iter().filter(|c| !c.breaking)) {
                let flag = if c.breaking { "**breaking** " } else { "" };
                let _ = writeln!(out, "- {flag}{} `{}`: {}", c.kind, c.target, c.detail);
            }
            let _ = writeln!(out);
        }
        if !self.rename_hints.is_empty() {
            let _ = writeln!(out, "## Possible renames\n");
            for (old, new) in &self.rename_hints {
                let _ = writeln!(out, "- `{old}` → `{new}` (removed and added with the same shape)");
            }
            let _ = writeln!(out);
        }
        out
    }
}
