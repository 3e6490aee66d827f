//! A spawned agent process as a transport: its own process group, its stderr forwarded or
//! kept, and termination (SIGTERM, a grace period, SIGKILL) that never signals a reaped group.

use std::io;
use std::process::ExitStatus;
use std::time::Duration;

use tokio::process::{Child, ChildStderr, ChildStdin, ChildStdout};

use crate::core::framing::{Frame, LineReader};

/// Where a spawned agent's stderr goes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum StderrMode {
    /// Each line becomes a `tracing` event (target `acp_rpc::agent_stderr`, level INFO).
    #[default]
    Trace,
    /// Shared with this process's stderr.
    Inherit,
    /// Discarded.
    Null,
    /// Kept for the caller: [`ChildProcess::take_stderr`].
    Piped,
}

/// Options for [`ChildProcess::spawn`].
#[derive(Clone, Debug)]
pub struct SpawnOptions {
    /// Where stderr goes (default: [`StderrMode::Trace`]).
    pub stderr: StderrMode,
    /// How long the process group has between SIGTERM and SIGKILL (default: 2 s); for an
    /// [`AgentProcess`](crate::AgentProcess), also how long the agent has to exit on end of
    /// input before SIGTERM.
    pub kill_grace: Duration,
}

impl Default for SpawnOptions {
    fn default() -> Self {
        SpawnOptions { stderr: StderrMode::Trace, kill_grace: Duration::from_secs(2) }
    }
}

/// A spawned agent process whose stdin/stdout are the transport.
///
/// The process leads its own process group (so its children can be signalled with it). When
/// the handle drops, the group gets SIGTERM, and SIGKILL after the grace period if the leader
/// has not exited by then; a detached task reaps the leader, so no zombie remains. Members of
/// the group that outlive the leader are killed once it has exited, just before it is reaped.
///
/// The group is only ever signalled while the leader is not reaped yet: until then its pid,
/// which is the group id, cannot be given to another process. Once this handle has reaped the
/// leader ([`ChildProcess::wait`]), it signals nothing any more.
#[derive(Debug)]
pub struct ChildProcess {
    child: Option<Child>,
    pid: u32,
    /// The leader was reaped (by [`ChildProcess::wait`]): its pid may be reused, never signal it.
    reaped: bool,
    stdin: Option<ChildStdin>,
    stdout: Option<ChildStdout>,
    stderr: Option<ChildStderr>,
    kill_grace: Duration,
}

impl ChildProcess {
    /// Spawns `command` with piped stdin/stdout in a new process group. Needs a tokio runtime.
    pub fn spawn(command: std::process::Command, options: SpawnOptions) -> io::Result<Self> {
        let mut command = tokio::process::Command::from(command);
        command
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(match options.stderr {
                StderrMode::Trace | StderrMode::Piped => std::process::Stdio::piped(),
                StderrMode::Inherit => std::process::Stdio::inherit(),
                StderrMode::Null => std::process::Stdio::null(),
            })
            // A fallback only: normally `Drop` hands the child to the reaper first.
            .kill_on_drop(true);
        #[cfg(unix)]
        command.process_group(0);
        let mut child = command.spawn()?;
        let pid = child.id().ok_or_else(|| io::Error::other("spawned process has no pid"))?;
        let stdin = child.stdin.take();
        let stdout = child.stdout.take();
        let mut stderr = child.stderr.take();
        if options.stderr == StderrMode::Trace {
            if let Some(stderr) = stderr.take() {
                tokio::spawn(forward_stderr(stderr, pid));
            }
        }
        let kill_grace = options.kill_grace;
        Ok(ChildProcess { child: Some(child), pid, reaped: false, stdin, stdout, stderr, kill_grace })
    }

    /// The transport: `(reader, writer)` = (the child's stdout, the child's stdin). `None` the
    /// second time.
    pub fn take_transport(&mut self) -> Option<(ChildStdout, ChildStdin)> {
        Some((self.stdout.take()?, self.stdin.take()?))
    }

    /// The child's stderr, with [`StderrMode::Piped`].
    pub fn take_stderr(&mut self) -> Option<ChildStderr> {
        self.stderr.take()
    }

    /// The child's pid (also its process group id).
    pub fn id(&self) -> u32 {
        self.pid
    }

