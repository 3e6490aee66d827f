//! `cargo xtask soak`: two real processes talking ACP for a fixed time, with their memory and
//! file descriptors watched.
//!
//! The processes are the `soak_peer` binary of the test crate (tests/src/bin/soak_peer.rs):
//! `soak_peer client` spawns `soak_peer agent` through the runtime's `spawn_agent` and runs
//! concurrent sessions of prompt turns with streamed updates, permission requests, and both
//! kinds of cancellation (`session/cancel`, and `$/cancel_request` by dropping the call). It is
//! built here with `cargo build --release` (the soak owns both peers, so it does not depend on
//! the demo examples' behaviour).
//!
//! Every second this samples both processes: resident memory (`VmRSS` of `/proc/<pid>/status`)
//! and open file descriptors (entries of `/proc/<pid>/fd`). It fails when either process's RSS
//! at the end exceeds its RSS after the warm-up by more than the bound, when either has more
//! file descriptors at the end than after the warm-up, or when the client reports an error
//! (a turn that ended wrongly, a failed call). Linux only (`/proc`).

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::Value;

/// What to run and the pass bounds.
#[derive(Clone, Debug)]
pub struct Options {
    /// How long the two processes talk.
    pub seconds: u64,
    /// Concurrent sessions of the client.
    pub sessions: usize,
    /// Allowed RSS growth of each process from the end of the warm-up to the end, in KiB.
    pub max_rss_growth_kib: u64,
}

impl Options {
    /// The warm-up: allocator pools and buffers reach their working size; growth is measured
    /// from its end. A quarter of the run, at most 10 s.
    pub fn warmup(&self) -> Duration {
        Duration::from_secs((self.seconds / 4).clamp(1, 10))
    }
}

/// One reading of a process.
#[derive(Clone, Copy, Debug, Default)]
pub struct Reading {
    /// Resident set size, KiB.
    pub rss_kib: u64,
    /// Open file descriptors.
    pub fds: usize,
}

/// Both processes at one moment (`None`: the process was gone).
#[derive(Clone, Debug)]
pub struct Sample {
    /// Seconds since the client started.
    pub at: f64,
    /// The client, then the agent.
    pub readings: [Option<Reading>; 2],
}

/// Reads `VmRSS` and the fd count of `pid`; `None` if the process is gone.
pub fn read_process(pid: u32) -> Option<Reading> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let rss_kib = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())?;
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd")).ok()?.count();
    Some(Reading { rss_kib, fds })
}

/// Builds `soak_peer` (release) and returns its path.
fn build(root: &Path) -> Result<PathBuf, String> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    eprintln!("soak: building soak_peer (cargo build --release -p acp-tests --bin soak_peer)");
    let output = Command::new(cargo)
        .args([
            "build",
            "--release",
            "-p",
            "acp-tests",
            "--bin",
            "soak_peer",
            "--message-format=json-render-diagnostics",
        ])
        .current_dir(root)
        .stderr(Stdio::inherit())
        .output()
        .map_err(|e| format!("cannot run cargo: {e}"))?;
    if !output.status.success() {
        return Err("building soak_peer failed".into());
    }
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|m| m["reason"] == "compiler-artifact" && m["target"]["name"] == "soak_peer")
        .find_map(|m| m["executable"].as_str().map(PathBuf::from))
        .ok_or_else(|| "cargo built no soak_peer executable".into())
}

/// The outcome of a soak run.
#[derive(Debug)]
pub struct Report {
    /// The options it ran with.
    pub options: Options,
    /// The client's and the agent's pids.
    pub pids: [u32; 2],
    /// One sample per second.
    pub samples: Vec<Sample>,
    /// The client's summary line (counts of turns, updates, messages).
    pub summary: Value,
    /// Why the run fails; empty when it passes.
    pub failures: Vec<String>,
}

