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
    if failures.is_empty() {
        println!("{} passed, 0 failed", tags.len());
        Ok(())
    } else {
        Err(format!("{} of {} releases failed: {}", failures.len(), tags.len(), failures.join(", ")))
    }
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
        let out = Command::new(env!("CARGO"))
            .current_dir(&crate_dir)
            .args(["check", "--quiet", "--all-targets"])
            .args(features)
            .env("RUSTFLAGS", "-D warnings")
            .env("CARGO_TARGET_DIR", scratch.join("target"))
            .output()
            .map_err(|e| format!("cannot run cargo: {e}"))?;
        if !out.status.success() {
            let stderr = String::from_utf8_lossy(&out.stderr);
            let head: Vec<&str> = stderr.lines().take(40).collect();
            return Err(format!("cargo check {} failed:\n{}", features.join(" "), head.join("\n")));
        }
    }
    Ok(format!("{} files, {lines} lines, compiles with all features and with none", files.len()))
}
