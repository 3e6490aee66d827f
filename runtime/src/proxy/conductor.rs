//! The conductor: runs a chain of components (proxies, then an agent) and is one agent to its
//! client. Every message goes through it: it renames the client's `initialize` to
//! `proxy/initialize` for proxies, unwraps what a proxy sends its successor, wraps what goes
//! back to a proxy, and renumbers requests hop by hop (see the wire table in [`crate::proxy`]).
//!
//! A proxy that does not know `proxy/initialize` (a `sacp` 11 one passes it on to its
//! successor, which the conductor answers -32601) is initialized again with
//! `_proxy/initialize`, and spoken to in `_proxy/successor` from then on; one that knows
//! neither (written for `@thinkwell/conductor` or an earlier `sacp`) gets the older wire's
//! `initialize` marked `"_meta": {"proxy": true}`, must answer with the same marker, and is
//! spoken to in `_proxy/successor/request` and `_proxy/successor/notification` (see [`Wire`]).
//! Run as a proxy itself ([`Conductor::proxy_mode`]), the conductor is initialized on whichever
//! of the three wires its own conductor speaks.
//!
//! Each hop is a [forwarding](crate::Connection::forwarding) connection, so the chain keeps
//! the order of what passes through it, passes params on byte for byte, passes cancellation on
//! hop by hop, and answers its client as an agent must when a component is stuck.
//!
//! # When something ends
//!
//! | event | what the client sees | the chain |
//! |---|---|---|
//! | the client closes its side | the answers to what is in flight, as cancelled (see [`Connection::forwarding`]), while it still reads | every component's input is closed; the components are then terminated ([`ComponentCommand`]: SIGTERM, SIGKILL after the grace period, all at once) and reaped |
//! | a component exits (its process is watched, so a child it left holding its stdout does not hide the exit; see [`Component::ends_with`]) or closes its output | an error answer (-32603, "forwarding failed: connection closed") for every request in flight through it, then the end of output | the other components are closed and reaped, as above |
//! | a component writes something that is not JSON-RPC | the same: a broken component ends the chain (waiting on it would hang the client) | as above |
//! | a component never answers | nothing until the client cancels; then the cancellation's answer (for `session/prompt`, `{"stopReason":"cancelled"}`) after the grace period | goes on |
//!
//! The conductor adds and removes nothing: the client gets the first component's
//! `initialize` answer verbatim, as with the official conductor. The exceptions are the older
//! wire's marker (added to the `initialize` an older proxy is sent, and to the conductor's own
//! answer in proxy mode when its conductor speaks that wire), and the MCP
//! bridge ([`Conductor::mcp_bridge`], feature `mcp-bridge`, unix), off by default: for an
//! agent without `mcpCapabilities.acp`, the conductor advertises it and turns the `"type":
//! "acp"` MCP servers of the chain into stdio servers the agent starts (see
//! `crate::mcp::bridge`).

use std::borrow::Cow;
use std::io;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use serde_json::value::RawValue;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use super::{Wire, envelope, is_any_successor_envelope, is_chain_method, mark_as_proxy, marks_a_proxy};
use crate::core::connection::Connection;
use crate::core::handler::{Forward, Handler, IncomingNotification, IncomingRequest};
use crate::core::jsonrpc::ErrorObject;
use crate::core::methods::{PROXY_INITIALIZE, SACP_PROXY_INITIALIZE};
use crate::core::peer::Peer;

#[cfg(feature = "process")]
mod command;
pub mod debug_log;
pub mod trace;
#[cfg(feature = "process")]
pub use command::{ChainExit, ComponentCommand, ParseError, run_commands};

type BoxReader = Box<dyn AsyncRead + Send + Unpin>;
type BoxWriter = Box<dyn AsyncWrite + Send + Unpin>;

