//! The API report of `cargo xtask semver` and `schema update`: the generated crate's public
//! items between two releases, the level of each change, cargo-semver-checks' verdict and the
//! proposed version. On the real releases v1.3.0 → v1.7.0, and on a small hand-written crate
//! pair that measures the item rules against cargo-semver-checks case by case.
//!
//! The tests that run cargo-semver-checks need it installed (`bash .ci/install-cargo-semver-checks`).
//! Without it they print `SKIPPED:` with the reason and how to install it, and pass, unless
//! `ACP_SEMVER_CHECKS_REQUIRED` is set to anything but `0` (CI sets it to 1), which makes the
//! missing tool a failure with the same message. The interop tests skip the same way
//! (`ACP_INTEROP_REQUIRED`).

use std::path::{Path, PathBuf};

mod common;

use xtask::codegen::OutputFile;
use xtask::semver::checks::{self, Verdict};
use xtask::semver::surface::Namespace;
use xtask::semver::{self, ApiChange, Level, Report, Side, Tool, Version};

fn releases() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/acp-schema/releases")
}

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn release(tag: &str) -> Side {
    Side::generate(&releases().join(tag), tag).expect("generates")
}

/// Whether cargo-semver-checks (the pinned version) can run. Without it: a skip that says why
/// and how to install it, or, with `ACP_SEMVER_CHECKS_REQUIRED` set (and not `0`), a failure
/// that says the same.
fn semver_checks_available(test: &str) -> bool {
    let why = match checks::installed() {
        Ok(version) if version == checks::PINNED_VERSION => return true,
        Ok(version) => format!(
            "cargo-semver-checks {version} is installed, the project checks with {}: run `bash {}`",
            checks::PINNED_VERSION,
            checks::INSTALL_SCRIPT
        ),
        Err(why) => why,
    };
    if std::env::var_os("ACP_SEMVER_CHECKS_REQUIRED").is_some_and(|v| v != "0") {
        panic!("{test}: {why}\n(ACP_SEMVER_CHECKS_REQUIRED is set, so a missing cargo-semver-checks fails the test)");
    }
    eprintln!("SKIPPED: {test}: {why} (set ACP_SEMVER_CHECKS_REQUIRED=1 to fail instead)");
    false
}

/// The one change to `path` in `namespace` among `changes`.
fn find<'r>(changes: &'r [ApiChange], namespace: Namespace, path: &str) -> &'r ApiChange {
    let found: Vec<&ApiChange> = changes.iter().filter(|c| c.namespace == namespace && c.path == path).collect();
    assert_eq!(found.len(), 1, "{namespace:?} `{path}` in {changes:#?}");
    found[0]
}

fn lint_ids_naming<'v>(verdict: &'v Verdict, name: &str) -> Vec<&'v str> {
    verdict.lints.iter().filter(|l| l.findings.iter().any(|f| f.contains(name))).map(|l| l.id.as_str()).collect()
}

