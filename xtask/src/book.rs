//! `cargo xtask book-links`: the book's links and includes, checked against the files they name.
//!
//! For every Markdown page under the book's `src/` folder, outside code blocks and code spans:
//!
//! - a relative link `[text](path)` or `[text](path#fragment)` must name an existing file,
//!   resolved from the page's folder (a link that leaves the book is resolved the same way, in
//!   the repository);
//! - a `#fragment`, into the same page or another Markdown page, must be the id of one of that
//!   page's headings, as mdBook makes ids (lower case, punctuation dropped, spaces to `-`,
//!   repeated headings numbered `-1`, `-2`, ...);
//! - `{{#include path}}`, `{{#include path:name}}`, `{{#rustdoc_include ...}}` (anywhere, code
//!   blocks included, since that is where they sit) must name an existing file and, with a name,
//!   an `ANCHOR: name` line followed by an `ANCHOR_END: name` line in it. Line ranges
//!   (`path:10:20`) are checked for the file only.
//!
//! `SUMMARY.md` is checked like any page, so a chapter it lists must exist. Absolute URLs
//! (`https:`, `mailto:`) are not fetched.

use std::collections::BTreeMap;
use std::path::{Component, Path, PathBuf};

/// One broken reference: the page, its line (1-based), and what is wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// The page, relative to the book's `src/` folder.
    pub page: PathBuf,
    /// The line of the page.
    pub line: usize,
    /// What is wrong, naming the target.
    pub message: String,
}

impl std::fmt::Display for Problem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}: {}", self.page.display(), self.line, self.message)
    }
}

/// Checks every page under `src` (the book's source folder); the pages are read from disk, and
/// so are the files they link to and include.
pub fn check(src: &Path) -> Result<Vec<Problem>, String> {
    let mut pages = Vec::new();
    collect_pages(src, &mut pages).map_err(|e| format!("cannot read {}: {e}", src.display()))?;
    pages.sort();
    let mut headings = BTreeMap::new();
    let mut problems = Vec::new();
    for page in &pages {
        let text = std::fs::read_to_string(page).map_err(|e| format!("cannot read {}: {e}", page.display()))?;
        let relative = page.strip_prefix(src).unwrap_or(page).to_path_buf();
        for (line, message) in check_page(page, &text, &mut headings) {
            problems.push(Problem { page: relative.clone(), line, message });
        }
    }
    Ok(problems)
}

fn collect_pages(dir: &Path, pages: &mut Vec<PathBuf>) -> std::io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        if path.is_dir() {
            collect_pages(&path, pages)?;
        } else if path.extension().is_some_and(|e| e == "md") {
            pages.push(path);
        }
    }
    Ok(())
}

/// The heading ids of a Markdown file, read once (the cache is keyed by normalised path).
fn heading_ids<'c>(path: &Path, cache: &'c mut BTreeMap<PathBuf, Option<Vec<String>>>) -> Option<&'c Vec<String>> {
    cache
        .entry(normalise(path))
        .or_insert_with(|| std::fs::read_to_string(path).ok().map(|text| ids_of(&text)))
        .as_ref()
}

/// The problems of one page, each with its line.
fn check_page(page: &Path, text: &str, headings: &mut BTreeMap<PathBuf, Option<Vec<String>>>) -> Vec<(usize, String)> {
    let dir = page.parent().unwrap_or(Path::new("."));
    let mut problems = Vec::new();
    let mut fence: Option<String> = None;
    for (index, line) in text.lines().enumerate() {
        let number = index + 1;
        for include in includes(line) {
            if let Err(message) = check_include(dir, &include) {
                problems.push((number, message));
            }
        }
        let trimmed = line.trim_start();
        if let Some(open) = &fence {
            if trimmed.starts_with(open.as_str()) && trimmed.trim_start_matches(open.as_str()).trim().is_empty() {
                fence = None;
            }
            continue;
        }
        if trimmed.starts_with("```") || trimmed.starts_with("~~~") {
            let marker: String = trimmed.chars().take_while(|&c| c == '`' || c == '~').collect();
            fence = Some(marker);
            continue;
        }
        for target in links(&strip_code_spans(line)) {
            if let Err(message) = check_link(page, dir, &target, headings) {
                problems.push((number, message));
            }
        }
    }
    problems
}

/// A link target: checked when relative, its fragment when it has one.
fn check_link(
    page: &Path,
    dir: &Path,
    target: &str,
    headings: &mut BTreeMap<PathBuf, Option<Vec<String>>>,
) -> Result<(), String> {
    let target = target.split_whitespace().next().unwrap_or_default(); // drop a "title"
    if target.is_empty() || target.contains("://") || target.starts_with("mailto:") {
        return Ok(());
    }
    let (path, fragment) = match target.split_once('#') {
        Some((path, fragment)) => (path, Some(fragment)),
        None => (target, None),
    };
    let file = if path.is_empty() { page.to_path_buf() } else { dir.join(path) };
    if !file.exists() {
        return Err(format!("link to `{target}`: {} does not exist", normalise(&file).display()));
    }
    let Some(fragment) = fragment else { return Ok(()) };
    if file.extension().is_none_or(|e| e != "md") {
        return Ok(());
    }
    match heading_ids(&file, headings) {
        Some(ids) if ids.iter().any(|id| id == fragment) => Ok(()),
        Some(ids) => Err(format!(
            "link to `{target}`: no heading with the id `{fragment}` in {} (its ids: {})",
            normalise(&file).display(),
            ids.join(", ")
        )),
        None => Err(format!("link to `{target}`: cannot read {}", normalise(&file).display())),
    }
}