/// Per process: (first, after warm-up, last, max) readings.
fn figures(samples: &[Sample], which: usize, warmup: f64) -> Option<[Reading; 4]> {
    let readings: Vec<(f64, Reading)> = samples.iter().filter_map(|s| s.readings[which].map(|r| (s.at, r))).collect();
    let first = readings.first()?.1;
    let warm = readings.iter().find(|(at, _)| *at >= warmup).map_or(first, |(_, r)| *r);
    let last = readings.last()?.1;
    let max = Reading {
        rss_kib: readings.iter().map(|(_, r)| r.rss_kib).max()?,
        fds: readings.iter().map(|(_, r)| r.fds).max()?,
    };
    Some([first, warm, last, max])
}

impl Report {
    /// Whether the run passed.
    pub fn passed(&self) -> bool {
        self.failures.is_empty()
    }

    /// The report as Markdown (what BENCHMARKS.md "## Soak" shows).
    pub fn markdown(&self) -> String {
        let o = &self.options;
        let warm = o.warmup().as_secs_f64();
        let mut out = String::new();
        out.push_str(&format!(
            "{} s, {} concurrent sessions; client pid {}, agent pid {}; {} samples, one per second; growth measured from the end of the {:.0} s warm-up.\n\n",
            o.seconds, o.sessions, self.pids[0], self.pids[1], self.samples.len(), warm
        ));
        out.push_str("| process | RSS start | RSS after warm-up | RSS end | RSS max | RSS growth after warm-up | fds start | fds after warm-up | fds end | fds max |\n");
        out.push_str("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
        for (i, name) in ["client", "agent"].iter().enumerate() {
            match figures(&self.samples, i, warm) {
                Some([first, w, last, max]) => out.push_str(&format!(
                    "| {name} | {} | {} | {} | {} | {:+} KiB | {} | {} | {} | {} |\n",
                    kib(first.rss_kib),
                    kib(w.rss_kib),
                    kib(last.rss_kib),
                    kib(max.rss_kib),
                    last.rss_kib as i64 - w.rss_kib as i64,
                    first.fds,
                    w.fds,
                    last.fds,
                    max.fds
                )),
                None => out.push_str(&format!("| {name} | no sample | | | | | | | | |\n")),
            }
        }
        let n = |k: &str| self.summary[k].as_u64().unwrap_or(0);
        let seconds = self.summary["seconds"].as_f64().unwrap_or(o.seconds as f64).max(0.001);
        let messages = n("messagesIn") + n("messagesOut");
        out.push_str(&format!(
            "\nMessages exchanged: {messages} ({} in, {} out at the client; {:.0}/s). Prompt turns: {} ({} `end_turn`, {} cancelled by `session/cancel` during a permission request, {} cancelled by `$/cancel_request` while streaming). `session/update`s: {}. Permission requests: {}.\n",
            n("messagesIn"),
            n("messagesOut"),
            messages as f64 / seconds,
            n("turns"),
            n("turnsEndTurn"),
            n("turnsCancelledBySessionCancel"),
            n("turnsCancelledByDrop"),
            n("updates"),
            n("permissionRequests"),
        ));
        out.push_str(&format!(
            "\nBounds: RSS growth after the warm-up at most {} KiB per process; no more fds at the end than after the warm-up. Result: {}.\n",
            o.max_rss_growth_kib,
            if self.passed() { "**pass**".to_owned() } else { format!("**fail**: {}", self.failures.join("; ")) }
        ));
        out
    }
}

fn kib(k: u64) -> String {
    format!("{:.1} MiB", k as f64 / 1024.0)
}

/// Builds the peers, runs them for `options.seconds`, samples them every second, and judges.
pub fn run(root: &Path, options: &Options) -> Result<Report, String> {
    let exe = build(root)?;
    eprintln!("soak: {} s, {} sessions: {} client", options.seconds, options.sessions, exe.display());
    let mut client = Command::new(&exe)
        .args(["client", &options.seconds.to_string(), &options.sessions.to_string()])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .map_err(|e| format!("cannot start {}: {e}", exe.display()))?;
    let started = Instant::now();
    let client_pid = client.id();
    let stdout = client.stdout.take().ok_or("no stdout")?;
    let (lines_tx, lines) = mpsc::channel::<String>();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if lines_tx.send(line).is_err() {
                break;
            }
        }
    });
    let kill = |client: &mut std::process::Child, agent: Option<u32>, why: String| {
        end_client_and_agent(client, agent);
        why
    };
    let first = lines
        .recv_timeout(Duration::from_secs(30))
        .map_err(|_| kill(&mut client, None, "the client did not report its agent".into()))?;
    let agent_pid: u32 = first
        .strip_prefix("agent-pid ")
        .and_then(|p| p.trim().parse().ok())
        .ok_or_else(|| kill(&mut client, None, format!("unexpected first line from the client: {first}")))?;

    let mut samples = Vec::new();
    let mut summary = None;
    let limit = Duration::from_secs(options.seconds + 60);
    // The first sample a second in: at once, the agent may not have finished starting.
    let mut next = started + Duration::from_secs(1);
    loop {
        // Sample until the client reports its summary (its sessions are done; what follows is
        // shutdown, not steady state).
        match lines.recv_timeout(next.saturating_duration_since(Instant::now())) {
            Ok(line) => {
                if let Ok(v) = serde_json::from_str::<Value>(&line) {
                    summary = Some(v);
                    break;
                }
                eprintln!("soak: client: {line}");
                continue;
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
            Err(mpsc::RecvTimeoutError::Timeout) => {}
        }
        let sample = Sample {
            at: started.elapsed().as_secs_f64(),
            readings: [read_process(client_pid), read_process(agent_pid)],
        };
        if samples.len() % 10 == 0 {
            let show =
                |r: Option<Reading>| r.map_or("gone".to_owned(), |r| format!("{} KiB, {} fds", r.rss_kib, r.fds));
            eprintln!(
                "soak: {:>5.1} s  client {}  agent {}",
                sample.at,
                show(sample.readings[0]),
                show(sample.readings[1])
            );
        }
        samples.push(sample);
        if started.elapsed() > limit {
            let why = format!("the client is still running after {} s", limit.as_secs());
            return Err(kill(&mut client, Some(agent_pid), why));
        }
        next += Duration::from_secs(1);
    }
    let status = client.wait().map_err(|e| format!("cannot wait for the client: {e}"))?;
    let mut failures = Vec::new();
    if !status.success() {
        failures.push(format!("the client exited with {status}"));
    }
    let summary = summary.unwrap_or_else(|| {
        failures.push("the client printed no summary".into());
        Value::Null
    });
    let warm = options.warmup().as_secs_f64();
    for (i, name) in ["client", "agent"].iter().enumerate() {
        let Some([_, w, last, _]) = figures(&samples, i, warm) else {
            failures.push(format!("no sample of the {name}"));
            continue;
        };
        let growth = last.rss_kib.saturating_sub(w.rss_kib);
        if growth > options.max_rss_growth_kib {
            failures.push(format!(
                "{name} RSS grew by {growth} KiB after the warm-up (bound {} KiB)",
                options.max_rss_growth_kib
            ));
        }
        if last.fds > w.fds {
            failures.push(format!("{name} fds grew from {} to {}", w.fds, last.fds));
        }
    }
    if samples.len() < options.seconds as usize / 2 {
        failures.push(format!("only {} samples in {} s", samples.len(), options.seconds));
    }
    Ok(Report { options: options.clone(), pids: [client_pid, agent_pid], samples, summary, failures })
}

