//! A small MCP server for tests, on `rmcp`'s server side: `echo` (read-only), `env` (its
//! environment, so a test can see what the daemon gave it), `slow` (sleeps; says when a call
//! was cancelled), `freeze` (blocks the server's one thread: it answers nothing, pings
//! included, until it is killed), `crash` (exits at once, mid-call), `grow` (adds the tool `late` and says
//! the list changed), `meet` (read-only: answers "met" only when two calls run at once),
//! `gather` (the same, unmarked), `flood` (floods its stderr), `picture` (answers with
//! an image, [`PICTURE`]) and `look` (who it runs as, and what of its parent — the daemon —
//! it can read). Run over stdio by the `mcp-test-server` binary.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{
    CallToolResult, ContentBlock, ListToolsResult, PaginatedRequestParams, ServerCapabilities,
    ServerConfig, SubscriptionFilter,
};
use rmcp::service::{Peer, RequestContext, RoleServer, SubscriptionContext};
use rmcp::{ErrorData, ServerHandler, ServiceExt, schemars, tool, tool_handler, tool_router};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

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

/// `meet`'s and `gather`'s arguments.
#[derive(Debug, serde::Deserialize, schemars::JsonSchema)]
pub struct MeetArgs {
    /// How long to wait for another call, in milliseconds.
    pub wait_ms: u64,
}

/// `flood`'s arguments.
#[derive(Debug, serde::Deserialize, schemars::JsonSchema)]
pub struct FloodArgs {
    /// How many lines (of 4,000 bytes) to write to stderr.
    pub lines: u64,
}

/// The image `picture` answers with: a 1×1 PNG.
pub const PICTURE: &[u8] = &[
    0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a, 0x00, 0x00, 0x00, 0x0d, 0x49, 0x48, 0x44, 0x52,
    0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x01, 0x08, 0x06, 0x00, 0x00, 0x00, 0x1f, 0x15, 0xc4,
    0x89, 0x00, 0x00, 0x00, 0x0d, 0x49, 0x44, 0x41, 0x54, 0x78, 0xda, 0x63, 0x64, 0x60, 0xf8, 0x5f,
    0x0f, 0x00, 0x02, 0x87, 0x01, 0x80, 0xeb, 0x47, 0xba, 0x92, 0x00, 0x00, 0x00, 0x00, 0x49, 0x45,
    0x4e, 0x44, 0xae, 0x42, 0x60, 0x82,
];

/// `picture`'s arguments.
#[derive(Debug, serde::Deserialize, schemars::JsonSchema)]
pub struct PictureArgs {
    /// `svg` or `broken` for an image the daemon leaves out; anything else, a PNG.
    #[serde(default)]
    pub kind: Option<String>,
}

/// The test server.
#[derive(Debug, Clone)]
pub struct TestServer {
    tool_router: ToolRouter<Self>,
    /// Whether `grow` was called: then `late` is listed too.
    grown: Arc<AtomicBool>,
    /// Wakes the listen streams when the list changed.
    grew: Arc<Notify>,
    /// Calls of `meet` so far, and their meeting point.
    meeting: Arc<AtomicUsize>,
    met: Arc<Notify>,
}

