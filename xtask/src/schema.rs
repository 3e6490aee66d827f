//! The pinned upstream schema: `schema/lock.json` names where the files come from and the
//! sha256 of every file; `schema fetch` fills `schema/json/` from a local folder, from an
//! upstream release's assets, or from a published npm package (the official TypeScript SDK
//! ships the schema it is built from), verifying each file against the lock.
//!
//! Two sources, one lock: an upstream release (`schema_version`, `release_url`: the GitHub
//! release `schema-v{version}` whose assets are the files) or an npm package (`npm`: package and
//! version; `npm pack` fetches it through the registry the maintainer's npm is set up for).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::codegen::load::sha256_hex;

/// `schema/lock.json`: the pinned release.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Lock {
    /// The upstream repository (`owner/name`).
    pub upstream: String,
    /// The release tag, e.g. `v1.7.0`.
    pub tag: String,
    /// The upstream commit of the tag (`unknown` when `schema update` was not told).
    pub commit: String,
    /// The version of the schema artifacts inside the release: upstream publishes them as the
    /// assets of its GitHub release `schema-v{schema_version}`. `None` for a package's schema.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schema_version: Option<String>,
    /// Where the release assets are downloaded from: `{release_url}/{asset}`, with the asset
    /// named by [`asset_name`]. `None` for a package's schema.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub release_url: Option<String>,
    /// The npm package whose `schema/` folder holds the files, when the pin comes from one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub npm: Option<NpmPackage>,
    /// `v1/schema.json` → sha256 (hex).
    pub files: BTreeMap<String, String>,
}

/// A published npm package that ships the schema files under `schema/` (`schema/v1/schema.json`,
/// ...), as the official TypeScript SDK does.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NpmPackage {
    /// The package name.
    pub package: String,
    /// The exact version.
    pub version: String,
}

/// The official TypeScript SDK, whose package ships the schema it is built from.
pub const OFFICIAL_NPM_PACKAGE: &str = "@agentclientprotocol/sdk";

impl NpmPackage {
    /// The official SDK's package at `version`.
    pub fn official(version: &str) -> NpmPackage {
        NpmPackage { package: OFFICIAL_NPM_PACKAGE.to_owned(), version: version.to_owned() }
    }

    /// The tag a pin from this package gets: `npm-sdk-2.4.0` for the official SDK 2.4.0 (the
    /// name of its folder under `../shared/acp-schema/next`), `npm-{name}-{version}` otherwise.
    pub fn tag(&self) -> String {
        if self.package == OFFICIAL_NPM_PACKAGE {
            format!("npm-sdk-{}", self.version)
        } else {
            let name = self.package.trim_start_matches('@').replace('/', "-");
            format!("npm-{name}-{}", self.version)
        }
    }

    /// Unpacks the package into `dir` with `npm pack` and `tar` (both on a maintainer's and
    /// CI's machines; no HTTP or archive code in the xtask), and returns the folder holding its
    /// `v1/` and `v2/` schema folders.
    pub fn unpack(&self, dir: &Path) -> Result<PathBuf, SchemaError> {
        let spec = format!("{}@{}", self.package, self.version);
        let fail = |reason: String| SchemaError::Npm { spec: spec.clone(), reason };
        std::fs::create_dir_all(dir).map_err(|source| SchemaError::Write { path: dir.to_owned(), source })?;
        let packed = std::process::Command::new("npm")
            .args(["pack", "--silent", &spec, "--pack-destination"])
            .arg(dir)
            .output()
            .map_err(|e| fail(format!("cannot run npm: {e}")))?;
        if !packed.status.success() {
            return Err(fail(String::from_utf8_lossy(&packed.stderr).trim().to_owned()));
        }
        let tarball = String::from_utf8_lossy(&packed.stdout).lines().last().unwrap_or_default().trim().to_owned();
        if tarball.is_empty() {
            return Err(fail("npm pack named no tarball".into()));
        }
        let unpacked = std::process::Command::new("tar")
            .arg("xzf")
            .arg(dir.join(&tarball))
            .arg("-C")
            .arg(dir)
            .output()
            .map_err(|e| fail(format!("cannot run tar: {e}")))?;
        if !unpacked.status.success() {
            return Err(fail(format!("tar: {}", String::from_utf8_lossy(&unpacked.stderr).trim())));
        }
        let schema = dir.join("package/schema");
        if !schema.join("v1/schema.json").exists() {
            return Err(fail("the package has no schema/v1/schema.json".into()));
        }
        Ok(schema)
    }
}

