//! `mcp-test-server`: the testkit's MCP server over stdio (see `switchboard_testkit::mcp`).

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    switchboard_testkit::mcp::serve_stdio().await
}
