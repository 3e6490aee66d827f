//! Starting an agent process and serving a client on its stdio (feature `process`):
//! [`spawn_agent`] / [`Connection::spawn_agent`], and the [`AgentProcess`] guard that ends the
//! agent (end of input first, then its process group's signals) when dropped.

use std::io;
use std::process::ExitStatus;

use acp_types::Client;

use super::{AgentHandle, ClientContext};
use crate::core::connection::Connection;
use crate::core::error::Error;
use crate::core::tasks::AbortOnDrop;
use crate::core::transport::{ChildProcess, SpawnOptions};

/// Spawns `command` as an agent process and serves `client` on its stdio with the default
/// [`Connection`] options: the one-call way for an editor to start an agent. Needs a tokio
/// runtime; see [`Connection::spawn_agent`].
///
/// The agent's stderr lines become `tracing` events (target `acp_rpc::agent_stderr`), so
/// they are only seen with a tracing subscriber installed; use [`Connection::spawn_agent`]
/// with [`StderrMode::Inherit`](crate::transport::StderrMode::Inherit) to pass them through.
pub fn spawn_agent<C>(client: C, command: std::process::Command) -> io::Result<(AgentHandle, AgentProcess)>
where
    C: Client<ClientContext> + 'static,
{
    Connection::new().spawn_agent(client, command, SpawnOptions::default())
}

impl Connection {
    /// Spawns `command` as an agent process (in its own process group, see [`ChildProcess`])
    /// and serves `client` on its stdin/stdout with these options. The connection runs in a
    /// spawned task (so this needs a tokio runtime).
    ///
    /// Returns the handle to the agent and the [`AgentProcess`] guard: keep it as long as the
    /// agent is needed. Dropping it ends the connection, which closes the agent's stdin, and
    /// then ends the agent's process group: an agent that has not exited on end of input
    /// within `options.kill_grace` gets SIGTERM, then SIGKILL after `options.kill_grace` again.
    /// When the agent exits by itself, the connection ends and pending calls fail with
    /// [`Error::ConnectionClosed`].
    pub fn spawn_agent<C>(
        self,
        client: C,
        command: std::process::Command,
        options: SpawnOptions,
    ) -> io::Result<(AgentHandle, AgentProcess)>
    where
        C: Client<ClientContext> + 'static,
    {
        let mut child = ChildProcess::spawn(command, options)?;
        let (reader, writer) =
            child.take_transport().ok_or_else(|| io::Error::other("spawned agent has no stdio transport"))?;
        let (agent, serve) = self.serve_client(client, reader, writer);
        let serve = AbortOnDrop::spawn(serve);
        Ok((agent, AgentProcess { child, serve }))
    }
}

/// A spawned agent process and the task that runs its connection (from
/// [`Connection::spawn_agent`]). Dropping it ends the connection, and with it the agent's
/// stdin, so a well-behaved agent exits by itself on end of input; one that has not within the
/// grace period (`SpawnOptions::kill_grace`) gets SIGTERM, then SIGKILL after the grace period
/// again. The process is reaped by a detached task. If the tokio runtime shuts down before
/// that is done (e.g. `main` returns right after the drop), the process group is killed at once.
///
/// `std::process::exit` runs no destructors and stops every task: a program that exits that
/// way must first await [`AgentProcess::terminate`] (or [`AgentProcess::wait`]), or the agent
/// outlives it.
#[derive(Debug)]
pub struct AgentProcess {
    child: ChildProcess,
    // Its writer holds the child's stdin.
    serve: AbortOnDrop<Result<(), Error>>,
}

impl Drop for AgentProcess {
    fn drop(&mut self) {
        // The aborted task drops the connection's writer, which closes the agent's stdin (at
        // once, or as soon as a worker gets to the task); the agent then has the grace period
        // to exit by itself before it is signalled.
        self.serve.abort();
        self.child.end_after_end_of_input();
    }
}

impl AgentProcess {
    /// The agent's pid (also its process group id).
    pub fn id(&self) -> u32 {
        self.child.id()
    }

    /// The process (e.g. for [`ChildProcess::take_stderr`] with `StderrMode::Piped`).
    pub fn child_mut(&mut self) -> &mut ChildProcess {
        &mut self.child
    }

    /// Waits for the agent process to exit by itself; processes it leaves behind in its group
    /// are then killed (see [`ChildProcess::wait`]).
    pub async fn wait(&mut self) -> io::Result<ExitStatus> {
        self.child.wait().await
    }

    /// Terminates the agent's process group now (SIGTERM, then SIGKILL after the grace
    /// period), waits until it is reaped, and ends the connection.
    pub async fn terminate(mut self) -> io::Result<ExitStatus> {
        // The connection ends when `self` drops, after this.
        self.child.terminate_now().await
    }
}
