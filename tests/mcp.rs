//! MCP servers over stdio, as an operator configures them and a person uses them: the
//! testkit's `mcp-test-server` (built by `cargo test` with the workspace) started by the
//! daemon, its tools offered to the model as `test__echo` …, called, crashed, reloaded,
//! listed (how calls behave in a turn: `mcp_calls.rs`).

use std::path::PathBuf;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use switchboard_testkit::Reply;

use crate::util::{self, Extra, Harness, PATIENCE};

/// The test server's binary, beside this test's — as root, a link to it in a directory
/// anyone may pass through: a root daemon starts its servers as `nobody`, who may not reach
/// the build directory (a checkout under a private home).
fn server_binary() -> PathBuf {
    static SHARED: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    let exe = std::env::current_exe().expect("the test's path");
    let dir = exe
        .parent()
        .and_then(|deps| deps.parent())
        .expect("target/<profile>");
    let binary = dir.join("mcp-test-server");
    assert!(
        binary.exists(),
        "{} is missing: `cargo test --workspace` builds it, or `cargo build -p \
         switchboard-testkit --bin mcp-test-server`",
        binary.display()
    );
    if !rustix::process::geteuid().is_root() {
        return binary;
    }
    SHARED
        .get_or_init(|| {
            use std::os::unix::fs::PermissionsExt;
            forget_earlier_runs();
            let shared =
                std::env::temp_dir().join(format!("switchboard-mcp-test-{}", std::process::id()));
            std::fs::create_dir_all(&shared).expect("a shared directory");
            std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o755))
                .expect("chmod");
            let linked = shared.join("mcp-test-server");
            let _ = std::fs::remove_file(&linked);
            if std::fs::hard_link(&binary, &linked).is_err() {
                std::fs::copy(&binary, &linked).expect("a copy of the server");
            }
            std::fs::set_permissions(&linked, std::fs::Permissions::from_mode(0o755))
                .expect("chmod");
            linked
        })
        .clone()
}

/// Removes the shared copies that test processes no longer running left behind (a hard link
/// keeps a rebuilt binary's old blocks on disk).
fn forget_earlier_runs() {
    let Ok(entries) = std::fs::read_dir(std::env::temp_dir()) else {
        return;
    };
    for entry in entries.filter_map(Result::ok) {
        let name = entry.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|name| name.strip_prefix("switchboard-mcp-test-"))
        else {
            continue;
        };
        if !std::path::Path::new("/proc").join(pid).exists() {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

/// The tools the test server offers (before `grow`).
pub(crate) const TOOLS: u64 = 11;

pub(crate) fn server_table(extra: &str) -> String {
    format!(
        "[mcp.servers.test]\ncommand = \"{}\"\n{extra}",
        server_binary().display()
    )
}

/// A daemon (in this process, with a connected client) using the test server with `extra`
/// lines in its entry, once the server's `tools` tools are offered.
pub(crate) async fn with_server(extra: &str, tools: u64) -> Harness {
    let tables = server_table(extra);
    let h = Box::pin(Harness::with_config(Extra {
        tables: &tables,
        ..Extra::default()
    }))
    .await;
    wait_for_tools(h.daemon.addr(), tools).await;
    h
}

/// Writes a config for a daemon against the LLM at `llm_url` in `dir` with `tables`; returns its path.
pub(crate) fn write_config(llm_url: &str, dir: &std::path::Path, tables: &str) -> PathBuf {
    let text = util::config_text_with(
        llm_url,
        dir,
        Extra {
            tables,
            ..Extra::default()
        },
    );
    let config = dir.join("config.toml");
    std::fs::write(&config, text).expect("config");
    config
}

/// A directory the test server may write its marks in: it runs as `nobody` under a root
/// daemon.
pub(crate) fn marks_dir() -> tempfile::TempDir {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o777)).expect("chmod");
    dir
}

