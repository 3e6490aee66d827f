//! The live transport: the [`RemoteAgent`] a connection is kept by, its status and
//! watch, what a reconnection gives back, and the endpoint and limits it was opened with.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use acp_types::{InitializeResponse, LoadSessionResponse, ResumeSessionResponse};
use hyper::Uri;
use tokio_util::sync::CancellationToken;

use crate::client::AgentHandle;
use crate::core::error::Error;
use crate::core::peer::Peer;
use crate::core::transport::{PipeReader, PipeWriter};

use super::{ConnectError, CookieJar, Profile};

/// A connection to a remote agent (from [`Remote`](super::Remote)): keep it as long as the agent is needed.
///
/// Dropping it ends the connection (pending calls fail with [`Error::ConnectionClosed`]); the
/// `DELETE` (or the WebSocket close) then goes out from a background task, bounded by
/// [`Remote::close_timeout`](super::Remote::close_timeout). [`RemoteAgent::close`] does the same and waits for it. When the
/// server ends the connection, calls fail the same way and [`RemoteAgent::end_reason`] says
/// why.
#[derive(Debug)]
pub struct RemoteAgent {
    pub(super) peer: Peer,
    pub(super) serve: Option<tokio::task::JoinHandle<Result<(), Error>>>,
    pub(super) status: Arc<Status>,
    pub(super) profile: Profile,
    pub(super) jar: CookieJar,
    pub(super) close_timeout: Duration,
}

impl RemoteAgent {
    /// The profile in use (from the URL's scheme).
    pub fn profile(&self) -> Profile {
        self.profile
    }

    /// The server's `Acp-Connection-Id`: over HTTP once `initialize` has been answered, over
    /// WebSocket from the handshake (if the server sent one).
    pub fn connection_id(&self) -> Option<String> {
        lock(&self.status.connection_id).clone()
    }

    /// The cookie jar of this connection (shared with the [`Remote::cookie_jar`](super::Remote::cookie_jar) given).
    pub fn cookies(&self) -> &CookieJar {
        &self.jar
    }

    /// Why the transport ended the connection (e.g. `the connection stream ended`, `POST
    /// answered 404`), once it has; `None` while it runs, and when it was closed from our side.
    pub fn end_reason(&self) -> Option<String> {
        lock(&self.status.end_reason).clone()
    }

    /// Ends the connection and waits until it is done and the server has been told (`DELETE`
    /// or a WebSocket Close, within [`Remote::close_timeout`](super::Remote::close_timeout)). Returns what the connection
    /// returned (`Err` for a transport error).
    pub async fn close(mut self) -> Result<(), Error> {
        self.peer.close();
        let result = match self.serve.take() {
            Some(task) => task.await.unwrap_or(Ok(())),
            None => Ok(()),
        };
        let wait = self.close_timeout.saturating_add(Duration::from_secs(1));
        let _ = tokio::time::timeout(wait, self.status.finished.cancelled()).await;
        result
    }
}

impl Drop for RemoteAgent {
    fn drop(&mut self) {
        // The connection winds down within its grace period; the driver then sees the end of
        // its output and says goodbye to the server.
        self.peer.close();
    }
}

/// The raw transport to a remote agent, from [`Remote::transport`](super::Remote::transport).
#[derive(Debug)]
pub struct RemoteTransport {
    /// The agent's messages, one per line.
    pub reader: PipeReader,
    /// Lines written here go to the agent; closing it ends the connection.
    pub writer: PipeWriter,
    pub(super) status: Arc<Status>,
    pub(super) profile: Profile,
}

impl RemoteTransport {
    /// The profile in use (from the URL's scheme).
    pub fn profile(&self) -> Profile {
        self.profile
    }

    /// A handle that outlives `reader` and `writer` (when they are moved out), to see how the
    /// transport ends.
    pub fn watch(&self) -> TransportWatch {
        TransportWatch { status: self.status.clone() }
    }
}

/// Watches a [`RemoteTransport`] whose ends went elsewhere.
#[derive(Clone, Debug)]
pub struct TransportWatch {
    status: Arc<Status>,
}

impl TransportWatch {
    /// Why the transport ended the connection, once it has (`None` while it runs, and when it
    /// was closed from our side).
    pub fn end_reason(&self) -> Option<String> {
        lock(&self.status.end_reason).clone()
    }

    /// Resolves when the transport is done (the server told, its streams dropped).
    pub async fn finished(&self) {
        self.status.finished.cancelled().await;
    }
}

/// What [`Remote::reconnect`](super::Remote::reconnect) gives: the new connection, the agent's `initialize` answer, and
/// how the session came back.
#[derive(Debug)]
#[non_exhaustive]
pub struct Reconnected {
    /// The agent, on the new connection.
    pub agent: AgentHandle,
    /// The new connection.
    pub remote: RemoteAgent,
    /// The agent's answer to `initialize`.
    pub init: Box<InitializeResponse>,
    /// How the session was re-attached.
    pub session: Reattached,
}

/// How [`Remote::reconnect`](super::Remote::reconnect) re-attached the session.
#[derive(Debug)]
#[non_exhaustive]
pub enum Reattached {
    /// With `session/load`: the history was replayed as `session/update`s.
    Loaded(Box<LoadSessionResponse>),
    /// With `session/resume`: no replay.
    Resumed(Box<ResumeSessionResponse>),
}

