//! The freshness stamp, `schema/codegen.stamp`: which generator wrote the checked-in code, from
//! which pinned schema (`schema/lock.json`), and the sha256 of every file it wrote. `codegen
//! --check` reads it first: when the generator and the lock are the same and every output still
//! hashes as recorded, the code is what a regeneration would write, and the check answers
//! without generating (hashing ~3 MB instead of building and printing every item). Anything
//! else, a missing or unreadable stamp included, falls back to the full comparison, so the
//! stamp can make the check faster but never changes its verdict.

use std::collections::BTreeMap;
use std::path::Path;

use super::OutputFile;
use super::load::sha256_hex;
use super::macro_table;

/// Where the stamp lives, from the workspace root (outside `generated/`, so it is not packaged).
pub const STAMP_PATH: &str = "schema/codegen.stamp";

/// This generator's fingerprint (see `xtask/build.rs`).
pub const GENERATOR: &str = env!("XTASK_GENERATOR_FINGERPRINT");

/// The page of the book whose handler tables the generator writes, between its
/// `<!-- handlers:begin ... -->` and `<!-- handlers:end -->` markers (from the workspace root).
pub const HANDLER_TABLES_FILE: &str = "docs/book/src/handlers.md";

/// The key of that page's generated region among the outputs.
pub const README_TABLES: &str = "docs/book/src/handlers.md#handlers";

/// `path` with `/` separators, as the stamp records it on every platform.
fn slash_path(path: &Path) -> String {
    path.components().map(|c| c.as_os_str().to_string_lossy()).collect::<Vec<_>>().join("/")
}

/// What one run of the generator read and wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stamp {
    generator: String,
    lock: String,
    /// Output key (a path from the workspace root, or [`README_TABLES`]) → sha256.
    outputs: BTreeMap<String, String>,
}

impl Stamp {
    /// The stamp of this generator for `outputs` (key, contents) generated from `lock_json`.
    pub fn new<'a>(lock_json: &[u8], outputs: impl IntoIterator<Item = (String, &'a str)>) -> Stamp {
        Stamp {
            generator: GENERATOR.to_owned(),
            lock: sha256_hex(lock_json),
            outputs: outputs.into_iter().map(|(key, contents)| (key, sha256_hex(contents.as_bytes()))).collect(),
        }
    }

    /// The stamp of one generator run: the files it wrote under `generated/` and `macros/`, and
    /// the generated region of the handler tables page (`tables_page`, the whole page).
    pub fn of_run(lock_json: &[u8], generated: &[OutputFile], table: &OutputFile, tables_page: Option<&str>) -> Stamp {
        let outputs = generated
            .iter()
            .map(|f| (format!("generated/{}", slash_path(&f.path)), f.contents.as_str()))
            .chain([(format!("macros/{}", slash_path(&table.path)), table.contents.as_str())])
            .chain(tables_page.and_then(macro_table::readme_region).map(|r| (README_TABLES.to_owned(), r)));
        Stamp::new(lock_json, outputs)
    }

    /// The stamp as written to [`STAMP_PATH`].
    pub fn render(&self) -> String {
        let mut text =
            String::from("# Written by `cargo xtask codegen`: lets `codegen --check` answer without regenerating.\n");
        text.push_str(&format!("generator {}\nlock {}\n", self.generator, self.lock));
        for (key, sha) in &self.outputs {
            text.push_str(&format!("output {sha} {key}\n"));
        }
        text
    }

    /// `None` for anything that is not a stamp as [`Stamp::render`] writes it.
    pub fn parse(text: &str) -> Option<Stamp> {
        let mut lines = text.lines().filter(|l| !l.starts_with('#'));
        let generator = lines.next()?.strip_prefix("generator ")?.to_owned();
        let lock = lines.next()?.strip_prefix("lock ")?.to_owned();
        let mut outputs = BTreeMap::new();
        for line in lines {
            let (sha, key) = line.strip_prefix("output ")?.split_once(' ')?;
            outputs.insert(key.to_owned(), sha.to_owned());
        }
        Some(Stamp { generator, lock, outputs })
    }

    /// Whether the stamp under `root` vouches for the checked-in outputs: written by this
    /// generator, from this lock, and every output unchanged since.
    pub fn vouches(root: &Path, lock_json: &[u8]) -> bool {
        let Some(stamp) = std::fs::read_to_string(root.join(STAMP_PATH)).ok().as_deref().and_then(Stamp::parse) else {
            return false;
        };
        if stamp.generator != GENERATOR || stamp.lock != sha256_hex(lock_json) || stamp.outputs.is_empty() {
            return false;
        }
        stamp
            .outputs
            .iter()
            .all(|(key, sha)| current_output(root, key).is_some_and(|text| sha256_hex(text.as_bytes()) == *sha))
    }
}