/// Why reading the lock or fetching the pinned files failed.
#[derive(Debug, thiserror::Error)]
pub enum SchemaError {
    /// A file could not be read.
    #[error("cannot read {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The lock file does not parse.
    #[error("{path} is not a valid lock file: {source}")]
    Lock {
        /// The lock file.
        path: PathBuf,
        /// The JSON error.
        source: serde_json::Error,
    },
    /// A file does not have the sha256 the lock pins.
    #[error("{file}: sha256 {actual} does not match {expected} pinned in schema/lock.json (release {tag})")]
    Mismatch {
        /// The file, as the lock names it (`v1/schema.json`).
        file: String,
        /// Its sha256.
        actual: String,
        /// The pinned sha256.
        expected: String,
        /// The pinned release.
        tag: String,
    },
    /// A release asset could not be downloaded.
    #[error(
        "cannot download {url}: {reason}\n\
         The machine may be offline. Either fetch from a local copy of the release:\n    \
         cargo xtask schema fetch --from ../shared/acp-schema/releases/{tag}\n\
         or retry online (the files are the assets of the upstream release listed in schema/lock.json)."
    )]
    Download {
        /// The asset's address.
        url: String,
        /// The pinned release.
        tag: String,
        /// What `curl` said, or why it could not run.
        reason: String,
    },
    /// An npm package could not be fetched or unpacked.
    #[error(
        "cannot fetch the npm package {spec}: {reason}\n\
         `schema fetch` runs `npm pack` (npm must be installed and reach its registry); offline, fetch \
         from a copy of the package's schema/ folder with --from DIR"
    )]
    Npm {
        /// `package@version`.
        spec: String,
        /// What npm or tar said.
        reason: String,
    },
    /// The lock names no source to download from.
    #[error("schema/lock.json names neither a release_url nor an npm package for {tag}: fetch with --from DIR")]
    NoSource {
        /// The pinned release.
        tag: String,
    },
    /// A fetched file or its folder could not be written.
    #[error("cannot write {path}: {source}")]
    Write {
        /// The file or folder.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
}

impl Lock {
    /// Reads and parses the lock file at `path`.
    pub fn read(path: &Path) -> Result<Lock, SchemaError> {
        let text =
            std::fs::read_to_string(path).map_err(|source| SchemaError::Read { path: path.to_owned(), source })?;
        serde_json::from_str(&text).map_err(|source| SchemaError::Lock { path: path.to_owned(), source })
    }

    /// Checks every pinned file under `dir` against its sha256.
    pub fn verify_dir(&self, dir: &Path) -> Result<(), SchemaError> {
        for file in self.files.keys() {
            let path = dir.join(file);
            let bytes = std::fs::read(&path).map_err(|source| SchemaError::Read { path: path.clone(), source })?;
            self.verify(file, &bytes)?;
        }
        Ok(())
    }

    fn verify(&self, file: &str, bytes: &[u8]) -> Result<(), SchemaError> {
        let actual = sha256_hex(bytes);
        match self.files.get(file) {
            Some(expected) if *expected == actual => Ok(()),
            Some(expected) => Err(SchemaError::Mismatch {
                file: file.to_owned(),
                actual,
                expected: expected.clone(),
                tag: self.tag.clone(),
            }),
            None => Ok(()),
        }
    }
}

/// Fills `out` with the pinned files, from `from` (a release folder), or from the source the
/// lock names: the npm package (unpacked in a folder beside `out`), else the release's assets.
pub fn fetch(lock: &Lock, from: Option<&Path>, out: &Path) -> Result<(), SchemaError> {
    let scratch = out.with_file_name("npm-package");
    let from = match (from, &lock.npm) {
        (Some(dir), _) => Some(dir.to_owned()),
        (None, Some(package)) => {
            let _ = std::fs::remove_dir_all(&scratch);
            Some(package.unpack(&scratch)?)
        }
        (None, None) => None,
    };
    let fetched = copy_or_download(lock, from.as_deref(), out);
    let _ = std::fs::remove_dir_all(&scratch);
    fetched
}

