//! Times the phases of code generation on the pinned schema (`schema/json`):
//! `cargo run --release -p xtask --example profile_codegen`.

use std::time::Instant;

use xtask::codegen::{self, Gating, Settings, load};

fn main() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../schema/json");
    let t = Instant::now();
    let v1 = load::load_version(&dir.join("v1")).expect("loads");
    let v2 = load::load_version(&dir.join("v2")).expect("loads");
    println!("load (v1 + v2, 8 files):   {:>6.1} ms", t.elapsed().as_secs_f64() * 1e3);
    let t = Instant::now();
    let m1 = codegen::build_model(&v1, Gating::Table).expect("model");
    let mut v2s = v2.clone();
    v2s.schema_unstable = None;
    let m2 = codegen::build_model(&v2s, Gating::AllInOne).expect("model");
    println!("classify + merge:          {:>6.1} ms", t.elapsed().as_secs_f64() * 1e3);
    let t = Instant::now();
    let items: Vec<_> = m1.items.iter().chain(&m2.items).map(|i| codegen::emit::item(i, &m1.items)).collect();
    let methods = (codegen::emit::methods(&m1), codegen::emit::methods(&m2));
    println!("emit tokens:               {:>6.1} ms", t.elapsed().as_secs_f64() * 1e3);
    let t = Instant::now();
    let all: proc_macro2::TokenStream = items.into_iter().chain([methods.0, methods.1]).collect();
    let file: syn::File = syn::parse2(all).expect("parses");
    println!("syn parse:                 {:>6.1} ms", t.elapsed().as_secs_f64() * 1e3);
    let t = Instant::now();
    let text = prettyplease::unparse(&file);
    println!("prettyplease:              {:>6.1} ms ({} lines)", t.elapsed().as_secs_f64() * 1e3, text.lines().count());
    let t = Instant::now();
    let files = codegen::generate(&Settings::new(&dir, "v1.7.0")).expect("generates");
    println!("generate (whole):          {:>6.1} ms ({} files)", t.elapsed().as_secs_f64() * 1e3, files.len());
}