#[test]
fn v1_3_0_to_v1_7_0_public_items() {
    let report = semver::report(&workspace(), &release("v1.3.0"), &release("v1.7.0"), Tool::Skip).expect("reports");
    assert_eq!(
        report.features,
        ["float_roundtrip", "preserve_order", "schemars"],
        "cargo-semver-checks' default: every feature but the unstable ones"
    );

    // `AuthMethod` went from an untagged to a tagged union: its fallback variant now keeps the
    // unknown object (`UnknownVariant`) instead of any JSON value. Code that built or matched
    // `AuthMethod::Other(value)` with a `serde_json::Value` stops compiling.
    let other = find(&report.changes, Namespace::Variant, "AuthMethod::Other");
    assert_eq!((other.kind, other.level), ("changed", Level::Major));
    assert_eq!(other.before.as_deref(), Some("Other(serde_json::Value)"));
    assert_eq!(other.after.as_deref(), Some("Other(serde_support::UnknownVariant)"));

    // Elicitation was stabilised: new types, a field on a #[non_exhaustive] struct, a variant
    // of a #[non_exhaustive] enum, a trait method with a default body. All additions.
    let request = find(&report.changes, Namespace::Type, "CreateElicitationRequest");
    assert_eq!((request.kind, request.level), ("added", Level::Minor));
    assert!(request.members >= 5, "its fields, constructor and impls come with it: {request:?}");
    let field = find(&report.changes, Namespace::Field, "ClientCapabilities::elicitation");
    assert_eq!((field.kind, field.level), ("added", Level::Minor));
    assert!(field.rule.contains("non_exhaustive"), "{field:?}");
    let variant = find(&report.changes, Namespace::Variant, "AuthMethod::Terminal");
    assert_eq!((variant.kind, variant.level), ("added", Level::Minor));
    let method = find(&report.changes, Namespace::TraitMethod, "Client::elicitation_create");
    assert_eq!((method.kind, method.level), ("added", Level::Minor));
    assert!(
        report.changes.iter().all(|c| c.kind != "removed"),
        "nothing stable was removed: {:#?}",
        report.changes.iter().filter(|c| c.kind == "removed").collect::<Vec<_>>()
    );

    // What only the unstable features compile is listed apart, and counts for nothing.
    let env_var = find(&report.unstable, Namespace::Type, "AuthEnvVar");
    assert_eq!(env_var.kind, "removed");
    let cwd = find(&report.unstable, Namespace::Field, "v2::NewSessionRequest::cwd");
    assert_eq!((cwd.before.as_deref(), cwd.after.as_deref()), (Some("String"), Some("AbsolutePath")));
    assert!(report.changes.iter().all(|c| !c.path.starts_with("v2::")), "v2 is behind an unstable feature");

    assert_eq!((report.items_level, report.level), (Level::Major, Level::Major));
    assert!(report.semver_checks.is_none());
    let current = semver::crate_version(&workspace()).unwrap();
    assert_eq!((report.current, report.proposed), (current, current.bump(Level::Major)));

    let md = report.markdown();
    assert!(md.contains(&format!("**Proposed version: `{current}` → `{}`**", current.bump(Level::Major))), "{md}");
    assert!(
        md.contains(
            "- **major** variant `acp_types::AuthMethod::Other`: `Other(serde_json::Value)` → \
             `Other(serde_support::UnknownVariant)` (signature or type changed)"
        ),
        "{md}"
    );
    assert!(
        md.contains("- minor type `acp_types::CreateElicitationRequest`: `struct CreateElicitationRequest`"),
        "{md}"
    );
    assert!(md.contains("| cargo-semver-checks | not run |"), "{md}");
}

#[test]
fn a_release_against_itself_is_a_patch() {
    let v1_7 = release("v1.7.0");
    let report = semver::report(&workspace(), &v1_7, &v1_7, Tool::Skip).expect("reports");
    assert!(report.changes.is_empty() && report.unstable.is_empty(), "{:#?}", report.changes);
    assert_eq!(report.level, Level::Patch);
    assert_eq!(report.proposed, report.current.bump(Level::Patch));
    assert!(report.markdown().contains("No public item changed."));
}

#[test]
fn v1_3_0_to_v1_7_0_checked_by_cargo_semver_checks() {
    if !semver_checks_available("v1_3_0_to_v1_7_0_checked_by_cargo_semver_checks") {
        return;
    }
    let report: Report =
        semver::report(&workspace(), &release("v1.3.0"), &release("v1.7.0"), Tool::Run).expect("reports");
    let verdict = report.semver_checks.as_ref().expect("ran");
    assert_eq!(verdict.version, checks::PINNED_VERSION);
    // cargo-semver-checks has no lint for a changed field or parameter type, so it passes the
    // `AuthMethod::Other` change; the item list catches it and the proposal follows the larger level.
    assert_eq!(verdict.level, Level::Patch, "{verdict:#?}");
    assert!(verdict.lints.is_empty(), "{verdict:#?}");
    assert!(verdict.summary.contains("no semver update required"), "{}", verdict.summary);
    assert_eq!((report.items_level, report.level), (Level::Major, Level::Major));
    assert_eq!(report.proposed, report.current.bump(Level::Major));
    let md = report.markdown();
    assert!(
        md.contains(&format!("| cargo-semver-checks {} | patch | no lint failed |", checks::PINNED_VERSION)),
        "{md}"
    );
    assert!(md.contains("| public items | major | 0 removed, 1 changed,"), "{md}");
}

