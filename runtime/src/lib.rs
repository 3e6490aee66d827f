//! Agent Client Protocol runtime: JSON-RPC 2.0 over newline-delimited JSON, with ACP's
//! concurrency and cancellation rules, for agents and clients alike.
//!
//! Two layers. The core works at the raw-JSON level (params and results are [`RawValue`]s,
//! never rewritten, except that line breaks between tokens go out as spaces to keep one
//! message per line): [`Connection`], [`Handler`], [`Peer`]. The typed layer sits on top of it
//! and speaks the generated [`acp_types`]: an agent implements `acp_types::Agent<AgentContext>`
//! and is served with [`agent::serve_stdio`] (or [`Connection::serve_agent`]); a client
//! implements `acp_types::Client<ClientContext>` and starts an agent with
//! `client::spawn_agent` (feature `process`; or [`Connection::serve_client`] over any transport). Each side calls the other
//! through a typed handle ([`ClientHandle`], [`AgentHandle`]). The macros [`acp_agent`],
//! [`acp_client`] and [`acp_proxy`] write the trait implementations from an impl block.
//!
//! # An agent
//!
//! Each `async fn` handles the method it is named after; `#[ext]` binds an extension method.
//! The block below is a whole agent, served on stdin/stdout:
//!
//! ```no_run
//! use acp_rpc::acp_types::*;
//! use acp_rpc::{AgentContext, acp_agent};
//!
//! struct Shouter;
//!
//! #[acp_agent]
//! impl Shouter {
//!     async fn initialize(&self, _: InitializeRequest) -> Result<InitializeResponse, Error> {
//!         Ok(InitializeResponse::new(ProtocolVersion::V1)) // the version this agent speaks
//!     }
//!     async fn authenticate(&self, _: AuthenticateRequest) -> Result<AuthenticateResponse, Error> {
//!         Ok(AuthenticateResponse::new())
//!     }
//!     async fn session_new(&self, _: NewSessionRequest) -> Result<NewSessionResponse, Error> {
//!         Ok(NewSessionResponse::new("sess_1"))
//!     }
//!     async fn session_prompt(&self, p: PromptRequest, cx: AgentContext) -> Result<PromptResponse, Error> {
//!         let text = TextContent::new("I HEAR YOU");
//!         let update = SessionUpdate::AgentMessageChunk(ContentChunk::new(text));
//!         cx.client().session_update(SessionNotification::new(p.session_id, update)).await?;
//!         Ok(PromptResponse::new(StopReason::EndTurn))
//!     }
//!     async fn session_cancel(&self, _: CancelNotification) {}
//!
//!     // An extension request: `_shout/upper`, params and result of any serde type.
//!     #[ext("_shout/upper")]
//!     async fn upper(&self, text: String) -> Result<String, Error> {
//!         Ok(text.to_uppercase())
//!     }
//! }
//!
//! #[tokio::main]
//! async fn main() -> Result<(), acp_rpc::Error> {
//!     acp_rpc::agent::serve_stdio(Shouter).await
//! }
//! ```
//!
//! # A client, an extension call and cancellation
//!
//! A client handles what the agent sends it (`session/update`, permission requests, and the
//! file system and terminal methods it chooses to offer) and drives the agent through an
//! [`AgentHandle`]. Here both run in one process over an in-memory [`transport::duplex`]; a real
//! client starts the agent with `spawn_agent(client, command)` (feature `process`) and gets the
//! same handle. The turn is cancelled with `session/cancel`, as ACP asks: the agent's handler
//! sees its token fire, and the prompt returns `stopReason: cancelled`.
//!
//! ```
//! use std::sync::Arc;
//!
//! use acp_rpc::acp_types::*;
//! use acp_rpc::{AgentContext, acp_agent, acp_client, serve_agent, serve_client, transport};
//! use tokio::sync::Notify;
//!
//! struct Worker;
//!
//! #[acp_agent]
//! impl Worker {
//!     async fn initialize(&self, _: InitializeRequest) -> Result<InitializeResponse, Error> {
//!         Ok(InitializeResponse::new(ProtocolVersion::V1))
//!     }
//!     async fn authenticate(&self, _: AuthenticateRequest) -> Result<AuthenticateResponse, Error> {
//!         Ok(AuthenticateResponse::new())
//!     }
//!     async fn session_new(&self, _: NewSessionRequest) -> Result<NewSessionResponse, Error> {
//!         Ok(NewSessionResponse::new("sess_1"))
//!     }
//!     // A turn that works until it is cancelled.
//!     async fn session_prompt(&self, p: PromptRequest, cx: AgentContext) -> Result<PromptResponse, Error> {
//!         // Asking for the token before the cancel arrives gives the handler time to wind down.
//!         let cancelled = cx.cancelled();
//!         let update = SessionUpdate::AgentMessageChunk(ContentChunk::new(TextContent::new("working")));
//!         cx.client().session_update(SessionNotification::new(p.session_id, update)).await?;
//!         cancelled.await;
//!         Ok(PromptResponse::new(StopReason::Cancelled))
//!     }
//!     async fn session_cancel(&self, _: CancelNotification) {}
//!
//!     #[ext("_demo/reverse")]
//!     async fn reverse(&self, words: Vec<String>) -> Result<Vec<String>, Error> {
//!         Ok(words.into_iter().rev().collect())
//!     }
//! }
//!
//! struct Editor {
//!     agent_spoke: Arc<Notify>,
//! }
//!
//! #[acp_client]
//! impl Editor {
//!     async fn session_request_permission(&self, _: RequestPermissionRequest) -> Result<RequestPermissionResponse, Error> {
//!         Ok(RequestPermissionResponse::new(RequestPermissionOutcome::Cancelled))
//!     }
//!     async fn session_update(&self, _: SessionNotification) {
//!         self.agent_spoke.notify_one();
//!     }
//! }
//!
//! #[tokio::main]
//! async fn main() -> Result<(), acp_rpc::Error> {
//!     let (agent_end, client_end) = transport::duplex(64 * 1024);
//!     let (_client, agent_connection) = serve_agent(Worker, agent_end.0, agent_end.1);
//!     tokio::spawn(agent_connection);
//!     let agent_spoke = Arc::new(Notify::new());
//!     let editor = Editor { agent_spoke: agent_spoke.clone() };
//!     let (agent, client_connection) = serve_client(editor, client_end.0, client_end.1);
//!     tokio::spawn(client_connection);
//!
//!     agent.initialize(InitializeRequest::new(ProtocolVersion::V1)).await?;
//!     let session = agent.new_session(NewSessionRequest::new("/tmp", vec![])).await?;
//!
//!     // An extension method: JSON params in, JSON result out.
//!     let reversed = agent.ext_method("_demo/reverse", serde_json::json!(["a", "b"])).await?;
//!     assert_eq!(reversed, serde_json::json!(["b", "a"]));
//!
//!     // The turn runs in a task of its own (a call is sent when first polled); once the agent
//!     // has started it, cancel it.
//!     let prompt = PromptRequest::new(session.session_id.clone(), vec![TextContent::new("go").into()]);
//!     let turn = tokio::spawn({
//!         let agent = agent.clone();
//!         async move { agent.prompt(prompt).await }
//!     });
//!     agent_spoke.notified().await;
//!     agent.cancel(CancelNotification::new(session.session_id)).await?;
//!     let response = turn.await.expect("the turn's task")?;
//!     assert_eq!(response.stop_reason, StopReason::Cancelled);
//!     Ok(())
//! }
//! ```
//!
//! # Modules
//!
//! | module | owns |
//! |---|---|
//! | [`agent`] | the agent side of the typed layer: [`AgentContext`], [`ClientHandle`], serving an `Agent` |
//! | [`client`] | the client side of the typed layer: [`ClientContext`], [`AgentHandle`], serving a `Client`, spawning an agent (`AgentProcess`, feature `process`) |
//! | [`terminal`] | [`TerminalHandle`]: a client terminal the agent created, released on drop |
//! | [`framing`] | splitting input into lines: buffering, the line limit, CRLF, blank lines |
//! | [`jsonrpc`] | the envelope: [`Id`], [`ErrorObject`] and [`codes`], decoding a line, encoding |
//! | [`connection`] | [`Connection`] (options), [`Serve`] (the I/O), and the concurrency and cancellation contract |
//! | [`handler`] | the [`Handler`] trait and [`IncomingRequest`] / [`IncomingNotification`] |
//! | [`peer`] | [`Peer`]: outgoing calls and notifications, cancel-on-drop, `cancel_session` |
//! | [`transport`] | stdio, in-memory duplex, and a spawned agent process (process group, stderr, termination; feature `process`) |
//! | [`methods`] | the ACP method names and fixed results the runtime acts on |
//! | `mcp` | MCP over ACP: rmcp servers offered through the connection, an agent's rmcp clients of them, the conductor's bridge (features `mcp-over-acp`, `mcp-bridge`) |
//! | [`version`] | serving v1 and v2 on one endpoint: each connection's first `initialize` picks |
//! | `v2` | protocol v2's typed layer (feature `unstable_protocol_v2`) |
//! | `v2_bridge` | protocol v2 served by a v1 implementation, translated as JSON (feature `unstable_v2_bridge`) |
//!
//! # The raw layer
//!
//! A raw handler (the typed layer is one too: [`agent::AgentHandler`], [`client::ClientHandler`]):
//!
//! ```no_run
//! use acp_rpc::{Connection, ErrorObject, Handler, IncomingRequest, RawValue};
//!
//! struct Echo;
//! impl Handler for Echo {
//!     async fn handle_request(&self, req: IncomingRequest) -> Result<Box<RawValue>, ErrorObject> {
//!         match &*req.method {
//!             "_echo" => Ok(req.params.unwrap_or_else(|| RawValue::from_string("null".into()).unwrap())),
//!             other => Err(ErrorObject::method_not_found(other)),
//!         }
//!     }
//! }
//!
//! # async fn run() -> Result<(), acp_rpc::Error> {
//! let (reader, writer) = acp_rpc::transport::stdio();
//! let (_peer, serve) = Connection::new().serve(reader, writer, Echo);
//! serve.await
//! # }
//! ```
//!
//! # Bad input and how it is answered
//!
//! Nothing the peer sends can panic the runtime or end the connection; only end of input or
//! a transport error do. An answer never echoes the input back. Answers with a `null` id are
//! what JSON-RPC prescribes when the id cannot be known.
//!
//! | input | answer |
//! |---|---|
//! | a line longer than `max_line_bytes` (default 64 MiB) | buffered up to the limit, then skipped to its newline; -32600 with `null` id; warning logged |
//! | not UTF-8 | -32700, `null` id |
//! | not JSON (incl. a stray log line, truncated JSON, trailing garbage) | -32700, `null` id |
//! | deeply nested JSON (e.g. 100,000 `[`) | -32700 if unterminated, -32600 if complete; no recursion, no stack overflow |
//! | empty or whitespace-only line | ignored |
//! | `\r\n` line ending | `\r` stripped, message handled normally |
//! | JSON that is not an object (number, string, `null`, ...) | -32600, `null` id |
//! | a batch (JSON array), protocol v1 | -32600, `null` id (v1 has no batches) |
//! | a batch on a protocol v2 connection | each entry routed as a message of its own; the answers of its requests and invalid entries go out as one array once the last is answered (`tests/batches.rs`) |
//! | an empty batch, v2 | -32600, `null` id, a single object (not an array) |
//! | an invalid entry of a batch (`1`, `"x"`, `[]`, an object without `method`), v2 | its own -32600 in the answer array; the other entries are served |
//! | a batch of notifications only, v2 | handled in order, nothing written (not even `[]`) |
//! | `"jsonrpc"` missing or not `"2.0"` | -32600 with the message's id if valid, else `null` |
//! | an id that is an object, array or boolean | -32600, `null` id |
//! | an id that is a number but not an i64 (`1.5`, `1e3`, beyond i64) | an id all the same, answered as written ([`Id::OtherNumber`]) |
//! | `"id": null` with a method | a request with id `null`; answered with id `null` |
//! | `"method"` not a string | -32600 with the id if valid, else `null` |
//! | no `"method"`, no `"result"`/`"error"` | -32600 with the id if valid, else `null` |
//! | a member given twice (e.g. two `"id"`) | -32600 with the id if unambiguous, else `null` |
//! | request `"params"` not an object or array (e.g. a string) | -32602 with its id |
//! | notification `"params"` not an object or array | not answered (notifications never are); warning logged |
//! | `"params": null` | treated as absent |
//! | a request for a method the handler does not know | the handler decides; the default and the typed layer answer -32601 |
//! | an unknown notification (e.g. `_x`) | passed to the handler, never answered; the default ignores it |
//! | a response to an id we are not waiting for | warning logged, ignored |
//! | a response with a string id | ignored like an unknown id (our ids are integers) |
//! | an error response with `null` id | warning logged, ignored |
//! | a malformed response (both `result` and `error`, bad error object, bad `jsonrpc`) | never answered; the pending call with that id, if any, fails with [`Error::Protocol`] |
//! | a request reusing the id of one of its in-flight requests | -32600 for the duplicate (with that id); the original runs on |
//! | a message with `"method"` *and* `"result"`/`"error"` | treated as a request or notification (the method decides) |
//! | `$/cancel_request` for an unknown id, or with bad params | ignored (never passed to the handler) |
//! | `session/cancel` without a string `"sessionId"` | nothing is cancelled; passed to the handler |
//! | more requests in flight than `max_concurrent_requests` + `max_queued_requests` (1024 + 4096) | held, unstarted, in the backlog (`max_backlog_bytes`, 64 MiB) and started in arrival order as slots free up; reading goes on, so cancellations (which answer a held request at once), responses and end of input still get through (`tests/overload.rs`) |
//! | a request that does not fit the backlog either | refused at once, unrun: [`codes::OVERLOADED`] (-32029) "Overloaded, retry later", `data` `{"retryAfterMs","inFlight","backlogBytes","maxBacklogBytes"}`; [`Error::is_overloaded`] on our side; see [`connection`](connection#overload-a-peer-that-sends-more-than-it-lets-us-finish) |
//! | a handler that panics | -32603 for its request; a notification handler's panic is logged; the connection goes on |
//! | a last line without a newline before end of input | handled like any other line |
//!
//! Each row is exercised by `tests/bad_input.rs`.

