//! The layering check (`cargo xtask layers`): reads a crate's module tree with syn, collects
//! which module refers to which (`use` items and every `crate::` / `super::` / child-module
//! path in the code; doc comments do not count), and holds the graph to a table of floors:
//!
//! - a module refers only to modules on its own floor or below;
//! - on a floor marked *strict* no two modules refer to each other, directly or in a cycle;
//! - on a floor of *parts* (the remote transport, the proxy layer, ...) a part refers to another
//!   part of that floor only where the table allows it.
//!
//! The crate root is exempt (it is the facade that re-exports every floor); its `pub use`
//! items are resolved, so that `crate::Error` counts as a reference to the module it names.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use syn::visit::Visit;

/// One floor of the table: the module prefixes it holds, lowest floor first.
#[derive(Debug, Clone)]
pub struct Floor {
    /// What the floor is, for the messages.
    pub name: &'static str,
    /// Module paths (without `crate::`); a module belongs to the floor of its longest
    /// matching prefix. Each prefix is a *part* of the floor.
    pub parts: &'static [&'static str],
    /// No cycle among the floor's modules (the core).
    pub strict: bool,
    /// Parts of this floor that may refer to other parts of it: (from, to). Without an entry,
    /// parts of one floor do not refer to each other; `None` lets them (one layer in parts).
    pub neighbours: Option<&'static [(&'static str, &'static str)]>,
}

/// The floors of `acp-rpc` (`runtime/src`), as `docs/architecture.md` describes them.
pub const ACP_RPC: &[Floor] = &[
    Floor { name: "core", parts: &["core"], strict: true, neighbours: None },
    Floor {
        name: "typed layers",
        parts: &[
            "typed",
            "advertise",
            "terminal",
            "sessions",
            "agent",
            "client",
            "compaction",
            "macro_support",
            "v2",
            "v2_bridge",
            "version",
        ],
        strict: true,
        neighbours: None,
    },
    Floor {
        name: "remote, proxies, MCP, conductor",
        parts: &["http", "proxy", "mcp", "proxy::conductor"],
        strict: false,
        neighbours: Some(&[("mcp", "proxy"), ("proxy::conductor", "proxy"), ("proxy::conductor", "mcp")]),
    },
];

/// A module of the tree (kept by its path, `core::peer`; empty for the root).
#[derive(Debug)]
struct Module {
    /// Referenced paths, each as segments from the crate root.
    refs: Vec<Vec<String>>,
}

/// What the check found.
#[derive(Debug, Default)]
pub struct Report {
    /// Every reference between two modules: (from, to), by module path.
    pub edges: BTreeSet<(String, String)>,
    /// The rules broken, one line each.
    pub violations: Vec<String>,
}

/// Reads the module tree rooted at `src/lib.rs` under `src` and checks it against `floors`.
pub fn check(src: &Path, floors: &[Floor]) -> Result<Report, String> {
    let mut modules = BTreeMap::new();
    read_module(src, &src.join("lib.rs"), String::new(), &mut modules)?;
    let aliases = root_aliases(&modules);
    let mut report = Report::default();
    for (name, module) in &modules {
        if name.is_empty() {
            continue;
        }
        for path in &module.refs {
            let path = resolve_alias(path, &aliases);
            if let Some(to) = longest_module(&path, &modules)
                && to != *name
                && !to.is_empty()
                && !is_ancestor(&to, name)
            {
                report.edges.insert((name.clone(), to));
            }
        }
    }
    let floor_of = |module: &str| -> Option<(usize, &'static str)> {
        floors
            .iter()
            .enumerate()
            .flat_map(|(i, floor)| floor.parts.iter().map(move |part| (i, *part)))
            .filter(|(_, part)| module == *part || module.starts_with(&format!("{part}::")))
            .max_by_key(|(_, part)| part.len())
    };
    for name in modules.keys().filter(|name| !name.is_empty()) {
        if floor_of(name).is_none() {
            report.violations.push(format!("module `{name}` has no floor in the layer table"));
        }
    }
    for (from, to) in &report.edges {
        let (Some((from_floor, from_part)), Some((to_floor, to_part))) = (floor_of(from), floor_of(to)) else {
            continue;
        };
        if to_floor > from_floor {
            report.violations.push(format!(
                "`{from}` ({}) refers to `{to}`, on the floor above it ({})",
                floors[from_floor].name, floors[to_floor].name
            ));
        } else if to_floor == from_floor
            && from_part != to_part
            && let Some(allowed) = floors[from_floor].neighbours
            && !allowed.contains(&(from_part, to_part))
        {
            report.violations.push(format!(
                "`{from}` refers to `{to}`: the parts `{from_part}` and `{to_part}` of the {} floor are neighbours, and that reference is not allowed",
                floors[from_floor].name
            ));
        }
    }
    for (i, floor) in floors.iter().enumerate().filter(|(_, floor)| floor.strict) {
        let on_floor: BTreeSet<&str> =
            modules.keys().filter(|name| floor_of(name).is_some_and(|(f, _)| f == i)).map(String::as_str).collect();
        for cycle in cycles(&report.edges, &on_floor) {
            report.violations.push(format!(
                "modules of the {} floor refer to each other: {}",
                floor.name,
                cycle.join(" → ")
            ));
        }
    }
    Ok(report)
}