/// The parent pid and process group of a live process (`None`: gone, or a zombie).
fn parent_and_group(pid: u32) -> Option<(u32, u32)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // `pid (comm) state ppid pgrp ...`; the command name may hold spaces and parentheses.
    let mut fields = stat.get(stat.rfind(')')? + 1..)?.split_whitespace();
    if fields.next()? == "Z" {
        return None;
    }
    Some((fields.next()?.parse().ok()?, fields.next()?.parse().ok()?))
}

/// Ends the client and the agent on an error path. The runtime starts the agent as the leader
/// of its own process group (`spawn_agent`), so killing the client alone leaves the agent, and
/// whatever it started, running. Its group is killed too: `agent` when the client reported it,
/// otherwise the groups led by the client's children, looked up before the client dies (after,
/// they are reparented). A child that does not lead a group is killed alone.
fn end_client_and_agent(client: &mut std::process::Child, agent: Option<u32>) {
    let agents: Vec<u32> = match agent {
        Some(pid) => vec![pid],
        None => children(client.id()),
    };
    let targets: Vec<String> = agents
        .iter()
        .filter_map(|&pid| {
            let (_, group) = parent_and_group(pid)?;
            Some(if group == pid { format!("-{pid}") } else { pid.to_string() })
        })
        .collect();
    let _ = client.kill();
    let _ = client.wait();
    if !targets.is_empty() {
        let _ = Command::new("kill").args(["-s", "KILL", "--"]).args(&targets).stderr(Stdio::null()).status();
    }
}

