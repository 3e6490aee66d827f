//! Writes the seed corpus of every target from the spec examples:
//! `cargo run --manifest-path fuzz/Cargo.toml --example seed_corpus [SPEC_DIR]`
//! (default `../shared/acp-spec/v1` from the repository root) into `fuzz/corpus/<target>/`.

use std::path::{Path, PathBuf};

fn main() -> std::io::Result<()> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let spec = std::env::args().nth(1).map(PathBuf::from).unwrap_or_else(|| root.join("../../shared/acp-spec/v1"));
    let seeds = acp_fuzz::seed_corpus(&spec)?;
    for (target, name, bytes) in &seeds {
        let dir = root.join("corpus").join(target);
        std::fs::create_dir_all(&dir)?;
        std::fs::write(dir.join(format!("spec-{name}")), bytes)?;
    }
    let count = |t: &str| seeds.iter().filter(|(target, ..)| *target == t).count();
    println!(
        "seeded from {}: framing_decode {}, router {}, router_v2 {}, typed_decode {}, http_server {}",
        spec.display(),
        count("framing_decode"),
        count("router"),
        count("router_v2"),
        count("typed_decode"),
        count("http_server")
    );
    Ok(())
}