    /// Waits for the process to exit by itself. Processes the leader leaves behind in its
    /// group (children it started and did not end) are then killed, before the leader is
    /// reaped (see [`ChildProcess`]).
    pub async fn wait(&mut self) -> io::Result<ExitStatus> {
        let child = self.child.as_mut().ok_or_else(|| io::Error::other("process already terminated"))?;
        // (When its exit cannot be watched, the group is left alone: killing it might kill the
        // leader we are to wait for.)
        if !self.reaped && exited(self.pid).await.is_ok() {
            signal_group(self.pid, Signal::Kill);
        }
        let status = child.wait().await?;
        if !self.reaped {
            self.reaped = true;
            tracing::debug!(target: "acp_rpc::process", pid = self.pid, "agent process reaped");
        }
        Ok(status)
    }

    /// Terminates the process group now (SIGTERM, then SIGKILL after the grace period) and
    /// waits until the leader is reaped.
    pub async fn terminate(mut self) -> io::Result<ExitStatus> {
        self.terminate_now().await
    }

    /// [`ChildProcess::terminate`] for an owner that cannot give the handle away.
    pub(crate) async fn terminate_now(&mut self) -> io::Result<ExitStatus> {
        let mut child = self.child.take().ok_or_else(|| io::Error::other("process already terminated"))?;
        if self.reaped {
            return child.wait().await;
        }
        signal_group(self.pid, Signal::Term);
        reap(Leader { child, pgid: self.pid, group_ended: false }, self.kill_grace, &[Signal::Kill]).await
    }

    /// Ends the process whose stdin its holder (a connection) is closing right now: it has the
    /// grace period to exit by itself on end of input; then the group gets SIGTERM, and SIGKILL
    /// after the grace period again. A detached task does it; without a runtime the group is
    /// killed at once, as on drop.
    pub(crate) fn end_after_end_of_input(&mut self) {
        self.end_detached(None, &[Signal::Term, Signal::Kill]);
    }

    /// Sends `first` to the group (if any) and leaves the rest of `escalation` (see [`reap`])
    /// to a detached task.
    fn end_detached(&mut self, first: Option<Signal>, escalation: &'static [Signal]) {
        let Some(child) = self.child.take() else { return };
        // Our end of stdin, if the transport was never taken, closes too: the agent sees end
        // of input as well as any signal.
        self.stdin.take();
        if self.reaped {
            // `wait` reaped the leader and killed the rest of its group: nothing is left.
            return;
        }
        if let Some(signal) = first {
            signal_group(self.pid, signal);
        }
        match tokio::runtime::Handle::try_current() {
            Ok(handle) => {
                // Built here, not in the task: a task that never runs still kills the group.
                let leader = Leader { child, pgid: self.pid, group_ended: false };
                let grace = self.kill_grace;
                handle.spawn(async move {
                    let _ = reap(leader, grace, escalation).await;
                });
            }
            Err(_) => {
                // No runtime to wait in: kill at once (the leader is not reaped, so its group id
                // is still its own); tokio reaps dropped children later.
                signal_group(self.pid, Signal::Kill);
                drop(child);
            }
        }
    }
}

impl Drop for ChildProcess {
    fn drop(&mut self) {
        self.end_detached(Some(Signal::Term), &[Signal::Kill]);
    }
}

/// Ends the process group and reaps its leader: for each of `escalation`, gives the leader
/// `grace` to exit and sends that signal to the group if it has not. Once the leader has exited
/// the rest of the group is killed, and only then is the leader reaped.
async fn reap(mut leader: Leader, grace: Duration, escalation: &[Signal]) -> io::Result<ExitStatus> {
    let pgid = leader.pgid;
    let mut exit = None;
    for &signal in escalation {
        match tokio::time::timeout(grace, exited(pgid)).await {
            Ok(result) => {
                exit = Some(result);
                break;
            }
            Err(_) => signal_group(pgid, signal),
        }
    }
    let exit = match exit {
        Some(exit) => exit,
        None => exited(pgid).await,
    };
    // No signals here, nor a way to watch the exit: stop it rather than wait for it forever.
    #[cfg(not(unix))]
    if exit.is_err() {
        let _ = leader.child.start_kill();
    }
    kill_stragglers(pgid, exit);
    leader.group_ended = true;
    let status = leader.child.wait().await;
    tracing::debug!(target: "acp_rpc::process", pid = pgid, "agent process reaped");
    status
}

