//! Running cargo-semver-checks on two generated crates (written to scratch folders) and reading
//! its verdict: which lints failed, at which level, on which items.
//!
//! The tool is installed by `.ci/install-cargo-semver-checks`, which pins [`PINNED_VERSION`];
//! another installed version is used with a warning in the report, a missing one is an error
//! saying how to install it.

use std::path::Path;
use std::process::Command;

use serde::Serialize;

use super::Level;

/// The cargo-semver-checks version the project checks with (and `.ci/install-cargo-semver-checks`
/// installs): 0.51 reads the rustdoc JSON of rustc 1.95 (format 57) and newer.
pub const PINNED_VERSION: &str = "0.51.0";

/// The script that installs [`PINNED_VERSION`], relative to the workspace root.
pub const INSTALL_SCRIPT: &str = ".ci/install-cargo-semver-checks";

/// What cargo-semver-checks said about two crates.
#[derive(Debug, Clone, Serialize)]
pub struct Verdict {
    /// `0.51.0`.
    pub version: String,
    /// The smallest bump its failed lints allow: `major` for a breaking change, `minor` for a
    /// lint that asks for a minor release, `patch` when no lint failed (cargo-semver-checks
    /// does not look at additions: it cannot tell minor from patch on its own).
    pub level: Level,
    /// The lints that failed or warned.
    pub lints: Vec<Lint>,
    /// Its summary line: `semver requires new major version: 3 major and 0 minor checks failed`.
    pub summary: String,
}

/// One failed (or warned) lint.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Lint {
    /// `enum_variant_missing`.
    pub id: String,
    /// `pub enum variant removed or renamed`.
    pub name: String,
    /// `major` or `minor`.
    pub level: Level,
    /// `false` for a warning (the lint suggests the level rather than requires it).
    pub required: bool,
    /// One line per finding: `variant AuthMethod::Agent, previously in file ...`.
    pub findings: Vec<String>,
}

/// The installed cargo-semver-checks' version, or why it cannot run.
pub fn installed() -> Result<String, String> {
    let out = Command::new(env!("CARGO")).args(["semver-checks", "--version"]).output();
    let how = format!(
        "install the version this project pins with `bash {INSTALL_SCRIPT}` (it runs `cargo install --locked \
         cargo-semver-checks --version {PINNED_VERSION}`, about 10 minutes on 2 cores)"
    );
    match out {
        Ok(out) if out.status.success() => {
            let text = String::from_utf8_lossy(&out.stdout);
            let version = text.trim().rsplit(' ').next().unwrap_or_default().to_owned();
            if version.is_empty() {
                return Err(format!("`cargo semver-checks --version` printed `{}`; {how}", text.trim()));
            }
            Ok(version)
        }
        Ok(out) => Err(format!(
            "cargo-semver-checks is not installed (`cargo semver-checks --version`: {}); {how}",
            String::from_utf8_lossy(&out.stderr).lines().next().unwrap_or("failed").trim()
        )),
        Err(e) => Err(format!("cannot run cargo ({e}); {how}")),
    }
}

/// Runs cargo-semver-checks with `old` as the baseline and `new` as the current crate (two
/// crate folders), building in `target_dir`. Features: its default choice, every feature but
/// the `unstable*` ones. The release is declared a patch, so that every lint asking for more
/// (a minor or a major release) fails and says so.
pub fn run(old: &Path, new: &Path, target_dir: &Path, version: &str) -> Result<Verdict, String> {
    let out = Command::new(env!("CARGO"))
        .args(["semver-checks", "check-release", "--release-type", "patch", "--color", "never", "--verbose"])
        .arg("--manifest-path")
        .arg(new.join("Cargo.toml"))
        .arg("--baseline-root")
        .arg(old)
        .env("CARGO_TARGET_DIR", target_dir)
        .env("CARGO_TERM_COLOR", "never")
        .output()
        .map_err(|e| format!("cannot run cargo semver-checks: {e}"))?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    parse(&stdout, &stderr, version).ok_or_else(|| {
        let tail: Vec<&str> = stderr.lines().rev().take(30).collect::<Vec<_>>().into_iter().rev().collect();
        format!(
            "cargo semver-checks ({}) gave no verdict; its last output:\n{}",
            out.status,
            if tail.is_empty() { stdout.trim().to_owned() } else { tail.join("\n") }
        )
    })
}

/// Reads a verdict from cargo-semver-checks' output: `--verbose` lines on stderr give each
/// lint's level (`FAIL [ 0.001s] major enum_variant_missing`), stdout has one block per failed
/// lint (`--- failure ID: NAME ---`, then its description and `Failed in:` with one finding a
/// line), and the `Summary` line on stderr the overall level. `None` without a summary.
pub fn parse(stdout: &str, stderr: &str, version: &str) -> Option<Verdict> {
    let summary = stderr.lines().find_map(|l| l.trim_start().strip_prefix("Summary "))?.trim().to_owned();
    let mut levels = std::collections::BTreeMap::new();
    for line in stderr.lines() {
        let words: Vec<&str> = line.split_whitespace().collect();
        // `FAIL [   0.001s]   major   enum_variant_missing`: the time may hold a space.
        if let [status @ ("FAIL" | "WARN"), .., category, id] = words.as_slice() {
            let level = match *category {
                "major" => Level::Major,
                "minor" => Level::Minor,
                _ => continue,
            };
            levels.insert(id.to_string(), (level, *status == "FAIL"));
        }
    }
    let mut lints: Vec<Lint> = Vec::new();
    let mut in_findings = false;
    for line in stdout.lines() {
        let header = line
            .strip_prefix("--- failure ")
            .or_else(|| line.strip_prefix("--- warning "))
            .and_then(|rest| rest.strip_suffix(" ---"));
        if let Some(header) = header {
            let (id, name) = header.split_once(": ").unwrap_or((header, ""));
            let (level, required) = levels.get(id).copied().unwrap_or((Level::Major, true));
            lints.push(Lint { id: id.to_owned(), name: name.to_owned(), level, required, findings: Vec::new() });
            in_findings = false;
        } else if line.trim() == "Failed in:" {
            in_findings = true;
        } else if in_findings && let Some(lint) = lints.last_mut() {
            let finding = line.trim();
            if finding.is_empty() {
                in_findings = false;
            } else {
                lint.findings.push(finding.to_owned());
            }
        }
    }
    let level = if summary.contains("requires new major version") {
        Level::Major
    } else if summary.contains("requires new minor version") {
        Level::Minor
    } else {
        Level::Patch
    };
    Some(Verdict { version: version.to_owned(), level, lints, summary })
}