/// Waits until `/healthz` says the MCP servers offer `tools` tools.
pub(crate) async fn wait_for_tools(addr: std::net::SocketAddr, tools: u64) -> Value {
    let deadline = Instant::now() + PATIENCE;
    loop {
        let health = util::health(addr).await;
        if health["mcp_tools"] == tools {
            return health;
        }
        assert!(
            Instant::now() < deadline,
            "never {tools} MCP tools: {health}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Waits until `path` exists (the test server writes it when a call is cancelled).
pub(crate) async fn wait_for_file(path: &std::path::Path) {
    let deadline = Instant::now() + PATIENCE;
    while !path.exists() {
        assert!(
            Instant::now() < deadline,
            "the server never heard of the cancellation"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// What the model read back from its tool calls in `request`, by call id.
pub(crate) fn results(request: &Value) -> Vec<(String, String)> {
    util::conversation(request)
        .into_iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| {
            (
                m["tool_call_id"].as_str().unwrap_or_default().to_owned(),
                m["content"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect()
}

#[tokio::test]
async fn a_server_tool_is_offered_called_and_its_result_reaches_the_model() {
    let mut h = with_server("", TOOLS).await;
    h.llm.push(Reply::tools([
        ("test__echo", json!({"text": "one"})),
        ("test__echo", json!({"text": "two"})),
    ]));
    h.llm.push(Reply::text("Both said."));
    assert_eq!(h.client.say("c", "echo twice").await.reply(), "Both said.");
    let requests = h.llm.requests();
    let offered: Vec<&str> = requests[0]["tools"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|t| t["function"]["name"].as_str())
        .filter(|name| name.starts_with("test__"))
        .collect();
    assert_eq!(
        offered,
        [
            "test__crash",
            "test__echo",
            "test__env",
            "test__flood",
            "test__freeze",
            "test__gather",
            "test__grow",
            "test__look",
            "test__meet",
            "test__picture",
            "test__slow"
        ]
    );
    let echo = requests[0]["tools"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|t| t["function"]["name"] == "test__echo")
        .expect("echo offered");
    assert_eq!(echo["function"]["description"], "Say the text back");
    assert_eq!(
        echo["function"]["parameters"]["properties"]["text"]["type"],
        "string"
    );
    let got = results(&requests[1]);
    assert_eq!(got.len(), 2, "{got:?}");
    let conversation = util::conversation(&requests[1]);
    let ids: Vec<&str> = conversation
        .iter()
        .filter_map(|m| m["tool_calls"].as_array())
        .flatten()
        .filter_map(|c| c["id"].as_str())
        .collect();
    assert_eq!(
        got.iter().map(|(id, _)| id.as_str()).collect::<Vec<_>>(),
        ids,
        "each result with its call's id"
    );
    assert_eq!(got[0].1, "mcp echo: one");
    assert_eq!(got[1].1, "mcp echo: two");
    // Counted per server (the recorder is this test binary's: at least these two).
    let response = crate::chat::http_get(h.daemon.addr(), "/metrics").await;
    let value = |series: &str| -> f64 {
        response
            .lines()
            .find_map(|line| line.strip_prefix(series))
            .and_then(|rest| rest.trim().parse().ok())
            .unwrap_or(0.0)
    };
    assert!(
        value(r#"switchboard_mcp_calls_total{server="test",outcome="ok"} "#) >= 2.0,
        "{response}"
    );
    assert!(value(r#"switchboard_mcp_call_seconds_count{server="test"} "#) >= 2.0);
    h.daemon.shutdown().await;
}

#[tokio::test]
async fn a_root_daemons_server_runs_unprivileged_and_cannot_read_the_daemon() {
    if !rustix::process::geteuid().is_root() {
        eprintln!("not root: a server as the daemon's own user was not tried here");
        return;
    }
    let mut h = with_server("", TOOLS).await;
    h.llm.push(Reply::tool("test__look", json!({})));
    h.llm.push(Reply::text("Looked."));
    assert_eq!(h.client.say("c", "who are you?").await.reply(), "Looked.");
    let got = results(h.llm.requests().last().expect("request"));
    let seen: Value = serde_json::from_str(&got[0].1).expect("JSON");
    assert_eq!(seen["uid"], "65534", "as [tools.exec] user, nobody: {seen}");
    assert_eq!(seen["cap_eff"], "0000000000000000", "{seen}");
    assert_eq!(seen["no_new_privs"], "1", "{seen}");
    for what in ["parent_environ", "parent_mem"] {
        let said = seen[what].as_str().unwrap_or_default();
        assert!(said.contains("Permission denied"), "{what}: {seen}");
    }
    h.daemon.shutdown().await;
}

#[tokio::test]
async fn the_server_gets_only_the_environment_its_entry_gives_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let llm = switchboard_testkit::ScriptedLlm::start()
        .await
        .expect("llm");
    let tables = server_table("env = { GREETING = \"hello\", FROM_ENV = \"${MCP_TEST_VALUE}\" }\n");
    let config = write_config(&llm.base_url(), dir.path(), &tables);
    // The service's environment holds a secret, and a value the entry passes on.
    let prelude = "export OPENAI_API_KEY=sk-not-for-servers-0123456789\n\
                   export MCP_TEST_VALUE=passed-on";
    let (mut child, addr) = util::spawn_daemon_with(&config, &[], prelude).await;
    wait_for_tools(addr, TOOLS).await;
    llm.push(Reply::tool("test__env", json!({})));
    llm.push(Reply::text("Seen."));
    let mut client = util::WsClient::connect(addr).await;
    assert_eq!(client.say("c", "show me").await.reply(), "Seen.");
    let got = results(&llm.requests()[1]);
    let env: serde_json::Map<String, Value> =
        serde_json::from_str(&got[0].1).expect("the server's environment as JSON");
    let mut names: Vec<&str> = env.keys().map(String::as_str).collect();
    names.sort_unstable();
    assert!(
        names
            .iter()
            .all(|n| ["FROM_ENV", "GREETING", "HOME", "PATH"].contains(n)),
        "{names:?}"
    );
    assert_eq!(env["GREETING"], "hello");
    assert_eq!(env["FROM_ENV"], "passed-on");
    assert!(!got[0].1.contains("sk-not-for-servers"), "{}", got[0].1);
    util::signal(&child, "-TERM");
    assert!(child.wait().await.expect("exits").success());
}

#[tokio::test]
async fn a_server_that_dies_mid_call_is_an_error_result_then_it_is_back() {
    let mut h = with_server("", TOOLS).await;
    h.llm.push(Reply::tool("test__crash", json!({})));
    h.llm.push(Reply::text("It broke."));
    assert_eq!(h.client.say("c", "crash it").await.reply(), "It broke.");
    let got = results(&h.llm.requests()[1]);
    assert!(
        got[0].1.to_lowercase().contains("error") && got[0].1.contains("MCP server"),
        "the model reads that the call failed: {got:?}"
    );
    // Down: its tools withdrawn and /healthz says why; then back, after its backoff.
    let deadline = Instant::now() + PATIENCE;
    loop {
        let health = util::health(h.daemon.addr()).await;
        if health["checks"]["mcp"]["servers_down"]["test"].is_string() {
            assert_eq!(health["mcp_tools"], 0, "{health}");
            assert!(
                health["checks"]["mcp"]["error"]
                    .as_str()
                    .is_some_and(|e| e.starts_with("test: ")),
                "switchboard status shows it: {health}"
            );
            assert_eq!(health["status"], "degraded");
            break;
        }
        // It may already be back: then the backoff was missed, which it cannot be (1 s).
        assert!(Instant::now() < deadline, "never reported down: {health}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    h.llm.push(Reply::text("No tools of theirs now."));
    h.client.say("c", "anything?").await;
    let offered = h.llm.requests()[2]["tools"].to_string();
    assert!(
        !offered.contains("test__"),
        "dead tools are not offered: {offered}"
    );
    let health = wait_for_tools(h.daemon.addr(), TOOLS).await;
    assert_eq!(health["status"], "ok", "{health}");
    h.llm
        .push(Reply::tool("test__echo", json!({"text": "again"})));
    h.llm.push(Reply::text("Back."));
    assert_eq!(h.client.say("c", "again").await.reply(), "Back.");
    assert_eq!(
        results(&h.llm.requests()[4]).last().expect("a result").1,
        "mcp echo: again"
    );
    h.daemon.shutdown().await;
}

#[tokio::test]
async fn a_reload_starts_stops_and_renames_servers_and_their_tools_follow() {
    use switchboard::reload::Reloaded;
    let mut h = Harness::start("").await;
    let path = h.dir.path().join("config.toml");
    let (base_url, dir) = (h.llm.base_url(), h.dir.path().to_owned());
    let write = |tables: &str| {
        let extra = Extra {
            tables,
            ..Extra::default()
        };
        std::fs::write(&path, util::config_text_with(&base_url, &dir, extra)).expect("config");
    };
    let applied = Reloaded::Applied {
        need_restart: Vec::new(),
    };
    let offered = |request: &Value| -> Vec<String> {
        request["tools"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|t| t["function"]["name"].as_str())
            .filter(|name| name.contains("__"))
            .map(str::to_owned)
            .collect()
    };

    // Added: its tools come.
    write(&server_table(""));
    assert_eq!(h.daemon.reload(&path).await, applied);
    wait_for_tools(h.daemon.addr(), TOOLS).await;
    h.llm
        .push(Reply::tool("test__echo", json!({"text": "new"})));
    h.llm.push(Reply::text("Works."));
    assert_eq!(h.client.say("c", "try it").await.reply(), "Works.");

    // Renamed: the old name's tools go, the new name's come.
    let renamed = server_table("").replace("[mcp.servers.test]", "[mcp.servers.other]");
    write(&renamed);
    assert_eq!(h.daemon.reload(&path).await, applied);
    wait_for_tools(h.daemon.addr(), TOOLS).await;
    h.llm.push(Reply::text("Listed."));
    h.client.say("c", "what do you have?").await;
    let tools = offered(h.llm.requests().last().expect("request"));
    assert_eq!(
        tools,
        [
            "other__crash",
            "other__echo",
            "other__env",
            "other__flood",
            "other__freeze",
            "other__gather",
            "other__grow",
            "other__look",
            "other__meet",
            "other__picture",
            "other__slow"
        ]
    );

    // Removed: none left, and /healthz is whole.
    write("");
    assert_eq!(h.daemon.reload(&path).await, applied);
    let health = wait_for_tools(h.daemon.addr(), 0).await;
    assert_eq!(health["status"], "ok", "{health}");
    h.llm.push(Reply::text("Nothing."));
    h.client.say("c", "and now?").await;
    assert!(offered(h.llm.requests().last().expect("request")).is_empty());
    h.daemon.shutdown().await;
}

#[tokio::test]
async fn mcp_list_starts_each_server_and_shows_its_tools_or_why_not() {
    let dir = tempfile::tempdir().expect("tempdir");
    let tables = format!(
        "{}\n[mcp.servers.nope]\ncommand = \"/nonexistent/mcp-server\"\n\n\
         [mcp.servers.off]\ncommand = \"x\"\nenabled = false\n",
        server_table("")
    );
    let config = write_config("http://127.0.0.1:9/v1", dir.path(), &tables);
    // Before the daemon's first start: no workspace yet. The server is listed from the
    // temporary directory, saying so, and nothing but the answer is printed.
    let output = tokio::process::Command::new(util::BINARY)
        .args(["mcp", "list", "--config"])
        .arg(&config)
        .output()
        .await
        .expect("runs");
    let before = String::from_utf8_lossy(&output.stdout);
    assert!(
        before.contains(&format!("test: up, {TOOLS} tools (")),
        "{before}"
    );
    assert!(
        before.contains("its working directory, the workspace")
            && before.contains("is made at the daemon's first start"),
        "{before}"
    );
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        !stderr.contains("INFO"),
        "an operator's command logs only errors: {stderr}"
    );
    std::fs::create_dir_all(dir.path().join("workspace")).expect("workspace");
    let output = tokio::process::Command::new(util::BINARY)
        .args(["mcp", "list", "--config"])
        .arg(&config)
        .output()
        .await
        .expect("runs");
    let out = String::from_utf8_lossy(&output.stdout);
    assert!(!output.status.success(), "a server is down: {out}");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines[0], "off: disabled (enabled = false)", "{out}");
    assert!(
        lines[1].starts_with("nope: down: `/nonexistent/mcp-server` could not be started"),
        "{out}"
    );
    assert!(
        lines[2].starts_with(&format!("test: up, {TOOLS} tools (")),
        "{out}"
    );
    assert_eq!(lines[4], "  test__echo  Say the text back", "{out}");
}

#[tokio::test]
async fn a_tool_the_server_adds_is_offered_from_the_next_turn() {
    let mut h = with_server("", TOOLS).await;
    h.llm.push(Reply::tool("test__grow", json!({})));
    h.llm.push(Reply::text("It grew."));
    assert_eq!(h.client.say("c", "grow").await.reply(), "It grew.");
    assert!(
        !h.llm.requests()[1]["tools"]
            .to_string()
            .contains("test__late"),
        "not within the turn that was running"
    );
    wait_for_tools(h.daemon.addr(), TOOLS + 1).await;
    h.llm.push(Reply::tool("test__late", json!({})));
    h.llm.push(Reply::text("Used it."));
    assert_eq!(
        h.client.say("c", "use the new one").await.reply(),
        "Used it."
    );
    let requests = h.llm.requests();
    assert!(requests[2]["tools"].to_string().contains("test__late"));
    assert_eq!(
        results(&requests[3]).last().expect("a result").1,
        "late tool"
    );
    h.daemon.shutdown().await;
}

#[tokio::test]
async fn a_server_over_http_is_reached_with_a_bearer_from_the_environment() {
    let (url, _server) = switchboard_testkit::mcp::serve_http("http-token-0123456789")
        .await
        .expect("serves");
    let dir = tempfile::tempdir().expect("tempdir");
    let llm = switchboard_testkit::ScriptedLlm::start()
        .await
        .expect("llm");
    let tables = format!(
        "[mcp.servers.web]\nurl = \"{url}\"\n\
         headers = {{ Authorization = \"Bearer ${{MCP_TEST_TOKEN}}\" }}\n\n\
         [mcp.servers.wrong]\nurl = \"{url}\"\nheaders = {{ Authorization = \"Bearer nope\" }}\n"
    );
    let config = write_config(&llm.base_url(), dir.path(), &tables);
    let prelude = "export MCP_TEST_TOKEN=http-token-0123456789";
    let (mut child, addr) = util::spawn_daemon_with(&config, &[], prelude).await;
    let health = wait_for_tools(addr, TOOLS).await;
    // The one with the wrong token is down, and says why.
    let deadline = Instant::now() + PATIENCE;
    let mut health = health;
    while !health["checks"]["mcp"]["servers_down"]["wrong"].is_string() {
        assert!(Instant::now() < deadline, "never down: {health}");
        tokio::time::sleep(Duration::from_millis(20)).await;
        health = util::health(addr).await;
    }
    llm.push(Reply::tool("web__echo", json!({"text": "over http"})));
    llm.push(Reply::text("Reached."));
    let mut client = util::WsClient::connect(addr).await;
    assert_eq!(client.say("c", "try http").await.reply(), "Reached.");
    assert_eq!(
        results(&llm.requests()[1]).last().expect("a result").1,
        "mcp echo: over http"
    );
    util::signal(&child, "-TERM");
    assert!(child.wait().await.expect("exits").success());
}