/// One component of a chain over any transport: what it writes (`reader`) and its input
/// (`writer`).
pub struct Component {
    /// Its name, for logs and errors.
    pub name: String,
    /// Reads what the component writes (a child's stdout).
    pub reader: BoxReader,
    /// Writes to the component (a child's stdin).
    pub writer: BoxWriter,
    /// Completes when the component has ended whatever its output does (its process exited):
    /// see [`Component::ends_with`].
    ended: Option<std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>>,
}

impl Component {
    /// A component over `reader` (its output) and `writer` (its input).
    pub fn new(
        name: impl Into<String>,
        reader: impl AsyncRead + Send + Unpin + 'static,
        writer: impl AsyncWrite + Send + Unpin + 'static,
    ) -> Self {
        Component { name: name.into(), reader: Box::new(reader), writer: Box::new(writer), ended: None }
    }

    /// The component has ended when `ended` completes, even if its output stays open: a
    /// process that exited while a child of its own still holds its stdout. The chain then
    /// ends as when the component closes its output.
    #[must_use]
    pub fn ends_with(mut self, ended: impl std::future::Future<Output = ()> + Send + 'static) -> Self {
        self.ended = Some(Box::pin(ended));
        self
    }
}

impl std::fmt::Debug for Component {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Component").field("name", &self.name).finish_non_exhaustive()
    }
}

/// How long past the cancel grace a shut-down chain waits for its client's connection to
/// answer what is in flight before it closes the components (see [`Conductor::shutdown_on`]).
const SHUTDOWN_MARGIN: Duration = Duration::from_millis(500);

/// How a chain ended.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ChainEnd {
    /// The client closed its side.
    ClientClosed,
    /// The token given to [`Conductor::shutdown_on`] was cancelled.
    ShutDown,
    /// A component ended first (exited, closed its output, or wrote something that is not
    /// JSON-RPC).
    ComponentEnded {
        /// Its place in the chain, from 0 (the last one is the agent).
        index: usize,
        /// Its name.
        name: String,
    },
}

/// Runs a chain; see the [module docs](self).
#[derive(Clone, Debug)]
pub struct Conductor {
    cancel_grace: Duration,
    proxy_mode: bool,
    trace: Option<TraceOut>,
    debug: Option<debug_log::DebugLog>,
    shutdown: Option<CancellationToken>,
    #[cfg(all(feature = "mcp-bridge", unix))]
    mcp_bridge: Option<crate::mcp::bridge::McpBridge>,
}

impl Default for Conductor {
    fn default() -> Self {
        Self::new()
    }
}

impl Conductor {
    /// A conductor with a 1 s cancellation grace period on every hop.
    pub fn new() -> Self {
        Conductor {
            cancel_grace: super::PROXY_CANCEL_GRACE,
            proxy_mode: false,
            trace: None,
            debug: None,
            shutdown: None,
            #[cfg(all(feature = "mcp-bridge", unix))]
            mcp_bridge: None,
        }
    }

    /// Ends the chain when `token` is cancelled (e.g. on a signal), as the end of the client's
    /// input would: requests in flight are answered with errors, then every connection closes,
    /// and [`run`](Self::run) returns [`ChainEnd::ShutDown`]. Unlike the end of input, this
    /// also ends a chain that is stuck: a component that stops reading its input holds up, by
    /// backpressure, the reading of the client's input, so its end would never be read.
    pub fn shutdown_on(mut self, token: CancellationToken) -> Self {
        self.shutdown = Some(token);
        self
    }

    /// Bridges MCP over ACP for an agent that does not speak it: when the agent's
    /// `initialize` answer lacks `mcpCapabilities.acp`, the client is told `acp: true`, and
    /// each `"type": "acp"` MCP server given to the agent becomes a stdio server running
    /// `shim` (see `crate::mcp::bridge`).
    #[cfg(all(feature = "mcp-bridge", unix))]
    pub fn mcp_bridge(mut self, shim: crate::mcp::bridge::McpBridge) -> Self {
        self.mcp_bridge = Some(shim);
        self
    }

