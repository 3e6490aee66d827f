//! Loading: one protocol version folder (`schema.json`, `meta.json` and their `.unstable`
//! variants) read into JSON values, with the sha256 of every file for the preamble.
//!
//! Only `schema.json` is required. Upstream's repository releases carry `meta.json`, but the
//! schema as the official SDKs' packages ship it does not: the method tables are in the schema
//! itself (`x-method`, `x-side`), and `meta.json`, where present, is only cross-checked.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::Value;
use sha2::{Digest, Sha256};

use super::{CodegenError, Result};

/// The files of one protocol version folder, parsed.
#[derive(Debug, Clone)]
pub struct VersionFiles {
    /// The folder.
    pub dir: PathBuf,
    /// `v1` or `v2`: the folder name.
    pub version: String,
    /// `schema.json`.
    pub schema: Value,
    /// `meta.json`, when the release has one: the methods' Rust names and the protocol version,
    /// cross-checked against the schema's own.
    pub meta: Option<Value>,
    /// `schema.unstable.json`, when the release has one.
    pub schema_unstable: Option<Value>,
    /// `meta.unstable.json`, when the release has one.
    pub meta_unstable: Option<Value>,
    /// File name → sha256 (hex) of every file read.
    pub sha256: BTreeMap<String, String>,
}

impl VersionFiles {
    /// The protocol version this folder describes: `meta.json`'s `version`, cross-checked with
    /// the folder name (`v1`); a release without `meta.json` (or an early one, without
    /// `version`) goes by the folder name. `None` for a folder that says neither (a scratch copy
    /// of a schema).
    pub fn protocol_version(&self) -> Result<Option<u16>> {
        let err = |message: String| CodegenError::Input { path: self.dir.join("meta.json"), message };
        let from_dir = self.version.strip_prefix('v').and_then(|n| n.parse::<u16>().ok());
        let from_meta = match self.meta.as_ref().and_then(|meta| meta.get("version")) {
            None => None,
            Some(v) => Some(
                v.as_u64()
                    .and_then(|n| u16::try_from(n).ok())
                    .ok_or_else(|| err(format!("`version` {v} is not a protocol version (0..=65535)")))?,
            ),
        };
        match (from_meta, from_dir) {
            (Some(meta), Some(dir)) if meta != dir => {
                Err(err(format!("`version` {meta} disagrees with the folder name `{}`", self.version)))
            }
            (Some(version), _) | (None, Some(version)) => Ok(Some(version)),
            (None, None) => Ok(None),
        }
    }
}

/// The sha256 of `bytes`, in lowercase hex, as the lock and the preamble write it.
pub fn sha256(bytes: &[u8]) -> String {
    sha256_hex(bytes)
}

/// The sha256 of `bytes`, in lowercase hex.
pub(crate) fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes).iter().map(|b| format!("{b:02x}")).collect()
}

/// Every file of a version folder.
pub fn load_version(dir: &Path) -> Result<VersionFiles> {
    let mut sha256 = BTreeMap::new();
    let mut read = |name: &str, required: bool| -> Result<Option<Value>> {
        let path = dir.join(name);
        let bytes = match std::fs::read(&path) {
            Ok(b) => b,
            Err(e) if !required && e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(CodegenError::Input { path, message: e.to_string() }),
        };
        sha256.insert(name.to_owned(), sha256_hex(&bytes));
        serde_json::from_slice(&bytes)
            .map(Some)
            .map_err(|e| CodegenError::Input { path, message: format!("not valid JSON: {e}") })
    };
    let schema = read("schema.json", true)?.unwrap_or_default();
    let meta = read("meta.json", false)?;
    let schema_unstable = read("schema.unstable.json", false)?;
    let meta_unstable = read("meta.unstable.json", false)?;
    let version = dir.file_name().and_then(|n| n.to_str()).unwrap_or("v1").to_owned();
    Ok(VersionFiles { dir: dir.to_owned(), version, schema, meta, schema_unstable, meta_unstable, sha256 })
}