/// `cargo xtask schema update` as a user runs it: the API report goes into `schema/CHANGES.md`
/// below the schema diff, with cargo-semver-checks' verdict and the proposed version. The
/// scratch workspace moves its pin to a "v1.8.0" holding v1.7.0's files (the one release the
/// feature table fits), so the report finds nothing and proposes a patch.
#[cfg(unix)]
#[test]
fn schema_update_writes_the_api_report() {
    if !semver_checks_available("schema_update_writes_the_api_report") {
        return;
    }
    let ws = Path::new(env!("CARGO_TARGET_TMPDIR")).join("semver-update");
    let _ = std::fs::remove_dir_all(&ws);
    std::fs::create_dir_all(ws.join("schema")).unwrap();
    std::fs::create_dir_all(ws.join("generated")).unwrap();
    for file in ["schema/lock.json", "Cargo.toml", "generated/Cargo.toml"] {
        std::fs::copy(workspace().join(file), ws.join(file)).unwrap();
    }
    // cargo-semver-checks builds in `target/semver/target`: share the workspace's, whose
    // dependencies the other tests have built.
    std::fs::create_dir_all(workspace().join("target")).unwrap();
    std::os::unix::fs::symlink(workspace().join("target").canonicalize().unwrap(), ws.join("target")).unwrap();
    let lock = xtask::schema::Lock::read(&ws.join("schema/lock.json")).unwrap();
    xtask::schema::fetch(&lock, Some(&common::release_dir(&lock.tag)), &ws.join("schema/json")).unwrap();
    let next = ws.join("v1.8.0");
    for file in lock.files.keys() {
        std::fs::create_dir_all(next.join(file).parent().unwrap()).unwrap();
        std::fs::copy(common::release_dir(&lock.tag).join(file), next.join(file)).unwrap();
    }
    let options = xtask::schema::UpdateOptions {
        schema_version: Some("1.22.0".into()),
        commit: Some("abc".into()),
        semver_checks: Tool::Run,
        ..Default::default()
    };
    xtask::schema::update(&ws, "v1.8.0", &next, &options).expect("updates");
    let changes = std::fs::read_to_string(ws.join("schema/CHANGES.md")).unwrap();
    let current = semver::crate_version(&workspace()).unwrap();
    for expected in [
        format!("# Schema changes\n\nFrom `{}` to `v1.8.0`.", lock.tag),
        format!("# Rust API of `acp-types`\n\nFrom `{}` to `v1.8.0`", lock.tag),
        format!("**Proposed version: `{current}` → `{}`** (patch", current.bump(Level::Patch)),
        format!("| cargo-semver-checks {} | patch | no lint failed |", checks::PINNED_VERSION),
        "| public items | patch | 0 removed, 0 changed, 0 added |".to_owned(),
    ] {
        assert!(changes.contains(&expected), "{expected}\nnot in:\n{changes}");
    }
}

/// A crate of one `src/lib.rs`.
fn small_crate(label: &str, lib: &str) -> Side {
    let manifest =
        "[package]\nname = \"semver-cases\"\nversion = \"0.0.0\"\nedition = \"2024\"\npublish = false\n\n[workspace]\n";
    Side {
        label: label.to_owned(),
        files: vec![
            OutputFile { path: "Cargo.toml".into(), contents: manifest.to_owned() },
            OutputFile { path: "src/lib.rs".into(), contents: lib.to_owned() },
        ],
    }
}

const OLD: &str = r#"
pub struct RemovedStruct;
pub struct ExhaustiveStruct { pub a: u8 }
#[non_exhaustive]
pub struct OpenStruct { pub a: u8 }
pub enum ExhaustiveEnum { A }
#[non_exhaustive]
pub enum OpenEnum { A }
#[non_exhaustive]
pub struct WithConstructor { pub a: u8 }
impl WithConstructor {
    pub fn new(a: u8) -> Self { WithConstructor { a } }
}
pub trait RequiredMethodTrait { fn a(&self); }
pub trait ProvidedMethodTrait { fn a(&self); }
#[non_exhaustive]
pub struct RetypedField { pub a: u8 }
#[derive(Default)]
pub struct LostDefault { pub a: u8 }
#[derive(Clone)]
pub struct LostClone { pub a: u8 }
pub struct Unchanged { pub a: u8 }
"#;