    /// How long a cancelled request waits for the answer from further down the chain before
    /// the conductor answers it itself (see [`Connection::forwarding`]).
    pub fn cancel_grace(mut self, grace: Duration) -> Self {
        self.cancel_grace = grace;
        self
    }

    /// Runs as a proxy rather than as an agent: the conductor is itself one link of a larger
    /// chain, initialized by its own conductor on any of the three wires (see [`Wire`]), and
    /// every component is a proxy. What the last
    /// one sends its successor goes to the conductor's own successor (wrapped, through the
    /// conductor's own conductor), and what comes from there reaches the last one. So chains
    /// nest: `acp-conductor agent "acp-conductor proxy P1 P2" AGENT`.
    pub fn proxy_mode(mut self) -> Self {
        self.proxy_mode = true;
        self
    }

    /// Writes every message between two places of the chain to `out`, once, as
    /// newline-delimited JSON in the official conductor's trace format (see [`trace`]). For a
    /// file, pass a `BufWriter`: each event is flushed as it is written.
    pub fn trace(mut self, out: impl std::io::Write + Send + 'static) -> Self {
        self.trace = Some(TraceOut(Arc::new(Mutex::new(Some(Box::new(out))))));
        self
    }

    /// Writes every line each component reads and writes (and, for the chain started by
    /// `run_commands`, its stderr) to `out`, in the official conductor's `--debug` layout (see
    /// [`debug_log`]). Credentials in MCP server definitions are redacted.
    pub fn debug_log(self, out: impl std::io::Write + Send + 'static) -> Self {
        self.debug_log_to(debug_log::DebugLog::new(out))
    }

    /// [`debug_log`](Self::debug_log) into a log you keep a clone of, to add the lines of your
    /// own (`C !`) with [`DebugLog::conductor_line`](debug_log::DebugLog::conductor_line).
    pub fn debug_log_to(mut self, log: debug_log::DebugLog) -> Self {
        self.debug = Some(log);
        self
    }