/// A group leader that [`reap`] is ending. Dropped before its group was dealt with (the
/// runtime shut down during a grace period, e.g. `main` returned right after the handle was
/// dropped, or the task never ran), it kills the group at once: no time is left for a grace
/// period, and the leader is not reaped yet, so the group id is still its own.
struct Leader {
    child: Child,
    pgid: u32,
    group_ended: bool,
}

impl Drop for Leader {
    fn drop(&mut self) {
        if !self.group_ended {
            signal_group(self.pgid, Signal::Kill);
        }
    }
}

/// Kills what is left of the group of a leader that `exited` (and that we have not reaped, so
/// its pid, the group id, is still its own): members that ignored SIGTERM or never got it.
fn kill_stragglers(pgid: u32, exited: io::Result<()>) {
    match exited {
        Ok(()) => signal_group(pgid, Signal::Kill),
        // Not our child (any more): someone else reaped it, its group id may be reused.
        #[cfg(unix)]
        Err(e) if e.raw_os_error() == Some(libc::ECHILD) => {}
        // Cannot tell whether it exited; it is not reaped, so the group is still its own.
        Err(_) => signal_group(pgid, Signal::Kill),
    }
}

/// Resolves once our child `pid` has exited, without reaping it.
#[cfg(unix)]
async fn exited(pid: u32) -> io::Result<()> {
    use tokio::signal::unix::{SignalKind, signal};
    // Listening before the first look, so an exit in between is not missed.
    let mut sigchld = signal(SignalKind::child())?;
    while !has_exited(pid)? {
        if sigchld.recv().await.is_none() {
            return Err(io::Error::other("SIGCHLD notifications ended"));
        }
    }
    Ok(())
}

#[cfg(not(unix))]
async fn exited(_pid: u32) -> io::Result<()> {
    Err(io::ErrorKind::Unsupported.into())
}

/// Whether our child `pid` has exited. `WNOWAIT` leaves it waitable (a zombie): its pid cannot
/// be reused until `Child::wait` reaps it.
#[cfg(unix)]
fn has_exited(pid: u32) -> io::Result<bool> {
    loop {
        // SAFETY: siginfo_t is a plain C struct, valid when zeroed; a zero `si_pid` after a
        // WNOHANG call means "not exited" (the portable way, see waitid(2)).
        let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
        // SAFETY: `info` is a valid, writable siginfo_t for the duration of the call.
        let r = unsafe {
            libc::waitid(libc::P_PID, pid as libc::id_t, &mut info, libc::WEXITED | libc::WNOHANG | libc::WNOWAIT)
        };
        if r == 0 {
            // SAFETY: `info` was filled in by waitid (or left zeroed).
            return Ok(unsafe { info.si_pid() } != 0);
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

#[derive(Clone, Copy)]
enum Signal {
    Term,
    Kill,
}

#[cfg(unix)]
fn signal_group(pgid: u32, signal: Signal) {
    let Ok(pgid) = libc::pid_t::try_from(pgid) else { return };
    // Never 0 or 1: `killpg(0)` would signal our own group, 1 is init.
    if pgid <= 1 {
        return;
    }
    let (signal, name) = match signal {
        Signal::Term => (libc::SIGTERM, "SIGTERM"),
        Signal::Kill => (libc::SIGKILL, "SIGKILL"),
    };
    tracing::debug!(target: "acp_rpc::process", pgid, signal = name, "signalling the agent's process group");
    // SAFETY: killpg has no memory-safety preconditions; ESRCH (group gone) is fine.
    unsafe {
        libc::killpg(pgid, signal);
    }
}

#[cfg(not(unix))]
fn signal_group(_pgid: u32, _signal: Signal) {
    // No process groups: `kill_on_drop` kills the child itself when the reaper drops it.
}

/// Forwards the child's stderr to `tracing`, one event per line (long lines are cut).
async fn forward_stderr(stderr: ChildStderr, pid: u32) {
    const MAX: usize = 64 * 1024;
    let mut lines = LineReader::new(stderr, MAX);
    loop {
        match lines.next_frame().await {
            Ok(Some(Frame::Line(line))) => {
                tracing::info!(target: "acp_rpc::agent_stderr", pid, "{}", String::from_utf8_lossy(line));
            }
            Ok(Some(Frame::Oversized { len })) => {
                tracing::info!(target: "acp_rpc::agent_stderr", pid, "<{len} bytes on one line, not shown>");
            }
            Ok(None) | Err(_) => break,
        }
    }
}
