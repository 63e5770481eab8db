//! Helpers for the end-to-end tests: a daemon on 127.0.0.1:0 against the scripted LLM, a
//! WebSocket client that reads frames the way a user's client would (`util/ws.rs`), and
//! checks of the invariants every saved or sent history must hold.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use switchboard::app::{self, Running};
use switchboard::config::Config;
use switchboard_testkit::{BarrierTool, EchoTool, FailTool, ScriptedLlm, SleepTool};
use switchboard_tools::ToolRegistry;

mod ws;

#[cfg(feature = "cluster")]
pub use ws::Read;
pub use ws::{TurnFrames, WsClient};

/// How long any single expected event may take before a test fails.
pub const PATIENCE: Duration = Duration::from_secs(10);

/// TOML lines added to the tables of the test config.
#[derive(Clone, Copy, Debug, Default)]
pub struct Extra<'a> {
    /// Appended to `[agent]`.
    pub agent: &'a str,
    /// Appended to `[llm]`.
    pub llm: &'a str,
    /// Appended to `[http]`.
    pub http: &'a str,
    /// Appended to `[daemon]`.
    pub daemon: &'a str,
    /// Appended at the end: further tables (e.g. `[channels.telegram]`).
    pub tables: &'a str,
}

/// Config text for a daemon in `dir` using `llm`, with `extra` TOML appended to the
/// `[agent]` table (e.g. `history_limit = 50`).
pub fn config_text(llm_base_url: &str, dir: &Path, agent_extra: &str) -> String {
    config_text_with(
        llm_base_url,
        dir,
        Extra {
            agent: agent_extra,
            ..Extra::default()
        },
    )
}

/// Config text for a daemon in `dir` using `llm`, with `extra` lines in its tables.
pub fn config_text_with(llm_base_url: &str, dir: &Path, extra: Extra<'_>) -> String {
    format!(
        r#"
[agent]
workspace = "{workspace}"
state_dir = "{state}"
{agent}

[llm]
base_url = "{llm_base_url}"
model = "scripted"
{retries}
{llm}

[http]
bind = "127.0.0.1:0"
{http}

[channels.websocket]
auth = "none"

[daemon]
shutdown_grace_secs = 2
{daemon}

{tables}
"#,
        workspace = dir.join("workspace").display(),
        state = dir.join("state").display(),
        agent = extra.agent,
        retries = if extra.llm.contains("max_retries") {
            ""
        } else {
            "max_retries = 3"
        },
        llm = extra.llm,
        http = extra.http,
        daemon = extra.daemon,
        tables = extra.tables,
    )
}

/// Parses config text as if read from `dir/config.toml`.
pub fn config(text: &str, dir: &Path) -> Config {
    Config::parse(text, &dir.join("config.toml")).expect("test config parses")
}

/// The tools of the test daemon: echo, fail, sleep, and a two-party barrier.
pub fn test_tools() -> ToolRegistry {
    ToolRegistry::new()
        .with(Arc::new(EchoTool))
        .with(Arc::new(FailTool))
        .with(Arc::new(SleepTool))
        .with(Arc::new(BarrierTool::new(2, Duration::from_secs(5))))
}

/// Starts a daemon in `dir` against `llm` with the test tools.
pub async fn start(llm: &ScriptedLlm, dir: &Path, agent_extra: &str) -> Running {
    let extra = Extra {
        agent: agent_extra,
        ..Extra::default()
    };
    start_configured(llm, dir, extra, Vec::new()).await
}

/// The session file of a WebSocket chat.
pub fn session_file(dir: &Path, chat_id: &str) -> PathBuf {
    dir.join("state/sessions")
        .join(format!("websocket_{chat_id}.jsonl"))
}

/// The messages of an LLM request after the system prompt.
pub fn conversation(request: &Value) -> Vec<Value> {
    request["messages"]
        .as_array()
        .expect("messages")
        .iter()
        .filter(|m| m["role"] != "system")
        .cloned()
        .collect()
}

/// The tool results an OpenAI-style request carries, in order.
pub fn tool_results(request: &Value) -> Vec<String> {
    conversation(request)
        .into_iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| m["content"].as_str().unwrap_or_default().to_owned())
        .collect()
}