/// The live children of `parent`.
fn children(parent: u32) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else { return Vec::new() };
    entries
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&pid| parent_and_group(pid).is_some_and(|(ppid, _)| ppid == parent))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_this_process() {
        let me = read_process(std::process::id()).expect("/proc/self is readable");
        assert!(me.rss_kib > 0 && me.fds >= 3, "{me:?}");
        assert!(read_process(u32::MAX).is_none());
    }

    /// A stand-in for `soak_peer client`: it starts an "agent" leading its own process group
    /// (as `spawn_agent` does), which starts a grandchild, and prints the agent's pid.
    fn client_with_agent() -> (std::process::Child, u32, u32) {
        let mut client = Command::new("sh")
            .args(["-c", "setsid sh -c 'sleep 120 & echo $!; wait' & wait"])
            .stdout(Stdio::piped())
            .spawn()
            .expect("sh and setsid");
        let mut line = String::new();
        BufReader::new(client.stdout.take().unwrap()).read_line(&mut line).unwrap();
        let grandchild: u32 = line.trim().parse().unwrap();
        let (agent, _) = parent_and_group(grandchild).expect("the agent's child runs");
        assert_eq!(parent_and_group(agent).map(|(_, g)| g), Some(agent), "the agent leads its own group");
        (client, agent, grandchild)
    }

    fn ended(pid: u32) -> bool {
        // The orphans are reaped by init; give the signal a moment to land.
        (0..50).any(|_| {
            std::thread::sleep(Duration::from_millis(20));
            parent_and_group(pid).is_none()
        })
    }

    #[test]
    fn an_error_ends_the_agent_and_its_group_too() {
        for known in [true, false] {
            let (mut client, agent, grandchild) = client_with_agent();
            end_client_and_agent(&mut client, known.then_some(agent));
            assert!(ended(agent) && ended(grandchild), "agent pid known: {known}");
        }
    }

    #[test]
    fn growth_is_measured_from_the_end_of_the_warm_up() {
        let r = |rss_kib, fds| Some(Reading { rss_kib, fds });
        let samples: Vec<Sample> = [(1.0, 100, 9), (5.0, 900, 12), (9.0, 950, 12), (12.0, 1000, 11)]
            .into_iter()
            .map(|(at, rss, fds)| Sample { at, readings: [r(rss, fds), None] })
            .collect();
        let [first, warm, last, max] = figures(&samples, 0, 5.0).unwrap();
        assert_eq!((first.rss_kib, warm.rss_kib, last.rss_kib, max.rss_kib), (100, 900, 1000, 1000));
        assert_eq!((warm.fds, last.fds, max.fds), (12, 11, 12));
        assert!(figures(&samples, 1, 5.0).is_none());
        let options = Options { seconds: 60, sessions: 4, max_rss_growth_kib: 8192 };
        assert_eq!(options.warmup(), Duration::from_secs(10));
        assert_eq!(Options { seconds: 2, ..options }.warmup(), Duration::from_secs(1));
    }
}
