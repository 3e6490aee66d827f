//! The runtime's error type: what an outgoing call or the connection itself can fail with.

use crate::core::jsonrpc::ErrorObject;

/// Why an outgoing call, a send, or [`crate::Serve`] failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The connection ended (end of input, transport error, [`crate::Peer::close`], or the
    /// [`crate::Serve`] future was dropped) before the call got its response.
    #[error("connection closed")]
    ConnectionClosed,
    /// The peer answered with an error object.
    #[error("peer returned an error: {0}")]
    Rpc(ErrorObject),
    /// The call was cancelled on our side (its cancellation token fired); the peer was sent
    /// `$/cancel_request`.
    #[error("request cancelled")]
    Cancelled,
    /// The peer broke JSON-RPC in its answer to our call (e.g. a response with both `result`
    /// and `error`).
    #[error("protocol violation by peer: {0}")]
    Protocol(&'static str),
    /// Reading or writing the transport failed.
    #[error("transport error: {0}")]
    Io(#[from] std::io::Error),
    /// A result from the peer did not decode into the expected type. `path` locates the
    /// offending field (e.g. `options[2].kind`; empty for the root or when unknown).
    #[error("cannot decode the peer's result at `{path}`: {message}")]
    Decode {
        /// Where in the result the problem is.
        path: String,
        /// What the problem is.
        message: String,
    },
    /// Our own params could not be encoded (e.g. a map with non-string keys).
    #[error("cannot encode params: {0}")]
    Encode(#[source] serde_json::Error),
    /// An extension call or notification we were asked to send is not valid ACP: its method
    /// does not start with `_`, or its params are a string, a number or a boolean (JSON-RPC
    /// params are an object or an array). Nothing was sent.
    #[error("invalid extension message `{method}`: {reason}")]
    InvalidExtension {
        /// The method name given.
        method: String,
        /// What is wrong with it.
        reason: &'static str,
    },
}

impl Error {
    /// Whether the peer refused the call because it is overloaded ([`crate::codes::OVERLOADED`]):
    /// the request never ran there, so sending it again after [`Error::retry_after`] is safe.
    ///
    /// ```
    /// # async fn example(peer: acp_rpc::Peer) -> Result<(), acp_rpc::Error> {
    /// let _answer = loop {
    ///     match peer.request_raw("_my/lookup", None).await {
    ///         Err(e) if e.is_overloaded() => tokio::time::sleep(e.retry_after().unwrap_or_default()).await,
    ///         other => break other?,
    ///     }
    /// };
    /// # Ok(()) }
    /// ```
    pub fn is_overloaded(&self) -> bool {
        matches!(self, Error::Rpc(e) if e.is_overloaded())
    }

    /// For an overload refusal, the peer's hint of how long to wait before retrying (see
    /// [`ErrorObject::retry_after`]); `None` for any other error.
    pub fn retry_after(&self) -> Option<std::time::Duration> {
        match self {
            Error::Rpc(e) => e.retry_after(),
            _ => None,
        }
    }

    /// The error object to answer the peer with when this error ends a handler (so a typed
    /// handler can use `?` on outgoing calls): the peer's own error passes through, the rest is
    /// -32603, and a cancelled call is -32800.
    pub fn to_error_object(&self) -> ErrorObject {
        match self {
            Error::Rpc(e) => e.clone(),
            Error::Cancelled => ErrorObject::request_cancelled(),
            other => ErrorObject::internal_error(other),
        }
    }
}

impl From<Error> for ErrorObject {
    fn from(e: Error) -> Self {
        e.to_error_object()
    }
}
