//! The generator's fingerprint, for `codegen --check`'s stamp (`src/codegen/stamp.rs`): a hash
//! of everything that decides what the generator writes (its sources, its templates, and the
//! versions of the crates that parse and print the code), so a stamp written by another
//! generator is never taken for fresh.

use std::path::{Path, PathBuf};

/// The crates whose version can change the generated text.
const PRINTING_CRATES: &[&str] = &["syn", "quote", "proc-macro2", "prettyplease", "serde_json"];

fn main() {
    let manifest = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"));
    let lock = manifest.join("Cargo.lock");
    for watched in [manifest.join("src/codegen"), manifest.join("templates"), lock.clone()] {
        println!("cargo:rerun-if-changed={}", watched.display());
    }
    let mut hash = Fnv::new();
    for dir in ["src/codegen", "templates"] {
        let mut files = Vec::new();
        collect(&manifest.join(dir), &mut files);
        files.sort();
        for file in files {
            let relative = file.strip_prefix(&manifest).unwrap_or(&file);
            hash.write(relative.to_string_lossy().replace('\\', "/").as_bytes());
            hash.write(&std::fs::read(&file).unwrap_or_else(|e| panic!("cannot read {}: {e}", file.display())));
        }
    }
    if let Ok(lock) = std::fs::read_to_string(&lock) {
        for (name, version) in locked_versions(&lock) {
            hash.write(format!("{name} {version}\n").as_bytes());
        }
    }
    println!("cargo:rustc-env=XTASK_GENERATOR_FINGERPRINT={:016x}", hash.finish());
}

fn collect(dir: &Path, files: &mut Vec<PathBuf>) {
    let entries = std::fs::read_dir(dir).unwrap_or_else(|e| panic!("cannot read {}: {e}", dir.display()));
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            collect(&path, files);
        } else {
            files.push(path);
        }
    }
}

/// `(name, version)` of the printing crates in Cargo.lock, in the lock's order.
fn locked_versions(lock: &str) -> Vec<(&str, &str)> {
    let mut found = Vec::new();
    let mut name = None;
    for line in lock.lines() {
        if let Some(n) = line.strip_prefix("name = ") {
            name = Some(n.trim_matches('"'));
        } else if let (Some(n), Some(v)) = (name, line.strip_prefix("version = ")) {
            if PRINTING_CRATES.contains(&n) {
                found.push((n, v.trim_matches('"')));
            }
            name = None;
        }
    }
    found
}

/// 64-bit FNV-1a: enough to tell one generator from another (nothing here is adversarial),
/// and no build dependency.
struct Fnv(u64);

impl Fnv {
    fn new() -> Self {
        Fnv(0xcbf2_9ce4_8422_2325)
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3);
        }
        // A separator, so ("ab", "c") and ("a", "bc") differ.
        self.0 = (self.0 ^ 0xff).wrapping_mul(0x0000_0100_0000_01b3);
    }

    fn finish(&self) -> u64 {
        self.0
    }
}