fn read_module(dir: &Path, file: &Path, name: String, modules: &mut BTreeMap<String, Module>) -> Result<(), String> {
    let text = std::fs::read_to_string(file).map_err(|e| format!("{}: {e}", file.display()))?;
    let ast = syn::parse_file(&text).map_err(|e| format!("{}: {e}", file.display()))?;
    let base: Vec<String> = if name.is_empty() { Vec::new() } else { name.split("::").map(str::to_owned).collect() };
    let mut collector = Collector { base: base.clone(), refs: Vec::new(), children: BTreeSet::new() };
    collector.visit_file(&ast);
    // Children of `a.rs` live in `a/`, of `a/mod.rs` and `lib.rs` in `a/`'s own folder.
    let child_dir = match file.file_name().and_then(|n| n.to_str()) {
        Some("lib.rs" | "mod.rs") => dir.to_path_buf(),
        _ => dir.join(file.file_stem().unwrap_or_default()),
    };
    // A bare path whose first segment is a child module refers to that child.
    let refs = collector
        .refs
        .into_iter()
        .map(|path| match path.first() {
            Some(first) if first.starts_with('\u{0}') => {
                let mut full = base.clone();
                full.push(first[1..].to_owned());
                full.extend(path[1..].iter().cloned());
                full
            }
            _ => path,
        })
        .filter(|path| !path.is_empty())
        .collect();
    modules.insert(name.clone(), Module { refs });
    for child in collector.children {
        let full = if name.is_empty() { child.clone() } else { format!("{name}::{child}") };
        let flat = child_dir.join(format!("{child}.rs"));
        let nested = child_dir.join(&child).join("mod.rs");
        let (file, dir) = if flat.exists() { (flat, child_dir.clone()) } else { (nested, child_dir.join(&child)) };
        read_module(&dir, &file, full, modules)?;
    }
    Ok(())
}

/// Collects a file's module declarations and the paths it names.
struct Collector {
    /// The module's own path, to resolve `self::` and `super::`.
    base: Vec<String>,
    /// Resolved paths; a bare path's first segment is marked with a leading NUL, to be matched
    /// against the child modules once they are known.
    refs: Vec<Vec<String>>,
    children: BTreeSet<String>,
}

impl Collector {
    fn push(&mut self, segments: Vec<String>) {
        let Some(first) = segments.first() else { return };
        let resolved = match first.as_str() {
            "crate" => segments[1..].to_vec(),
            "self" => self.base.iter().cloned().chain(segments[1..].iter().cloned()).collect(),
            "super" => {
                let ups = segments.iter().take_while(|s| *s == "super").count();
                let keep = self.base.len().saturating_sub(ups);
                self.base[..keep].iter().cloned().chain(segments[ups..].iter().cloned()).collect()
            }
            _ => {
                let mut marked = segments.clone();
                marked[0] = format!("\u{0}{first}");
                marked
            }
        };
        self.refs.push(resolved);
    }