    /// Runs the chain `components` (proxies, then the agent, which comes last) for the client
    /// on `reader` / `writer`, until the client or a component ends.
    ///
    /// # Errors
    ///
    /// `InvalidInput` when `components` is empty (a chain needs an agent).
    pub async fn run<R, W>(self, reader: R, writer: W, components: Vec<Component>) -> io::Result<ChainEnd>
    where
        R: AsyncRead + Send + Unpin + 'static,
        W: AsyncWrite + Send + Unpin + 'static,
    {
        if components.is_empty() {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "a chain needs at least an agent component"));
        }
        let chain = Arc::new(Chain {
            proxy_mode: self.proxy_mode,
            client: OnceLock::new(),
            components: components.iter().map(|_| OnceLock::new()).collect(),
            wires: components.iter().map(|_| Arc::new(AtomicU8::new(Wire::Current.as_u8()))).collect(),
            client_wire: AtomicU8::new(Wire::Current.as_u8()),
            #[cfg(all(feature = "mcp-bridge", unix))]
            bridge: self.mcp_bridge.clone().map(crate::mcp::bridge::Bridge::new),
        });
        let tracer = self
            .trace
            .as_ref()
            .and_then(TraceOut::take)
            .map(|out| trace::Tracer::new(out, components.len(), self.proxy_mode));
        let tapped = |connection: Connection, place: Place| match (&tracer, &self.debug) {
            (None, None) => connection,
            (tracer, debug) => connection.wire_tap(trace::Tap::new(tracer.clone(), debug.clone(), place)),
        };
        let mut serves = JoinSet::new();
        // The components' own ends ([`Component::ends_with`]), apart from `serves`: the chain
        // does not wait for those that never come.
        let mut exits = JoinSet::new();
        let mut names = Vec::new();
        let mut peers = Vec::new();
        for (index, mut component) in components.into_iter().enumerate() {
            if let Some(ended) = component.ended.take() {
                exits.spawn(async move {
                    ended.await;
                    index
                });
            }
            let connection = Connection::new()
                .forwarding()
                .wrapped_cancels(crate::proxy::wrapped_cancel_request)
                .end_on_bad_input()
                .cancel_grace(self.cancel_grace);
            let connection = tapped(connection, Place::Component(index));
            let link = Link { chain: chain.clone(), at: Place::Component(index) };
            let (peer, serve) = connection.serve(component.reader, component.writer, link);
            let _ = chain.components[index].set(peer.clone());
            peers.push(peer);
            names.push(component.name);
            serves.spawn(async move { (Place::Component(index), serve.await) });
        }
        let link = Link { chain: chain.clone(), at: Place::Client };
        let connection = tapped(
            Connection::new()
                .forwarding()
                .wrapped_cancels(crate::proxy::wrapped_cancel_request)
                .cancel_grace(self.cancel_grace),
            Place::Client,
        );
        let (client, client_serve) = connection.serve(reader, writer, link);
        let _ = chain.client.set(client.clone());
        serves.spawn(async move { (Place::Client, client_serve.await) });
        #[cfg(all(feature = "mcp-bridge", unix))]
        if let (Some(bridge), Some(agent)) = (&chain.bridge, chain.agent_index()) {
            // The bridge speaks for the agent: toward the client from the agent's place. (A
            // conductor in proxy mode has no agent, so nothing to bridge for.)
            let route = match agent.checked_sub(1) {
                None => crate::mcp::tunnel::Route::plain(client.clone()),
                Some(before) => crate::mcp::tunnel::Route::wrapped(peers[before].clone(), chain.wires[before].clone()),
            };
            bridge.set_route(route);
        }

        let shutdown = self.shutdown.clone().unwrap_or_default();
        let joined = tokio::select! {
            joined = serves.join_next() => Some(joined),
            Some(Ok(index)) = exits.join_next() => {
                tracing::info!(component = %names[index], "acp conductor: a component exited");
                Some(Some(Ok((Place::Component(index), Ok(())))))
            }
            () = shutdown.cancelled() => None,
        };
        drop(exits);
        let end = match joined {
            None => {
                tracing::info!("acp conductor: shutdown requested; ending the chain");
                // As at the end of the client's input: its connection stops reading and
                // answers what is in flight (within the cancel grace) before it ends; then
                // the components are closed, below. Not longer than that: in a stuck chain,
                // the client's connection waits on a component, which closing it releases.
                client.close();
                let client_ended = async {
                    while let Some(joined) = serves.join_next().await {
                        if matches!(joined, Ok((Place::Client, _))) {
                            break;
                        }
                    }
                };
                let _ = tokio::time::timeout(self.cancel_grace + SHUTDOWN_MARGIN, client_ended).await;
                ChainEnd::ShutDown
            }
            Some(Some(Ok((Place::Component(index), result)))) => {
                if let Err(e) = result {
                    tracing::warn!(component = %names[index], error = %e, "acp conductor: component connection failed");
                }
                tracing::info!(component = %names[index], "acp conductor: a component ended; ending the chain");
                ChainEnd::ComponentEnded { index, name: names[index].clone() }
            }
            // A client that closes right after the error answers of a component that ended
            // can finish first: the component's end is still why the chain ended.
            _ => match peers.iter().position(Peer::is_closed) {
                Some(index) => ChainEnd::ComponentEnded { index, name: names[index].clone() },
                None => ChainEnd::ClientClosed,
            },
        };
        // Components first: requests in flight through them are answered with errors while
        // the client's connection still writes; then the client's connection, which waits for
        // those answers (within the grace period) before it ends.
        for peer in &peers {
            peer.close();
        }
        client.close();
        while serves.join_next().await.is_some() {}
        #[cfg(all(feature = "mcp-bridge", unix))]
        if let Some(bridge) = &chain.bridge {
            bridge.shut_down();
        }
        Ok(end)
    }
}

