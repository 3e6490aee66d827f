//! Contract line 8 over real pipes and real processes: peer death, process-group termination,
//! reaping; plus the child-process transport itself.
#![cfg(unix)]

mod common;

use std::process::Command;
use std::time::{Duration, Instant};

use acp_rpc::transport::{ChildProcess, SpawnOptions, StderrMode};
use acp_rpc::{Connection, Error};
use common::*;
use serde_json::json;
use tokio::io::{AsyncBufReadExt, BufReader};

fn sh(script: &str) -> Command {
    let mut c = Command::new("sh");
    c.arg("-c").arg(script);
    c
}

/// `None` once the process is gone, `Some('Z')` for a zombie, `Some(state)` otherwise.
fn proc_state(pid: u32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit_once(')')?.1.trim_start().chars().next()
}

/// Waits (bounded) until `done` holds.
async fn eventually(what: &str, mut done: impl FnMut() -> bool) {
    let t0 = Instant::now();
    while !done() {
        assert!(t0.elapsed() < LIMIT, "timed out waiting for: {what}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// A process we spawned must be reaped by us: no `/proc` entry at all (a zombie still has one).
async fn assert_reaped(pid: u32) {
    eventually(&format!("pid {pid} reaped"), || proc_state(pid).is_none()).await;
}

/// A grandchild is reaped by init (or whatever reaps orphans here), which we do not control:
/// dead is enough.
async fn assert_dead(pid: u32) {
    eventually(&format!("pid {pid} dead"), || matches!(proc_state(pid), None | Some('Z'))).await;
}

async fn read_pid(stderr: &mut BufReader<tokio::process::ChildStderr>) -> u32 {
    let mut line = String::new();
    tokio::time::timeout(LIMIT, stderr.read_line(&mut line)).await.unwrap().unwrap();
    line.trim().parse().unwrap_or_else(|_| panic!("not a pid: {line:?}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn contract_8_peer_death_fails_every_pending_call_within_100ms_and_leaves_no_process() {
    // `cat` echoes our requests back to us: when our (hanging) handler has seen one, the call
    // has certainly crossed the real pipes and is pending.
    let mut child = ChildProcess::spawn(Command::new("cat"), SpawnOptions::default()).unwrap();
    let pid = child.id();
    let (r, w) = child.take_transport().unwrap();
    let (handler, mut rx) = test_handler();
    let (peer, serve) = Connection::new().cancel_grace(Duration::from_millis(20)).serve(r, w, handler);
    let serve = tokio::spawn(serve);

    let calls: Vec<_> = (0..20)
        .map(|_| {
            let peer = peer.clone();
            tokio::spawn(async move { peer.request_raw("hang", None).await })
        })
        .collect();
    for _ in 0..20 {
        assert_eq!(next(&mut rx.started).await, "hang");
    }

    let t0 = Instant::now();
    // SAFETY: plain kill(2) of our own child.
    assert_eq!(unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) }, 0);
    for call in calls {
        let result = tokio::time::timeout(LIMIT, call).await.unwrap().unwrap();
        assert!(matches!(result, Err(Error::ConnectionClosed)), "{result:?}");
    }
    let elapsed = t0.elapsed();
    assert!(elapsed < Duration::from_millis(100), "pending calls failed only after {elapsed:?}");

    // `serve` returns: end of input, or the broken pipe when a cancelled handler's answer was
    // written first.
    let served = tokio::time::timeout(LIMIT, serve).await.unwrap().unwrap();
    assert!(matches!(served, Ok(()) | Err(Error::Io(_))), "{served:?}");
    drop(child);
    assert_reaped(pid).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn contract_8_process_group_gets_sigterm_when_the_handle_drops() {
    let options = SpawnOptions { stderr: StderrMode::Piped, kill_grace: Duration::from_secs(5) };
    // The agent starts a helper of its own: the whole group must go.
    let mut child = ChildProcess::spawn(sh("sleep 1000 & echo $! >&2; wait"), options).unwrap();
    let leader = child.id();
    let mut stderr = BufReader::new(child.take_stderr().unwrap());
    let helper = read_pid(&mut stderr).await;
    assert!(proc_state(helper).is_some_and(|s| s != 'Z'));

    let t0 = Instant::now();
    drop(child);
    assert_reaped(leader).await;
    assert_dead(helper).await;
    // SIGTERM did it, well before the 5 s SIGKILL deadline.
    assert!(t0.elapsed() < Duration::from_secs(4), "{:?}", t0.elapsed());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn contract_8_process_group_ignoring_sigterm_is_killed_after_the_grace_period() {
    let grace = Duration::from_millis(200);
    let options = SpawnOptions { stderr: StderrMode::Piped, kill_grace: grace };
    // Both the shell and its helper ignore SIGTERM.
    let mut child = ChildProcess::spawn(sh("trap '' TERM; sleep 1000 & echo $! >&2; wait"), options).unwrap();
    let leader = child.id();
    let mut stderr = BufReader::new(child.take_stderr().unwrap());
    let helper = read_pid(&mut stderr).await;

    let t0 = Instant::now();
    drop(child);
    assert_reaped(leader).await;
    assert_dead(helper).await;
    assert!(t0.elapsed() >= grace, "killed before the grace period: {:?}", t0.elapsed());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transport_child_process_round_trip_over_real_pipes() {
    // Through `cat`, our request comes back to our own handler, whose answer comes back as the
    // response: both directions of the connection over real pipes.
    let mut child = ChildProcess::spawn(Command::new("cat"), SpawnOptions::default()).unwrap();
    let pid = child.id();
    let (r, w) = child.take_transport().unwrap();
    assert!(child.take_transport().is_none());
    let (handler, _rx) = test_handler();
    let (peer, serve) = Connection::new().serve(r, w, handler);
    let serve = tokio::spawn(serve);
    for i in 0..100 {
        let v: serde_json::Value = peer.request("echo", &json!({"i": i, "_meta": {"x": [1, 2]}})).await.unwrap();
        assert_eq!(v, json!({"i": i, "_meta": {"x": [1, 2]}}));
    }
    let status = child.terminate().await.unwrap();
    assert!(!status.success());
    assert_reaped(pid).await;
    let served = tokio::time::timeout(LIMIT, serve).await.unwrap().unwrap();
    assert!(matches!(served, Ok(()) | Err(Error::Io(_))), "{served:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transport_child_stderr_is_piped_or_forwarded() {
    let options = SpawnOptions { stderr: StderrMode::Piped, ..SpawnOptions::default() };
    let mut child = ChildProcess::spawn(sh("echo agent-says-hello >&2; exec cat"), options).unwrap();
    let mut stderr = BufReader::new(child.take_stderr().unwrap());
    let mut line = String::new();
    tokio::time::timeout(LIMIT, stderr.read_line(&mut line)).await.unwrap().unwrap();
    assert_eq!(line, "agent-says-hello\n");

    // Forwarded to tracing (the default): the stderr pipe is consumed, so a chatty agent never
    // blocks on a full stderr pipe; it exits normally once its stdin closes.
    let mut child = ChildProcess::spawn(
        sh("i=0; while [ $i -lt 2000 ]; do echo 'a fairly long log line to fill the pipe' >&2; i=$((i+1)); done; cat"),
        SpawnOptions::default(),
    )
    .unwrap();
    assert!(child.take_stderr().is_none());
    let (_r, w) = child.take_transport().unwrap();
    drop(w);
    let status = tokio::time::timeout(LIMIT, child.wait()).await.unwrap().unwrap();
    assert!(status.success());
}

/// The `acp_rpc::process` events of this thread: `(pid, what)`, `what` a signal sent to the
/// group (`SIGTERM`, `SIGKILL`) or `reaped`.
#[derive(Clone, Default)]
struct ProcessLog(std::sync::Arc<std::sync::Mutex<Vec<(u64, String)>>>);

struct Fields(std::collections::HashMap<String, String>);

impl tracing::field::Visit for Fields {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        self.0.insert(field.name().to_owned(), format!("{value:?}"));
    }
    fn record_str(&mut self, field: &tracing::field::Field, value: &str) {
        self.0.insert(field.name().to_owned(), value.to_owned());
    }
}

impl tracing::Subscriber for ProcessLog {
    fn enabled(&self, metadata: &tracing::Metadata<'_>) -> bool {
        metadata.target() == "acp_rpc::process"
    }
    fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        tracing::span::Id::from_u64(1)
    }
    fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}
    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
    fn event(&self, event: &tracing::Event<'_>) {
        let mut fields = Fields(Default::default());
        event.record(&mut fields);
        let f = fields.0;
        let pid = f.get("pgid").or(f.get("pid")).and_then(|p| p.parse().ok()).expect("a pid");
        let what = f.get("signal").cloned().unwrap_or_else(|| "reaped".to_owned());
        self.0.lock().unwrap().push((pid, what));
    }
    fn enter(&self, _: &tracing::span::Id) {}
    fn exit(&self, _: &tracing::span::Id) {}
}

impl ProcessLog {
    fn of(&self, pid: u32) -> Vec<String> {
        self.0.lock().unwrap().iter().filter(|(p, _)| *p == u64::from(pid)).map(|(_, w)| w.clone()).collect()
    }
}

/// Once the leader is reaped its pid, the process group's id, may be given to another process:
/// the group is signalled only before (stragglers included), never after. One thread, so the
/// scoped log sees the detached reaper too.
#[tokio::test]
async fn the_process_group_is_never_signalled_after_its_leader_is_reaped() {
    let log = ProcessLog::default();
    let _log = tracing::subscriber::set_default(log.clone());
    let piped = SpawnOptions { stderr: StderrMode::Piped, kill_grace: LIMIT };

    // The leader exits by itself and `wait` reaps it; its helper outlives it until then.
    let mut waited = ChildProcess::spawn(sh("sleep 1000 & echo $! >&2"), piped.clone()).unwrap();
    let helper = read_pid(&mut BufReader::new(waited.take_stderr().unwrap())).await;
    assert!(waited.wait().await.unwrap().success());
    assert_dead(helper).await;
    let waited_pid = waited.id();
    drop(waited);

    // Dropped while running: the detached reaper.
    let dropped = ChildProcess::spawn(sh("exec sleep 1000"), piped.clone()).unwrap();
    let dropped_pid = dropped.id();
    drop(dropped);
    eventually("the dropped child reaped", || log.of(dropped_pid).contains(&"reaped".to_owned())).await;

    // Terminated.
    let terminated = ChildProcess::spawn(sh("exec sleep 1000"), piped).unwrap();
    let terminated_pid = terminated.id();
    terminated.terminate().await.unwrap();

    assert_eq!(log.of(waited_pid), ["SIGKILL", "reaped"]);
    assert_eq!(log.of(dropped_pid), ["SIGTERM", "SIGKILL", "reaped"]);
    assert_eq!(log.of(terminated_pid), ["SIGTERM", "SIGKILL", "reaped"]);
}