    fn use_tree(&mut self, prefix: &mut Vec<String>, tree: &syn::UseTree) {
        match tree {
            syn::UseTree::Path(p) => {
                prefix.push(p.ident.to_string());
                self.use_tree(prefix, &p.tree);
                prefix.pop();
            }
            syn::UseTree::Name(n) => {
                let mut path = prefix.clone();
                if n.ident != "self" {
                    path.push(n.ident.to_string());
                }
                self.push(path);
            }
            syn::UseTree::Rename(r) => {
                let mut path = prefix.clone();
                if r.ident != "self" {
                    path.push(r.ident.to_string());
                }
                self.push(path);
            }
            syn::UseTree::Glob(_) => self.push(prefix.clone()),
            syn::UseTree::Group(g) => {
                for tree in &g.items {
                    self.use_tree(prefix, tree);
                }
            }
        }
    }
}

impl<'ast> Visit<'ast> for Collector {
    fn visit_item_mod(&mut self, item: &'ast syn::ItemMod) {
        match &item.content {
            // `mod x;`: a module of its own file.
            None => {
                self.children.insert(item.ident.to_string());
            }
            // An inline module (tests): its paths count as the file's.
            Some((_, items)) => {
                for item in items {
                    self.visit_item(item);
                }
            }
        }
    }

    fn visit_item_use(&mut self, item: &'ast syn::ItemUse) {
        self.use_tree(&mut Vec::new(), &item.tree);
    }

    fn visit_path(&mut self, path: &'ast syn::Path) {
        if path.leading_colon.is_none() && path.segments.len() > 1 {
            self.push(path.segments.iter().map(|s| s.ident.to_string()).collect());
        }
        syn::visit::visit_path(self, path);
    }

    fn visit_macro(&mut self, mac: &'ast syn::Macro) {
        // Paths inside macro calls (`tokio::select!`, `matches!`) are tokens: read the ones
        // that start at `crate::` or `super::`.
        let tokens: Vec<String> = mac.tokens.clone().into_iter().map(|t| t.to_string()).collect();
        let mut i = 0;
        while i < tokens.len() {
            if tokens[i] == "crate" || tokens[i] == "super" {
                let mut path = vec![tokens[i].clone()];
                let mut j = i + 1;
                let colon = |k: usize| tokens.get(k).is_some_and(|t| t == ":");
                while colon(j) && colon(j + 1) {
                    match tokens.get(j + 2) {
                        Some(seg) if seg.chars().all(|c| c.is_alphanumeric() || c == '_') => path.push(seg.clone()),
                        _ => break,
                    }
                    j += 3;
                }
                self.push(path);
                i = j;
            } else {
                i += 1;
            }
        }
        syn::visit::visit_macro(self, mac);
    }
}

/// The root's `pub use` items: the name a path starts with, and the path it stands for.
fn root_aliases(modules: &BTreeMap<String, Module>) -> BTreeMap<String, Vec<String>> {
    let Some(root) = modules.get("") else { return BTreeMap::new() };
    let mut aliases = BTreeMap::new();
    for path in &root.refs {
        if let Some(last) = path.last() {
            let last = last.trim_start_matches('\u{0}').to_owned();
            let target: Vec<String> = path.iter().map(|s| s.trim_start_matches('\u{0}').to_owned()).collect();
            if target.len() > 1 && modules.contains_key(&target[0]) {
                aliases.entry(last).or_insert(target);
            }
        }
    }
    aliases
}

fn resolve_alias(path: &[String], aliases: &BTreeMap<String, Vec<String>>) -> Vec<String> {
    match path.first().and_then(|first| aliases.get(first)) {
        Some(target) => target.iter().cloned().chain(path[1..].iter().cloned()).collect(),
        None => path.to_vec(),
    }
}

fn longest_module(path: &[String], modules: &BTreeMap<String, Module>) -> Option<String> {
    (1..=path.len()).rev().map(|n| path[..n].join("::")).find(|name| modules.contains_key(name))
}

fn is_ancestor(ancestor: &str, module: &str) -> bool {
    module.starts_with(&format!("{ancestor}::"))
}