/// Where [`Conductor::trace`] writes: taken by the first chain that runs.
#[derive(Clone)]
struct TraceOut(Arc<Mutex<Option<Box<dyn std::io::Write + Send>>>>);

impl TraceOut {
    fn take(&self) -> Option<Box<dyn std::io::Write + Send>> {
        self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner).take()
    }
}

impl std::fmt::Debug for TraceOut {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TraceOut")
    }
}

/// The components' connections, set once each connection exists.
struct Chain {
    /// Every component is a proxy, and the chain's end is our own successor.
    proxy_mode: bool,
    client: OnceLock<Peer>,
    components: Vec<OnceLock<Peer>>,
    /// The wire each proxy speaks (a [`Wire`] as a number), as its `initialize` found out
    /// (shared with the MCP bridge's route, which wraps for the proxy before the agent).
    wires: Vec<Arc<AtomicU8>>,
    /// In proxy mode, the wire our own conductor speaks, as its `initialize` said.
    client_wire: AtomicU8,
    #[cfg(all(feature = "mcp-bridge", unix))]
    bridge: Option<Arc<crate::mcp::bridge::Bridge>>,
}

impl Chain {
    fn client(&self) -> Option<Peer> {
        self.client.get().cloned()
    }

    fn component(&self, index: usize) -> Option<Peer> {
        self.components.get(index)?.get().cloned()
    }

    /// The agent's place, unless the chain runs as a proxy (then it has none).
    fn agent_index(&self) -> Option<usize> {
        (!self.proxy_mode).then(|| self.components.len() - 1)
    }

    fn last_index(&self) -> usize {
        self.components.len() - 1
    }

    fn is_agent(&self, index: usize) -> bool {
        Some(index) == self.agent_index()
    }

    /// The wire the proxy at `place` speaks (at the client's place, our own conductor).
    fn wire(&self, place: Place) -> Wire {
        let wire = match place {
            Place::Client => &self.client_wire,
            Place::Component(index) => &self.wires[index],
        };
        Wire::from_u8(wire.load(Ordering::Acquire))
    }

    fn set_wire(&self, place: Place, wire: Wire) {
        let slot = match place {
            Place::Client => &self.client_wire,
            Place::Component(index) => &self.wires[index],
        };
        slot.store(wire.as_u8(), Ordering::Release);
    }

    /// The envelope for a request (`notification: false`) or a notification to the proxy at
    /// `place`.
    fn envelope_to(&self, place: Place, notification: bool) -> &'static str {
        self.wire(place).successor_envelope(notification)
    }

    /// Puts every hop under the rules of the protocol version the chain's `initialize` answer
    /// names (v2: batches, and a `session/prompt` answered like any request), before the client
    /// reads that answer, as an agent's own connection does.
    fn adopt_version(&self, answer: &Result<Box<RawValue>, ErrorObject>) {
        #[derive(serde::Deserialize)]
        struct Answer {
            #[serde(rename = "protocolVersion")]
            protocol_version: Option<u64>,
        }
        let Ok(answer) = answer else { return };
        let Ok(Answer { protocol_version: Some(version) }) = serde_json::from_str(answer.get()) else { return };
        let v2 = version >= 2;
        let hops = self.client.get().into_iter().chain(self.components.iter().filter_map(OnceLock::get));
        for peer in hops {
            peer.follow_v2_rules(v2);
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Place {
    Client,
    Component(usize),
}

/// The conductor's end of one hop: where what arrives on it goes.
struct Link {
    chain: Arc<Chain>,
    at: Place,
}

fn forward<'a>(
    to: Option<Peer>,
    method: impl Into<Cow<'a, str>>,
    params: Option<Cow<'a, RawValue>>,
) -> Option<Forward<'a>> {
    Some(Forward { to: to?, method: method.into(), params })
}

