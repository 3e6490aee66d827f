//! `#[acp_agent]` and `#[acp_client]`: an inherent impl block becomes a complete ACP peer.
//!
//! Each `async fn` in the block handles the protocol method of the same name (the names of the
//! generated `Agent` / `Client` traits, listed in `src/table.rs`, which `cargo xtask codegen`
//! regenerates with the bindings), or the extension its `#[ext(..)]` / `#[ext_notification(..)]`
//! names. Plain functions and associated consts are helpers and stay in the block. The expansion
//! is thin: it implements the generated trait by calling the user's functions, and nothing else;
//! routing, decoding, cancellation and errors are the runtime's. Misuse is reported at compile
//! time, all errors at once, each pointing at the offending code.
//!
//! Use the macros through `acp-rpc`, which re-exports them.

#![cfg_attr(docsrs, feature(doc_cfg))]
#![deny(missing_docs)]

mod expand;
mod proxy;
// Printed by `cargo xtask codegen` (prettyplease), and checked by `codegen --check`.
#[rustfmt::skip]
mod table;

use proc_macro::TokenStream;

/// Turns `impl MyAgent { async fn initialize(..) .. }` into an ACP agent: implements
/// `acp_types::Agent<AgentContext>` by calling the functions in the block.
///
/// - A handler is `async fn NAME(&self, params: P) -> Result<R, E>` (with
///   `E: Into<acp_types::Error>`), optionally with a second argument `cx: AgentContext`;
///   `self: &Self` works too. A notification handler returns nothing or `Result<(), E>` (an
///   error is logged: notifications are never answered).
/// - `#[ext("_vendor/method")]` binds a function to the extension request of that name (params:
///   any `Deserialize` type, result: any `Serialize` type); `#[ext_notification("_vendor/name")]`
///   to the extension notification of that name. A request without a function answers -32601;
///   a notification without one is ignored.
/// - Any other `async fn` must be named after a protocol method; plain functions and
///   associated consts are left in the block. The block may be generic.
/// - `#[cfg]` / `#[cfg_attr(.., cfg(..))]` on a handler apply to everything generated for it.
/// - A handler of an unstable method needs the `acp-rpc` feature of that name (one
///   compile error says which otherwise).
/// - The capabilities of the handlers present (e.g. `loadSession` when `session_load` is
///   handled) are added to the `initialize` result.
///
/// # Protocol v2
///
/// `#[acp_agent(v2)]` implements `acp_types::v2::Agent<acp_rpc::v2::AgentContext>` instead
/// (needs the `acp-rpc` feature `unstable_protocol_v2`): handler names and types come from
/// v2's method table, capabilities are advertised v2-style (`{}` markers under `capabilities`,
/// e.g. `session.delete` when `session_delete` is handled), and the v2 baseline is required:
/// `session_new`, `session_list`, `session_resume`, `session_close`, `session_prompt` and
/// `session_cancel`; `auth_login` and `auth_logout` come as a pair or not at all. A prompt
/// handler reaches its turn (`cx.turn()`) to stream messages and tool calls; its `Ok` ends the
/// turn with `end_turn`. Serve a v1 and a v2 block from one binary with
/// `acp_rpc::ProtocolRouter`.
///
/// The attribute's other key, `crate = "path::to::acp_rpc"`, names the runtime when it is
/// re-exported under another path.
#[proc_macro_attribute]
pub fn acp_agent(attr: TokenStream, item: TokenStream) -> TokenStream {
    expand::expand(expand::Side::new(expand::Role::Agent), attr.into(), item.into()).into()
}

/// Turns `impl MyClient { async fn session_request_permission(..) .. }` into an ACP client:
/// implements `acp_types::Client<ClientContext>` and `acp_rpc::Advertise` (the client
/// capabilities the handlers present earn, for the `initialize` request). The rules are
/// [`acp_agent`]'s, with `cx: ClientContext`; `#[acp_client(v2)]` implements
/// `acp_types::v2::Client<acp_rpc::v2::ClientContext>` (no `fs/*` or `terminal/*`: v2 has
/// neither).
#[proc_macro_attribute]
pub fn acp_client(attr: TokenStream, item: TokenStream) -> TokenStream {
    expand::expand(expand::Side::new(expand::Role::Client), attr.into(), item.into()).into()
}

/// Turns `impl MyProxy { async fn session_prompt(..) .. }` into an ACP proxy: implements
/// `acp_rpc::proxy::Proxy`, handling the messages the block's functions are named after
/// and forwarding everything else untouched (serve it with `acp_rpc::proxy::serve_proxy`).
///
/// - A function named after a method the agent handles (`session_prompt`, `session_cancel`,
///   `session_new`, ...) intercepts it on its way from the client; one named after a method
///   the client handles (`session_update`, `session_request_permission`, `fs_read_text_file`,
///   ...) intercepts it on its way from the agent. A name both sides have (`mcp_message`)
///   takes `#[from(client)]` or `#[from(agent)]`.
/// - `#[ext("_vendor/method")]` / `#[ext_notification("_vendor/method")]` with
///   `#[from(client)]` or `#[from(agent)]` intercept an extension.
/// - A request handler is `async fn NAME(&self, call: ProxiedRequest<P>) -> Result<A, E>`,
///   with `P: FromParams + IntoParams` (the raw params, a `serde_json::Value`, or a lossless
///   typed view), `A: IntoAnswer` (e.g. what `call.forward().await` returns, verbatim) and
///   `E: Into<ErrorObject>`. A notification handler is
///   `async fn NAME(&self, call: ProxiedNotification<P>)` and returns nothing; it passes the
///   notification on with `call.forward().await`, or drops it by not doing so.
/// - Any other `async fn` in the block is an error (unknown names get a "did you mean");
///   plain functions stay as helpers. All errors are reported at once, each at its cause.
///
/// The attribute's one key, `crate = "path::to::acp_rpc"`, names the runtime when it is
/// re-exported under another path.
#[proc_macro_attribute]
pub fn acp_proxy(attr: TokenStream, item: TokenStream) -> TokenStream {
    proxy::expand(attr.into(), item.into()).into()
}
