//! `cargo xtask semver` and the Rust half of `schema update`'s report: what moving from one
//! schema release to another does to the public API of the generated crate, and the version
//! bump that asks for under Cargo's semver rules.
//!
//! Two sources, each doing what it is good at:
//! - the item list ([`surface`]): both crates are generated in memory and their public items
//!   read from the source, then compared path by path. It names every item added, changed or
//!   removed, and classifies each by Cargo's rules for what the generator emits (a field added
//!   to a `#[non_exhaustive]` struct is minor, a removal or a changed signature major, ...).
//! - the verdict ([`checks`]): cargo-semver-checks, run on the two crates written to scratch
//!   folders, says whether the change breaks dependents. It only reports breakage, so minor
//!   (something added) against patch (nothing public changed) comes from the item list.
//!
//! The proposed bump is the larger of the two levels; the report shows both.

pub mod checks;
pub mod surface;

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::codegen::{self, Gating, OutputFile, Settings};
use surface::{ApiItem, Namespace, Surface};

/// How much a change asks of the version number, in Cargo's terms.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Level {
    /// Nothing public changed.
    Patch,
    /// Something was added; nothing that compiled stops compiling.
    Minor,
    /// Something that compiled against the old crate may not compile against the new one.
    Major,
}

impl Level {
    /// Its name in the report: `patch`, `minor`, `major`.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Level::Patch => "patch",
            Level::Minor => "minor",
            Level::Major => "major",
        }
    }
}

/// A crate version `MAJOR.MINOR.PATCH` (no pre-release or build part: the generated crate has none).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub struct Version {
    /// `MAJOR`.
    pub major: u64,
    /// `MINOR`.
    pub minor: u64,
    /// `PATCH`.
    pub patch: u64,
}

impl Version {
    /// Reads `MAJOR.MINOR.PATCH`, surrounding whitespace allowed.
    pub fn parse(text: &str) -> Result<Version, String> {
        let parts: Vec<&str> = text.trim().split('.').collect();
        let numbers: Vec<u64> = parts.iter().filter_map(|p| p.parse().ok()).collect();
        match numbers.as_slice() {
            [major, minor, patch] if parts.len() == 3 => Ok(Version { major: *major, minor: *minor, patch: *patch }),
            _ => Err(format!("`{text}` is not a MAJOR.MINOR.PATCH version")),
        }
    }

    /// The next version for a change of `level`. Below 1.0, Cargo treats the minor number as
    /// the major one (0.3.x and 0.4.0 are incompatible, 0.3.1 and 0.3.2 compatible), so a
    /// breaking change bumps the minor and anything else the patch.
    pub fn bump(self, level: Level) -> Version {
        let Version { major, minor, patch } = self;
        match (major, level) {
            (0, Level::Major) => Version { major, minor: minor + 1, patch: 0 },
            (0, _) | (_, Level::Patch) => Version { major, minor, patch: patch + 1 },
            (_, Level::Minor) => Version { major, minor: minor + 1, patch: 0 },
            (_, Level::Major) => Version { major: major + 1, minor: 0, patch: 0 },
        }
    }
}

impl std::fmt::Display for Version {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}.{}", self.major, self.minor, self.patch)
    }
}

/// The version of the generated crate: `generated/Cargo.toml`'s, or the workspace's when it
/// inherits it (`version.workspace = true`).
pub fn crate_version(workspace: &Path) -> Result<Version, String> {
    let read =
        |path: PathBuf| std::fs::read_to_string(&path).map_err(|e| format!("cannot read {}: {e}", path.display()));
    let manifest = read(workspace.join("generated/Cargo.toml"))?;
    let own = section_value(&manifest, "[package]", "version");
    let text = match own.as_deref() {
        Some(v) if v.starts_with('"') => v.trim_matches('"').to_owned(),
        _ => {
            let root = read(workspace.join("Cargo.toml"))?;
            section_value(&root, "[workspace.package]", "version")
                .map(|v| v.trim_matches('"').to_owned())
                .ok_or("generated/Cargo.toml inherits its version, but Cargo.toml has no [workspace.package] version")?
        }
    };
    Version::parse(&text).map_err(|e| format!("the version of the generated crate: {e}"))
}