/// The cycles among `nodes` (one per strongly connected component of more than one module),
/// each as a path that returns to its start.
fn cycles(edges: &BTreeSet<(String, String)>, nodes: &BTreeSet<&str>) -> Vec<Vec<String>> {
    let next = |from: &str| -> Vec<&str> {
        edges.iter().filter(|(f, t)| f == from && nodes.contains(t.as_str())).map(|(_, t)| t.as_str()).collect()
    };
    let reaches = |from: &str, to: &str| -> Option<Vec<String>> {
        // Breadth first, for the shortest way round.
        let mut seen = BTreeMap::<&str, &str>::new();
        let mut queue = std::collections::VecDeque::from([from]);
        while let Some(at) = queue.pop_front() {
            for n in next(at) {
                if n == to {
                    let mut path = vec![to.to_owned(), at.to_owned()];
                    let mut back = at;
                    while back != from {
                        back = seen[back];
                        path.push(back.to_owned());
                    }
                    path.reverse();
                    path.dedup();
                    return Some(path);
                }
                if !seen.contains_key(n) && n != from {
                    seen.insert(n, at);
                    queue.push_back(n);
                }
            }
        }
        None
    };
    let mut found = Vec::new();
    let mut covered = BTreeSet::new();
    for node in nodes {
        if covered.contains(*node) {
            continue;
        }
        if let Some(mut cycle) = reaches(node, node) {
            if cycle.first() != cycle.last() {
                cycle.push(node.to_string());
            }
            covered.extend(cycle.iter().cloned());
            found.push(cycle);
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    fn tree(files: &[(&str, &str)]) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("layers-{}-{}", std::process::id(), files.len()));
        let _ = std::fs::remove_dir_all(&dir);
        for (path, text) in files {
            let file = dir.join(path);
            std::fs::create_dir_all(file.parent().unwrap()).unwrap();
            std::fs::write(file, text).unwrap();
        }
        dir
    }

    const FLOORS: &[Floor] = &[
        Floor { name: "core", parts: &["core"], strict: true, neighbours: None },
        Floor { name: "top", parts: &["http", "proxy", "mcp"], strict: true, neighbours: Some(&[("mcp", "proxy")]) },
    ];

    #[test]
    fn a_tree_that_looks_down_passes() {
        let dir = tree(&[
            ("lib.rs", "mod core; pub mod http; pub use self::core::peer::Peer;"),
            ("core/mod.rs", "pub mod jsonrpc; pub mod peer;"),
            ("core/jsonrpc.rs", "pub struct Id;"),
            ("core/peer.rs", "use super::jsonrpc::Id; pub struct Peer(Id);"),
            ("http.rs", "fn f(_: crate::Peer) { let _ = crate::core::jsonrpc::Id; }"),
        ]);
        let report = check(&dir, FLOORS).unwrap();
        assert_eq!(report.violations, Vec::<String>::new());
        assert!(report.edges.contains(&("http".into(), "core::peer".into())), "{:?}", report.edges);
        assert!(report.edges.contains(&("core::peer".into(), "core::jsonrpc".into())));
    }

    #[test]
    fn a_cycle_in_the_core_an_upward_reference_and_a_neighbour_fail() {
        let dir = tree(&[
            ("lib.rs", "mod core; mod http; mod proxy; mod mcp; mod stray;"),
            ("core/mod.rs", "mod a; mod b;"),
            // A cycle through a macro's tokens, which syn does not parse as paths.
            ("core/a.rs", "fn f() { tokio::select! { _ = crate::core::b::g() => {} } }"),
            ("core/b.rs", "use super::a; fn g() { let _ = crate::http::X; }"),
            ("http.rs", "pub struct X;"),
            ("proxy.rs", "use crate::mcp::Y;"),
            ("mcp.rs", "pub struct Y; use crate::proxy::Z;"),
            ("stray.rs", ""),
        ]);
        let report = check(&dir, FLOORS).unwrap();
        let all = report.violations.join("\n");
        assert!(all.contains("module `stray` has no floor"), "{all}");
        assert!(all.contains("`core::b` (core) refers to `http`, on the floor above it"), "{all}");
        assert!(all.contains("refer to each other: core::a → core::b → core::a"), "{all}");
        assert!(all.contains("`proxy` refers to `mcp`"), "{all}");
        assert!(!all.contains("`mcp` refers to `proxy`"), "{all}");
    }
}