impl Link {
    /// Toward the client from component `index`: plain to the client from the first one,
    /// wrapped for the proxy before it otherwise.
    fn toward_client<'a>(
        &self,
        index: usize,
        method: &'a str,
        params: Option<&'a RawValue>,
        notification: bool,
    ) -> Option<Forward<'a>> {
        match index.checked_sub(1) {
            None => forward(self.chain.client(), method, params.map(Cow::Borrowed)),
            Some(before) => {
                let wrapped = Cow::Owned(envelope::wrap(method, params));
                let envelope = self.chain.envelope_to(Place::Component(before), notification);
                forward(self.chain.component(before), envelope, Some(wrapped))
            }
        }
    }

    /// Initializes the proxy at `index` with the client's `initialize` params: on the current
    /// wire, on `sacp`'s when the proxy does not know `proxy/initialize` (-32601), and on the
    /// older one when it knows neither. Only -32601 moves on to the next wire: any other answer
    /// goes back as it came. On the older wire the answer must carry the marker (-32600
    /// otherwise; `@thinkwell/conductor` checks its first proxy so, this conductor every older
    /// proxy), which is left in it as that conductor leaves it.
    async fn initialize_proxy(
        &self,
        index: usize,
        params: Option<&RawValue>,
        cancel: &tokio_util::sync::CancellationToken,
    ) -> Result<Box<RawValue>, ErrorObject> {
        let peer = self.chain.component(index).ok_or_else(|| {
            ErrorObject::internal_error(format_args!("no component to forward `initialize` to (component {index})"))
        })?;
        let mut attempts = [Wire::Current, Wire::Sacp, Wire::Older].into_iter().peekable();
        while let Some(wire) = attempts.next() {
            // Told before it is sent: the proxy wraps its successor's `initialize` in the
            // wire's envelope before it answers.
            self.chain.set_wire(Place::Component(index), wire);
            if wire == Wire::Older {
                return self.initialize_older_proxy(&peer, params, cancel).await;
            }
            match peer.request_raw_until(wire.initialize_method(), params, cancel).await {
                Err(crate::Error::Rpc(e))
                    if e.code == crate::core::jsonrpc::codes::METHOD_NOT_FOUND && attempts.peek().is_some() =>
                {
                    tracing::debug!(
                        component = index,
                        method = wire.initialize_method(),
                        "acp conductor: not known; trying the next proxy wire"
                    );
                }
                answer => return answer.map_err(super::answer_error),
            }
        }
        unreachable!("the last attempt returns")
    }

    /// The older wire's `initialize`: the client's params with the marker, and an answer that
    /// must carry it.
    async fn initialize_older_proxy(
        &self,
        peer: &Peer,
        params: Option<&RawValue>,
        cancel: &tokio_util::sync::CancellationToken,
    ) -> Result<Box<RawValue>, ErrorObject> {
        let marked =
            mark_as_proxy(params).map_err(|e| ErrorObject::invalid_params(format_args!("`initialize` params: {e}")))?;
        let answer = peer.request_raw_until(INITIALIZE, Some(&marked), cancel).await.map_err(super::answer_error)?;
        if !marks_a_proxy(Some(&answer)) {
            return Err(ErrorObject::invalid_request(
                "the proxy knows neither `proxy/initialize` nor `_proxy/initialize`, and its answer to the older \
                 wire's `initialize` does not carry `\"_meta\": {\"proxy\": true}`: it did not take the proxy role",
            ));
        }
        Ok(answer)
    }
}