/// Asserts a conversation as sent to the LLM is valid: it starts with a user message and
/// every tool result directly answers a call of the assistant message before it.
pub fn assert_no_orphans(messages: &[Value]) {
    assert_eq!(
        messages.first().map(|m| &m["role"]),
        Some(&json!("user")),
        "{messages:?}"
    );
    let mut open: Vec<String> = Vec::new();
    for message in messages {
        if message["role"] == "tool" {
            let id = message["tool_call_id"].as_str().expect("tool_call_id");
            let position = open.iter().position(|o| o == id);
            assert!(
                position.is_some(),
                "orphaned tool result {id} in {messages:#?}"
            );
            open.retain(|o| o != id);
        } else {
            assert!(
                open.is_empty(),
                "calls {open:?} have no results in {messages:#?}"
            );
            open = message["tool_calls"]
                .as_array()
                .map(|calls| {
                    calls
                        .iter()
                        .filter_map(|c| c["id"].as_str().map(str::to_owned))
                        .collect()
                })
                .unwrap_or_default();
        }
    }
}

/// Reads a session file line by line; every line must be valid JSON.
pub fn read_session_file(path: &Path) -> Vec<Value> {
    let text = std::fs::read_to_string(path).expect("session file exists");
    text.lines()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("bad line {line}: {e}")))
        .collect()
}

/// A tool that holds for a while and records how many probe calls ran at once.
pub struct Probe {
    pub name: &'static str,
    pub exclusive: bool,
    pub hold: Duration,
    /// Probe calls running now, shared by every probe of a test.
    pub running: Arc<std::sync::atomic::AtomicUsize>,
    /// The most probe calls seen running at once.
    pub max_seen: Arc<std::sync::atomic::AtomicUsize>,
}

#[async_trait::async_trait]
impl switchboard_tools::Tool for Probe {
    fn name(&self) -> &str {
        self.name
    }
    fn description(&self) -> &str {
        "Records concurrency."
    }
    fn parameters(&self) -> Value {
        json!({"type": "object", "properties": {}})
    }
    fn exclusive(&self) -> bool {
        self.exclusive
    }
    async fn call(
        &self,
        _: Value,
        _: &switchboard_tools::ToolContext,
    ) -> Result<switchboard_tools::ToolOutput, switchboard_tools::ToolError> {
        use std::sync::atomic::Ordering;
        let now = self.running.fetch_add(1, Ordering::SeqCst) + 1;
        self.max_seen.fetch_max(now, Ordering::SeqCst);
        tokio::time::sleep(self.hold).await;
        self.running.fetch_sub(1, Ordering::SeqCst);
        Ok(format!("{} saw {now} running", self.name).into())
    }
}

/// Starts a daemon with `extra` lines in the config's tables and the test tools plus `tools`.
pub async fn start_configured(
    llm: &ScriptedLlm,
    dir: &Path,
    extra: Extra<'_>,
    tools: Vec<Arc<dyn switchboard_tools::Tool>>,
) -> Running {
    let text = config_text_with(&llm.base_url(), dir, extra);
    let mut registry = test_tools();
    for tool in tools {
        registry.register(tool);
    }
    app::start(config(&text, dir), registry)
        .await
        .expect("daemon starts")
}

/// `GET /healthz` as JSON.
pub async fn health(addr: std::net::SocketAddr) -> Value {
    let response = crate::chat::http_get(addr, "/healthz").await;
    let body = response.split("\r\n\r\n").nth(1).expect("body");
    serde_json::from_str(body).expect("JSON")
}

/// A daemon in its own temporary directory against a fresh scripted LLM, with one
/// connected WebSocket client: the setup most tests share.
pub struct Harness {
    pub dir: tempfile::TempDir,
    pub llm: ScriptedLlm,
    pub daemon: Running,
    pub client: WsClient,
}

impl Harness {
    /// Starts with the test tools and `agent_extra` in the `[agent]` table.
    pub async fn start(agent_extra: &str) -> Self {
        Self::with_tools(agent_extra, Vec::new()).await
    }

    /// Starts with the test tools plus `extra`.
    pub async fn with_tools(
        agent_extra: &str,
        extra: Vec<Arc<dyn switchboard_tools::Tool>>,
    ) -> Self {
        let config_extra = Extra {
            agent: agent_extra,
            ..Extra::default()
        };
        Self::with(config_extra, extra).await
    }

    /// Starts with the test tools and `extra` lines in the config's tables.
    pub async fn with_config(extra: Extra<'_>) -> Self {
        Self::with(extra, Vec::new()).await
    }

    /// Starts with `extra` lines in the config's tables and the test tools plus `tools`.
    pub async fn with(extra: Extra<'_>, tools: Vec<Arc<dyn switchboard_tools::Tool>>) -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let llm = ScriptedLlm::start().await.expect("scripted LLM");
        let daemon = start_configured(&llm, dir.path(), extra, tools).await;
        let client = WsClient::connect(daemon.addr()).await;
        Self {
            dir,
            llm,
            daemon,
            client,
        }
    }
}

/// The switchboard binary cargo built for these tests.
pub const BINARY: &str = env!("CARGO_BIN_EXE_switchboard");

