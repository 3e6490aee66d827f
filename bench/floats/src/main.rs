//! What serde_json's exact float parsing (`float_roundtrip`, on by default in acp-types) costs
//! when decoding, in ns per message or per number. run.sh builds this twice, with and without
//! the feature, and alternates the two builds.
//!
//! - a `tool_call` session update whose `rawInput` holds 16 numbers of 17 significant digits
//!   (what a float printed by JavaScript or Rust looks like);
//! - the same update with 16 numbers of two decimals;
//! - the same update with 16 integers (no float parsing at all: the control);
//! - a bare array of 100,000 17-digit numbers, decoded as `Vec<f64>`, per number.
//!
//! Usage: `acp-floats-bench [REPS] [ITERS]`; prints one line per input with the median of
//! REPS measurements, and whether this build parses floats exactly.

use std::hint::black_box;
use std::time::Instant;

use acp_types::SessionNotification;
use serde_json::json;

/// `count` pseudo-random numbers in [0, 1000), printed by `print`.
fn numbers(count: usize, print: impl Fn(f64) -> serde_json::Value) -> Vec<serde_json::Value> {
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    (0..count)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            print((x >> 11) as f64 / (1u64 << 53) as f64 * 1000.0)
        })
        .collect()
}

fn tool_call(values: Vec<serde_json::Value>) -> String {
    json!({
        "sessionId": "sess_0123456789abcdef",
        "update": {
            "sessionUpdate": "tool_call",
            "toolCallId": "call_1",
            "title": "Move the selection",
            "kind": "edit",
            "status": "pending",
            "rawInput": {"path": "/home/user/project/src/main.rs", "points": values}
        }
    })
    .to_string()
}

fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(f64::total_cmp);
    xs[xs.len() / 2]
}

fn main() {
    let mut args = std::env::args().skip(1).map(|a| a.parse::<usize>().expect("a number"));
    let reps = args.next().unwrap_or(9);
    let iters = args.next().unwrap_or(20_000);
    let long = tool_call(numbers(16, |f| json!(f)));
    let short = tool_call(numbers(16, |f| json!((f * 100.0).round() / 100.0)));
    let integers = tool_call(numbers(16, |f| json!(f as u64)));
    let array = serde_json::to_string(&numbers(100_000, |f| json!(f))).unwrap();

    let mut per_message: [Vec<f64>; 3] = Default::default();
    let mut per_number = Vec::new();
    for _ in 0..reps {
        for (times, text) in per_message.iter_mut().zip([&long, &short, &integers]) {
            let start = Instant::now();
            for _ in 0..iters {
                black_box(acp_types::decode::from_str::<SessionNotification>(black_box(text)).unwrap());
            }
            times.push(start.elapsed().as_nanos() as f64 / iters as f64);
        }
        let start = Instant::now();
        black_box(serde_json::from_str::<Vec<f64>>(black_box(&array)).unwrap());
        per_number.push(start.elapsed().as_nanos() as f64 / 100_000.0);
    }
    let exact = cfg!(feature = "float_roundtrip");
    let [long_t, short_t, int_t] = per_message.map(median);
    println!("float_roundtrip={exact} tool_call, 16 numbers of 17 digits: {long_t:.0} ns/message");
    println!("float_roundtrip={exact} tool_call, 16 numbers of 2 decimals: {short_t:.0} ns/message");
    println!("float_roundtrip={exact} tool_call, 16 integers: {int_t:.0} ns/message");
    println!("float_roundtrip={exact} Vec<f64> of 17-digit numbers: {:.1} ns/number", median(per_number));
}
