//! An official v1 proxy offering one rmcp server, `official-calc`, over MCP over ACP.

use agent_client_protocol::{Proxy, Stdio, mcp_server::McpServer};
use agent_client_protocol_rmcp::rmcp_3::McpServerExt;
use rmcp::handler::server::{router::tool::ToolRouter, wrapper::Parameters};
use rmcp::model::{ServerCapabilities, ServerConfig};
use rmcp::{ServerHandler, tool, tool_handler, tool_router};

#[derive(serde::Deserialize, rmcp::schemars::JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
struct AddParams {
    a: i64,
    b: i64,
}

#[derive(Clone)]
struct Calc {
    #[allow(dead_code)]
    tool_router: ToolRouter<Calc>,
}

#[tool_router]
impl Calc {
    #[tool(description = "Adds two integers")]
    fn add(&self, Parameters(AddParams { a, b }): Parameters<AddParams>) -> String {
        format!("official:{}", a + b)
    }
}

#[tool_handler]
impl ServerHandler for Calc {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let server = McpServer::from_rmcp("official-calc", || Calc { tool_router: Calc::tool_router() });
    Proxy.v1().name("official-mcp-proxy").with_mcp_server(server).connect_to(Stdio::new()).await?;
    Ok(())
}