/// An include's file, and its anchor when it names one.
fn check_include(dir: &Path, include: &str) -> Result<(), String> {
    let mut parts = include.splitn(2, ':');
    let path = parts.next().unwrap_or_default().trim();
    let selector = parts.next().map(str::trim);
    let file = dir.join(path);
    let text = std::fs::read_to_string(&file)
        .map_err(|e| format!("include of `{include}`: cannot read {}: {e}", normalise(&file).display()))?;
    let Some(selector) = selector else { return Ok(()) };
    // `path:10`, `path:10:20`, `path::20`, `path:10:` are line ranges, not anchors.
    if selector.is_empty() || selector.split(':').all(|p| p.is_empty() || p.chars().all(|c| c.is_ascii_digit())) {
        return Ok(());
    }
    let start = text.lines().position(|l| anchor_named(l, "ANCHOR:", selector));
    let end = text.lines().position(|l| anchor_named(l, "ANCHOR_END:", selector));
    match (start, end) {
        (Some(start), Some(end)) if start < end => Ok(()),
        (Some(_), Some(_)) => Err(format!("include of `{include}`: ANCHOR_END: {selector} comes before its ANCHOR")),
        (None, _) => Err(format!("include of `{include}`: no `ANCHOR: {selector}` in {}", normalise(&file).display())),
        (Some(_), None) => {
            Err(format!("include of `{include}`: no `ANCHOR_END: {selector}` in {}", normalise(&file).display()))
        }
    }
}

/// Whether `line` holds `marker` (`ANCHOR:` or `ANCHOR_END:`) followed by exactly `name`.
fn anchor_named(line: &str, marker: &str, name: &str) -> bool {
    line.match_indices(marker).any(|(at, _)| {
        let rest = line[at + marker.len()..].trim_start();
        let word: String = rest.chars().take_while(|c| c.is_alphanumeric() || *c == '_' || *c == '-').collect();
        word == name
    })
}

/// The paths of the `{{#include ..}}` / `{{#rustdoc_include ..}}` directives of a line.
fn includes(line: &str) -> Vec<String> {
    let mut found = Vec::new();
    let mut rest = line;
    while let Some(start) = rest.find("{{#") {
        let after = &rest[start + 3..];
        let Some(end) = after.find("}}") else { break };
        let directive = &after[..end];
        // `\{{#include ..}}` is mdBook's escape: shown as written, not included.
        if rest[..start].ends_with('\\') {
            rest = &after[end + 2..];
            continue;
        }
        for keyword in ["include ", "rustdoc_include "] {
            if let Some(argument) = directive.strip_prefix(keyword) {
                found.push(argument.trim().to_owned());
            }
        }
        rest = &after[end + 2..];
    }
    found
}

/// `line` with its code spans blanked, so that `[a](b)` inside backquotes is not a link.
fn strip_code_spans(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '`' {
            out.push(c);
            continue;
        }
        let mut ticks = 1;
        while chars.peek() == Some(&'`') {
            chars.next();
            ticks += 1;
        }
        let closing = "`".repeat(ticks);
        let rest: String = chars.clone().collect();
        match rest.find(&closing) {
            Some(end) => {
                out.push(' ');
                for _ in 0..rest[..end + ticks].chars().count() {
                    chars.next();
                }
            }
            None => {
                out.push_str(&closing);
            }
        }
    }
    out
}

/// The targets of the inline links and images of a line: `[text](target)`.
fn links(line: &str) -> Vec<String> {
    let mut found = Vec::new();
    let bytes = line.as_bytes();
    let mut i = 0;
    while let Some(offset) = line[i..].find("](") {
        let start = i + offset + 2;
        let mut depth = 1;
        let mut end = start;
        while end < bytes.len() {
            match bytes[end] {
                b'(' => depth += 1,
                b')' => {
                    depth -= 1;
                    if depth == 0 {
                        break;
                    }
                }
                _ => {}
            }
            end += 1;
        }
        if end >= bytes.len() {
            break;
        }
        found.push(line[start..end].trim().trim_start_matches('<').trim_end_matches('>').to_owned());
        i = end + 1;
    }
    found
}

/// The heading ids of a page, as mdBook makes them.
pub fn ids_of(text: &str) -> Vec<String> {
    let mut ids = Vec::new();
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut fence = false;
    for line in text.lines() {
        let trimmed = line.trim_start();
        if trimmed.starts_with("```") || trimmed.starts_with("~~~") {
            fence = !fence;
            continue;
        }
        if fence || !trimmed.starts_with('#') {
            continue;
        }
        let hashes = trimmed.chars().take_while(|&c| c == '#').count();
        if hashes > 6 || !trimmed[hashes..].starts_with(' ') {
            continue;
        }
        let base = id_of(trimmed[hashes..].trim());
        let count = seen.entry(base.clone()).or_insert(0);
        ids.push(if *count == 0 { base.clone() } else { format!("{base}-{count}") });
        *count += 1;
    }
    ids
}

