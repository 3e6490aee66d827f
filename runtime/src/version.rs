//! Protocol versions on one endpoint: [`ProtocolRouter`] serves v1 and v2 peers from one
//! executable, each connection with the implementation its first `initialize` picks.
//!
//! The rules (`v2/migration.mdx`, "Version negotiation"):
//!
//! - The first `initialize` request picks the version: the highest configured version at or
//!   below the one the client asked for, or the latest configured one when the client asked
//!   for less (`initialization.mdx`: an agent that does not support the requested version
//!   answers with the latest it does; the client decides whether to go on). So a client asking
//!   for 2 gets v2 where it is configured, and a v1-only endpoint answers 1; a client asking
//!   for 3 gets 2, and one asking for 0 gets the latest.
//! - A request asking for 2 or more whose params are not a v2 `initialize` (v2 requires the
//!   client's `info`; a v1 client sends `clientInfo`, if anything) goes to the v1
//!   implementation when there is one: a v1 client that asks for a higher version than it
//!   speaks gets `protocolVersion: 1` and goes on, instead of a v2 error it cannot read.
//! - The choice is made by the first `initialize` that is answered successfully, and is final:
//!   the connection is never re-routed, and a later `initialize` goes to the chosen
//!   implementation like any other request. Until a version is chosen, `initialize` requests
//!   are handled one at a time: one pipelined behind the first waits for it, then goes to the
//!   implementation it chose (so two answers never name two versions). An `initialize` the
//!   picked implementation refuses chooses nothing: the client may try again.
//! - Choosing v2 switches the connection to v2's rules (batches, see
//!   [`Connection::v2_rules`](crate::Connection::v2_rules)) before the `initialize` answer is
//!   written, so everything the client sends after reading it is read under them.
//! - An `initialize` whose `protocolVersion` is missing or not an integer from 0 to 65535 is
//!   answered -32602 (with `data.path`), nothing is chosen, and the connection goes on: the
//!   client may try again.
//! - Before a version is chosen, any other request is answered -32600 ("send `initialize`
//!   first"), and notifications are ignored (logged). This is judged when the message is
//!   handled, not when it is read: a message the peer sent just before the choice (a request
//!   pipelined behind a client's `initialize`, or what an agent writes just before its
//!   answer, which `negotiate` reads as the choice) may still reach the chosen version.
//!
//! A client uses the same router for what the agent sends it, and `ProtocolRouter::negotiate`
//! (feature `unstable_protocol_v2`) to start: it asks for version 2 and goes on with v1 when
//! the agent answers 1, handing back a `Negotiated` handle to match on. Its `initialize` carries both versions' fields (v2's
//! `info` and `capabilities`, v1's `clientInfo` and `clientCapabilities`), so a v1 agent learns
//! the client's v1 capabilities from the same request: no second `initialize`, no reconnect.

use std::sync::{Arc, OnceLock};

use serde::Deserialize;
use serde_json::value::RawValue;

use crate::core::handler::{DynHandler, Handler, IncomingNotification, IncomingRequest};
use crate::core::jsonrpc::ErrorObject;

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
/// # async fn run<V1, V2>(v1: V1, v2: V2) -> Result<(), acp_rpc::Error>
/// # where V1: acp_rpc::acp_types::Agent<acp_rpc::AgentContext> + 'static,
/// #       V2: acp_rpc::acp_types::v2::Agent<acp_rpc::v2::AgentContext> + 'static {
/// use acp_rpc::version::ProtocolRouter;
/// let router = ProtocolRouter::new().with_v1_agent(v1).with_v2_agent(v2);
/// let (reader, writer) = acp_rpc::transport::stdio();
/// let (_peer, serve) = acp_rpc::Connection::new().serve(reader, writer, router);
/// serve.await
/// # }
/// ```
#[derive(Default)]
pub struct ProtocolRouter {
    v1: Option<Arc<dyn DynHandler>>,
    v2: Option<Arc<dyn DynHandler>>,
    /// Shared with the reader's hook in `negotiate`, which sets it on the client side.
    chosen: Arc<OnceLock<Version>>,
    /// Held by the `initialize` being handled while no version is chosen.
    choosing: tokio::sync::Mutex<()>,
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

    /// Serves v2 clients with the v1 implementation added before, through a
    /// [`V2Bridge`](crate::v2_bridge::V2Bridge) that translates each message (feature
    /// `unstable_v2_bridge`): one v1 implementation answers both versions, with none of the v2
    /// types compiled in. Without a v1 implementation this adds nothing (a warning is logged).
    #[cfg(feature = "unstable_v2_bridge")]
    pub fn with_v2_bridge(mut self) -> Self {
        match &self.v1 {
            Some(v1) => self.v2 = Some(Arc::new(crate::v2_bridge::V2Bridge::over(v1.clone()))),
            None => tracing::warn!("acp: `with_v2_bridge` needs a v1 implementation, added before it; none was"),
        }
        self
    }

