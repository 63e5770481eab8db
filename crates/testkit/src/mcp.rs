//! A small MCP server for tests, on `rmcp`'s server side: `echo` (read-only), `env` (its
//! environment, so a test can see what the daemon gave it), `slow` (sleeps; says when a call
//! was cancelled on its stderr) and `crash` (exits at once, mid-call). Run over stdio by the
//! `mcp-test-server` binary.

use std::time::Duration;

use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::{ServerHandler, ServiceExt, schemars, tool, tool_handler, tool_router};

/// `echo`'s arguments.
#[derive(Debug, serde::Deserialize, schemars::JsonSchema)]
pub struct EchoArgs {
    /// What to say back.
    pub text: String,
}

/// `slow`'s arguments.
#[derive(Debug, serde::Deserialize, schemars::JsonSchema)]
pub struct SlowArgs {
    /// How long to take, in milliseconds.
    pub ms: u64,
}

/// The test server.
#[derive(Debug, Clone)]
pub struct TestServer {
    tool_router: ToolRouter<Self>,
}

impl Default for TestServer {
    fn default() -> Self {
        Self {
            tool_router: Self::tool_router(),
        }
    }
}

#[tool_router]
impl TestServer {
    /// Says the text back.
    #[tool(description = "Say the text back", annotations(read_only_hint = true))]
    async fn echo(&self, Parameters(EchoArgs { text }): Parameters<EchoArgs>) -> String {
        format!("mcp echo: {text}")
    }

    /// The server's environment, as a JSON object.
    #[tool(
        description = "The server's environment variables",
        annotations(read_only_hint = true)
    )]
    async fn env(&self) -> String {
        let vars: serde_json::Map<String, serde_json::Value> = std::env::vars()
            .map(|(k, v)| (k, serde_json::Value::String(v)))
            .collect();
        serde_json::Value::Object(vars).to_string()
    }

    /// Takes its time.
    #[tool(description = "Wait, then answer")]
    async fn slow(&self, Parameters(SlowArgs { ms }): Parameters<SlowArgs>) -> String {
        // Dropped when the client cancels the call: the guard says so on stderr.
        struct Told;
        impl Drop for Told {
            fn drop(&mut self) {
                if !std::thread::panicking() {
                    eprintln!("slow: dropped");
                }
            }
        }
        let told = Told;
        tokio::time::sleep(Duration::from_millis(ms)).await;
        std::mem::forget(told);
        format!("slept {ms} ms")
    }

    /// Exits the process at once, mid-call.
    #[tool(description = "Exit at once")]
    async fn crash(&self) -> String {
        std::process::exit(3)
    }
}

#[tool_handler(router = self.tool_router)]
impl ServerHandler for TestServer {}

/// Serves [`TestServer`] on stdin and stdout until the client goes away.
pub async fn serve_stdio() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let server = TestServer::default()
        .serve(rmcp::transport::stdio())
        .await?;
    server.waiting().await?;
    Ok(())
}