impl Default for TestServer {
    fn default() -> Self {
        Self {
            tool_router: Self::tool_router(),
            grown: Arc::default(),
            grew: Arc::default(),
            meeting: Arc::default(),
            met: Arc::default(),
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

    /// Takes its time; a call cancelled meanwhile (`notifications/cancelled`) says so on
    /// stderr, and in the file `MCP_TEST_CANCELLED` names, if any.
    #[tool(description = "Wait, then answer")]
    async fn slow(
        &self,
        Parameters(SlowArgs { ms }): Parameters<SlowArgs>,
        cancelled: CancellationToken,
    ) -> String {
        tokio::select! {
            () = tokio::time::sleep(Duration::from_millis(ms)) => format!("slept {ms} ms"),
            () = cancelled.cancelled() => {
                eprintln!("slow: cancelled");
                if let Some(path) = std::env::var_os("MCP_TEST_CANCELLED") {
                    let _ = std::fs::write(path, "cancelled");
                }
                "cancelled".to_owned()
            }
        }
    }

    /// Blocks the server's only thread for `ms`: nothing is answered meanwhile — not the
    /// cancellation, not a ping (a server stuck in a call).
    #[tool(description = "Hang the whole server")]
    async fn freeze(&self, Parameters(SlowArgs { ms }): Parameters<SlowArgs>) -> String {
        std::thread::sleep(Duration::from_millis(ms));
        format!("froze {ms} ms")
    }

    /// Who the server runs as (uid, effective capabilities, `no_new_privs`) and whether it can
    /// read its parent's environment and memory, as JSON.
    #[tool(
        description = "Who am I, and what of my parent can I read",
        annotations(read_only_hint = true)
    )]
    async fn look(&self) -> String {
        let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
        let field = |name: &str| {
            status
                .lines()
                .find_map(|line| line.strip_prefix(name))
                .map(|value| value.trim().to_owned())
                .unwrap_or_default()
        };
        let parent = std::os::unix::process::parent_id();
        let environ = std::fs::read(format!("/proc/{parent}/environ"));
        let mem = std::fs::File::open(format!("/proc/{parent}/mem"));
        serde_json::json!({
            "uid": field("Uid:").split_whitespace().next().unwrap_or_default(),
            "cap_eff": field("CapEff:"),
            "no_new_privs": field("NoNewPrivs:"),
            "parent_environ": environ.map_or_else(|err| err.to_string(), |_| "read".to_owned()),
            "parent_mem": mem.map_or_else(|err| err.to_string(), |_| "opened".to_owned()),
        })
        .to_string()
    }

    /// Exits the process at once, mid-call.
    #[tool(description = "Exit at once")]
    async fn crash(&self) -> String {
        std::process::exit(3)
    }

    /// Adds `late` to the tools, and says so (`notifications/tools/list_changed`).
    #[tool(description = "Add a tool")]
    async fn grow(&self, peer: Peer<RoleServer>) -> String {
        self.grown.store(true, Ordering::SeqCst);
        // Servers on protocols before 2026-07-28 send it unscoped; later ones on the
        // client's listen streams.
        let _ = peer.notify_tool_list_changed().await;
        self.grew.notify_waiters();
        "grown".to_owned()
    }

    /// Waits (up to `wait_ms`) until another call is running too: "met" when calls run side
    /// by side, "alone" when they run one after another. Marked read-only.
    #[tool(description = "Meet another call", annotations(read_only_hint = true))]
    async fn meet(&self, Parameters(MeetArgs { wait_ms }): Parameters<MeetArgs>) -> String {
        self.meeting_point(wait_ms).await
    }

    /// `meet`, not marked read-only (the config may say it is).
    #[tool(description = "Meet another call, unmarked")]
    async fn gather(&self, Parameters(MeetArgs { wait_ms }): Parameters<MeetArgs>) -> String {
        self.meeting_point(wait_ms).await
    }

    /// Writes `lines` lines to stderr, then answers.
    #[tool(description = "Write a lot to stderr")]
    async fn flood(&self, Parameters(FloodArgs { lines }): Parameters<FloodArgs>) -> String {
        let line = "x".repeat(4000);
        for _ in 0..lines {
            eprintln!("{line}");
        }
        format!("wrote {lines} lines")
    }

