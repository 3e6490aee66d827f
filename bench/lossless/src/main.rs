//! What a proxy pays for `acp_types::lossless` views, against the plain typed path.
//!
//! For three messages (a `session/prompt` request, a small `session/update` chunk and a
//! `tool_call_update` with 20 content blocks, each with unknown members and `_meta`), in ns per
//! message:
//!
//! - `decode`: `serde_json::from_str::<T>` (the plain path; it loses the unknown members);
//! - `decode + encode`: the same, then `serde_json::to_string`;
//! - `view, forwarded`: `Lossless::<T>::from_raw(&RawValue)` then `into_raw()`, unchanged;
//! - `view, changed`: the same with one change through the view (a block prepended, the
//!   session id, the tool call's status);
//! - `Value, changed`: the untyped lossless way, `serde_json::Value` parsed, changed by hand
//!   and written.
//!
//! Usage: `acp-lossless-bench [REPS] [ITERS]`. The variants are interleaved in each of the
//! REPS repetitions, and the table shows the median of each.

use std::hint::black_box;
use std::time::Instant;

use acp_types::lossless::Lossless;
use acp_types::{ContentBlock, PromptRequest, SessionNotification, SessionUpdate, TextContent, ToolCallStatus};
use serde_json::value::RawValue;
use serde_json::{Value, json};

/// One message and how each variant changes it.
struct Message {
    name: &'static str,
    text: String,
    decode: fn(&str),
    decode_encode: fn(&str),
    forward: fn(&RawValue),
    change: fn(&RawValue),
    change_value: fn(&str),
}

fn prompt() -> Message {
    let block = |i: usize| json!({"type": "text", "text": format!("Paragraph {i} of the user's message."), "x-cursor": {"line": i}});
    let text = json!({
        "sessionId": "sess_0123456789abcdef",
        "prompt": [block(1), block(2),
            {"type": "resource_link", "name": "main.rs", "uri": "file:///home/user/project/src/main.rs", "_meta": {"pinned": true}}],
        "_meta": {"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"},
        "x-editor": {"name": "zed", "version": "0.190.0"}
    })
    .to_string();
    Message {
        name: "session/prompt (3 blocks)",
        text,
        decode: |t| {
            black_box(serde_json::from_str::<PromptRequest>(t).unwrap());
        },
        decode_encode: |t| {
            let v: PromptRequest = serde_json::from_str(t).unwrap();
            black_box(serde_json::to_string(&v).unwrap());
        },
        forward: |raw| {
            black_box(Lossless::<PromptRequest>::from_raw(raw).unwrap().into_raw().unwrap());
        },
        change: |raw| {
            let mut view = Lossless::<PromptRequest>::from_raw(raw).unwrap();
            view.prompt.insert(0, ContentBlock::from(TextContent::new("Context from the proxy.")));
            black_box(view.into_raw().unwrap());
        },
        change_value: |t| {
            let mut v: Value = serde_json::from_str(t).unwrap();
            v["prompt"].as_array_mut().unwrap().insert(0, json!({"type": "text", "text": "Context from the proxy."}));
            black_box(serde_json::to_string(&v).unwrap());
        },
    }
}

