//! The sessions' working directory: a fresh directory of our own in the temporary folder,
//! removed when the run ends.
//!
//! It is created with `create_dir` under a name nobody can have prepared (an existing entry,
//! a symbolic link planted there included, makes us pick another name), so the removal at the
//! end only ever deletes what this process created.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

pub struct ScratchDir {
    path: PathBuf,
}

impl ScratchDir {
    /// A new directory under the system's temporary folder.
    pub fn create() -> Result<Self, String> {
        let base = std::env::temp_dir();
        // The agent gets an absolute path without symbolic links (the base's, e.g. /tmp on
        // macOS, resolved); the name inside it is ours.
        let base = base.canonicalize().map_err(|e| format!("cannot resolve {}: {e}", base.display()))?;
        Self::create_in(&base, unique_names())
    }

    /// A new directory in `base`, under the first of `names` that is not taken.
    fn create_in(base: &Path, names: impl IntoIterator<Item = String>) -> Result<Self, String> {
        let mut last = None;
        for name in names.into_iter().take(100) {
            let path = base.join(name);
            let mut builder = std::fs::DirBuilder::new();
            #[cfg(unix)]
            std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
            match builder.create(&path) {
                Ok(()) => return Ok(ScratchDir { path }),
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => last = Some(path),
                Err(e) => return Err(format!("cannot create {}: {e}", path.display())),
            }
        }
        let tried = last.map_or_else(|| base.display().to_string(), |p| p.display().to_string());
        Err(format!("cannot create a scratch directory: every name tried exists (last {tried})"))
    }

    pub fn path(&self) -> String {
        self.path.to_string_lossy().into_owned()
    }
}

impl Drop for ScratchDir {
    fn drop(&mut self) {
        // `remove_dir_all` does not follow a symbolic link that replaced the directory: it
        // removes the link only.
        let _ = std::fs::remove_dir_all(&self.path);
    }
}

/// `acp-check-<pid>-<nanoseconds>-<counter>`: unique within this process, hard to guess from
/// outside it.
fn unique_names() -> impl Iterator<Item = String> {
    static COUNTER: AtomicU32 = AtomicU32::new(0);
    std::iter::repeat_with(|| {
        let nanos = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_nanos());
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        format!("acp-check-{}-{nanos:x}-{n}", std::process::id())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fresh folder for one test, removed afterwards.
    fn base(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("acp-check-test-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir(&dir).unwrap();
        dir
    }

    #[cfg(unix)]
    #[test]
    fn a_planted_symlink_is_skipped_and_its_target_survives() {
        let base = base("symlink");
        let victim = base.join("victim");
        std::fs::create_dir(&victim).unwrap();
        std::fs::write(victim.join("precious.txt"), "keep me").unwrap();
        std::os::unix::fs::symlink(&victim, base.join("taken")).unwrap();

        let scratch = ScratchDir::create_in(&base, ["taken".to_owned(), "fresh".to_owned()]).unwrap();
        assert_eq!(scratch.path, base.join("fresh"));
        assert!(!std::fs::symlink_metadata(&scratch.path).unwrap().file_type().is_symlink());
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(&scratch.path).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o700);
        }
        std::fs::write(scratch.path.join("session-file"), "x").unwrap();
        drop(scratch);

        assert!(!base.join("fresh").exists(), "the scratch directory is removed");
        assert_eq!(std::fs::read_to_string(victim.join("precious.txt")).unwrap(), "keep me");
        assert!(std::fs::symlink_metadata(base.join("taken")).unwrap().file_type().is_symlink());
        std::fs::remove_dir_all(&base).unwrap();
    }

    #[test]
    fn every_name_taken_is_an_error_and_removes_nothing() {
        let base = base("taken");
        std::fs::create_dir(base.join("a")).unwrap();
        std::fs::write(base.join("a/file"), "x").unwrap();
        let error = ScratchDir::create_in(&base, ["a".to_owned(), "a".to_owned()]).err().expect("an error");
        assert!(error.contains("every name tried exists"), "{error}");
        assert!(base.join("a/file").exists());
        std::fs::remove_dir_all(&base).unwrap();
    }

    #[test]
    fn names_are_unique() {
        let names: Vec<String> = unique_names().take(3).collect();
        assert!(names[0] != names[1] && names[1] != names[2], "{names:?}");
        assert!(names[0].starts_with(&format!("acp-check-{}-", std::process::id())));
    }
}