/// Why [`Remote::reconnect`](super::Remote::reconnect) failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ReconnectError {
    /// No connection.
    #[error(transparent)]
    Connect(#[from] ConnectError),
    /// A call failed.
    #[error("{step}: {source}")]
    Call {
        /// `initialize`, `session/load` or `session/resume`.
        step: &'static str,
        /// The error.
        #[source]
        source: Error,
    },
    /// The agent cannot re-attach sessions: in v1 it advertises neither `loadSession` nor
    /// `sessionCapabilities.resume`; in v2 ([`Remote::reconnect_v2`](super::Remote::reconnect_v2)) it advertises no
    /// `capabilities.session`.
    #[error(
        "the agent can neither load nor resume sessions (it advertises neither `loadSession` nor \
         `sessionCapabilities.resume` in v1, no `capabilities.session` in v2)"
    )]
    Unsupported,
    /// [`Remote::reconnect_v2`](super::Remote::reconnect_v2): the agent answered `initialize` with another protocol
    /// version than 2.
    #[error("the agent answered `initialize` with protocol version {answered}, not 2")]
    Version {
        /// The version it answered.
        answered: u16,
    },
}

/// What [`Remote::reconnect_v2`](super::Remote::reconnect_v2) gives (feature `unstable_protocol_v2`): the new connection,
/// the agent's `initialize` answer, and its `session/resume` answer.
#[cfg(feature = "unstable_protocol_v2")]
#[derive(Debug)]
#[non_exhaustive]
pub struct ReconnectedV2 {
    /// The agent, on the new connection.
    pub agent: crate::v2::AgentHandle,
    /// The new connection.
    pub remote: RemoteAgent,
    /// The agent's answer to `initialize`.
    pub init: Box<acp_types::v2::InitializeResponse>,
    /// The agent's answer to `session/resume`.
    pub session: Box<acp_types::v2::ResumeSessionResponse>,
}

/// What the driver tells the [`RemoteAgent`].
#[derive(Debug, Default)]
pub(super) struct Status {
    pub(super) connection_id: Mutex<Option<String>>,
    pub(super) end_reason: Mutex<Option<String>>,
    /// Fires when the driver is done (the server told, streams dropped).
    pub(super) finished: CancellationToken,
}

impl Status {
    pub(super) fn set_connection_id(&self, id: String) {
        *lock(&self.connection_id) = Some(id);
    }

    pub(super) fn set_end_reason(&self, reason: String) {
        lock(&self.end_reason).get_or_insert(reason);
    }
}

pub(super) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The endpoint: the URL, checked.
#[derive(Debug)]
pub(super) struct Endpoint {
    pub(super) uri: Uri,
    pub(super) profile: Profile,
    /// `host:port`, the cookie jar's key.
    pub(super) server: String,
    /// The host to connect to (an IPv6 address without its brackets).
    pub(super) host: String,
    pub(super) port: u16,
    /// `https://` or `wss://`.
    pub(super) tls: bool,
}

impl Endpoint {
    pub(super) fn parse(url: &str) -> Result<Endpoint, ConnectError> {
        let invalid = |reason: &str| ConnectError::InvalidUrl { url: url.to_owned(), reason: reason.to_owned() };
        let uri: Uri = url.trim().parse().map_err(|e: hyper::http::uri::InvalidUri| invalid(&e.to_string()))?;
        let scheme = uri
            .scheme_str()
            .ok_or_else(|| invalid("no scheme: give the whole endpoint, e.g. http://127.0.0.1:8080/acp"))?
            .to_ascii_lowercase();
        let (profile, tls) = match scheme.as_str() {
            "http" => (Profile::StreamableHttp, false),
            "ws" => (Profile::WebSocket, false),
            #[cfg(feature = "http-tls")]
            "https" => (Profile::StreamableHttp, true),
            #[cfg(feature = "http-tls")]
            "wss" => (Profile::WebSocket, true),
            #[cfg(not(feature = "http-tls"))]
            "https" | "wss" => return Err(ConnectError::TlsNotBuiltIn { scheme }),
            _ => return Err(ConnectError::UnsupportedScheme { scheme }),
        };
        let host = uri.host().filter(|h| !h.is_empty()).ok_or_else(|| invalid("no host"))?.to_ascii_lowercase();
        let port = uri.port_u16().unwrap_or(if tls { 443 } else { 80 });
        let server = format!("{host}:{port}");
        let host = host.trim_start_matches('[').trim_end_matches(']').to_owned();
        Ok(Endpoint { uri, profile, server, host, port, tls })
    }
}

#[derive(Clone, Copy, Debug)]
pub(super) struct Limits {
    pub(super) request_timeout: Duration,
    pub(super) close_timeout: Duration,
    pub(super) idle_timeout: Option<Duration>,
    pub(super) max_message_bytes: usize,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tls_schemes_need_the_tls_feature() {
        let http = Endpoint::parse("http://127.0.0.1:8080/acp").expect("http");
        assert_eq!(
            (http.profile, http.tls, http.port, http.server.as_str()),
            (Profile::StreamableHttp, false, 8080, "127.0.0.1:8080")
        );
        #[cfg(feature = "http-tls")]
        {
            let https = Endpoint::parse("https://Agents.Example/acp").expect("https");
            assert_eq!((https.profile, https.tls, https.port), (Profile::StreamableHttp, true, 443));
            assert_eq!((https.host.as_str(), https.server.as_str()), ("agents.example", "agents.example:443"));
            let wss = Endpoint::parse("wss://[::1]:9443/acp").expect("wss");
            assert_eq!((wss.profile, wss.tls, wss.port, wss.host.as_str()), (Profile::WebSocket, true, 9443, "::1"));
        }
        #[cfg(not(feature = "http-tls"))]
        for url in ["https://agents.example/acp", "wss://agents.example/acp"] {
            let error = Endpoint::parse(url).expect_err("no TLS in this build");
            assert!(matches!(error, ConnectError::TlsNotBuiltIn { .. }), "{error:?}");
            assert!(error.to_string().contains("turn on its `http-tls` feature"), "{error}");
        }
    }
}