/// `key = value` (or `key.workspace = true`, as `workspace`) in `section` of a TOML file.
fn section_value(toml: &str, section: &str, key: &str) -> Option<String> {
    let mut inside = false;
    for line in toml.lines().map(str::trim) {
        if line.starts_with('[') {
            inside = line == section;
        } else if inside && let Some((k, v)) = line.split_once('=') {
            let k = k.trim();
            if k == key {
                return Some(v.trim().to_owned());
            }
            if k == format!("{key}.workspace") {
                return Some("workspace".to_owned());
            }
        }
    }
    None
}

/// One public item added, removed or changed.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ApiChange {
    /// `added`, `removed` or `changed`.
    pub kind: &'static str,
    /// Which names the item lives among.
    pub namespace: Namespace,
    /// Relative to the crate root: `AuthMethod::Agent`, `v2::PromptRequest::new`.
    pub path: String,
    /// The old signature; `None` for an added item.
    pub before: Option<String>,
    /// The new signature; `None` for a removed item.
    pub after: Option<String>,
    /// What the change asks of the version number.
    pub level: Level,
    /// The rule that sets the level: `a public item removed`, `field added to a #[non_exhaustive] struct`.
    pub rule: &'static str,
    /// For an added or removed type: how many of its members (fields, variants, functions,
    /// impls) came or went with it, listed under the type only.
    pub members: usize,
}

