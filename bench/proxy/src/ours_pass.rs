//! A pass-through proxy written with `acp_rpc::proxy`.
#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), acp_rpc::Error> {
    let (stdin, stdout) = acp_rpc::transport::stdio();
    acp_rpc::proxy::serve_proxy(acp_rpc::proxy::Passthrough, stdin, stdout).await
}
