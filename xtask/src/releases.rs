//! `cargo xtask check-releases`: every upstream release generates into a scratch crate that
//! compiles without warnings, with all features and with none. This is how the generator is
//! held to "a schema it cannot handle fails with a message, never a panic, never bad code".

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::codegen::{self, Gating, Settings};
use crate::schema::Lock;

/// The derives a vendored file is compiled with, besides none: every structural derive
/// `--derive` supports, so that one it would add where it cannot compile fails here.
const VENDOR_DERIVES: [&str; 4] = ["Eq", "Hash", "PartialOrd", "Ord"];

/// Where release folders are looked up by default, relative to the workspace root (not to the
/// current directory, so that the commands work from any folder of the workspace).
pub const DEFAULT_ROOT: &str = "../shared/acp-schema/releases";

/// The release tags under `releases`: the folders holding a `v1/schema.json`.
pub fn tags(releases: &Path) -> Result<Vec<String>, String> {
    let mut tags: Vec<String> = std::fs::read_dir(releases)
        .map_err(|e| format!("cannot list the releases folder {}: {e}", releases.display()))?
        .filter_map(|e| e.ok())
        .filter(|e| e.path().join("v1/schema.json").exists())
        .filter_map(|e| e.file_name().into_string().ok())
        .collect();
    tags.sort();
    Ok(tags)
}

/// The folder of release `tag` under `releases`, or an error naming the tags there are.
pub fn release_dir(releases: &Path, tag: &str) -> Result<PathBuf, String> {
    let dir = releases.join(tag);
    if dir.join("v1/schema.json").exists() {
        return Ok(dir);
    }
    let known = match tags(releases) {
        Ok(tags) if tags.is_empty() => "it holds no release folders (with v1/schema.json)".to_owned(),
        Ok(tags) => format!("releases there: {}", tags.join(", ")),
        Err(e) => e,
    };
    Err(format!("no release `{tag}` under {} ({known})", releases.display()))
}

/// A `diff` argument: an existing folder as given, otherwise a release tag under `releases`.
pub fn resolve(arg: &str, releases: &Path) -> Result<PathBuf, String> {
    resolve_in(arg, &[releases.to_owned()])
}

/// A release argument: an existing folder as given, otherwise a release tag under the first of
/// `roots` that has it (`v1.7.0` under the releases, `npm-sdk-2.4.0` under the newer schemas).
pub fn resolve_in(arg: &str, roots: &[PathBuf]) -> Result<PathBuf, String> {
    let path = PathBuf::from(arg);
    if path.exists() {
        return Ok(path);
    }
    if path.components().count() > 1 {
        return Err(format!("no folder {arg}"));
    }
    if let Some(dir) = roots.iter().map(|root| root.join(arg)).find(|dir| dir.join("v1/schema.json").exists()) {
        return Ok(dir);
    }
    match roots {
        [one] => release_dir(one, arg),
        _ => {
            let known: Vec<String> = roots
                .iter()
                .map(|root| match tags(root) {
                    Ok(tags) => {
                        format!("{}: {}", root.display(), if tags.is_empty() { "none".into() } else { tags.join(", ") })
                    }
                    Err(e) => e,
                })
                .collect();
            let folders: Vec<String> = roots.iter().map(|root| root.display().to_string()).collect();
            Err(format!("no release `{arg}` under {} (releases in {})", folders.join(" or "), known.join("; ")))
        }
    }
}

/// The releases under `releases` and how each is gated: the feature table describes the
/// unstable surface of the release pinned in `lock` (whichever it is), every other release has
/// its unstable items behind the one `unstable` feature.
pub fn plan(lock: &Lock, releases: &Path) -> Result<Vec<(String, Gating)>, String> {
    let tags = tags(releases)?;
    if tags.is_empty() {
        return Err(format!("no release folders (with v1/schema.json) under {}", releases.display()));
    }
    Ok(tags
        .into_iter()
        .map(|tag| {
            let gating = if tag == lock.tag { Gating::Table } else { Gating::AllInOne };
            (tag, gating)
        })
        .collect())
}

/// Where newer schemas than the releases are looked up by default (the one an official SDK
/// package ships, say), relative to the workspace root.
pub const DEFAULT_NEXT: &str = "../shared/acp-schema/next";