const NEW: &str = r#"
pub struct ExhaustiveStruct { pub a: u8, pub b: u8 }
#[non_exhaustive]
pub struct OpenStruct { pub a: u8, pub b: u8 }
pub enum ExhaustiveEnum { A, B }
#[non_exhaustive]
pub enum OpenEnum { A, B }
#[non_exhaustive]
pub struct WithConstructor { pub a: u8, pub b: u8 }
impl WithConstructor {
    pub fn new(a: u8, b: u8) -> Self { WithConstructor { a, b } }
}
pub trait RequiredMethodTrait { fn a(&self); fn b(&self); }
pub trait ProvidedMethodTrait { fn a(&self); fn b(&self) {} }
#[non_exhaustive]
pub struct RetypedField { pub a: String }
pub struct LostDefault { pub a: u8 }
pub struct LostClone { pub a: u8 }
pub struct Unchanged { pub a: u8 }
pub struct AddedStruct;
"#;

/// Each kind of change the generator's output can go through, in one crate pair: the item
/// list's level next to the lint cargo-semver-checks reports on the same item. Where the tool
/// has a lint, both call the change major; additions are minor for the list and nothing for
/// the tool (it does not look at them). Two breaking changes only the list sees: a field whose
/// type changed (the tool has no lint for types) and a lost `#[derive(Default)]`
/// (cargo-semver-checks 0.51 on rustc 1.95 reports a lost `Clone`, not a lost `Default`) —
/// both happen to generated types when a schema field changes type or becomes required.
#[test]
fn item_rules_measured_against_cargo_semver_checks() {
    let (old, new) = (small_crate("cases-old", OLD), small_crate("cases-new", NEW));
    let skipped = semver::report(&workspace(), &old, &new, Tool::Skip).expect("reports");
    let level = |ns, path| find(&skipped.changes, ns, path).level;
    // (the name the tool's findings use, the item list's level, the expected level, the tool's lint)
    let cases = [
        ("RemovedStruct", level(Namespace::Type, "RemovedStruct"), Level::Major, Some("struct_missing")),
        (
            "ExhaustiveStruct",
            level(Namespace::Field, "ExhaustiveStruct::b"),
            Level::Major,
            Some("constructible_struct_adds_field"),
        ),
        ("OpenStruct", level(Namespace::Field, "OpenStruct::b"), Level::Minor, None),
        ("ExhaustiveEnum", level(Namespace::Variant, "ExhaustiveEnum::B"), Level::Major, Some("enum_variant_added")),
        ("OpenEnum", level(Namespace::Variant, "OpenEnum::B"), Level::Minor, None),
        (
            "WithConstructor::new",
            level(Namespace::Function, "WithConstructor::new"),
            Level::Major,
            Some("method_parameter_count_changed"),
        ),
        (
            "RequiredMethodTrait",
            level(Namespace::TraitMethod, "RequiredMethodTrait::b"),
            Level::Major,
            Some("trait_method_added"),
        ),
        ("ProvidedMethodTrait", level(Namespace::TraitMethod, "ProvidedMethodTrait::b"), Level::Minor, None),
        (
            "LostClone",
            level(Namespace::Impl, "impl Clone for LostClone"),
            Level::Major,
            Some("derive_trait_impl_removed"),
        ),
        ("AddedStruct", level(Namespace::Type, "AddedStruct"), Level::Minor, None),
        // Only the item list:
        ("RetypedField", level(Namespace::Field, "RetypedField::a"), Level::Major, None),
        ("LostDefault", level(Namespace::Impl, "impl Default for LostDefault"), Level::Major, None),
    ];
    for (name, level, expected, _) in cases {
        assert_eq!(level, expected, "{name}");
    }
    let retyped = find(&skipped.changes, Namespace::Field, "RetypedField::a");
    assert_eq!((retyped.before.as_deref(), retyped.after.as_deref()), (Some("u8"), Some("String")));
    assert!(skipped.changes.iter().all(|c| !c.path.contains("Unchanged")), "{:#?}", skipped.changes);

    if !semver_checks_available("item_rules_measured_against_cargo_semver_checks") {
        return;
    }
    let report = semver::report(&workspace(), &old, &new, Tool::Run).expect("reports");
    let verdict = report.semver_checks.as_ref().expect("ran");
    for (name, _, _, lint) in cases {
        let ids = lint_ids_naming(verdict, name);
        match lint {
            Some(lint) => assert_eq!(ids, [lint], "{name}"),
            None => assert!(ids.is_empty(), "{name}: cargo-semver-checks reported {ids:?}"),
        }
    }
    assert!(lint_ids_naming(verdict, "Unchanged").is_empty());
    assert_eq!((verdict.level, report.items_level, report.level), (Level::Major, Level::Major, Level::Major));
}

