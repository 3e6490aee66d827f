//! The rmcp [`Transport`]s of MCP over ACP: [`TunnelTransport`], an rmcp client's end of a
//! [`Tunnel`] ([`super::McpClients`]), and [`OperationTransport`], the one-request session an
//! rmcp server runs for each `mcp/message` ([`super::McpServers`]).

use std::future::Future;
use std::marker::PhantomData;
use std::sync::Arc;

use rmcp::service::{RxJsonRpcMessage, ServiceRole, TxJsonRpcMessage};
use rmcp::transport::Transport;
use serde_json::Value;

use super::tunnel::{LocalEnd, Outbox, Tunnel, answer_message};
use crate::core::jsonrpc::ErrorObject;

/// Why a message could not be sent over the tunnel.
#[derive(Debug, thiserror::Error)]
pub(crate) enum TunnelError {
    #[error("the MCP connection over ACP is closed")]
    Closed,
    #[error("cannot encode an MCP message: {0}")]
    Encode(#[source] serde_json::Error),
}

/// rmcp's end of a tunnel, for the role `R`.
pub(crate) struct TunnelTransport<R> {
    outbox: Option<Outbox>,
    inbox: tokio::sync::mpsc::Receiver<Value>,
    tunnel: Arc<Tunnel>,
    role: PhantomData<fn() -> R>,
}

impl<R> TunnelTransport<R> {
    pub(crate) fn new(local: LocalEnd, tunnel: Arc<Tunnel>) -> Self {
        TunnelTransport { outbox: Some(local.outbox), inbox: local.inbox, tunnel, role: PhantomData }
    }
}

impl<R: ServiceRole> Transport<R> for TunnelTransport<R> {
    type Error = TunnelError;

    fn send(&mut self, item: TxJsonRpcMessage<R>) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        // rmcp runs the returned futures concurrently: the message is queued here, in the
        // order rmcp sends them, and the future has nothing left to do.
        let sent = match serde_json::to_value(&item) {
            Ok(message) => match &self.outbox {
                Some(outbox) => outbox.send_now(message).then_some(()).ok_or(TunnelError::Closed),
                None => Err(TunnelError::Closed),
            },
            Err(e) => Err(TunnelError::Encode(e)),
        };
        std::future::ready(sent)
    }

    async fn receive(&mut self) -> Option<RxJsonRpcMessage<R>> {
        loop {
            let message = self.inbox.recv().await?;
            match serde_json::from_value::<RxJsonRpcMessage<R>>(message.clone()) {
                Ok(decoded) => return Some(decoded),
                Err(e) => {
                    if let Some(decoded) = self.undecodable(message, &e) {
                        return Some(decoded);
                    }
                }
            }
        }
    }

    async fn close(&mut self) -> Result<(), Self::Error> {
        // The tunnel's pump sees the outbox end and closes the connection.
        self.outbox = None;
        Ok(())
    }
}

impl<R: ServiceRole> TunnelTransport<R> {
    /// A message rmcp cannot read: an answer to one of rmcp's requests is handed over as an
    /// error, so rmcp does not wait for it forever; a notification is dropped. (The tunnel
    /// hands on no requests: the provider cannot send any on this wire.)
    fn undecodable(&self, message: Value, e: &serde_json::Error) -> Option<RxJsonRpcMessage<R>> {
        tracing::warn!(server = %self.tunnel.server_id(), error = %e, "mcp over acp: an MCP message rmcp cannot read");
        let id = message.get("id").cloned().filter(|_| message.get("method").is_none())?;
        let error = ErrorObject::internal_error(format_args!("the MCP peer's answer is invalid: {e}"));
        serde_json::from_value(answer_message(id, Err(serde_json::to_value(error).ok()?))).ok()
    }
}

/// The transport of one `mcp/message` request's rmcp session: the request (and, once the ACP
/// request is cancelled, MCP's `notifications/cancelled` for it, or the answers to the
/// server's own requests) goes in through `inbox`, everything the server sends comes out of
/// `outbox`.
pub(crate) struct OperationTransport<R: ServiceRole> {
    pub(crate) inbox: tokio::sync::mpsc::UnboundedReceiver<RxJsonRpcMessage<R>>,
    pub(crate) outbox: tokio::sync::mpsc::UnboundedSender<TxJsonRpcMessage<R>>,
}

impl<R: ServiceRole> Transport<R> for OperationTransport<R> {
    type Error = TunnelError;

    fn send(&mut self, item: TxJsonRpcMessage<R>) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        std::future::ready(self.outbox.send(item).map_err(|_| TunnelError::Closed))
    }

    async fn receive(&mut self) -> Option<RxJsonRpcMessage<R>> {
        self.inbox.recv().await
    }

    async fn close(&mut self) -> Result<(), Self::Error> {
        self.inbox.close();
        Ok(())
    }
}
