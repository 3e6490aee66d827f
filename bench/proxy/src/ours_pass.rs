//! A pass-through proxy written with `acp_runtime::proxy`.
#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), acp_runtime::Error> {
    let (stdin, stdout) = acp_runtime::transport::stdio();
    acp_runtime::proxy::serve_proxy(acp_runtime::proxy::Passthrough, stdin, stdout).await
}
