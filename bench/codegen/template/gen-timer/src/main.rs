//! Usage: codegen-gen-timer SCHEMA_DIR TAG RUNS
//! Calls `xtask::codegen::generate` (v1 + unstable + v2, formatted, nothing written) RUNS times
//! after one warm-up call and prints one duration in milliseconds per line.
use std::time::Instant;

fn main() {
    let mut args = std::env::args().skip(1);
    let dir = args.next().expect("SCHEMA_DIR");
    let tag = args.next().expect("TAG");
    let runs: usize = args.next().map(|s| s.parse().expect("RUNS")).unwrap_or(20);
    let settings = xtask::codegen::Settings::new(&dir, &tag);
    let files = xtask::codegen::generate(&settings).expect("codegen failed");
    eprintln!("{} files", files.len());
    for _ in 0..runs {
        let started = Instant::now();
        let files = xtask::codegen::generate(&settings).expect("codegen failed");
        let ms = started.elapsed().as_secs_f64() * 1e3;
        std::hint::black_box(files);
        println!("{ms:.2}");
    }
}
