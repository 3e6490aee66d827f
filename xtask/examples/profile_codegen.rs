//! Times the phases of code generation on the pinned schema (`schema/json`), best of 5:
//! `cargo run --release --manifest-path xtask/Cargo.toml --example profile_codegen`.
//!
//! The phase rows run on one thread, item by item as `generate` renders them; the last row is
//! `generate` itself, which spreads the rendering over the cores.

use std::time::{Duration, Instant};

use xtask::codegen::{self, Gating, Settings, docs, load};

fn best<T>(mut run: impl FnMut() -> T) -> (Duration, T) {
    let mut best = Duration::MAX;
    let mut out = None;
    for _ in 0..5 {
        let t = Instant::now();
        let value = run();
        best = best.min(t.elapsed());
        out = Some(value);
    }
    (best, out.expect("ran"))
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn main() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../schema/json");
    let (t, (v1, v2)) = best(|| {
        (load::load_version(&dir.join("v1")).expect("loads"), load::load_version(&dir.join("v2")).expect("loads"))
    });
    println!("load (v1 + v2):            {:>6.1} ms", ms(t));
    let (t, (m1, m2)) = best(|| {
        (
            codegen::build_model(&v1, Gating::Table).expect("model"),
            codegen::build_model(&v2, Gating::Table).expect("model"),
        )
    });
    println!("classify + merge:          {:>6.1} ms", ms(t));
    // What each piece of `generate` does before formatting: structs built as syntax, the other
    // items and the methods modules emitted as tokens and parsed.
    let syntax_all = || {
        let file = |items| syn::File { shebang: None, attrs: Vec::new(), items };
        let mut files: Vec<syn::File> = Vec::new();
        for model in [&m1, &m2] {
            files.extend(model.items.iter().map(|i| file(codegen::emit::item_syntax(i, model).expect("parses"))));
            files.push(syn::parse2(codegen::emit::methods(model)).expect("parses"));
        }
        files
    };
    let (t, _) = best(|| docs::deferred(syntax_all));
    println!("emit + syn:                {:>6.1} ms", ms(t));
    let (files, texts) = docs::deferred(syntax_all);
    let (t, lines) = best(|| {
        let text: String = files.iter().map(prettyplease::unparse).collect();
        docs::expand(&text, &texts).expect("expands").lines().count()
    });
    println!("prettyplease + docs:       {:>6.1} ms ({lines} lines)", ms(t));
    let (t, files) = best(|| codegen::generate(&Settings::new(&dir, "v1.7.0")).expect("generates"));
    println!("generate (whole, threads): {:>6.1} ms ({} files)", ms(t), files.len());
}
