//! Protocol versions on one endpoint: [`ProtocolRouter`] serves v1 and v2 peers from one
//! executable, each connection with the implementation its first `initialize` picks.
//!
//! The rules (`v2/migration.mdx`, "Version negotiation"):
//!
//! - The first `initialize` request picks the version: the highest configured version at or
//!   below the one the client asked for, or the lowest configured one when the client asked
//!   for less (that implementation answers with its own version, and the client decides
//!   whether to go on). So a client asking for 2 gets v2 where it is configured, and a v1-only
//!   endpoint answers 1; a client asking for 3 gets 2.
//! - The choice is final: the connection is never re-routed, and a later `initialize` goes to
//!   the chosen implementation like any other request.
//! - Choosing v2 switches the connection to v2's rules (batches, see
//!   [`Connection::v2_rules`](crate::Connection::v2_rules)) before the `initialize` answer is
//!   written, so everything the client sends after reading it is read under them.
//! - An `initialize` whose `protocolVersion` is missing or not an integer from 0 to 65535 is
//!   answered -32602 (with `data.path`), nothing is chosen, and the connection goes on: the
//!   client may try again.
//! - Before a version is chosen, any other request is answered -32600 ("send `initialize`
//!   first"), and notifications are ignored (logged).

use std::sync::{Arc, OnceLock};

use serde::Deserialize;
use serde_json::value::RawValue;

use crate::handler::{DynHandler, Handler, IncomingNotification, IncomingRequest};
use crate::jsonrpc::ErrorObject;

/// A protocol version a [`ProtocolRouter`] can serve.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[non_exhaustive]
pub enum Version {
    /// Protocol v1.
    V1,
    /// Protocol v2 (feature `unstable_protocol_v2`).
    V2,
}

impl Version {
    /// The version's number on the wire (`protocolVersion`).
    pub fn number(self) -> u16 {
        match self {
            Version::V1 => 1,
            Version::V2 => 2,
        }
    }
}

/// A raw [`Handler`] that routes each connection to the v1 or the v2 implementation, as its
/// first `initialize` decides (see the [module docs](self) for the rules).
///
/// ```no_run
/// # #[cfg(feature = "unstable_protocol_v2")]
/// # async fn run<V1, V2>(v1: V1, v2: V2) -> Result<(), acp_runtime::Error>
/// # where V1: acp_runtime::acp_types::Agent<acp_runtime::AgentContext> + 'static,
/// #       V2: acp_runtime::acp_types::v2::Agent<acp_runtime::v2::AgentContext> + 'static {
/// use acp_runtime::version::ProtocolRouter;
/// let router = ProtocolRouter::new().with_v1_agent(v1).with_v2_agent(v2);
/// let (reader, writer) = acp_runtime::transport::stdio();
/// let (_peer, serve) = acp_runtime::Connection::new().serve(reader, writer, router);
/// serve.await
/// # }
/// ```
#[derive(Default)]
pub struct ProtocolRouter {
    v1: Option<Arc<dyn DynHandler>>,
    v2: Option<Arc<dyn DynHandler>>,
    chosen: OnceLock<Version>,
}

impl std::fmt::Debug for ProtocolRouter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProtocolRouter")
            .field("v1", &self.v1.is_some())
            .field("v2", &self.v2.is_some())
            .field("chosen", &self.chosen.get())
            .finish()
    }
}

impl ProtocolRouter {
    /// A router with no implementation yet: add at least one.
    pub fn new() -> Self {
        Self::default()
    }

    /// Serves v1 clients with a raw handler.
    pub fn with_v1(mut self, handler: impl Handler) -> Self {
        self.v1 = Some(Arc::new(handler));
        self
    }

    /// Serves v1 clients with a typed agent (`acp_types::Agent`, e.g. under `#[acp_agent]`).
    pub fn with_v1_agent<A>(self, agent: A) -> Self
    where
        A: acp_types::Agent<crate::AgentContext> + 'static,
    {
        self.with_v1(crate::agent::AgentHandler::new(agent))
    }

    /// Serves v2 clients with a raw handler (which should follow v2's rules; the router
    /// switches the connection to them when it picks v2).
    pub fn with_v2(mut self, handler: impl Handler) -> Self {
        self.v2 = Some(Arc::new(handler));
        self
    }

    /// Serves v2 clients with a typed v2 agent (`acp_types::v2::Agent`).
    #[cfg(feature = "unstable_protocol_v2")]
    pub fn with_v2_agent<A>(self, agent: A) -> Self
    where
        A: acp_types::v2::Agent<crate::v2::AgentContext> + 'static,
    {
        self.with_v2(crate::v2::AgentHandler::new(agent))
    }