#[cfg(all(feature = "mcp-bridge", unix))]
impl Link {
    /// The message, unwrapped, when it goes into the agent from here.
    fn bound_for_agent<'a>(
        &self,
        method: &'a str,
        params: Option<&'a RawValue>,
    ) -> Option<(std::borrow::Cow<'a, str>, Option<&'a RawValue>)> {
        let agent = self.chain.agent_index()?;
        let wrapped = is_any_successor_envelope(method);
        match self.at {
            Place::Client if agent == 0 && !wrapped => Some((method.into(), params)),
            Place::Component(index) if index + 1 == agent && wrapped => {
                let inner = envelope::unwrap(params).ok()?;
                Some((inner.method, inner.params))
            }
            _ => None,
        }
    }

    /// The bridge and the message, when the bridge handles this message into the agent.
    fn for_bridge<'a>(
        &'a self,
        method: &'a str,
        params: Option<&'a RawValue>,
    ) -> Option<(&'a Arc<crate::mcp::bridge::Bridge>, std::borrow::Cow<'a, str>, Option<&'a RawValue>)> {
        let bridge = self.chain.bridge.as_ref()?;
        let (method, params) = self.bound_for_agent(method, params)?;
        bridge.wants(&method, params).then_some((bridge, method, params))
    }
}

impl Link {
    /// Where a request (`notification: false`) or notification read here goes when the
    /// conductor does not handle it; the kind picks the envelope on the older wire.
    fn route<'a>(&self, method: &'a str, params: Option<&'a RawValue>, notification: bool) -> Option<Forward<'a>> {
        let chain = &self.chain;
        #[cfg(all(feature = "mcp-bridge", unix))]
        if self.for_bridge(method, params).is_some() {
            return None;
        }
        // Initializing a proxy, and anything out of place, is left to `handle_request`.
        // Envelopes of any wire are told from anyone: a proxy passes the `proxy/initialize`
        // it does not know on in its own, before its wire is known.
        match (self.at, method) {
            // As a proxy: what our successor sends back to our last proxy (still wrapped: it
            // is for a proxy).
            (Place::Client, m) if chain.proxy_mode && is_any_successor_envelope(m) => {
                let last = Place::Component(chain.last_index());
                let envelope = chain.envelope_to(last, notification);
                forward(chain.component(chain.last_index()), envelope, params.map(Cow::Borrowed))
            }
            (_, PROXY_INITIALIZE | SACP_PROXY_INITIALIZE) => None,
            (Place::Client, INITIALIZE) => None,
            (Place::Client, m) if is_any_successor_envelope(m) => None,
            (Place::Client, _) => forward(chain.component(0), method, params.map(Cow::Borrowed)),
            (Place::Component(index), m) if is_any_successor_envelope(m) => {
                if chain.is_agent(index) {
                    return None;
                }
                let inner = envelope::unwrap(params).ok()?;
                if is_chain_method(&inner.method) {
                    return None;
                }
                if index == chain.last_index() {
                    // As a proxy, the last one's successor is ours: passed on as it came, in
                    // our own conductor's envelope.
                    let envelope = chain.envelope_to(Place::Client, notification);
                    return forward(chain.client(), envelope, params.map(Cow::Borrowed));
                }
                let next = index + 1;
                if inner.method == INITIALIZE && !chain.is_agent(next) {
                    return None;
                }
                forward(chain.component(next), inner.method, inner.params.map(Cow::Borrowed))
            }
            (Place::Component(index), _) => self.toward_client(index, method, params, notification),
        }
    }
}

impl Handler for Link {
    fn forward<'a>(&self, method: &'a str, params: Option<&'a RawValue>) -> Option<Forward<'a>> {
        self.route(method, params, false)
    }

    fn forward_notification<'a>(&self, method: &'a str, params: Option<&'a RawValue>) -> Option<Forward<'a>> {
        self.route(method, params, true)
    }

    fn handles_in_order(&self, method: &str, params: Option<&RawValue>) -> bool {
        super::initializes(method, params)
    }

