//! The pinned upstream schema: `schema/lock.json` names the release (tag, commit, download
//! address) and the sha256 of every file; `schema fetch` fills `schema/json/` from a local
//! folder or from the release assets, verifying each file against the lock.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::codegen::load::sha256_hex;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Lock {
    /// The upstream repository (`owner/name`).
    pub upstream: String,
    pub tag: String,
    pub commit: String,
    /// The version of the schema artifacts inside the release.
    pub schema_version: String,
    /// Where the release assets are downloaded from: `{release_url}/{file}`.
    pub release_url: String,
    /// `v1/schema.json` → sha256 (hex).
    pub files: BTreeMap<String, String>,
}

#[derive(Debug, thiserror::Error)]
pub enum SchemaError {
    #[error("cannot read {path}: {source}")]
    Read { path: PathBuf, source: std::io::Error },
    #[error("{path} is not a valid lock file: {source}")]
    Lock { path: PathBuf, source: serde_json::Error },
    #[error("{file}: sha256 {actual} does not match {expected} pinned in schema/lock.json (release {tag})")]
    Mismatch { file: String, actual: String, expected: String, tag: String },
    #[error(
        "cannot download {url}: {reason}\n\
         The machine may be offline. Either fetch from a local copy of the release:\n    \
         cargo xtask schema fetch --from ../shared/acp-schema/releases/{tag}\n\
         or retry online (the files are the assets of the upstream release listed in schema/lock.json)."
    )]
    Download { url: String, tag: String, reason: String },
    #[error("cannot write {path}: {source}")]
    Write { path: PathBuf, source: std::io::Error },
}

impl Lock {
    pub fn read(path: &Path) -> Result<Lock, SchemaError> {
        let text = std::fs::read_to_string(path).map_err(|source| SchemaError::Read { path: path.to_owned(), source })?;
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

/// Fills `out` with the pinned files, from `from` (a release folder) or by download.
pub fn fetch(lock: &Lock, from: Option<&Path>, out: &Path) -> Result<(), SchemaError> {
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

/// Downloads one release asset with `curl`, which every developer machine and CI image has;
/// keeping HTTP out of the xtask's dependencies keeps its build small.
fn download(lock: &Lock, file: &str) -> Result<Vec<u8>, SchemaError> {
    let url = format!("{}/{}", lock.release_url, file);
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
