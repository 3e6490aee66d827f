//! `#[acp_agent]` and `#[acp_client]`: an inherent impl block becomes a complete ACP peer.
//!
//! Each `async fn` in the block handles the protocol method of the same name (the names of the
//! generated `Agent` / `Client` traits, listed in [`table`], which `cargo xtask codegen`
//! regenerates with the bindings). The expansion is thin: it implements the generated trait by
//! calling the user's functions, and nothing else; routing, decoding, cancellation and errors
//! are the runtime's. Misuse is reported at compile time, all errors at once, each pointing at
//! the offending code.
//!
//! Use the macros through `acp-runtime`, which re-exports them.

mod expand;
mod table;

use proc_macro::TokenStream;

/// Turns `impl MyAgent { async fn initialize(..) .. }` into an ACP agent: implements
/// `acp_types::Agent<AgentContext>` by calling the functions in the block.
///
/// A handler is `async fn NAME(&self, params: P) -> Result<R, E>` (with `E: Into<acp_types::Error>`),
/// optionally with a second argument `cx: AgentContext`. `#[ext("_vendor/method")]` binds a
/// function to an extension method. The capabilities of the handlers present (e.g.
/// `loadSession` when `session_load` is handled) are added to the `initialize` result.
#[proc_macro_attribute]
pub fn acp_agent(attr: TokenStream, item: TokenStream) -> TokenStream {
    expand::expand(expand::Side::Agent, attr.into(), item.into()).into()
}

/// Turns `impl MyClient { async fn session_request_permission(..) .. }` into an ACP client:
/// implements `acp_types::Client<ClientContext>` and `acp_runtime::Advertise` (the client
/// capabilities the handlers present earn, for the `initialize` request).
#[proc_macro_attribute]
pub fn acp_client(attr: TokenStream, item: TokenStream) -> TokenStream {
    expand::expand(expand::Side::Client, attr.into(), item.into()).into()
}