/// Compares two surfaces: every item only in `old` is removed, only in `new` added, in both
/// with another signature changed. Members of a type added or removed with it are counted on
/// the type, not listed.
pub fn compare(old: &Surface, new: &Surface) -> Vec<ApiChange> {
    let mut out: Vec<ApiChange> = Vec::new();
    let change = |kind, (ns, path): &(Namespace, String), before: Option<&ApiItem>, after: Option<&ApiItem>| {
        let (level, rule) = classify(kind, *ns, before, after, old);
        ApiChange {
            kind,
            namespace: *ns,
            path: path.clone(),
            before: before.map(|i| i.signature.clone()),
            after: after.map(|i| i.signature.clone()),
            level,
            rule,
            members: 0,
        }
    };
    for (key, item) in old {
        match new.get(key) {
            None => out.push(change("removed", key, Some(item), None)),
            Some(now) if now != item => out.push(change("changed", key, Some(item), Some(now))),
            Some(_) => {}
        }
    }
    for (key, item) in new {
        if !old.contains_key(key) {
            out.push(change("added", key, None, Some(item)));
        }
    }
    // Fold the members of a type or module that came or went into its line.
    let whole: BTreeSet<(&'static str, Namespace, String)> = out
        .iter()
        .filter(|c| matches!(c.namespace, Namespace::Type | Namespace::Module) && c.kind != "changed")
        .map(|c| (c.kind, c.namespace, c.path.clone()))
        .collect();
    let owner = |c: &ApiChange| -> Option<(Namespace, String)> {
        let side = if c.kind == "removed" { old } else { new };
        let parent = side.get(&(c.namespace, c.path.clone())).and_then(|i| i.parent.clone()).or_else(|| {
            // Inherent functions and constants: `Type::name`.
            matches!(c.namespace, Namespace::Function | Namespace::Const)
                .then(|| c.path.rsplit_once("::").map(|(t, _)| t.to_owned()))
                .flatten()
        });
        if let Some(parent) = parent.filter(|p| whole.contains(&(c.kind, Namespace::Type, p.clone()))) {
            return Some((Namespace::Type, parent));
        }
        // Anything inside a module that came or went: `v2::X`, `impl From<A> for B (in v2)`.
        whole.iter().find_map(|(kind, ns, module)| {
            let inside = c.path.starts_with(&format!("{module}::"))
                || c.path.ends_with(&format!(" (in {module})"))
                || c.path.contains(&format!(" (in {module}::"));
            (*kind == c.kind && *ns == Namespace::Module && inside).then(|| (Namespace::Module, module.clone()))
        })
    };
    let mut folded: Vec<(&'static str, Namespace, String)> = Vec::new();
    out.retain(|c| match owner(c) {
        Some((ns, parent)) if c.kind != "changed" => {
            folded.push((c.kind, ns, parent));
            false
        }
        _ => true,
    });
    for c in &mut out {
        if matches!(c.namespace, Namespace::Type | Namespace::Module) {
            c.members = folded
                .iter()
                .filter(|(kind, ns, parent)| *kind == c.kind && *ns == c.namespace && *parent == c.path)
                .count();
        }
    }
    // Major first, then removed, changed, added; by path within each.
    out.sort_by(|a, b| {
        b.level.cmp(&a.level).then(b.kind.cmp(a.kind)).then(a.path.cmp(&b.path)).then(a.namespace.cmp(&b.namespace))
    });
    out
}

/// The level of one change, by Cargo's semver rules (the reference's "SemVer Compatibility"
/// chapter) for the kinds of items the generator emits.
fn classify(
    kind: &str,
    ns: Namespace,
    before: Option<&ApiItem>,
    after: Option<&ApiItem>,
    old: &Surface,
) -> (Level, &'static str) {
    let parent_in_old = |item: &ApiItem| item.parent.as_ref().and_then(|p| old.get(&(Namespace::Type, p.clone())));
    match (kind, before, after) {
        ("removed", _, _) => (Level::Major, "a public item removed"),
        ("added", _, Some(item)) => match (ns, parent_in_old(item)) {
            (Namespace::Field, Some(parent)) if parent.exhaustive == Some(true) => {
                (Level::Major, "field added to a struct users build with literals (they break)")
            }
            (Namespace::Field, _) => (Level::Minor, "field added to a #[non_exhaustive] or new struct"),
            (Namespace::Variant, Some(parent)) if parent.exhaustive == Some(true) => {
                (Level::Major, "variant added to an exhaustive enum (exhaustive matches break)")
            }
            (Namespace::Variant, _) => (Level::Minor, "variant added to a #[non_exhaustive] or new enum"),
            (Namespace::TraitMethod, Some(_)) if item.provided == Some(false) => {
                (Level::Major, "trait item without a default added (implementations break)")
            }
            (Namespace::Impl, _) => (Level::Minor, "trait implementation added"),
            _ => (Level::Minor, "a public item added"),
        },
        ("changed", Some(was), Some(is)) => {
            if was.signature != is.signature {
                (Level::Major, "signature or type changed")
            } else if was.exhaustive == Some(true) && is.exhaustive == Some(false) {
                (Level::Major, "#[non_exhaustive] added")
            } else if was.exhaustive == Some(false) && is.exhaustive == Some(true) {
                (Level::Minor, "#[non_exhaustive] removed")
            } else if was.provided == Some(true) && is.provided == Some(false) {
                (Level::Major, "trait item lost its default (implementations break)")
            } else if was.provided == Some(false) && is.provided == Some(true) {
                (Level::Minor, "trait item gained a default")
            } else {
                (Level::Major, "changed")
            }
        }
        _ => (Level::Major, "changed"),
    }
}

/// One side of a comparison: a label for the report and a crate (its files, from the crate
/// root: `Cargo.toml`, `src/lib.rs`, ...).
pub struct Side {
    /// `v1.7.0`, or the folder.
    pub label: String,
    /// The crate's files.
    pub files: Vec<OutputFile>,
}

impl Side {
    /// The crate generated from the release folder `dir` (holding `v1/`, maybe `v2/`), as a
    /// standalone package of the generated crate's name. Its unstable items are gated by the
    /// feature table where the table describes the release (the pinned one), else all behind
    /// `unstable`, as `check-releases` generates them.
    pub fn generate(dir: &Path, label: &str) -> Result<Side, String> {
        let settings = |gating| Settings { gating, standalone: true, ..Settings::new(dir, label) };
        let files = match codegen::generate(&settings(Gating::Table)) {
            Ok(files) => files,
            Err(_) => {
                codegen::generate(&settings(Gating::AllInOne)).map_err(|e| format!("{label} does not generate: {e}"))?
            }
        };
        Ok(Side { label: label.to_owned(), files })
    }
}

/// Whether to run cargo-semver-checks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Tool {
    /// Run it; it must be installed (the CLI's default).
    Run,
    /// The item list and its rules only (the report says so). The library's default, so that
    /// callers that only pin or regenerate do not build two crates' docs.
    #[default]
    Skip,
}

/// The whole report.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// The package name: `acp-types`.
    pub package: String,
    /// The old side's label.
    pub old: String,
    /// The new side's label.
    pub new: String,
    /// The features both surfaces were read with (cargo-semver-checks' default choice).
    pub features: Vec<String>,
    /// Changes to what those features compile.
    pub changes: Vec<ApiChange>,
    /// Changes only visible with the `unstable*` features on, which carry no semver promise.
    pub unstable: Vec<ApiChange>,
    /// The largest level of [`Report::changes`].
    pub items_level: Level,
    /// `None` when the tool was skipped.
    pub semver_checks: Option<checks::Verdict>,
    /// A note when the tool is not the pinned version.
    pub tool_note: Option<String>,
    /// The larger of the two levels.
    pub level: Level,
    /// The generated crate's version now.
    pub current: Version,
    /// `current` bumped by `level`.
    pub proposed: Version,
}

