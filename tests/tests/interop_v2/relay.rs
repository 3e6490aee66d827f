//! Two peer processes connected through this test process: a client and an agent, each
//! speaking ACP on its own stdin/stdout. Every line either sends is recorded with its direction
//! (the [`Wire`]) before it is passed on, so a message's causes are always recorded before it.
//!
//! Both children are killed on every path (a guard's `Drop`), and the whole exchange has a
//! deadline: past it both are killed and the test fails with what was recorded so far.

use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Which way a line went.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dir {
    /// Client to agent.
    ToAgent,
    /// Agent to client.
    ToClient,
}

/// The lines of one connection, in the order this process relayed them.
#[derive(Clone, Debug, Default)]
pub struct Wire {
    pub lines: Vec<(Dir, String)>,
}

/// What a connection left behind.
pub struct Outcome {
    pub wire: Wire,
    pub client_stderr: String,
    pub agent_stderr: String,
    /// `None`: the agent had not exited a few seconds after the client did, and was killed.
    pub agent_exit: Option<ExitStatus>,
}

impl Outcome {
    /// The wire and both peers' stderr, for a failure message.
    pub fn dump(&self) -> String {
        format!(
            "--- wire ---\n{}--- client stderr ---\n{}--- agent stderr ---\n{}",
            self.wire.dump(),
            self.client_stderr,
            self.agent_stderr
        )
    }
}

impl Wire {
    /// One line per message, `C->A` / `A->C` first.
    pub fn dump(&self) -> String {
        self.lines
            .iter()
            .map(|(dir, line)| format!("{} {line}\n", if *dir == Dir::ToAgent { "C->A" } else { "A->C" }))
            .collect()
    }
}

/// A child that is killed (and reaped) when dropped, whatever happened before.
struct Guard {
    child: Child,
}

impl Drop for Guard {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn spawn(mut command: Command, role: &str) -> Guard {
    command.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped());
    let child = command.spawn().unwrap_or_else(|e| panic!("cannot start the {role} ({command:?}): {e}"));
    Guard { child }
}

/// How long the agent may take to exit once the client is gone (its stdin is closed then).
const AGENT_GRACE: Duration = Duration::from_secs(5);

/// Runs `client` against `agent` until the client exits, at most `limit`.
pub fn connect(client: Command, agent: Command, limit: Duration) -> Outcome {
    let deadline = Instant::now() + limit;
    let mut agent = spawn(agent, "agent");
    let mut client = spawn(client, "client");
    let log = Arc::new(Mutex::new(Vec::new()));

    let relays = [
        relay(client.child.stdout.take().unwrap(), agent.child.stdin.take().unwrap(), Dir::ToAgent, &log),
        relay(agent.child.stdout.take().unwrap(), client.child.stdin.take().unwrap(), Dir::ToClient, &log),
    ];
    let client_err = collect(client.child.stderr.take().unwrap());
    let agent_err = collect(agent.child.stderr.take().unwrap());

    let client_exit = wait_until(&mut client.child, deadline);
    // The client's stdout is closed now, so the agent's stdin is too: it should end by itself.
    let agent_exit = match client_exit {
        Some(_) => wait_until(&mut agent.child, Instant::now() + AGENT_GRACE),
        None => None,
    };
    drop(client);
    drop(agent);
    // Both are gone, so every pipe is closed and the threads end.
    for relay in relays {
        let _ = relay.join();
    }
    let outcome = Outcome {
        wire: Wire { lines: std::mem::take(&mut *log.lock().unwrap_or_else(PoisonError::into_inner)) },
        client_stderr: client_err.join().unwrap_or_default(),
        agent_stderr: agent_err.join().unwrap_or_default(),
        agent_exit,
    };
    if client_exit.is_none() {
        panic!("the client did not finish within {limit:?}; both peers were killed\n{}", outcome.dump());
    }
    outcome
}

/// Copies lines from `from` to `to`, recording each. When `to` is gone the lines are still
/// read and recorded (what a peer says to a dead one is evidence too). At the end `to` is
/// dropped, which closes the other peer's stdin.
fn relay(
    from: impl Read + Send + 'static,
    to: impl Write + Send + 'static,
    dir: Dir,
    log: &Arc<Mutex<Vec<(Dir, String)>>>,
) -> JoinHandle<()> {
    let log = log.clone();
    std::thread::spawn(move || {
        let mut reader = BufReader::new(from);
        let mut to = Some(to);
        let mut line = Vec::new();
        loop {
            line.clear();
            match reader.read_until(b'\n', &mut line) {
                Ok(0) | Err(_) => break,
                Ok(_) => {}
            }
            let text = line.strip_suffix(b"\n").unwrap_or(&line);
            let text = String::from_utf8_lossy(text.strip_suffix(b"\r").unwrap_or(text)).into_owned();
            log.lock().unwrap_or_else(PoisonError::into_inner).push((dir, text));
            if let Some(writer) = to.as_mut()
                && writer.write_all(&line).and_then(|()| writer.flush()).is_err()
            {
                to = None;
            }
        }
    })
}

fn collect(mut from: impl Read + Send + 'static) -> JoinHandle<String> {
    std::thread::spawn(move || {
        let mut bytes = Vec::new();
        let _ = from.read_to_end(&mut bytes);
        String::from_utf8_lossy(&bytes).into_owned()
    })
}

/// The child's exit status, or `None` if it is still running at `deadline`.
fn wait_until(child: &mut Child, deadline: Instant) -> Option<ExitStatus> {
    loop {
        if let Ok(Some(status)) = child.try_wait() {
            return Some(status);
        }
        if Instant::now() >= deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}
