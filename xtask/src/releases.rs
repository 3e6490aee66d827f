//! `cargo xtask check-releases`: every upstream release generates into a scratch crate that
//! compiles without warnings, with all features and with none. This is how the generator is
//! held to "a schema it cannot handle fails with a message, never a panic, never bad code".

use std::path::Path;
use std::process::Command;

use crate::codegen::{self, Gating, Settings};

/// The release whose unstable surface the feature table describes.
const PINNED_TABLE_TAG: &str = "v1.7.0";

pub fn check_all(workspace: &Path, releases: &Path) -> Result<(), String> {
    let mut tags: Vec<String> = std::fs::read_dir(releases)
        .map_err(|e| format!("cannot list {}: {e}", releases.display()))?
        .filter_map(|e| e.ok())
        .filter(|e| e.path().join("v1/schema.json").exists())
        .filter_map(|e| e.file_name().into_string().ok())
        .collect();
    tags.sort();
    if tags.is_empty() {
        return Err(format!("no release folders under {}", releases.display()));
    }
    let scratch = workspace.join("target/release-check");
    let mut failures = Vec::new();
    for tag in &tags {
        match check_one(workspace, &releases.join(tag), tag, &scratch) {
            Ok(summary) => println!("ok   {tag}: {summary}"),
            Err(e) => {
                println!("FAIL {tag}: {e}");
                failures.push(tag.clone());
            }
        }
    }
    let mut checked = tags.len();
    for (label, features) in [("vendor (stable)", vec![]), ("vendor (unstable)", vec!["unstable".to_owned()])] {
        checked += 1;
        match check_vendor(workspace, &scratch, &features) {
            Ok(summary) => println!("ok   {label}: {summary}"),
            Err(e) => {
                println!("FAIL {label}: {e}");
                failures.push(label.to_owned());
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
fn check_vendor(workspace: &Path, scratch: &Path, features: &[String]) -> Result<String, String> {
    let lock = crate::schema::Lock::read(&workspace.join("schema/lock.json")).map_err(|e| e.to_string())?;
    let settings = Settings::new(workspace.join("schema/json"), &lock.tag);
    let text = codegen::vendor(&settings, features, true, &[]).map_err(|e| e.to_string())?;
    let name = if features.is_empty() { "vendor-stable" } else { "vendor-unstable" };
    let crate_dir = scratch.join(name);
    std::fs::create_dir_all(crate_dir.join("src")).map_err(|e| e.to_string())?;
    // The vendored file as a module of a user's crate, as a project would keep it.
    std::fs::write(crate_dir.join("src/acp.rs"), &text).map_err(|e| e.to_string())?;
    std::fs::write(crate_dir.join("src/lib.rs"), "//! A crate vendoring the ACP types.\npub mod acp;\n")
        .map_err(|e| e.to_string())?;
    let manifest = format!(
        "[package]\nname = \"{name}\"\nversion = \"0.0.0\"\nedition = \"2021\"\npublish = false\n\n\
         [dependencies]\nserde = {{ version = \"1\", features = [\"derive\"] }}\nserde_json = \"1\"\n\n[workspace]\n"
    );
    std::fs::write(crate_dir.join("Cargo.toml"), manifest).map_err(|e| e.to_string())?;
    std::fs::copy(workspace.join("Cargo.lock"), crate_dir.join("Cargo.lock")).map_err(|e| e.to_string())?;
    cargo_check(&crate_dir, scratch, &[])?;
    Ok(format!("{} lines, compiles standalone (edition 2021, serde + serde_json only)", text.lines().count()))
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

fn check_one(workspace: &Path, dir: &Path, tag: &str, scratch: &Path) -> Result<String, String> {
    let mut settings = Settings::new(dir, tag);
    settings.gating = if tag == PINNED_TABLE_TAG { Gating::Table } else { Gating::AllInOne };
    settings.package = format!("acp-types-{}", tag.replace('.', "-"));
    settings.standalone = true;
    let files = codegen::generate(&settings).map_err(|e| e.to_string())?;
    let crate_dir = scratch.join(tag);
    let _ = std::fs::remove_dir_all(crate_dir.join("src"));
    codegen::write_or_check(&crate_dir, &files, false).map_err(|e| e.to_string())?;
    // Resolve serde and serde_json exactly as the workspace does, without the network.
    std::fs::copy(workspace.join("Cargo.lock"), crate_dir.join("Cargo.lock")).map_err(|e| e.to_string())?;
    let lines: usize = files.iter().map(|f| f.contents.lines().count()).sum();
    for features in [&["--all-features"][..], &["--no-default-features"][..]] {
        cargo_check(&crate_dir, scratch, features)?;
    }
    Ok(format!("{} files, {lines} lines, compiles with all features and with none", files.len()))
}