/// Compares the crate generated from `old` with the one from `new`. With [`Tool::Run`], both
/// are written under `workspace/target/semver/` and checked with cargo-semver-checks, which
/// must be installed (the error says how).
pub fn report(workspace: &Path, old: &Side, new: &Side, tool: Tool) -> Result<Report, String> {
    let current = crate_version(workspace)?;
    let package = package_name(&new.files).unwrap_or_else(|| "acp-types".to_owned());
    let declared_old = surface::declared_features(&old.files);
    let declared_new = surface::declared_features(&new.files);
    let checked_old = surface::checked_features(&declared_old);
    let checked_new = surface::checked_features(&declared_new);
    let (parsed_old, parsed_new) = (surface::Parsed::new(&old.files)?, surface::Parsed::new(&new.files)?);
    let changes = compare(&surface::surface(&parsed_old, &checked_old)?, &surface::surface(&parsed_new, &checked_new)?);
    let all_old = surface::surface(&parsed_old, &declared_old.iter().cloned().collect())?;
    let all_new = surface::surface(&parsed_new, &declared_new.iter().cloned().collect())?;
    let stable_keys: BTreeSet<(Namespace, &str)> = changes.iter().map(|c| (c.namespace, c.path.as_str())).collect();
    let unstable: Vec<ApiChange> = compare(&all_old, &all_new)
        .into_iter()
        .filter(|c| !stable_keys.contains(&(c.namespace, c.path.as_str())))
        .collect();
    let items_level = changes.iter().map(|c| c.level).max().unwrap_or(Level::Patch);

    let (semver_checks, tool_note) = match tool {
        Tool::Skip => (None, None),
        Tool::Run => {
            let version = checks::installed()?;
            let note = (version != checks::PINNED_VERSION).then(|| {
                format!(
                    "cargo-semver-checks {version} is installed; the project checks with {} (`bash {}`)",
                    checks::PINNED_VERSION,
                    checks::INSTALL_SCRIPT
                )
            });
            let scratch = workspace.join("target/semver");
            // One check at a time in the shared target dir: cargo-semver-checks reads each
            // crate's rustdoc JSON from `target/doc/acp_types.json` after building it, where a
            // concurrent check of another pair would write its own.
            std::fs::create_dir_all(&scratch).map_err(|e| format!("cannot create {}: {e}", scratch.display()))?;
            let lock = std::fs::File::create(scratch.join(".lock"))
                .and_then(|file| file.lock().map(|()| file))
                .map_err(|e| format!("cannot lock {}: {e}", scratch.join(".lock").display()))?;
            let pair = format!("{}..{}", slug(&old.label), slug(&new.label));
            let old_dir = write_crate(&scratch.join(&pair).join("old"), &old.files, current)?;
            let new_dir = write_crate(&scratch.join(&pair).join("new"), &new.files, current)?;
            let verdict = checks::run(&old_dir, &new_dir, &scratch.join("target"), &version)?;
            drop(lock);
            (Some(verdict), note)
        }
    };
    let level = items_level.max(semver_checks.as_ref().map_or(Level::Patch, |v| v.level));
    Ok(Report {
        package,
        old: old.label.clone(),
        new: new.label.clone(),
        features: checked_new.into_iter().collect(),
        changes,
        unstable,
        items_level,
        semver_checks,
        tool_note,
        level,
        current,
        proposed: current.bump(level),
    })
}

