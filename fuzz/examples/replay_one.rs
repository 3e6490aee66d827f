//! Runs one target on input files, on stable and without libFuzzer, e.g. to reproduce a crash:
//! `cargo run --release --manifest-path fuzz/Cargo.toml --example replay_one -- router FILE...`
//! With `ACP_FUZZ_DEBUG=1`, the router targets print what the connection wrote.

fn main() {
    let mut args = std::env::args().skip(1);
    let target = args.next().unwrap_or_default();
    let run: fn(&[u8]) = match target.as_str() {
        "framing_decode" => acp_fuzz::framing_decode,
        "router" => acp_fuzz::router,
        "router_v2" => acp_fuzz::router_v2,
        "typed_decode" => acp_fuzz::typed_decode,
        "http_server" => acp_fuzz::http_server,
        _ => {
            eprintln!("usage: replay_one framing_decode|router|router_v2|typed_decode|http_server FILE...");
            std::process::exit(2);
        }
    };
    for file in args {
        let data = std::fs::read(&file).unwrap_or_else(|e| panic!("cannot read {file}: {e}"));
        let started = std::time::Instant::now();
        run(&data);
        eprintln!("{file}: ok in {:.1?}", started.elapsed());
    }
}
