//! `spawn_agent`: a client connected to a real agent process in one call; the guard keeps the
//! process alive, dropping it closes the agent's stdin and then terminates the process group.
#![cfg(unix)]

mod typed_common;

use std::process::Command;
use std::time::{Duration, Instant};

use acp_rpc::client::ClientContext;
use acp_rpc::transport::{SpawnOptions, StderrMode};
use acp_rpc::{Connection, Error};
use acp_types::*;
use tokio::io::{AsyncBufReadExt, BufReader};
use typed_common::LIMIT;

/// A client that needs nothing from the agent.
struct Quiet;

impl Client<ClientContext> for Quiet {
    async fn session_request_permission(
        &self,
        _: RequestPermissionRequest,
        _: ClientContext,
    ) -> Result<RequestPermissionResponse, acp_types::Error> {
        Ok(RequestPermissionResponse::new(RequestPermissionOutcome::Cancelled))
    }
    async fn session_update(&self, _: SessionNotification, _: ClientContext) -> Result<(), acp_types::Error> {
        Ok(())
    }
}

/// A scripted agent: answers the first request (our ids start at 0) with an `initialize`
/// result, then does what `then` says.
fn scripted_agent(then: &str) -> Command {
    let mut c = Command::new("sh");
    c.arg("-c").arg(format!(
        r#"read line; printf '%s\n' '{{"jsonrpc":"2.0","id":0,"result":{{"protocolVersion":1,"_meta":{{"a":1}}}}}}'; {then}"#
    ));
    c
}

fn alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => !matches!(stat.rsplit_once(')').and_then(|(_, s)| s.trim_start().chars().next()), Some('Z')),
        Err(_) => false,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn typed_spawn_agent_connects_in_one_call_and_the_guard_terminates_the_process() {
    // `sleep` ignores its end of input: after the (short) grace period it gets SIGTERM.
    let options = SpawnOptions { kill_grace: Duration::from_millis(50), ..SpawnOptions::default() };
    let (agent, process) = Connection::new().spawn_agent(Quiet, scripted_agent("exec sleep 1000"), options).unwrap();
    let pid = process.id();
    let init = tokio::time::timeout(LIMIT, agent.initialize(InitializeRequest::new(ProtocolVersion(1))))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(init.protocol_version, ProtocolVersion(1));
    assert_eq!(init.meta.unwrap()["a"], 1);
    assert!(alive(pid));

    drop(process);
    tokio::time::timeout(LIMIT, agent.closed()).await.expect("connection ends with the guard");
    let t0 = Instant::now();
    while alive(pid) {
        assert!(t0.elapsed() < LIMIT, "agent process {pid} still alive");
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    let late = agent.new_session(NewSessionRequest::new("/w", vec![])).await;
    assert!(matches!(late, Err(Error::ConnectionClosed)), "{late:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn typed_spawned_agent_exiting_fails_pending_calls_and_closes_the_handle() {
    let options = SpawnOptions { stderr: StderrMode::Null, ..SpawnOptions::default() };
    // Answers `initialize`, then exits when it gets the next request.
    let (agent, mut process) =
        Connection::new().spawn_agent(Quiet, scripted_agent("read line; exit 3"), options).unwrap();
    agent.initialize(InitializeRequest::new(ProtocolVersion(1))).await.unwrap();
    let pending = agent.new_session(NewSessionRequest::new("/w", vec![])).await;
    assert!(matches!(pending, Err(Error::ConnectionClosed)), "{pending:?}");
    tokio::time::timeout(LIMIT, agent.closed()).await.unwrap();
    let status = tokio::time::timeout(LIMIT, process.wait()).await.unwrap().unwrap();
    assert_eq!(status.code(), Some(3));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_the_agent_process_closes_its_stdin_first_so_it_can_exit_by_itself() {
    // A long grace period: an agent that exits on end of input never needs a signal.
    let options = SpawnOptions { stderr: StderrMode::Piped, kill_grace: LIMIT };
    let script = "trap 'echo got-sigterm >&2' TERM; while read line; do :; done; echo end-of-input >&2";
    let (agent, mut process) = Connection::new().spawn_agent(Quiet, scripted_agent(script), options).unwrap();
    let pid = process.id();
    let mut stderr = BufReader::new(process.child_mut().take_stderr().unwrap());
    agent.initialize(InitializeRequest::new(ProtocolVersion(1))).await.unwrap();

    let t0 = Instant::now();
    drop(process);
    let mut said = Vec::new();
    let mut line = String::new();
    while tokio::time::timeout(LIMIT, stderr.read_line(&mut line)).await.expect("the agent exits").unwrap() > 0 {
        said.push(std::mem::take(&mut line));
    }
    assert_eq!(said, ["end-of-input\n"], "the agent saw its end of input before any signal");
    assert!(t0.elapsed() < LIMIT / 2, "{:?}", t0.elapsed());
    while alive(pid) {
        assert!(t0.elapsed() < LIMIT, "agent process {pid} still alive");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// An `AgentProcess` dropped just before the runtime shuts down (at the end of `main`): no grace
/// period can run any more, so the whole process group is killed, the agent's own children
/// included, instead of only the leader.
#[test]
fn an_agent_process_dropped_as_the_runtime_ends_takes_its_whole_group_down() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let grandchild = rt.block_on(async {
        // The agent starts a child of its own in its group and tells us its pid.
        let script = "sleep 1000 & echo $! >&2; while read line; do :; done; sleep 0.2";
        let options = SpawnOptions { stderr: StderrMode::Piped, ..SpawnOptions::default() };
        let (agent, mut process) = Connection::new().spawn_agent(Quiet, scripted_agent(script), options).unwrap();
        agent.initialize(InitializeRequest::new(ProtocolVersion(1))).await.unwrap();
        let mut stderr = BufReader::new(process.child_mut().take_stderr().unwrap());
        let mut line = String::new();
        tokio::time::timeout(LIMIT, stderr.read_line(&mut line)).await.unwrap().unwrap();
        line.trim().parse::<u32>().expect("the agent's child's pid")
        // `process` drops here, the runtime right after.
    });
    drop(rt);
    let t0 = Instant::now();
    let survived = loop {
        if !alive(grandchild) {
            break false;
        }
        if t0.elapsed() > Duration::from_secs(2) {
            break true;
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    if survived {
        // SAFETY: kill has no memory-safety preconditions; the pid is our stray grandchild.
        unsafe { libc::kill(grandchild as libc::pid_t, libc::SIGKILL) };
    }
    assert!(!survived, "the agent's child {grandchild} outlived the AgentProcess guard");
}