fn package_name(files: &[OutputFile]) -> Option<String> {
    let manifest = files.iter().find(|f| f.path == Path::new("Cargo.toml"))?;
    section_value(&manifest.contents, "[package]", "name").map(|n| n.trim_matches('"').to_owned())
}

/// A label as a folder name: `v1.3.0`, `schema_json`.
fn slug(label: &str) -> String {
    label.chars().map(|c| if c.is_ascii_alphanumeric() || c == '.' || c == '-' { c } else { '_' }).collect()
}

/// Writes a generated crate to `dir` (replacing what was there) with `version`, so that both
/// crates cargo-semver-checks compares carry the version the report starts from.
fn write_crate(dir: &Path, files: &[OutputFile], version: Version) -> Result<PathBuf, String> {
    let _ = std::fs::remove_dir_all(dir.join("src"));
    let files: Vec<OutputFile> = files
        .iter()
        .map(|f| {
            let mut f = f.clone();
            if f.path == Path::new("Cargo.toml") {
                f.contents = f.contents.replacen("version = \"0.0.0\"", &format!("version = \"{version}\""), 1);
            }
            f
        })
        .collect();
    codegen::write_or_check(dir, &files, false).map_err(|e| format!("cannot write {}: {e}", dir.display()))?;
    Ok(dir.to_owned())
}

