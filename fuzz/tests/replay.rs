//! Runs every target on stable, without libFuzzer: the seeds from the spec examples, the local
//! corpus and the checked-in regression inputs (`corpus/<target>/`, `regressions/<target>/`),
//! then a bounded number of random inputs made by mutating them (seeded, so a failure replays;
//! a failing input is written to `artifacts/<target>/`). `ACP_FUZZ_ITERATIONS` sets the number
//! of random inputs per target (default 2,000). This is also the fallback fuzzer where
//! `cargo fuzz` cannot run (see ../FUZZING.md).

use std::path::Path;

type Target = fn(&[u8]);

const TARGETS: &[(&str, Target)] = &[
    ("framing_decode", acp_fuzz::framing_decode),
    ("router", acp_fuzz::router),
    ("router_v2", acp_fuzz::router_v2),
    ("http_server", acp_fuzz::http_server),
    ("typed_decode", acp_fuzz::typed_decode),
];

/// The seeds made from the spec examples (as `examples/seed_corpus.rs` writes them), then the
/// files of `corpus/<target>/` (git-ignored: whatever local runs grew) and
/// `regressions/<target>/` (checked in).
fn inputs(target: &str) -> Vec<Vec<u8>> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let spec = root.join("../../shared/acp-spec/v1");
    let seeds =
        acp_fuzz::seed_corpus(&spec).unwrap_or_else(|e| panic!("cannot read the spec at {}: {e}", spec.display()));
    let mut out: Vec<Vec<u8>> = seeds.into_iter().filter(|(t, ..)| *t == target).map(|(.., bytes)| bytes).collect();
    for dir in ["corpus", "regressions"] {
        let Ok(entries) = std::fs::read_dir(root.join(dir).join(target)) else { continue };
        let mut files: Vec<_> = entries.filter_map(|e| e.ok().map(|e| e.path())).collect();
        files.sort();
        out.extend(files.iter().filter_map(|f| std::fs::read(f).ok()));
    }
    out
}

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

const TOKENS: &[&[u8]] = &[
    b"{",
    b"}",
    b"[",
    b"]",
    b"\"",
    b",",
    b":",
    b"\n",
    b"\r\n",
    b"null",
    b"-1",
    b"1e999",
    b"\"id\":",
    b"\"method\":",
    b"\"params\":",
    b"\"result\":",
    b"\"error\":",
    b"\"jsonrpc\":\"2.0\"",
    b"\"sessionId\":",
    b"\\u0000",
    b"\xff",
    b"\"session/prompt\"",
    b"\"session/cancel\"",
    b"\"$/cancel_request\"",
    b"\"_meta\":",
    b"\n###\n",
    b"\n\n",
    b"{conn}",
    b"\nacp-connection-id: ",
    b"\nacp-session-id: ",
    b"\ncontent-type: application/json",
    b"\naccept: text/event-stream",
    b"\nupgrade: websocket",
    b"GET /acp",
    b"POST /acp",
];

/// One random mutation: flip, insert, delete, duplicate a range, or splice a token.
fn mutate(rng: &mut Rng, input: &mut Vec<u8>) {
    let len = input.len();
    match rng.below(5) {
        0 if len > 0 => {
            let i = rng.below(len);
            input[i] ^= 1 << rng.below(8);
        }
        1 => {
            let i = rng.below(len + 1);
            input.insert(i, rng.next() as u8);
        }
        2 if len > 0 => {
            let i = rng.below(len);
            let n = rng.below(16).min(len - i);
            input.drain(i..i + n);
        }
        3 if len > 0 => {
            let i = rng.below(len);
            let n = rng.below(64).min(len - i);
            let copy = input[i..i + n].to_vec();
            let at = rng.below(len + 1);
            input.splice(at..at, copy);
        }
        _ => {
            let token = TOKENS[rng.below(TOKENS.len())];
            let at = rng.below(len + 1);
            input.splice(at..at, token.iter().copied());
        }
    }
}

#[test]
fn corpus_and_regressions_replay() {
    for (name, target) in TARGETS {
        let inputs = inputs(name);
        for input in &inputs {
            target(input);
        }
        eprintln!("{name}: {} corpus and regression inputs", inputs.len());
    }
}

#[test]
fn random_mutations_of_the_corpus() {
    let iterations: usize = std::env::var("ACP_FUZZ_ITERATIONS").ok().and_then(|v| v.parse().ok()).unwrap_or(2_000);
    for (t, (name, target)) in TARGETS.iter().enumerate() {
        let mut pool = inputs(name);
        if pool.is_empty() {
            pool.push(b"\0{}".to_vec());
        }
        let mut rng = Rng(0xF022 + t as u64);
        let started = std::time::Instant::now();
        for _ in 0..iterations {
            let mut input = pool[rng.below(pool.len())].clone();
            for _ in 0..1 + rng.below(8) {
                mutate(&mut rng, &mut input);
            }
            input.truncate(1 << 16);
            if let Err(panic) = std::panic::catch_unwind(|| target(&input)) {
                let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("artifacts").join(name);
                let _ = std::fs::create_dir_all(&dir);
                let file = dir.join(format!("replay-crash-{}", rng.next()));
                let _ = std::fs::write(&file, &input);
                eprintln!("{name}: failing input written to {}", file.display());
                std::panic::resume_unwind(panic);
            }
        }
        eprintln!("{name}: {iterations} random inputs in {:.1?}", started.elapsed());
    }
}