fn copy_or_download(lock: &Lock, from: Option<&Path>, out: &Path) -> Result<(), SchemaError> {
    for file in lock.files.keys() {
        let bytes = match from {
            Some(dir) => {
                let path = dir.join(file);
                std::fs::read(&path).map_err(|source| SchemaError::Read { path, source })?
            }
            None => download(lock, file)?,
        };
        lock.verify(file, &bytes)?;
        let path = out.join(file);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(|source| SchemaError::Write { path: parent.to_owned(), source })?;
        }
        std::fs::write(&path, bytes).map_err(|source| SchemaError::Write { path, source })?;
    }
    Ok(())
}

/// The name of the release asset holding the pinned file `file`. Release assets are flat, so
/// the `vN/` folder of the lock cannot be part of the URL: upstream's release workflow uploads
/// the v1 files under their own names (`v1/schema.unstable.json` → `schema.unstable.json`) and
/// the files of another protocol version with the version before the extension or the
/// `.unstable` suffix (`v2/schema.unstable.json` → `schema.v2.unstable.json`), as its
/// repository once named them.
pub fn asset_name(file: &str) -> String {
    let Some((version, name)) = file.split_once('/') else { return file.to_owned() };
    if version == "v1" {
        return name.to_owned();
    }
    let (stem, ext) = name.split_once('.').unwrap_or((name, ""));
    if ext.is_empty() { format!("{stem}.{version}") } else { format!("{stem}.{version}.{ext}") }
}

/// The release address upstream publishes the schema artifacts of version `schema_version` at.
pub fn default_release_url(upstream: &str, schema_version: &str) -> String {
    format!("https://github.com/{upstream}/releases/download/schema-v{schema_version}")
}

/// Downloads one release asset with `curl`, which every developer machine and CI image has;
/// keeping HTTP out of the xtask's dependencies keeps its build small.
fn download(lock: &Lock, file: &str) -> Result<Vec<u8>, SchemaError> {
    let release_url = lock.release_url.as_deref().ok_or_else(|| SchemaError::NoSource { tag: lock.tag.clone() })?;
    let url = format!("{}/{}", release_url.trim_end_matches('/'), asset_name(file));
    let fail = |reason: String| SchemaError::Download { url: url.clone(), tag: lock.tag.clone(), reason };
    let output = std::process::Command::new("curl")
        .args(["--fail", "--silent", "--show-error", "--location", "--max-time", "60", &url])
        .output()
        .map_err(|e| fail(format!("cannot run curl: {e}")))?;
    if !output.status.success() {
        return Err(fail(String::from_utf8_lossy(&output.stderr).trim().to_owned()));
    }
    Ok(output.stdout)
}

/// What `schema update` records about the release besides its files; `None` keeps the pinned
/// value when the tag stays the same.
#[derive(Debug, Clone, Default)]
pub struct UpdateOptions {
    /// The upstream commit of the release.
    pub commit: Option<String>,
    /// The version of the schema artifacts (`1.21.0` for the release `schema-v1.21.0`).
    pub schema_version: Option<String>,
    /// Where the assets are downloaded from; defaults to upstream's `schema-v{schema_version}`.
    pub release_url: Option<String>,
    /// Whether the API report runs cargo-semver-checks (the CLI does unless told not to).
    pub semver_checks: crate::semver::Tool,
    /// The npm package the files come from, recorded instead of a release.
    pub npm: Option<NpmPackage>,
}

