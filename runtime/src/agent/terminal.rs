//! [`TerminalHandle`]: an agent's handle to one terminal it created on the client
//! ([`crate::agent::ClientHandle::create_terminal`]), which it must release when done.

use std::fmt;

use acp_types::{
    KillTerminalRequest, KillTerminalResponse, ReleaseTerminalRequest, ReleaseTerminalResponse, SessionId, TerminalId,
    TerminalOutputRequest, TerminalOutputResponse, WaitForTerminalExitRequest, WaitForTerminalExitResponse,
    client_method,
};

use super::ClientHandle;
use crate::core::error::Error;
use crate::typed;

/// A terminal running a command on the client, created by
/// [`ClientHandle::create_terminal`]. (Named `...Handle` so that it does not clash with
/// [`acp_types::Terminal`], the tool-call content that embeds a terminal by id.)
///
/// ACP requires the agent to release every terminal it creates (`terminal/release`, which also
/// kills a command still running). Call [`TerminalHandle::release`] to do it and see the answer;
/// otherwise dropping the handle sends the release from a spawned task, without blocking (so it
/// may reach the client after the answer of the request that dropped it; nothing is sent if
/// the connection has ended or there is no tokio runtime).
///
/// [`TerminalHandle::output`] and [`TerminalHandle::wait_for_exit`] are bound to the
/// cancellation token of the handle that created the terminal (they give up once the turn is
/// cancelled); [`TerminalHandle::kill`] and the release are not, so a cancelled turn can still
/// clean up.
pub struct TerminalHandle {
    id: TerminalId,
    session_id: SessionId,
    client: ClientHandle,
    released: bool,
}

impl fmt::Debug for TerminalHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TerminalHandle")
            .field("id", &self.id)
            .field("session_id", &self.session_id)
            .field("released", &self.released)
            .finish_non_exhaustive()
    }
}

impl TerminalHandle {
    pub(crate) fn new(id: TerminalId, session_id: SessionId, client: ClientHandle) -> Self {
        TerminalHandle { id, session_id, client, released: false }
    }

    /// The terminal's id (e.g. to embed it in a tool call with `ToolCallContent::Terminal`).
    pub fn id(&self) -> &TerminalId {
        &self.id
    }

    /// The session the terminal belongs to.
    pub fn session_id(&self) -> &SessionId {
        &self.session_id
    }

    /// `terminal/output`: the output so far, whether it was truncated, and the exit status
    /// once the command has exited.
    pub fn output(&self) -> impl Future<Output = Result<TerminalOutputResponse, Error>> + Send + '_ {
        let params = TerminalOutputRequest::new(self.session_id.clone(), self.id.clone());
        self.client.call(client_method::TERMINAL_OUTPUT, &params)
    }

    /// `terminal/wait_for_exit`: waits until the command exits; its exit code or signal.
    pub fn wait_for_exit(&self) -> impl Future<Output = Result<WaitForTerminalExitResponse, Error>> + Send + '_ {
        let params = WaitForTerminalExitRequest::new(self.session_id.clone(), self.id.clone());
        self.client.call(client_method::TERMINAL_WAIT_FOR_EXIT, &params)
    }

    /// `terminal/kill`: kills the command; the terminal stays valid (output can still be read)
    /// until released. Not bound to the turn's cancellation.
    pub fn kill(&self) -> impl Future<Output = Result<KillTerminalResponse, Error>> + Send + '_ {
        let params = KillTerminalRequest::new(self.session_id.clone(), self.id.clone());
        typed::typed_call(self.client.peer(), client_method::TERMINAL_KILL, &params, None)
    }

    /// `terminal/release`: kills the command if it still runs and frees the terminal; its id
    /// is invalid afterwards. Not bound to the turn's cancellation. Dropping the returned
    /// future before it completes does not send a second release.
    pub fn release(mut self) -> impl Future<Output = Result<ReleaseTerminalResponse, Error>> + Send + 'static {
        self.released = true;
        let params = ReleaseTerminalRequest::new(self.session_id.clone(), self.id.clone());
        typed::typed_call_owned(self.client.peer().clone(), client_method::TERMINAL_RELEASE, &params)
    }
}

impl Drop for TerminalHandle {
    fn drop(&mut self) {
        if self.released || self.client.is_closed() {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            tracing::warn!(terminal = %self.id, "acp terminal dropped outside a tokio runtime; not released");
            return;
        };
        let client = self.client.unbound();
        let params = ReleaseTerminalRequest::new(self.session_id.clone(), self.id.clone());
        runtime.spawn(async move {
            let released: Result<ReleaseTerminalResponse, Error> =
                client.call(client_method::TERMINAL_RELEASE, &params).await;
            if let Err(error) = released {
                tracing::debug!(terminal = %params.terminal_id, %error, "acp terminal: release on drop failed");
            }
        });
    }
}