/// Starts the binary with `config`, as `WRAPPER... sh -c 'PRELUDE; exec switchboard …'`
/// (e.g. `unshare -Urm` and a `mount`, or `ulimit -n 256`); returns it and the address it
/// serves on (read from its JSON log). The rest of its log is drained in the background.
/// The child's pid is the daemon's (the shell execs it).
pub async fn spawn_daemon_with(
    config: &Path,
    wrapper: &[&str],
    prelude: &str,
) -> (tokio::process::Child, std::net::SocketAddr) {
    let (child, serving) = spawn_serving(config, wrapper, prelude).await;
    let addr = serving["addr"].as_str().unwrap_or_default();
    (child, addr.parse().expect("address"))
}

/// Starts the binary with `config`; returns it and its start line (`switchboard is
/// serving`, as JSON).
pub async fn spawn_daemon_serving(config: &Path) -> (tokio::process::Child, Value) {
    spawn_serving(config, &[], "").await
}

async fn spawn_serving(
    config: &Path,
    wrapper: &[&str],
    prelude: &str,
) -> (tokio::process::Child, Value) {
    use std::process::Stdio;
    use tokio::io::{AsyncBufReadExt, BufReader};
    let script = format!("{prelude}\nexec \"$0\" \"$@\"");
    let (program, wrapper_args) = match wrapper.split_first() {
        Some((program, args)) => (*program, args),
        None => ("sh", &[][..]),
    };
    let mut command = tokio::process::Command::new(program);
    command.args(wrapper_args);
    if !wrapper.is_empty() {
        command.arg("sh");
    }
    let mut child = command
        .arg("-c")
        .arg(script)
        .arg(BINARY)
        .args(["--log-format", "json", "run", "--config"])
        .arg(config)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("binary starts");
    let stderr = child.stderr.take().expect("stderr");
    let (tx, rx) = tokio::sync::oneshot::channel();
    // SWITCHBOARD_TEST_LOGS=DIR keeps each daemon's log in DIR/<pid>.log, for a failure's
    // post-mortem.
    let mut keep = std::env::var_os("SWITCHBOARD_TEST_LOGS").and_then(|dir| {
        let path = std::path::Path::new(&dir).join(format!("{}.log", child.id().unwrap_or(0)));
        std::fs::File::create(path).ok()
    });
    tokio::spawn(async move {
        let mut lines = BufReader::new(stderr).lines();
        let mut tx = Some(tx);
        while let Ok(Some(line)) = lines.next_line().await {
            if let Some(file) = &mut keep {
                use std::io::Write;
                let _ = writeln!(file, "{line}");
            }
            let Ok(log) = serde_json::from_str::<Value>(&line) else {
                continue;
            };
            if log["message"] == "switchboard is serving"
                && let Some(tx) = tx.take()
            {
                let _ = tx.send(log);
            }
        }
    });
    let serving = tokio::time::timeout(PATIENCE, rx)
        .await
        .expect("the daemon reports its address in time")
        .expect("log line");
    // The start line names the page as a link a terminal can open.
    assert_eq!(
        serving["url"],
        format!("http://{}/", serving["addr"].as_str().unwrap_or_default()),
        "the start line's url"
    );
    (child, serving)
}

/// Starts the binary with `config`.
pub async fn spawn_daemon(config: &Path) -> (tokio::process::Child, std::net::SocketAddr) {
    spawn_daemon_with(config, &[], "").await
}

/// Runs `switchboard ARGS --config CONFIG` (an operator's command, e.g. `pairing approve
/// CODE`), which must succeed; its standard output.
pub async fn cli(args: &[&str], config: &Path) -> String {
    let output = tokio::process::Command::new(BINARY)
        .args(args)
        .arg("--config")
        .arg(config)
        .output()
        .await
        .expect("runs");
    assert!(
        output.status.success(),
        "switchboard {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// Sends SIGTERM (or another signal, e.g. `-KILL`) to a child process.
pub fn signal(child: &tokio::process::Child, signal: &str) {
    let pid = child.id().expect("running").to_string();
    let status = std::process::Command::new("kill")
        .args([signal, &pid])
        .status()
        .expect("kill");
    assert!(status.success());
}

/// Sends raw bytes to the daemon and reads what comes back until the server closes the
/// connection (or `wait` passes); returns it as text.
pub async fn raw_http(addr: std::net::SocketAddr, request: &str, wait: Duration) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(addr).await.expect("connect");
    stream.write_all(request.as_bytes()).await.expect("write");
    let mut response = Vec::new();
    let _ = tokio::time::timeout(wait, stream.read_to_end(&mut response)).await;
    String::from_utf8_lossy(&response).into_owned()
}