/// The lock pinning `tag` with `files` (path → sha256), from the pinned `old` one. Nothing that
/// describes the old release is carried over to a new tag: a lock naming v1.8.0 with v1.7.0's
/// download address would make a later `schema fetch` download the wrong files.
pub fn pin(old: &Lock, tag: &str, files: BTreeMap<String, String>, options: &UpdateOptions) -> Result<Lock, String> {
    let same_tag = tag == old.tag;
    let commit = match &options.commit {
        Some(c) => c.clone(),
        None if same_tag => old.commit.clone(),
        None if options.npm.is_some() => "unknown".to_owned(),
        None => {
            eprintln!("warning: no --commit given; the lock records the upstream commit as `unknown`");
            "unknown".to_owned()
        }
    };
    // A package's schema: the package is the source, and no release address is carried over.
    let npm = options.npm.clone().or_else(|| if same_tag { old.npm.clone() } else { None });
    if let Some(npm) = &npm {
        if options.release_url.is_some() {
            return Err("--release-url is for an upstream release, not an npm package".to_owned());
        }
        let schema_version = options.schema_version.clone();
        let npm = Some(npm.clone());
        return Ok(Lock {
            upstream: old.upstream.clone(),
            tag: tag.to_owned(),
            commit,
            schema_version,
            release_url: None,
            npm,
            files,
        });
    }
    let schema_version = match &options.schema_version {
        Some(v) if v.is_empty() || v.contains(['/', ' ']) || v.starts_with('v') => {
            return Err(format!("--schema-version `{v}`: expected a version such as `1.21.0`, without the `v`"));
        }
        Some(v) => v.clone(),
        None if same_tag && old.schema_version.is_some() => old.schema_version.clone().unwrap_or_default(),
        None => {
            return Err(format!(
                "--schema-version is required when the pin moves from {} to {tag}: schema/lock.json's \
                 schema_version {} and release_url belong to {} (upstream publishes the files of a release \
                 as the assets of its `schema-v<VERSION>` GitHub release)",
                old.tag,
                old.schema_version.as_deref().unwrap_or("(none)"),
                old.tag
            ));
        }
    };
    if !same_tag && old.schema_version.as_deref() == Some(schema_version.as_str()) && files != old.files {
        return Err(format!(
            "--schema-version {schema_version} is the version pinned for {}, but the files of {tag} differ \
             from {}'s: give the version of {tag}'s schema artifacts",
            old.tag, old.tag
        ));
    }
    let release_url = match &options.release_url {
        Some(url) if !url.starts_with("https://") && !url.starts_with("http://") && !url.starts_with("file://") => {
            return Err(format!("--release-url `{url}`: expected an http(s):// or file:// address"));
        }
        Some(url) => url.trim_end_matches('/').to_owned(),
        None if old.schema_version.as_deref() == Some(schema_version.as_str()) && same_tag => {
            old.release_url.clone().unwrap_or_else(|| default_release_url(&old.upstream, &schema_version))
        }
        None => default_release_url(&old.upstream, &schema_version),
    };
    Ok(Lock {
        upstream: old.upstream.clone(),
        tag: tag.to_owned(),
        commit,
        schema_version: Some(schema_version),
        release_url: Some(release_url),
        npm: None,
        files,
    })
}

/// The changelog entry of a move from `old` to `new`: the proposed version as its heading, and
/// the reports (`changes`) under it, their headings one level down.
pub fn changelog_entry(version: &str, old: &str, new: &str, changes: &str) -> String {
    let mut entry = format!(
        "## {version} (proposed): regenerated from schema {new}\n\nThe bindings follow schema `{new}` \
         (before: `{old}`). Drafted by `cargo xtask schema update`; the version is the one its API \
         report proposes.\n"
    );
    for line in changes.lines() {
        entry.push('\n');
        if line.starts_with('#') {
            entry.push_str("##");
        }
        entry.push_str(line);
    }
    entry.push('\n');
    entry
}

/// `changelog` with `entry` first under its title (the title is written when there is none).
pub fn with_entry(changelog: &str, entry: &str) -> String {
    const TITLE: &str = "# Changelog of acp-types\n\nEach entry: the schema the bindings were generated from, what changed in it, and what that did to the crate's API.\n";
    let rest = changelog.strip_prefix(TITLE).unwrap_or(changelog).trim_start_matches('\n');
    if rest.is_empty() { format!("{TITLE}\n{entry}") } else { format!("{TITLE}\n{entry}\n{rest}") }
}

