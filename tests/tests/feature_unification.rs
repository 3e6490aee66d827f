//! `cargo run -p acp-rpc --example duet` after `cargo test --workspace` reuses the test build.
//!
//! Cargo compiles a crate once per set of features, and the set depends on which packages a
//! command selects: `cargo test --workspace` unifies the features every member asks for,
//! `cargo run -p acp-rpc` only those acp-rpc's own targets ask for. Where the two differ for
//! acp-rpc or anything below it, the demo command recompiles acp-rpc (about a minute on
//! 2 cores) right after a full test run. acp-rpc's dev-dependencies therefore name the
//! features the other members turn on (the lines marked "(unified)" in `runtime/Cargo.toml`),
//! and this test fails, naming what is missing, when a member turns on one more.

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;

/// `cargo tree` of a selection, one line per package and its features: `name vX.Y.Z (path) f1,f2`.
fn features(selection: &[&str]) -> BTreeSet<String> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    let out = Command::new(cargo)
        .current_dir(&root)
        .arg("tree")
        .args(selection)
        .args(["-e", "normal,build,dev", "--prefix", "none", "-f", "{p} {f}"])
        .output()
        .expect("runs cargo tree");
    assert!(out.status.success(), "cargo tree {selection:?} failed:\n{}", String::from_utf8_lossy(&out.stderr));
    lines(&String::from_utf8_lossy(&out.stdout))
}

/// The distinct package lines of `cargo tree`'s output, without its markers.
fn lines(tree: &str) -> BTreeSet<String> {
    tree.lines()
        .map(|line| line.trim_end_matches(" (*)").replace(" (proc-macro)", ""))
        .filter(|line| !line.trim().is_empty())
        .collect()
}

/// The lines of `narrow` that `wide` does not have: packages `narrow` builds with other features.
fn rebuilt(wide: &BTreeSet<String>, narrow: &BTreeSet<String>) -> Vec<String> {
    narrow.difference(wide).cloned().collect()
}

#[test]
fn the_demo_reuses_the_workspace_test_build() {
    let workspace = features(&["--workspace"]);
    let demo = features(&["-p", "acp-rpc"]);
    let missing = rebuilt(&workspace, &demo);
    assert!(
        missing.is_empty(),
        "`cargo run -p acp-rpc --example duet` would build these with other features than \
         `cargo test --workspace` does, and so compile acp-rpc again after a test run:\n  {}\n\
         Add the features the workspace build has for them (`cargo tree --workspace -e features -i NAME` \
         says who turns them on) to acp-rpc's dev-dependencies, the lines marked (unified) in \
         runtime/Cargo.toml.",
        missing.join("\n  ")
    );
}

/// The comparison itself: a package built with fewer features by the narrow selection is found,
/// one built the same way by both is not.
#[test]
fn a_feature_only_the_workspace_turns_on_is_found() {
    let wide =
        lines("acp-rpc v0.1.0 (/r/runtime) default,mcp-bridge\nlibc v0.2.191 default,std\nclap v4.5.0 default (*)\n");
    let narrow = lines("acp-rpc v0.1.0 (/r/runtime) default\nlibc v0.2.191 default,std (*)\n");
    assert_eq!(rebuilt(&wide, &narrow), ["acp-rpc v0.1.0 (/r/runtime) default"]);
    assert!(rebuilt(&wide, &lines("libc v0.2.191 default,std\n")).is_empty());
}