/// `cargo xtask check-releases`: every release under each folder of `roots` generated into a
/// scratch crate under `target/release-check` and compiled, then the pinned release vendored
/// three ways (stable, unstable, with every `--derive`); prints one line per check and fails
/// naming the checks that failed. What a release's generator could not type is listed under it.
pub fn check_all(workspace: &Path, roots: &[PathBuf]) -> Result<(), String> {
    let lock = Lock::read(&workspace.join("schema/lock.json")).map_err(|e| e.to_string())?;
    let mut plan_all = Vec::new();
    for root in roots {
        plan_all.extend(plan(&lock, root)?.into_iter().map(|(tag, gating)| (root.join(&tag), tag, gating)));
    }
    let plan = plan_all;
    let scratch = workspace.join("target/release-check");
    let mut failures = Vec::new();
    for (dir, tag, gating) in &plan {
        match check_one(workspace, dir, tag, *gating, &scratch) {
            Ok(summary) => println!("ok   {tag}: {summary}"),
            Err(e) => {
                println!("FAIL {tag}: {e}");
                failures.push(tag.clone());
            }
        }
    }
    let mut checked = plan.len();
    let unstable = vec!["unstable".to_owned()];
    let derives: Vec<String> = VENDOR_DERIVES.iter().map(|d| d.to_string()).collect();
    let vendor_checks = [
        ("vendor (stable)".to_owned(), "vendor-stable", vec![], vec![]),
        ("vendor (unstable)".to_owned(), "vendor-unstable", unstable.clone(), vec![]),
        (format!("vendor (unstable, --derive {})", VENDOR_DERIVES.join(",")), "vendor-derive", unstable, derives),
    ];
    for (label, name, features, derives) in vendor_checks {
        checked += 1;
        match check_vendor(workspace, &lock, &scratch, name, &features, &derives) {
            Ok(summary) => println!("ok   {label}: {summary}"),
            Err(e) => {
                println!("FAIL {label}: {e}");
                failures.push(label);
            }
        }
    }
    if failures.is_empty() {
        println!("{checked} passed, 0 failed");
        Ok(())
    } else {
        Err(format!("{} of {checked} checks failed: {}", failures.len(), failures.join(", ")))
    }
}

/// A vendored file (pinned release, `schema/json`) compiles on its own in a scratch crate.
fn check_vendor(
    workspace: &Path,
    lock: &Lock,
    scratch: &Path,
    name: &str,
    features: &[String],
    derives: &[String],
) -> Result<String, String> {
    let settings = Settings::new(workspace.join("schema/json"), &lock.tag);
    let vendored = codegen::vendor(&settings, features, true, derives).map_err(|e| e.to_string())?;
    let text = vendored.text;
    let crate_dir = scratch.join(name);
    std::fs::create_dir_all(crate_dir.join("src")).map_err(|e| e.to_string())?;
    // The vendored file as a module of a user's crate, as a project would keep it.
    std::fs::write(crate_dir.join("src/acp.rs"), &text).map_err(|e| e.to_string())?;
    // In a crate that forbids `unsafe` code: a vendored file has none.
    std::fs::write(
        crate_dir.join("src/lib.rs"),
        "//! A crate vendoring the ACP types.\n#![forbid(unsafe_code)]\npub mod acp;\n",
    )
    .map_err(|e| e.to_string())?;
    // And as a private module of a program, which uses none of it: no warning either.
    std::fs::write(crate_dir.join("src/main.rs"), "//! A program vendoring the ACP types.\nmod acp;\n\nfn main() {}\n")
        .map_err(|e| e.to_string())?;
    // And what a user of the file does with its helpers, run below.
    std::fs::create_dir_all(crate_dir.join("examples")).map_err(|e| e.to_string())?;
    let example = VENDORED_USE.replace("CRATE", &name.replace('-', "_"));
    std::fs::write(crate_dir.join("examples/vendored_use.rs"), example).map_err(|e| e.to_string())?;
    let manifest = format!(
        "[package]\nname = \"{name}\"\nversion = \"0.0.0\"\nedition = \"2021\"\npublish = false\n\n\
         [dependencies]\nserde = {{ version = \"1\", features = [\"derive\"] }}\nserde_json = {{ version = \"1\", features = [\"raw_value\"] }}\n\n[workspace]\n"
    );
    std::fs::write(crate_dir.join("Cargo.toml"), manifest).map_err(|e| e.to_string())?;
    std::fs::copy(workspace.join("Cargo.lock"), crate_dir.join("Cargo.lock")).map_err(|e| e.to_string())?;
    cargo_check(&crate_dir, scratch, &[])?;
    // Running it takes a build; once is enough (the helpers do not depend on the features).
    let ran = name == "vendor-stable";
    if ran {
        run_example(&crate_dir, scratch, "vendored_use")?;
    }
    let mut summary = format!(
        "{} lines, compiles standalone (edition 2021, serde + serde_json with `raw_value` only, \
         `forbid(unsafe_code)`)",
        text.lines().count()
    );
    if ran {
        summary.push_str("; its `decode`, `Nullable` and `lossless` work");
    }
    for note in &vendored.notes {
        summary.push_str(&format!("\n     {note}"));
    }
    Ok(summary)
}

