//! Shared helpers: the runtime, the message, memory readings, percentiles, result lines.

use std::time::Duration;

/// The text of every `agent_message_chunk` (short, like one streamed LLM token or two).
pub const TEXT: &str = "Hello, world! ";
pub const SESSION: &str = "sess_bench_1";
/// Protocol v2: the `messageId` of every streamed chunk on the official and raw sides, as long
/// as the ids acp-rpc's `Turn` makes (`msg_agent_<process start, hex>_<counter>`), so the
/// lines on the wire are the same size.
pub const MESSAGE_ID: &str = "msg_agent_5f3c2a19d8e47_1";

/// The same multi-threaded tokio runtime for every implementation (worker threads = cores).
/// `BENCH_RUNTIME=current_thread` switches to a single-threaded runtime (both connections
/// on one thread: no cross-core wake-ups, far less noise on a small shared machine).
pub fn current_thread() -> bool {
    std::env::var("BENCH_RUNTIME").as_deref() == Ok("current_thread")
}

/// `BENCH_CALLER=task` runs a measurement in a task spawned on the runtime instead of in
/// `block_on` on the main thread. On the multi-thread runtime that decides whether each round
/// trip starts and ends with a wake-up of a parked thread (main thread ↔ worker), a fixed cost
/// of the machine that is the same for every implementation.
pub fn caller_in_task() -> bool {
    std::env::var("BENCH_CALLER").as_deref() == Ok("task")
}

/// Runs `fut` to completion on [`rt`], as the caller mode ([`caller_in_task`]) says.
pub fn run<F: std::future::Future<Output = ()> + Send + 'static>(fut: F) {
    let rt = rt();
    if caller_in_task() {
        rt.block_on(async move { tokio::spawn(fut).await.expect("benchmark task") });
    } else {
        rt.block_on(fut);
    }
}

pub fn rt() -> tokio::runtime::Runtime {
    if current_thread() {
        return tokio::runtime::Builder::new_current_thread().enable_all().build().expect("tokio runtime");
    }
    tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("tokio runtime")
}

/// `VmHWM` (peak resident set) of a process in KiB, from `/proc/<pid>/status`.
pub fn vm_hwm_kib(pid: &str) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
}

pub fn self_hwm_kib() -> u64 {
    vm_hwm_kib("self").unwrap_or(0)
}

/// Peak RSS of this process's (single, live) child process: the spawned agent. Found by
/// scanning `/proc` for our pid as parent, because the official SDK's `AcpAgent` does not
/// expose the child's pid.
pub fn child_hwm_kib() -> u64 {
    let me = std::process::id().to_string();
    let Ok(dir) = std::fs::read_dir("/proc") else { return 0 };
    for entry in dir.flatten() {
        let name = entry.file_name();
        let Some(pid) = name.to_str() else { continue };
        if !pid.bytes().all(|b| b.is_ascii_digit()) {
            continue;
        }
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else { continue };
        // `pid (comm) state ppid ...`; comm may contain spaces, so split after the last ')'.
        let Some(rest) = stat.rsplit_once(')').map(|(_, r)| r) else { continue };
        let mut fields = rest.split_whitespace();
        let _state = fields.next();
        if fields.next() == Some(me.as_str()) {
            return vm_hwm_kib(pid).unwrap_or(0);
        }
    }
    0
}

/// Throughput result line: `<kind> impl n secs msgs_per_s client_hwm_kib agent_hwm_kib`; the
/// kind is `pipe` (v1) or `pipe2` (protocol v2).
pub fn print_pipe(kind: &str, imp: &str, n: u64, elapsed: Duration, client_kib: u64, agent_kib: u64) {
    let secs = elapsed.as_secs_f64();
    println!("{kind}\t{imp}\t{n}\t{secs:.6}\t{:.0}\t{client_kib}\t{agent_kib}", n as f64 / secs);
}

/// Latency result line: `<kind> impl n p50_us p99_us max_us`; the kind gets `-ct` on the
/// current-thread runtime.
pub fn print_latency(kind: &str, imp: &str, mut samples: Vec<Duration>) {
    let kind = match (current_thread(), caller_in_task()) {
        (true, _) => format!("{kind}-ct"),
        (false, true) => format!("{kind}-task"),
        (false, false) => kind.to_string(),
    };
    samples.sort_unstable();
    let us = |d: Duration| d.as_secs_f64() * 1e6;
    let n = samples.len();
    println!(
        "{kind}\t{imp}\t{n}\t{:.2}\t{:.2}\t{:.2}",
        us(percentile(&samples, 0.50)),
        us(percentile(&samples, 0.99)),
        us(samples[n - 1])
    );
}

/// Nearest-rank percentile of sorted samples.
pub fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let rank = ((p * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

/// Round trips done before measuring, in `rtt`.
pub const RTT_WARMUP: u64 = 1_000;
