//! The core floor: newline-delimited JSON-RPC 2.0 with ACP's concurrency and cancellation
//! rules, and the transports it runs on. It knows no role (agent, client, proxy), no protocol
//! version beyond the rules it is told to follow, and nothing of the layers above it: they
//! reach it through [`Peer`](peer::Peer), [`Handler`](handler::Handler), the builder
//! [`Connection`](connection::Connection), and the seams documented on `Peer` (the
//! per-connection [`Extensions`](extensions::Extensions), the version's rules, the readings of
//! a request's cancellation); `docs/architecture.md` lists them.
//!
//! Inside, every module looks only at the ones listed before it (the layering check,
//! `cargo xtask layers`, holds the tree to that):
//!
//! | module | owns |
//! |---|---|
//! | `jsonrpc` | the envelope: ids, error objects, decoding a line, encoding |
//! | `framing` | the line reader: buffering, the line limit, CRLF |
//! | `methods` | the ACP method names the rules act on, and how a request is classed by them |
//! | `tasks`, `catch_unwind` | spawning, counting and aborting tasks; panics as answers |
//! | `owner`, `extensions` | who is asking; per-connection state of the layers above |
//! | `error` | what an outgoing call or the connection fails with |
//! | `writer` | the output queue and the task that writes it, the wire tap |
//! | `batch` | answering a JSON-RPC batch entry by entry |
//! | `backlog` | requests held as bytes beyond the task bounds |
//! | `state` | the state every task of a connection shares |
//! | `peer` | outgoing calls and notifications |
//! | `handler` | the handler trait and the incoming messages |
//! | `requests` | the request runner: one task per request, one answer each, the backlog's task |
//! | `notifications` | the ordered notification task |
//! | `reader` | the read loop: routes each line to its pending call, a request or a notification |
//! | `connection` | the builder and the [`Serve`](connection::Serve) future that starts the tasks |
//! | `transport` | stdio, duplex, child processes |

pub(crate) mod backlog;
pub(crate) mod batch;
pub(crate) mod catch_unwind;
pub mod connection;
pub(crate) mod error;
pub mod extensions;
pub mod framing;
pub mod handler;
pub mod jsonrpc;
pub(crate) mod load;
pub mod methods;
pub(crate) mod notifications;
pub mod owner;
pub mod peer;
pub(crate) mod reader;
pub(crate) mod requests;
pub(crate) mod state;
pub(crate) mod tasks;
pub mod transport;
pub(crate) mod watch;
pub(crate) mod writer;