fn chunk() -> Message {
    let text = json!({
        "sessionId": "sess_0123456789abcdef",
        "update": {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": "Let me look at the failing test first."}, "x-seq": 17},
        "_meta": {"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}
    })
    .to_string();
    Message {
        name: "session/update (message chunk)",
        text,
        decode: |t| {
            black_box(serde_json::from_str::<SessionNotification>(t).unwrap());
        },
        decode_encode: |t| {
            let v: SessionNotification = serde_json::from_str(t).unwrap();
            black_box(serde_json::to_string(&v).unwrap());
        },
        forward: |raw| {
            black_box(Lossless::<SessionNotification>::from_raw(raw).unwrap().into_raw().unwrap());
        },
        change: |raw| {
            let mut view = Lossless::<SessionNotification>::from_raw(raw).unwrap();
            view.session_id = "sess_renamed_by_proxy".into();
            black_box(view.into_raw().unwrap());
        },
        change_value: |t| {
            let mut v: Value = serde_json::from_str(t).unwrap();
            v["sessionId"] = json!("sess_renamed_by_proxy");
            black_box(serde_json::to_string(&v).unwrap());
        },
    }
}

fn tool_call_update() -> Message {
    let content: Vec<Value> = (0..20)
        .map(|i| json!({"type": "content", "content": {"type": "text", "text": format!("line {i}: test result ok, 0.{i:03}s")}, "x-row": i}))
        .collect();
    let text = json!({
        "sessionId": "sess_0123456789abcdef",
        "update": {
            "sessionUpdate": "tool_call_update", "toolCallId": "call_42", "status": "in_progress",
            "content": content,
            "locations": [{"path": "/home/user/project/src/lib.rs", "line": 120}],
            "rawOutput": {"exitCode": 0, "stdout": "test result: ok. 20 passed"},
            "x-tool": {"runner": "cargo", "elapsedMs": 1234.5}
        },
        "_meta": {"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}
    })
    .to_string();
    Message {
        name: "tool_call_update (20 blocks)",
        text,
        decode: |t| {
            black_box(serde_json::from_str::<SessionNotification>(t).unwrap());
        },
        decode_encode: |t| {
            let v: SessionNotification = serde_json::from_str(t).unwrap();
            black_box(serde_json::to_string(&v).unwrap());
        },
        forward: |raw| {
            black_box(Lossless::<SessionNotification>::from_raw(raw).unwrap().into_raw().unwrap());
        },
        change: |raw| {
            let mut view = Lossless::<SessionNotification>::from_raw(raw).unwrap();
            if let SessionUpdate::ToolCallUpdate(update) = &mut view.update {
                update.status = Some(Some(ToolCallStatus::Completed));
            }
            black_box(view.into_raw().unwrap());
        },
        change_value: |t| {
            let mut v: Value = serde_json::from_str(t).unwrap();
            v["update"]["status"] = json!("completed");
            black_box(serde_json::to_string(&v).unwrap());
        },
    }
}

/// ns per call of `f`, over `iters` calls.
fn time(iters: u32, mut f: impl FnMut()) -> f64 {
    let start = Instant::now();
    for _ in 0..iters {
        f();
    }
    start.elapsed().as_nanos() as f64 / f64::from(iters)
}

fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(f64::total_cmp);
    xs[xs.len() / 2]
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let reps: usize = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(9);
    let iters: u32 = args.get(2).and_then(|a| a.parse().ok()).unwrap_or(20_000);
    const VARIANTS: [&str; 5] = ["decode", "decode + encode", "view, forwarded", "view, changed", "Value, changed"];
    println!("| message (bytes) | {} | changed view / decode + encode |", VARIANTS.join(" | "));
    println!("|---|{}---:|", "---:|".repeat(VARIANTS.len()));
    for m in [prompt(), chunk(), tool_call_update()] {
        let raw = RawValue::from_string(m.text.clone()).unwrap();
        // The view's changed output keeps every unknown member (checked once, outside the timing).
        let mut view = Lossless::<Value>::from_raw(&*raw).unwrap();
        view.edit();
        assert_eq!(view.to_raw().unwrap().get(), m.text);
        let mut samples: Vec<Vec<f64>> = vec![Vec::new(); VARIANTS.len()];
        for _ in 0..reps {
            samples[0].push(time(iters, || (m.decode)(&m.text)));
            samples[1].push(time(iters, || (m.decode_encode)(&m.text)));
            samples[2].push(time(iters, || (m.forward)(&raw)));
            samples[3].push(time(iters, || (m.change)(&raw)));
            samples[4].push(time(iters, || (m.change_value)(&m.text)));
        }
        let ns: Vec<f64> = samples.into_iter().map(median).collect();
        let cells: Vec<String> = ns.iter().map(|n| format!("{n:.0}")).collect();
        println!("| {} ({}) | {} | {:.2}× |", m.name, m.text.len(), cells.join(" | "), ns[3] / ns[1]);
    }
}