impl Report {
    /// The Markdown report: the proposal, both verdicts, cargo-semver-checks' findings, then
    /// the public items removed, changed and added (and those behind unstable features).
    pub fn markdown(&self) -> String {
        let krate = self.package.replace('-', "_");
        let mut out = String::new();
        let _ = writeln!(out, "# Rust API of `{}`\n", self.package);
        let features = if self.features.is_empty() {
            "no features".to_owned()
        } else {
            self.features.iter().map(|f| format!("`{f}`")).collect::<Vec<_>>().join(", ")
        };
        let _ = writeln!(
            out,
            "From `{}` to `{}`: the generated crate's public API with {features} (the features \
             cargo-semver-checks checks; the `unstable*` ones carry no semver promise).\n",
            self.old, self.new
        );
        let why = match (self.level, self.current.major) {
            (Level::Major, 0) => "a breaking change: below 1.0 it bumps the minor number",
            (Level::Major, _) => "a breaking change",
            (Level::Minor, 0) => "additions only: below 1.0 they bump the patch number",
            (Level::Minor, _) => "additions only",
            (Level::Patch, _) => "no public item changed",
        };
        let _ = writeln!(
            out,
            "**Proposed version: `{}` → `{}`** ({}: {why}).\n",
            self.current,
            self.proposed,
            self.level.as_str()
        );
        let count = |kind: &str| self.changes.iter().filter(|c| c.kind == kind).count();
        let _ = writeln!(out, "| Source | Verdict | Basis |\n|---|---|---|");
        match &self.semver_checks {
            Some(v) => {
                let lints = if v.lints.is_empty() {
                    "no lint failed".to_owned()
                } else {
                    v.lints.iter().map(|l| format!("`{}` ({})", l.id, l.findings.len())).collect::<Vec<_>>().join(", ")
                };
                let _ = writeln!(out, "| cargo-semver-checks {} | {} | {lints} |", v.version, v.level.as_str());
            }
            None => {
                let _ = writeln!(out, "| cargo-semver-checks | not run | `--skip-semver-checks` |");
            }
        }
        let _ = writeln!(
            out,
            "| public items | {} | {} removed, {} changed, {} added |\n",
            self.items_level.as_str(),
            count("removed"),
            count("changed"),
            count("added")
        );
        if let Some(note) = &self.tool_note {
            let _ = writeln!(out, "Note: {note}.\n");
        }
        if let Some(v) = self.semver_checks.as_ref().filter(|v| !v.lints.is_empty()) {
            let _ = writeln!(out, "## cargo-semver-checks\n\n{}\n", v.summary);
            for lint in &v.lints {
                let kind = if lint.required { "" } else { ", warning" };
                let _ = writeln!(out, "### `{}` ({}{kind}): {}\n", lint.id, lint.level.as_str(), lint.name);
                for f in &lint.findings {
                    let _ = writeln!(out, "- {f}");
                }
                let _ = writeln!(out);
            }
        }
        let _ = writeln!(out, "## Public items\n");
        if self.changes.is_empty() {
            let _ = writeln!(out, "No public item changed.\n");
        }
        for (kind, title) in [("removed", "Removed"), ("changed", "Changed"), ("added", "Added")] {
            let rows: Vec<&ApiChange> = self.changes.iter().filter(|c| c.kind == kind).collect();
            if rows.is_empty() {
                continue;
            }
            let _ = writeln!(out, "### {title}\n");
            for c in rows {
                let _ = writeln!(out, "- {}", line(c, &krate, true));
            }
            let _ = writeln!(out);
        }
        if !self.unstable.is_empty() {
            let _ = writeln!(
                out,
                "## Behind unstable features\n\nOnly visible with the `unstable*` features on, which \
                 cargo-semver-checks leaves out and the version does not answer for.\n"
            );
            for c in &self.unstable {
                let _ = writeln!(out, "- {} {}", c.kind, line(c, &krate, false));
            }
            let _ = writeln!(out);
        }
        out
    }
}

/// `**major** variant `acp_types::AuthMethod::Agent`: `Agent(AuthMethodAgent)` (a public item removed)`.
fn line(c: &ApiChange, krate: &str, with_level: bool) -> String {
    let path = if c.namespace == Namespace::Impl { c.path.clone() } else { format!("{krate}::{}", c.path) };
    let level = match (with_level, c.level) {
        (false, _) => String::new(),
        (true, Level::Major) => "**major** ".to_owned(),
        (true, level) => format!("{} ", level.as_str()),
    };
    let shape = match (&c.before, &c.after) {
        (Some(b), Some(a)) => format!(": `{b}` → `{a}`"),
        (Some(s), None) | (None, Some(s)) if c.namespace != Namespace::Impl => format!(": `{s}`"),
        _ => String::new(),
    };
    let members = match c.members {
        0 => String::new(),
        n => format!("with {n} members"),
    };
    let note = match (with_level, members.is_empty()) {
        (true, true) => format!(" ({})", c.rule),
        (true, false) => format!(" ({}, {members})", c.rule),
        (false, true) => String::new(),
        (false, false) => format!(" ({members})"),
    };
    format!("{level}{} `{path}`{shape}{note}", c.namespace.noun())
}