/// The checked-in text of an output.
fn current_output(root: &Path, key: &str) -> Option<String> {
    if key == README_TABLES {
        let readme = std::fs::read_to_string(root.join(HANDLER_TABLES_FILE)).ok()?;
        return macro_table::readme_region(&readme).map(str::to_owned);
    }
    std::fs::read_to_string(root.join(key)).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stamp_reads_back_as_written() {
        let stamp =
            Stamp::new(b"{}", [("generated/src/lib.rs".to_owned(), "fn a() {}"), (README_TABLES.to_owned(), "|")]);
        assert_eq!(Stamp::parse(&stamp.render()), Some(stamp));
        assert_eq!(Stamp::parse("generator x\n"), None);
        assert_eq!(Stamp::parse("generator x\nlock y\noutput nospace\n"), None);
    }

    #[test]
    fn the_stamp_vouches_only_for_unchanged_outputs_of_this_generator_and_lock() {
        let root = std::env::temp_dir().join(format!("xtask-stamp-{}", std::process::id()));
        std::fs::create_dir_all(root.join("schema")).unwrap();
        std::fs::create_dir_all(root.join("generated")).unwrap();
        std::fs::create_dir_all(root.join(HANDLER_TABLES_FILE).parent().unwrap()).unwrap();
        std::fs::write(root.join("generated/lib.rs"), "fn a() {}").unwrap();
        let readme =
            "intro\n<!-- handlers:begin (generated by `cargo xtask codegen`) -->\n| t |\n<!-- handlers:end -->\nmore\n";
        std::fs::write(root.join(HANDLER_TABLES_FILE), readme).unwrap();
        let outputs = || [("generated/lib.rs".to_owned(), "fn a() {}"), (README_TABLES.to_owned(), "\n| t |\n")];
        let write = |stamp: &Stamp| std::fs::write(root.join(STAMP_PATH), stamp.render()).unwrap();

        assert!(!Stamp::vouches(&root, b"lock"), "no stamp");
        write(&Stamp::new(b"lock", outputs()));
        assert!(Stamp::vouches(&root, b"lock"));
        assert!(!Stamp::vouches(&root, b"another lock"));

        std::fs::write(root.join(HANDLER_TABLES_FILE), readme.replace("more", "edited prose")).unwrap();
        assert!(Stamp::vouches(&root, b"lock"), "prose outside the generated region does not matter");
        std::fs::write(root.join(HANDLER_TABLES_FILE), readme.replace("| t |", "| u |")).unwrap();
        assert!(!Stamp::vouches(&root, b"lock"), "an edited table");
        std::fs::write(root.join(HANDLER_TABLES_FILE), readme).unwrap();

        std::fs::write(root.join("generated/lib.rs"), "fn b() {}").unwrap();
        assert!(!Stamp::vouches(&root, b"lock"), "an edited output");
        std::fs::remove_file(root.join("generated/lib.rs")).unwrap();
        assert!(!Stamp::vouches(&root, b"lock"), "a missing output");
        std::fs::write(root.join("generated/lib.rs"), "fn a() {}").unwrap();

        let mut other = Stamp::new(b"lock", outputs());
        other.generator = "another generator".into();
        write(&other);
        assert!(!Stamp::vouches(&root, b"lock"));
        std::fs::remove_dir_all(&root).unwrap();
    }
}