    async fn handle_request(&self, req: IncomingRequest) -> Result<Box<RawValue>, ErrorObject> {
        #[cfg(all(feature = "mcp-bridge", unix))]
        if let Some((bridge, method, params)) = self.for_bridge(&req.method, req.params.as_deref()) {
            let agent = self.chain.agent_index().and_then(|agent| self.chain.component(agent));
            let agent = agent.ok_or_else(|| ErrorObject::internal_error("the agent is not connected"))?;
            return bridge.handle_request(&agent, &method, params, &req.cancel).await;
        }
        // Only what `forward` left here: a proxy's initialize, messages out of place, or a
        // hop that does not exist yet (a component that is not connected).
        let chain = &self.chain;
        let params = req.params.as_deref();
        match (self.at, &*req.method) {
            // The older wire's initialize, from our own conductor: answered with the marker.
            (Place::Client, INITIALIZE) if chain.proxy_mode && marks_a_proxy(params) => {
                chain.set_wire(Place::Client, Wire::Older);
                let answer = self.initialize_proxy(0, params, &req.cancel).await;
                chain.adopt_version(&answer);
                answer.and_then(super::with_proxy_marker)
            }
            (Place::Client, INITIALIZE) if chain.proxy_mode => Err(ErrorObject::invalid_request(
                "this conductor runs as a proxy: it is initialized by its own conductor, with `proxy/initialize` \
                 (or `_proxy/initialize`, or an `initialize` whose `_meta.proxy` is true)",
            )),
            (Place::Client, INITIALIZE) => {
                let answer = if chain.is_agent(0) {
                    let agent =
                        chain.component(0).ok_or_else(|| ErrorObject::internal_error("the agent is not connected"))?;
                    agent.request_raw_until(INITIALIZE, params, &req.cancel).await.map_err(super::answer_error)
                } else {
                    self.initialize_proxy(0, params, &req.cancel).await
                };
                chain.adopt_version(&answer);
                answer
            }
            (Place::Client, method @ (PROXY_INITIALIZE | SACP_PROXY_INITIALIZE)) if chain.proxy_mode => {
                let wire = if method == PROXY_INITIALIZE { Wire::Current } else { Wire::Sacp };
                chain.set_wire(Place::Client, wire);
                let answer = self.initialize_proxy(0, params, &req.cancel).await;
                chain.adopt_version(&answer);
                answer
            }
            (_, method @ (PROXY_INITIALIZE | SACP_PROXY_INITIALIZE)) => {
                Err(ErrorObject::invalid_request(format_args!("`{method}` requests are only sent by the conductor")))
            }
            (place, method) if is_any_successor_envelope(method) => {
                let inner = envelope::unwrap(params)?;
                match place {
                    Place::Component(index)
                        if inner.method == INITIALIZE && !chain.is_agent(index) && index < chain.last_index() =>
                    {
                        self.initialize_proxy(index + 1, inner.params, &req.cancel).await
                    }
                    // A proxy that passes on what it does not know (a `sacp` one given
                    // `proxy/initialize`): for it, the method does not exist, which makes it
                    // answer so and be initialized on its own wire.
                    Place::Component(_) if matches!(&*inner.method, PROXY_INITIALIZE | SACP_PROXY_INITIALIZE) => {
                        Err(ErrorObject::method_not_found(&inner.method))
                    }
                    _ => Err(ErrorObject::invalid_request(format_args!(
                        "`{method}` is only exchanged between the conductor and the proxies it initialized (wrapped: `{}`)",
                        inner.method
                    ))),
                }
            }
            (_, other) => Err(ErrorObject::internal_error(format_args!("no component to forward `{other}` to"))),
        }
    }

    async fn handle_notification(&self, notification: IncomingNotification) {
        #[cfg(all(feature = "mcp-bridge", unix))]
        if let Some((bridge, method, params)) = self.for_bridge(&notification.method, notification.params.as_deref()) {
            if let Some(agent) = self.chain.agent_index().and_then(|agent| self.chain.component(agent)) {
                bridge.handle_notification(&agent, &method, params).await;
            }
            return;
        }
        tracing::warn!(method = %notification.method, at = ?self.at, "acp conductor: notification out of place dropped");
    }
}

const INITIALIZE: &str = acp_types::agent_method::INITIALIZE;