#[test]
fn the_command_line_prints_the_report() {
    let xtask = |args: &[&str]| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_xtask")).args(args).output().unwrap();
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (ok, stdout, stderr) =
        xtask(&["semver", "--from", "v1.3.0", "--to", "v1.7.0", "--skip-semver-checks", "--json"]);
    assert!(ok, "{stderr}");
    let json: serde_json::Value = serde_json::from_str(&stdout).expect("JSON");
    assert_eq!((json["old"].as_str(), json["new"].as_str()), (Some("v1.3.0"), Some("v1.7.0")));
    assert_eq!((json["level"].as_str(), json["items_level"].as_str()), (Some("major"), Some("major")));
    assert!(json["semver_checks"].is_null());
    let other = json["changes"].as_array().unwrap().iter().find(|c| c["path"] == "AuthMethod::Other").expect("listed");
    assert_eq!((other["kind"].as_str(), other["namespace"].as_str()), (Some("changed"), Some("variant")));

    let (ok, _, stderr) = xtask(&["semver", "--to", "v9.9.9", "--skip-semver-checks"]);
    assert!(!ok);
    assert!(stderr.contains("no release `v9.9.9` under"), "{stderr}");
}

#[test]
fn versions_bump_by_cargo_rules() {
    let v = |s| Version::parse(s).unwrap();
    assert_eq!(v("0.1.0").bump(Level::Major), v("0.2.0"));
    assert_eq!(v("0.1.3").bump(Level::Minor), v("0.1.4"));
    assert_eq!(v("0.1.3").bump(Level::Patch), v("0.1.4"));
    assert_eq!(v("1.4.2").bump(Level::Major), v("2.0.0"));
    assert_eq!(v("1.4.2").bump(Level::Minor), v("1.5.0"));
    assert_eq!(v("1.4.2").bump(Level::Patch), v("1.4.3"));
    for bad in ["1.2", "1.2.3-rc.1", "x.y.z", ""] {
        assert!(Version::parse(bad).is_err(), "{bad}");
    }
}

#[test]
fn the_install_script_pins_the_version_the_xtask_expects() {
    let script = std::fs::read_to_string(workspace().join(checks::INSTALL_SCRIPT)).unwrap();
    assert!(script.contains(&format!("\nversion={}\n", checks::PINNED_VERSION)), "{script}");
    assert!(script.contains("cargo install --locked cargo-semver-checks --version \"$version\""), "{script}");
}

#[test]
fn a_verdict_is_read_from_cargo_semver_checks_output() {
    let stderr = "     Parsing semver-cases v0.1.0 (current)\n\
                  \x20       FAIL [   0.001s]        major        struct_missing\n\
                  \x20       PASS [   0.000s]        major        enum_missing\n\
                  \x20       WARN [   0.000s]        minor        type_marked_deprecated\n\
                  \x20    Summary semver requires new major version: 1 major and 0 minor checks failed\n";
    let stdout = "\n--- failure struct_missing: pub struct removed or renamed ---\n\nDescription:\nA struct is gone.\n\
                  \x20       ref: https://doc.rust-lang.org/cargo/reference/semver.html#item-remove\n\n\
                  Failed in:\n  struct semver_cases::RemovedStruct, previously in file src/lib.rs:2\n\n\
                  --- warning type_marked_deprecated: type #[deprecated] added ---\n\nFailed in:\n  struct Old in src/lib.rs:9\n";
    let verdict = checks::parse(stdout, stderr, "0.51.0").expect("a summary");
    assert_eq!(verdict.level, Level::Major);
    assert_eq!(verdict.lints.len(), 2);
    assert_eq!(
        (verdict.lints[0].id.as_str(), verdict.lints[0].level, verdict.lints[0].required),
        ("struct_missing", Level::Major, true)
    );
    assert_eq!(verdict.lints[0].findings, ["struct semver_cases::RemovedStruct, previously in file src/lib.rs:2"]);
    assert_eq!((verdict.lints[1].level, verdict.lints[1].required), (Level::Minor, false));
    assert!(checks::parse("", "error: no manifest", "0.51.0").is_none(), "no summary, no verdict");
}
