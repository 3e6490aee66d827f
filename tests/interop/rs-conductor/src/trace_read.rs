//! `trace-read FILE`: reads a conductor trace (newline-delimited JSON) with the official
//! conductor's `TraceEvent` type, the input of its sequence-diagram viewer. Prints the number of
//! events; exits 1 naming the first line that does not read.

use agent_client_protocol_conductor::trace::TraceEvent;

fn main() {
    let path = std::env::args().nth(1).expect("usage: trace-read FILE");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("cannot read {path}: {e}"));
    let mut events = 0;
    for (number, line) in text.lines().enumerate().filter(|(_, line)| !line.trim().is_empty()) {
        if let Err(e) = serde_json::from_str::<TraceEvent>(line) {
            eprintln!("line {}: not a trace event: {e}: {line}", number + 1);
            std::process::exit(1);
        }
        events += 1;
    }
    println!("{events}");
}