    /// A picture: a line of text and [`PICTURE`]; with `kind = "svg"`, an image of a type
    /// models are not shown; with `kind = "broken"`, image data that is not base64.
    #[tool(description = "Take a picture", annotations(read_only_hint = true))]
    async fn picture(
        &self,
        Parameters(PictureArgs { kind }): Parameters<PictureArgs>,
    ) -> CallToolResult {
        use base64::Engine;
        let png = base64::engine::general_purpose::STANDARD.encode(PICTURE);
        let image = match kind.as_deref() {
            Some("svg") => ContentBlock::image(png, "image/svg+xml"),
            Some("broken") => ContentBlock::image("not base64!", "image/png"),
            _ => ContentBlock::image(png, "image/png"),
        };
        CallToolResult::success(vec![ContentBlock::text("a picture"), image])
    }

    /// Listed only after `grow`.
    #[tool(description = "A tool that came later")]
    async fn late(&self) -> String {
        "late tool".to_owned()
    }
}

impl TestServer {
    async fn meeting_point(&self, wait_ms: u64) -> String {
        let arrived = self.meeting.fetch_add(1, Ordering::SeqCst) + 1;
        if arrived.is_multiple_of(2) {
            self.met.notify_waiters();
            return "met".to_owned();
        }
        let met = self.met.notified();
        match tokio::time::timeout(Duration::from_millis(wait_ms), met).await {
            Ok(()) => "met".to_owned(),
            Err(_) => {
                self.meeting.fetch_sub(1, Ordering::SeqCst);
                "alone".to_owned()
            }
        }
    }
}

#[tool_handler(router = self.tool_router)]
impl ServerHandler for TestServer {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(
            ServerCapabilities::builder()
                .enable_tools()
                .enable_tool_list_changed()
                .build(),
        )
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let grown = self.grown.load(Ordering::SeqCst);
        let tools = self
            .tool_router
            .list_all()
            .into_iter()
            .filter(|tool| grown || tool.name != "late")
            .collect();
        let mut result = ListToolsResult::with_all_items(tools);
        // Not to be cached: the list changes.
        result.ttl_ms = Some(0);
        Ok(result)
    }

    fn accepted_subscription_filter(
        &self,
        requested: &SubscriptionFilter,
    ) -> Option<SubscriptionFilter> {
        Some(requested.supported_by(&self.get_info().capabilities))
    }

    async fn listen(&self, context: SubscriptionContext) -> Result<(), ErrorData> {
        loop {
            self.grew.notified().await;
            if context.sink().notify_tool_list_changed().await.is_err() {
                return Ok(());
            }
        }
    }
}

/// Serves [`TestServer`] on stdin and stdout until the client goes away.
pub async fn serve_stdio() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let server = TestServer::default()
        .serve(rmcp::transport::stdio())
        .await?;
    server.waiting().await?;
    Ok(())
}

/// [`TestServer`] over streamable HTTP on 127.0.0.1, at `/mcp`, answering only requests with
/// `Authorization: Bearer <token>` (others get 401); returns its URL and the task serving it.
pub async fn serve_http(token: &str) -> std::io::Result<(String, tokio::task::JoinHandle<()>)> {
    use axum::http::{Request, StatusCode, header};
    use axum::middleware::{self, Next};
    use axum::response::{IntoResponse, Response};
    use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
    use rmcp::transport::streamable_http_server::{
        StreamableHttpServerConfig, StreamableHttpService,
    };

    let service = StreamableHttpService::new(
        || Ok(TestServer::default()),
        Arc::new(LocalSessionManager::default()),
        StreamableHttpServerConfig::default(),
    );
    let expected = format!("Bearer {token}");
    let bearer = move |request: Request<axum::body::Body>, next: Next| {
        let expected = expected.clone();
        async move {
            let given = request
                .headers()
                .get(header::AUTHORIZATION)
                .and_then(|value| value.to_str().ok());
            if given == Some(expected.as_str()) {
                next.run(request).await
            } else {
                let refused: Response = (StatusCode::UNAUTHORIZED, "bad token").into_response();
                refused
            }
        }
    };
    let app = axum::Router::new()
        .nest_service("/mcp", service)
        .layer(middleware::from_fn(bearer));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let task = tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    Ok((format!("http://{addr}/mcp"), task))
}
