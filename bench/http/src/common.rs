//! Shared helpers: the runtime, the prompt's text, memory readings, percentiles.

use std::time::Duration;

/// The text of every streamed `agent_message_chunk` (one LLM token or two), as in bench/runtime.
pub const TEXT: &str = "Hello, world! ";

/// The tokio multi-thread runtime (worker threads = cores), what `#[tokio::main]` gives.
pub fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("tokio runtime")
}

/// What a prompt asks the bench agent for: `"N"` or `"N P"` (N updates, P µs apart).
pub fn parse_prompt(text: &str) -> (u64, Duration) {
    let mut words = text.split_whitespace().map(|w| w.parse::<u64>().unwrap_or(0));
    let n = words.next().unwrap_or(0);
    let pause = Duration::from_micros(words.next().unwrap_or(0));
    (n, pause)
}

/// A field of `/proc/<pid>/status` in KiB (`VmRSS`, `VmHWM`).
pub fn status_kib(pid: &str, field: &str) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
}

/// Nearest-rank percentile of sorted samples.
pub fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let rank = ((p * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

/// CPU time a process has used so far: the run time of its live threads, in nanoseconds, from
/// `/proc/<pid>/task/*/schedstat` (`/proc/<pid>/stat`'s user + system time counts in 10 ms
/// ticks, too coarse for one turn of a fast server). A thread that ended between two readings
/// takes its time with it: the difference of two readings is taken with `saturating_sub`.
pub fn cpu_time(pid: &str) -> Option<Duration> {
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).ok()?;
    let mut nanos = 0u64;
    for task in tasks.flatten() {
        let Ok(stat) = std::fs::read_to_string(task.path().join("schedstat")) else { continue };
        nanos += stat.split_whitespace().next().and_then(|n| n.parse::<u64>().ok()).unwrap_or(0);
    }
    (nanos > 0).then(|| Duration::from_nanos(nanos))
}