    /// The version this connection speaks, once its first `initialize` has chosen it.
    pub fn chosen(&self) -> Option<Version> {
        self.chosen.get().copied()
    }

    /// The implementation for a requested version (see the [module docs](self)).
    fn pick(&self, requested: u16) -> Option<Version> {
        let configured = [(Version::V1, &self.v1), (Version::V2, &self.v2)];
        let available = configured.iter().filter(|(_, h)| h.is_some()).map(|(v, _)| *v);
        let at_or_below = available.clone().filter(|v| v.number() <= requested).max();
        at_or_below.or_else(|| available.min())
    }

    fn handler(&self, version: Version) -> &Arc<dyn DynHandler> {
        let handler = match version {
            Version::V1 => &self.v1,
            Version::V2 => &self.v2,
        };
        handler.as_ref().expect("only configured versions are chosen")
    }
}

impl Handler for ProtocolRouter {
    async fn handle_request(&self, req: IncomingRequest) -> Result<Box<RawValue>, ErrorObject> {
        let version = match self.chosen.get() {
            Some(version) => *version,
            None => {
                if req.method != acp_types::agent_method::INITIALIZE {
                    return Err(ErrorObject::invalid_request(format_args!(
                        "`{}` before `initialize`: send `initialize` first, to agree on a protocol version",
                        req.method
                    )));
                }
                let requested = requested_version(req.params.as_deref())?;
                let Some(version) = self.pick(requested) else {
                    return Err(ErrorObject::internal_error("this endpoint serves no protocol version"));
                };
                // Concurrent first `initialize`s: the first choice stands.
                let version = *self.chosen.get_or_init(|| version);
                if version == Version::V2 {
                    req.peer.shared.set_v2();
                }
                tracing::debug!(requested, chosen = version.number(), "acp: protocol version chosen");
                version
            }
        };
        self.handler(version).handle_request_boxed(req).await
    }

    async fn handle_notification(&self, notification: IncomingNotification) {
        match self.chosen.get() {
            Some(version) => self.handler(*version).handle_notification_boxed(notification).await,
            None => tracing::debug!(method = %notification.method, "acp: notification before `initialize` ignored"),
        }
    }
}

/// The `protocolVersion` of `initialize` params; -32602 (with its path) when it is not a u16.
fn requested_version(params: Option<&RawValue>) -> Result<u16, ErrorObject> {
    #[derive(Deserialize)]
    struct Init {
        #[serde(rename = "protocolVersion")]
        protocol_version: u16,
    }
    let text = params.map_or("{}", RawValue::get);
    // Objects only: a derived struct would also read an array positionally.
    let text = if text.starts_with('{') { text } else { "{}" };
    serde_json::from_str::<Init>(text).map(|init| init.protocol_version).map_err(|e| {
        ErrorObject::invalid_params_at(
            "protocolVersion",
            format_args!("`protocolVersion` must be an integer from 0 to 65535 ({e})"),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with(v1: bool, v2: bool) -> ProtocolRouter {
        let mut router = ProtocolRouter::new();
        if v1 {
            router = router.with_v1(());
        }
        if v2 {
            router = router.with_v2(());
        }
        router
    }

    #[test]
    fn picks_the_highest_configured_version_at_or_below_the_request() {
        let both = with(true, true);
        assert_eq!(both.pick(2), Some(Version::V2));
        assert_eq!(both.pick(3), Some(Version::V2));
        assert_eq!(both.pick(65535), Some(Version::V2));
        assert_eq!(both.pick(1), Some(Version::V1));
        assert_eq!(both.pick(0), Some(Version::V1), "below every version: the lowest answers");
        let v1_only = with(true, false);
        assert_eq!(v1_only.pick(2), Some(Version::V1), "a v1-only endpoint answers 1");
        let v2_only = with(false, true);
        assert_eq!(v2_only.pick(1), Some(Version::V2), "the client decides whether to go on");
        assert_eq!(with(false, false).pick(1), None);
    }

    #[test]
    fn reads_the_requested_version_or_says_what_is_wrong() {
        let raw = |s: &str| RawValue::from_string(s.to_owned()).unwrap();
        assert_eq!(requested_version(Some(&raw(r#"{"protocolVersion":2,"info":{}}"#))).unwrap(), 2);
        for bad in
            [r#"{}"#, r#"{"protocolVersion":"2"}"#, r#"{"protocolVersion":-1}"#, r#"{"protocolVersion":70000}"#, "[2]"]
        {
            let e = requested_version(Some(&raw(bad))).unwrap_err();
            assert_eq!(e.code, crate::codes::INVALID_PARAMS, "{bad}");
            assert_eq!(e.data.as_ref().unwrap()["path"], "protocolVersion", "{bad}");
        }
    }
}