/// mdBook's id of a heading's text: Markdown markup and punctuation dropped (but `-` and `_`),
/// letters lower-cased, spaces to `-`.
fn id_of(heading: &str) -> String {
    // The text of links, not their targets: `[a](b)` is `a`.
    let mut text = String::new();
    let mut rest = heading;
    while let Some(open) = rest.find('[') {
        text.push_str(&rest[..open]);
        let after = &rest[open + 1..];
        match (after.find("]("), after.find(']')) {
            (Some(close), _) if after[close + 2..].contains(')') => {
                text.push_str(&after[..close]);
                let tail = &after[close + 2..];
                rest = &tail[tail.find(')').map_or(tail.len(), |p| p + 1)..];
            }
            _ => {
                text.push('[');
                rest = after;
            }
        }
    }
    text.push_str(rest);
    text.chars()
        .filter_map(|c| {
            if c.is_alphanumeric() || c == '_' || c == '-' {
                Some(c.to_lowercase().collect::<String>())
            } else if c.is_whitespace() {
                Some("-".to_owned())
            } else {
                None
            }
        })
        .collect()
}

/// `path` without `.` and `..` components where they can be folded.
fn normalise(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for component in path.components() {
        match component {
            Component::CurDir => {}
            Component::ParentDir if out.components().next_back().is_some_and(|c| matches!(c, Component::Normal(_))) => {
                out.pop();
            }
            other => out.push(other),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A scratch book: `src/` with the given pages, and a code file beside it.
    fn book(name: &str, pages: &[(&str, &str)]) -> PathBuf {
        let root = std::env::temp_dir().join(format!("xtask-book-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        std::fs::create_dir_all(root.join("src/part")).unwrap();
        std::fs::write(root.join("code.rs"), "// ANCHOR: here\nfn a() {}\n// ANCHOR_END: here\n").unwrap();
        for (path, text) in pages {
            std::fs::write(root.join("src").join(path), text).unwrap();
        }
        root
    }

    fn messages(root: &Path) -> Vec<String> {
        check(&root.join("src")).unwrap().iter().map(ToString::to_string).collect()
    }

    #[test]
    fn a_sound_book_has_no_problems() {
        let root = book(
            "sound",
            &[
                ("a.md", "# A page\n\n## Its part: `code`, twice\n\nSee [b](part/b.md#b-and-more), [here](#a-page).\n"),
                (
                    "part/b.md",
                    "# B, and more!\n\n```rust\n{{#include ../../code.rs:here}}\n```\n[up](../a.md#its-part-code-twice)\n",
                ),
            ],
        );
        assert_eq!(messages(&root), Vec::<String>::new());
        let _ = std::fs::remove_dir_all(&root);
    }

    #[test]
    fn a_broken_link_a_missing_heading_and_a_missing_anchor_are_each_found() {
        let root = book(
            "broken",
            &[
                ("a.md", "# A\n\n[gone](missing.md)\n[no such part](b.md#nowhere)\n[fine](b.md#b)\n"),
                (
                    "b.md",
                    "# B\n\n```rust\n{{#include ../code.rs:elsewhere}}\n{{#include ../nothing.rs}}\n```\n`\\{{#include escaped.rs}}`\n",
                ),
            ],
        );
        let found = messages(&root);
        assert_eq!(found.len(), 4, "{found:#?}");
        assert!(found[0].starts_with("a.md:3: link to `missing.md`"), "{}", found[0]);
        assert!(
            found[1].starts_with("a.md:4: link to `b.md#nowhere`: no heading with the id `nowhere`"),
            "{}",
            found[1]
        );
        assert!(
            found[2].starts_with("b.md:4: include of `../code.rs:elsewhere`: no `ANCHOR: elsewhere`"),
            "{}",
            found[2]
        );
        assert!(found[3].starts_with("b.md:5: include of `../nothing.rs`: cannot read"), "{}", found[3]);
        let _ = std::fs::remove_dir_all(&root);
    }

    #[test]
    fn code_is_not_read_for_links() {
        let root = book("code", &[("a.md", "# A\n\n`[x](nowhere.md)`\n\n```text\n[y](nowhere.md)\n```\n")]);
        assert_eq!(messages(&root), Vec::<String>::new());
        let _ = std::fs::remove_dir_all(&root);
    }

    #[test]
    fn ids_follow_mdbook() {
        assert_eq!(
            ids_of(
                "# Checking an agent: acp-check\n## The `Cargo` features\n## Again\n## Again\n```\n# not a heading\n```\n"
            ),
            ["checking-an-agent-acp-check", "the-cargo-features", "again", "again-1"]
        );
        assert_eq!(
            ids_of("## Under `sacp-conductor` and with [sacp](x.md) proxies"),
            ["under-sacp-conductor-and-with-sacp-proxies"]
        );
    }
}