    /// Serves v1 agents' requests with a typed client (`acp_types::Client`).
    pub fn with_v1_client<C>(self, client: C) -> Self
    where
        C: acp_types::Client<crate::ClientContext> + 'static,
    {
        self.with_v1(crate::client::ClientHandler::new(client))
    }

    /// Serves v2 agents' requests with a typed v2 client (`acp_types::v2::Client`).
    #[cfg(feature = "unstable_protocol_v2")]
    pub fn with_v2_client<C>(self, client: C) -> Self
    where
        C: acp_types::v2::Client<crate::v2::ClientContext> + 'static,
    {
        self.with_v2(crate::v2::ClientHandler::new(client))
    }

    /// Client side: initializes the connection served by this router (shared with it through
    /// an `Arc`) and fixes its version from the agent's answer (see the [module docs](self)).
    /// Asks for v2 when a v2 client is configured, else for v1. The version is fixed as the
    /// answer is read, so what the agent sends right behind it goes to that version's client.
    /// An answer naming a version this router does not serve fails with
    /// [`Error::Protocol`](crate::Error::Protocol), one that does not decode as that version's
    /// `initialize` result with [`Error::Decode`](crate::Error::Decode); either way the
    /// connection is closed.
    #[cfg(feature = "unstable_protocol_v2")]
    pub async fn negotiate(
        &self,
        peer: &crate::Peer,
        v2: acp_types::v2::InitializeRequest,
        v1: acp_types::InitializeRequest,
    ) -> Result<Negotiated, crate::Error> {
        use crate::Error;
        let asked = if self.v2.is_some() { Version::V2 } else { Version::V1 };
        let mut request = serde_json::to_value(&v1).map_err(Error::Encode)?;
        if asked == Version::V2 {
            let v2 = serde_json::to_value(&v2).map_err(Error::Encode)?;
            if let (serde_json::Value::Object(both), serde_json::Value::Object(v2)) = (&mut request, v2) {
                both.extend(v2);
            }
            // A batch the agent sends with its answer is read under v2's rules; a v1 answer
            // turns them off again before the next message is read.
            peer.follow_v2_rules(true);
        }
        // Until the answer is read, v1's rules come back however the call ends without one
        // (given up, cancelled, the connection gone): the guard goes with the hook, which the
        // connection either runs on the answer or drops unrun.
        let mut undecided = Undecided { peer: peer.clone(), chosen: false };
        // The version is fixed by the reader as it reads the answer, before it reads what the
        // agent sends next: a request or notification written right behind the answer is
        // routed to the chosen version, not refused as coming before `initialize`.
        let on_answer: crate::core::peer::AnswerHook = Box::new({
            let chosen = self.chosen.clone();
            let serves = (self.v1.is_some(), self.v2.is_some());
            move |answer, _| {
                undecided.chosen = true;
                let peer = &undecided.peer;
                let version = answer.as_ref().ok().and_then(|raw| answered_version(raw, serves));
                if let Some(version) = version {
                    let _ = chosen.set(version);
                }
                peer.follow_v2_rules(version == Some(Version::V2));
            }
        });
        let request = peer.encode_request(acp_types::agent_method::INITIALIZE, Some(&request));
        let answer = crate::typed::call_encoded(peer, request.map(|r| r.on_answer(on_answer)), None).await;
        let raw = match answer {
            Ok(raw) => raw,
            Err(e) => {
                peer.follow_v2_rules(false);
                return Err(e);
            }
        };
        let Some(version) = answered_version(&raw, (self.v1.is_some(), self.v2.is_some())) else {
            peer.close();
            return Err(Error::Protocol(
                "the agent answered `initialize` with a protocol version this client does not speak",
            ));
        };
        let negotiated = match version {
            Version::V1 => crate::typed::decode_result(&raw)
                .map(|init| Negotiated::V1 { agent: crate::AgentHandle::new(peer.clone()), init }),
            Version::V2 => crate::typed::decode_result(&raw)
                .map(|init| Negotiated::V2 { agent: crate::v2::AgentHandle::new(peer.clone()), init }),
        };
        if negotiated.is_err() {
            // The connection was switched to a version whose answer it cannot read: nothing
            // sensible can follow on it.
            peer.close();
        }
        negotiated
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
        at_or_below.or_else(|| available.max())
    }