/// `cargo xtask schema update`: everything is generated and checked in memory first, so a
/// release the generator cannot handle (or the feature table does not describe) changes nothing.
/// `schema/CHANGES.md` gets the schema diff and the API report ([`crate::semver`]), with the
/// proposed version of the generated crate, and `generated/CHANGELOG.md` a draft entry holding
/// both ([`changelog_entry`]).
pub fn update(workspace: &Path, tag: &str, from: &Path, options: &UpdateOptions) -> Result<(), String> {
    use crate::codegen::{self, Settings};

    if !from.join("v1/schema.json").exists() {
        return Err(format!(
            "{} has no v1/schema.json: pass --from with a folder holding the release's v1/ (and v2/) files",
            from.display()
        ));
    }
    let lock_path = workspace.join("schema/lock.json");
    let old_lock = Lock::read(&lock_path).map_err(|e| e.to_string())?;
    let pinned = workspace.join("schema/json");
    old_lock.verify_dir(&pinned).map_err(|e| format!("{e}\nrun `cargo xtask schema fetch` first"))?;

    let mut new_files = BTreeMap::new();
    for version in ["v1", "v2"] {
        for name in ["schema.json", "meta.json", "schema.unstable.json", "meta.unstable.json"] {
            let rel = format!("{version}/{name}");
            if let Ok(bytes) = std::fs::read(from.join(&rel)) {
                new_files.insert(rel, (sha256_hex(&bytes), bytes));
            }
        }
    }
    // The new lock first: a missing option fails before the (slow) generation.
    let shas = new_files.iter().map(|(k, (sha, _))| (k.clone(), sha.clone())).collect();
    let lock = pin(&old_lock, tag, shas, options)?;

    let settings = Settings::new(from, tag);
    let files = codegen::generate(&settings).map_err(|e| format!("release {tag} does not generate: {e}"))?;
    let table = codegen::macro_table(&settings).map_err(|e| e.to_string())?;
    let readme_path = workspace.join(codegen::stamp::HANDLER_TABLES_FILE);
    let readme = match std::fs::read_to_string(&readme_path) {
        Ok(text) => Some(codegen::readme(&settings, &text).map_err(|e| e.to_string())?),
        Err(_) => None,
    };
    let mut report = crate::diff::diff_dirs(&pinned, from).map_err(|e| e.to_string())?;
    report.old = old_lock.tag.clone();
    report.new = tag.to_owned();
    // The crate as pinned against the one about to be written: its public items, and
    // cargo-semver-checks' verdict on them (which needs the tool: a missing one stops here).
    let api = {
        use crate::semver::{self, Side};
        let old = Side::generate(&pinned, &old_lock.tag)?;
        let new = Side::generate(from, tag)?;
        semver::report(workspace, &old, &new, options.semver_checks)?
    };

    // Everything checked: write.
    let _ = std::fs::remove_dir_all(&pinned);
    for (rel, (_, bytes)) in &new_files {
        let path = pinned.join(rel);
        std::fs::create_dir_all(path.parent().unwrap_or(&pinned)).map_err(|e| e.to_string())?;
        std::fs::write(&path, bytes).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    }
    let text = serde_json::to_string_pretty(&lock).map_err(|e| e.to_string())? + "\n";
    std::fs::write(&lock_path, &text).map_err(|e| e.to_string())?;
    codegen::write_or_check(&workspace.join("generated"), &files, false).map_err(|e| e.to_string())?;
    codegen::write_or_check(&workspace.join("macros"), std::slice::from_ref(&table), false)
        .map_err(|e| e.to_string())?;
    if let Some(readme) = &readme {
        std::fs::write(&readme_path, readme).map_err(|e| e.to_string())?;
    }
    // The stamp last, as `codegen` writes it: the next `codegen --check` answers from it.
    let stamp = codegen::stamp::Stamp::of_run(text.as_bytes(), &files, &table, readme.as_deref()).render();
    std::fs::write(workspace.join(codegen::stamp::STAMP_PATH), stamp).map_err(|e| e.to_string())?;
    let changes = format!("{}\n{}", report.markdown(), api.markdown());
    std::fs::write(workspace.join("schema/CHANGES.md"), &changes).map_err(|e| e.to_string())?;
    let changelog_path = workspace.join("generated/CHANGELOG.md");
    let changelog = std::fs::read_to_string(&changelog_path).unwrap_or_default();
    let entry = changelog_entry(&api.proposed.to_string(), &old_lock.tag, tag, &changes);
    std::fs::write(&changelog_path, with_entry(&changelog, &entry)).map_err(|e| e.to_string())?;
    println!(
        "pinned {tag} ({} files); regenerated; {} schema changes ({} breaking) and {} API changes written to \
         schema/CHANGES.md\n{}: propose {} → {} ({}{})",
        lock.files.len(),
        report.changes.len(),
        report.breaking(),
        api.changes.len(),
        api.package,
        api.current,
        api.proposed,
        api.level.as_str(),
        if api.semver_checks.is_some() { "" } else { "; cargo-semver-checks skipped" }
    );
    Ok(())
}