#![cfg_attr(docsrs, feature(doc_cfg))]
#![deny(missing_docs)]

/// The README's example, compiled as a doctest so that it cannot go stale.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctest;

// The core: framing, JSON-RPC, the connection and the transports (see `core/mod.rs`). Its
// public modules keep the paths they had before it was a floor of its own.
mod core;
pub use self::core::{connection, framing, handler, jsonrpc, methods, owner, peer, transport};

mod advertise;
pub mod agent;
pub use agent::{compaction, terminal};
pub mod client;
#[cfg(any(feature = "http-server", feature = "http-client"))]
pub mod http;
#[doc(hidden)]
pub mod macro_support;
#[cfg(any(feature = "mcp-over-acp", feature = "mcp-bridge"))]
pub mod mcp;
pub mod proxy;
pub mod sessions;
#[cfg(feature = "unstable_protocol_v2")]
pub mod v2;
#[cfg(feature = "unstable_v2_bridge")]
pub mod v2_bridge;
pub mod version;

mod typed;

pub use self::core::error::Error;
pub use acp_macros::{acp_agent, acp_client, acp_proxy};
pub use acp_types;
pub use advertise::Advertise;
pub use agent::{AgentContext, ClientHandle, serve_agent};
pub use client::{AgentHandle, ClientContext, serve_client};
#[cfg(feature = "process")]
pub use client::{AgentProcess, spawn_agent};
pub use connection::{Connection, RequestLoad, Serve};
pub use handler::{Forward, Handler, IncomingNotification, IncomingRequest};
pub use jsonrpc::{ErrorObject, Id, codes};
pub use owner::Owner;
pub use peer::{Peer, PendingResponse, SessionScope};
pub use serde_json::value::RawValue;
pub use terminal::TerminalHandle;
pub use tokio_util::sync::CancellationToken;