    /// `version`, unless it is v2 and `params` are not a v2 `initialize` request (v2 requires
    /// `info`, which a v1 client does not send) while v1 is configured: a v1 client asking for
    /// a version above 1 is answered by the v1 implementation, with `protocolVersion: 1`, and
    /// goes on with v1 instead of being refused.
    fn fitting(&self, version: Version, params: Option<&RawValue>) -> Version {
        #[cfg(feature = "unstable_protocol_v2")]
        if version == Version::V2 && self.v1.is_some() {
            let text = params.map_or("{}", RawValue::get);
            if serde_json::from_str::<acp_types::v2::InitializeRequest>(text).is_err() {
                return Version::V1;
            }
        }
        // Without the v2 types (a v2 bridge alone): the member that tells a v2 request apart,
        // `info` with its required name and version.
        #[cfg(not(feature = "unstable_protocol_v2"))]
        if version == Version::V2 && self.v1.is_some() && !has_v2_info(params) {
            return Version::V1;
        }
        version
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
                let _choosing = self.choosing.lock().await;
                if let Some(version) = self.chosen.get() {
                    // Chosen by an earlier `initialize` while this one waited.
                    return self.handler(*version).handle_request_boxed(req).await;
                }
                let requested = requested_version(req.params.as_deref())?;
                let Some(version) = self.pick(requested) else {
                    return Err(ErrorObject::internal_error("this endpoint serves no protocol version"));
                };
                let version = self.fitting(version, req.params.as_deref());
                // Before the answer is written: what the client sends after reading it is read
                // under the chosen version's rules. Until a version is chosen, the guard puts
                // v1's rules back however this ends: refused, cancelled, or panicking (the
                // panic is answered further up); the client may then try again.
                let mut undecided = Undecided { peer: req.peer.clone(), chosen: false };
                undecided.peer.follow_v2_rules(version == Version::V2);
                let answer = self.handler(version).handle_request_boxed(req).await;
                if answer.is_ok() {
                    let chosen = *self.chosen.get_or_init(|| version);
                    undecided.peer.follow_v2_rules(chosen == Version::V2);
                    undecided.chosen = true;
                    tracing::debug!(requested, chosen = chosen.number(), "acp: protocol version chosen");
                }
                return answer;
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

/// An `initialize` being answered (or, on the client side, waiting for its answer) before a
/// version is chosen: dropped unchosen (refused, cancelled, or unwound by a panic), it puts the
/// connection back under v1's rules.
struct Undecided {
    peer: crate::Peer,
    chosen: bool,
}

impl Drop for Undecided {
    fn drop(&mut self) {
        if !self.chosen {
            self.peer.follow_v2_rules(false);
        }
    }
}

/// Whether `initialize` params carry v2's `info` (an object with string `name` and `version`).
#[cfg_attr(feature = "unstable_protocol_v2", allow(dead_code))]
fn has_v2_info(params: Option<&RawValue>) -> bool {
    #[derive(Deserialize)]
    struct Params {
        #[serde(rename = "info")]
        _info: Info,
    }
    #[derive(Deserialize)]
    struct Info {
        #[serde(rename = "name")]
        _name: String,
        #[serde(rename = "version")]
        _version: String,
    }
    params.is_some_and(|raw| serde_json::from_str::<Params>(raw.get()).is_ok())
}

/// The outcome of [`ProtocolRouter::negotiate`]: the version the agent chose, with the typed
/// handle and the `initialize` answer of that version.
#[cfg(feature = "unstable_protocol_v2")]
#[derive(Debug)]
#[non_exhaustive]
pub enum Negotiated {
    /// The agent speaks v1 (it answered `protocolVersion: 1`).
    V1 {
        /// The v1 handle.
        agent: crate::AgentHandle,
        /// The agent's answer.
        init: Box<acp_types::InitializeResponse>,
    },
    /// The agent speaks v2.
    V2 {
        /// The v2 handle.
        agent: crate::v2::AgentHandle,
        /// The agent's answer.
        init: Box<acp_types::v2::InitializeResponse>,
    },
}

#[cfg(feature = "unstable_protocol_v2")]
impl Negotiated {
    /// The version the agent chose.
    pub fn version(&self) -> Version {
        match self {
            Negotiated::V1 { .. } => Version::V1,
            Negotiated::V2 { .. } => Version::V2,
        }
    }
}

/// The version an agent's `initialize` answer names, if this client serves it (`serves`: v1,
/// v2).
#[cfg(feature = "unstable_protocol_v2")]
fn answered_version(answer: &RawValue, serves: (bool, bool)) -> Option<Version> {
    #[derive(Deserialize)]
    struct Answer {
        #[serde(rename = "protocolVersion")]
        protocol_version: u16,
    }
    match serde_json::from_str::<Answer>(answer.get()).ok()?.protocol_version {
        1 if serves.0 => Some(Version::V1),
        2 if serves.1 => Some(Version::V2),
        _ => None,
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

    #[test]
    fn v2_info_tells_a_v2_initialize_apart() {
        let has = |params: &str| has_v2_info(Some(&RawValue::from_string(params.to_owned()).unwrap()));
        assert!(has(r#"{"protocolVersion":2,"info":{"name":"a","version":"1"}}"#));
        assert!(!has(r#"{"protocolVersion":2,"clientInfo":{"name":"a","version":"1"}}"#));
        assert!(!has(r#"{"protocolVersion":2,"info":{"name":"a"}}"#));
        assert!(!has(r#"{"protocolVersion":2,"info":"a"}"#));
        assert!(!has_v2_info(None));
    }

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
        assert_eq!(both.pick(0), Some(Version::V2), "below every version: the latest answers");
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