/// A program using a vendored file's `decode` (errors with a JSON path), `Nullable` and
/// `lossless` (a change that keeps unknown members), as the README's vendoring section says a
/// project can; `CRATE` is the scratch crate's name. The generated crate's docs show the same
/// program (see `codegen::lib_rs`).
const VENDORED_USE: &str = include_str!("../templates/vendored_use.rs");

fn run_example(crate_dir: &Path, scratch: &Path, example: &str) -> Result<(), String> {
    let out = Command::new(env!("CARGO"))
        .current_dir(crate_dir)
        .args(["run", "--quiet", "--example", example])
        // The flags of the check, so that its build of the dependencies is reused.
        .env("RUSTFLAGS", "-D warnings")
        .env("CARGO_TARGET_DIR", scratch.join("target"))
        .output()
        .map_err(|e| format!("cannot run cargo: {e}"))?;
    if out.status.success() {
        return Ok(());
    }
    let stderr = String::from_utf8_lossy(&out.stderr);
    let head: Vec<&str> = stderr.lines().take(40).collect();
    Err(format!("cargo run --example {example} failed:\n{}", head.join("\n")))
}

fn cargo_check(crate_dir: &Path, scratch: &Path, args: &[&str]) -> Result<(), String> {
    let out = Command::new(env!("CARGO"))
        .current_dir(crate_dir)
        .args(["check", "--quiet", "--all-targets"])
        .args(args)
        .env("RUSTFLAGS", "-D warnings")
        .env("CARGO_TARGET_DIR", scratch.join("target"))
        .output()
        .map_err(|e| format!("cannot run cargo: {e}"))?;
    if out.status.success() {
        return Ok(());
    }
    let stderr = String::from_utf8_lossy(&out.stderr);
    let head: Vec<&str> = stderr.lines().take(40).collect();
    Err(format!("cargo check {} failed:\n{}", args.join(" "), head.join("\n")))
}

fn check_one(workspace: &Path, dir: &Path, tag: &str, gating: Gating, scratch: &Path) -> Result<String, String> {
    let mut settings = Settings::new(dir, tag);
    settings.gating = gating;
    settings.package = format!("acp-types-{}", tag.replace('.', "-"));
    settings.standalone = true;
    let (files, untyped) = codegen::generate_reported(&settings).map_err(|e| e.to_string())?;
    let crate_dir = scratch.join(tag);
    let _ = std::fs::remove_dir_all(crate_dir.join("src"));
    codegen::write_or_check(&crate_dir, &files, false).map_err(|e| e.to_string())?;
    // Resolve serde and serde_json exactly as the workspace does, without the network.
    std::fs::copy(workspace.join("Cargo.lock"), crate_dir.join("Cargo.lock")).map_err(|e| e.to_string())?;
    let lines: usize = files.iter().map(|f| f.contents.lines().count()).sum();
    for features in [&["--all-features"][..], &["--no-default-features"][..]] {
        cargo_check(&crate_dir, scratch, features)?;
    }
    let mut summary = format!("{} files, {lines} lines, compiles with all features and with none", files.len());
    if !untyped.is_empty() {
        summary.push_str(&format!("; {} definition(s) not typed (raw JSON):", untyped.len()));
        for definition in &untyped {
            summary.push_str(&format!("\n     {definition}"));
        }
    }
    Ok(summary)
}
