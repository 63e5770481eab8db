use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use serde_json::Value;
use switchboard::config::Config;
use switchboard_sessions::repair;
use switchboard_testkit::{Reply, ScriptedLlm};
use tokio::process::{Child, Command};

use crate::util::{self, BINARY, WsClient, spawn_daemon};

/// Writes the test config to `dir/config.toml` with the given shutdown grace (seconds).
fn write_config(dir: &Path, llm: &ScriptedLlm, grace_secs: &str) -> std::path::PathBuf {
    let config = dir.join("config.toml");
    let text = util::config_text(&llm.base_url(), dir, "").replace(
        "shutdown_grace_secs = 2",
        &format!("shutdown_grace_secs = {grace_secs}"),
    );
    std::fs::write(&config, text).expect("write config");
    config
}

fn sigterm(child: &Child) {
    util::signal(child, "-TERM");
}

async fn exit_code(child: &mut Child) -> std::process::ExitStatus {
    tokio::time::timeout(Duration::from_secs(15), child.wait())
        .await
        .expect("the daemon exits in time")
        .expect("wait")
}

#[tokio::test]
async fn sigterm_during_a_turn_exits_zero_with_the_session_intact() {
    let dir = tempfile::tempdir().expect("tempdir");
    let llm = ScriptedLlm::start().await.expect("llm");
    llm.push(Reply::text("far too late").delayed(Duration::from_secs(60)));
    let (mut child, addr) = spawn_daemon(&write_config(dir.path(), &llm, "0.5")).await;
    let mut client = WsClient::connect(addr).await;
    client.send("c", "please wait for me").await;
    llm.wait_for_requests(1, util::PATIENCE).await;

    sigterm(&child);
    let turn = client.turn("c").await;
    assert_eq!(turn.reply(), "Stopped.", "the cancelled turn still answers");
    assert!(exit_code(&mut child).await.success());

    let records = util::read_session_file(&util::session_file(dir.path(), "c"));
    assert_eq!(records[0]["role"], "user");
    assert_eq!(records[0]["content"], "please wait for me");
    let messages: Vec<switchboard_core::ChatMessage> = records
        .iter()
        .filter(|r| r.get("role").is_some())
        .map(|r| serde_json::from_value(r.clone()).expect("a message"))
        .collect();
    assert_eq!(
        repair(messages.clone()),
        messages,
        "the saved session is valid as it is"
    );
}

#[tokio::test]
async fn sigterm_lets_a_running_turn_finish_within_the_grace_period() {
    let dir = tempfile::tempdir().expect("tempdir");
    let llm = ScriptedLlm::start().await.expect("llm");
    llm.push(Reply::text("just in time").delayed(Duration::from_millis(500)));
    let (mut child, addr) = spawn_daemon(&write_config(dir.path(), &llm, "10")).await;
    let mut client = WsClient::connect(addr).await;
    client.send("c", "answer before you go").await;
    llm.wait_for_requests(1, util::PATIENCE).await;
    sigterm(&child);
    assert_eq!(client.turn("c").await.reply(), "just in time");
    assert!(exit_code(&mut child).await.success());
}

#[tokio::test]
async fn an_unknown_config_key_fails_with_file_line_and_key() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = dir.path().join("bad.toml");
    std::fs::write(&config, "[agent]\nhistory_limit = 50\nmax_iteratons = 3\n").expect("write");
    let output = Command::new(BINARY)
        .args(["run", "--config"])
        .arg(&config)
        .output()
        .await
        .expect("runs");
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    let expected = format!(
        "{}:3:1: agent.max_iteratons: unknown field",
        config.display()
    );
    assert!(stderr.contains(&expected), "{stderr}");
}

#[tokio::test]
async fn the_example_config_parses() {
    let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("config.example.toml");
    let config = Config::load(&example).expect("config.example.toml parses");
    assert_eq!(*config.agent.history_limit.get_ref(), 50);
    assert_eq!(*config.agent.max_iterations.get_ref(), 40);
    assert_eq!(config.http.bind.get_ref().0.to_string(), "127.0.0.1:8080");
}

/// The README's "try it without a key" config: it parses, points at `fake-llm`'s default
/// address, and keeps its files under `target/try`.
#[tokio::test]
async fn the_fake_llm_example_config_parses() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let config = Config::load(&root.join("examples/fake-llm.toml")).expect("it parses");
    assert_eq!(config.llm.base_url(), "http://127.0.0.1:8081/v1");
    let state = config.path(&config.agent.state_dir);
    assert!(state.ends_with("examples/../target/try/state"), "{state:?}");
}

#[tokio::test]
async fn version_is_printed() {
    let output = Command::new(BINARY)
        .arg("--version")
        .output()
        .await
        .expect("runs");
    assert!(output.status.success());
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(stdout.contains(env!("CARGO_PKG_VERSION")), "{stdout}");
}

#[tokio::test]
async fn agent_m_runs_one_turn_in_the_terminal() {
    let dir = tempfile::tempdir().expect("tempdir");
    let llm = ScriptedLlm::start().await.expect("llm");
    llm.push(Reply::text("hello from the terminal"));
    let config = dir.path().join("config.toml");
    std::fs::write(&config, util::config_text(&llm.base_url(), dir.path(), "")).expect("write");
    let output = Command::new(BINARY)
        .args(["agent", "--config"])
        .arg(&config)
        .args(["-m", "hi from the shell"])
        .output()
        .await
        .expect("runs");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&output.stdout).trim(),
        "hello from the terminal"
    );
    assert!(dir.path().join("state/sessions/cli_local.jsonl").exists());
}

#[tokio::test]
async fn interactive_agent_reads_lines_until_quit() {
    use tokio::io::AsyncWriteExt;
    let dir = tempfile::tempdir().expect("tempdir");
    let llm = ScriptedLlm::start().await.expect("llm");
    let config = dir.path().join("config.toml");
    std::fs::write(&config, util::config_text(&llm.base_url(), dir.path(), "")).expect("write");
    let mut child = Command::new(BINARY)
        .args(["agent", "--config"])
        .arg(&config)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("runs");
    let mut stdin = child.stdin.take().expect("stdin");
    stdin
        .write_all(b"first line\nsecond line\n/quit\n")
        .await
        .expect("write");
    drop(stdin);
    let output = tokio::time::timeout(util::PATIENCE, child.wait_with_output())
        .await
        .expect("exits in time")
        .expect("output");
    assert!(output.status.success());
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert_eq!(
        stdout.lines().collect::<Vec<_>>(),
        ["echo: first line", "echo: second line"]
    );
    let second = util::conversation(&llm.requests()[1]);
    assert_eq!(
        second.len(),
        3,
        "the second turn carries the first: {second:?}"
    );
}

#[tokio::test]
async fn sigterm_right_after_serving_exits_zero() {
    let dir = tempfile::tempdir().expect("tempdir");
    let llm = ScriptedLlm::start().await.expect("llm");
    let config = write_config(dir.path(), &llm, "2");
    for attempt in 0..5 {
        // The signal lands in the moment the daemon announces itself.
        let (mut child, _) = spawn_daemon(&config).await;
        sigterm(&child);
        let status = exit_code(&mut child).await;
        assert!(
            status.success(),
            "attempt {attempt}: {status} (killed by the signal instead of handling it?)"
        );
    }
}

#[tokio::test]
async fn sigterm_under_load_flushes_every_socket_and_closes_it_going_away() {
    use futures::StreamExt;
    use tokio_tungstenite::tungstenite::Message;
    use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;

    let dir = tempfile::tempdir().expect("tempdir");
    let llm = ScriptedLlm::start().await.expect("llm");
    // Every turn streams for about half a second, so SIGTERM lands in the middle of them.
    llm.respond_with(|_| {
        Reply::paced(
            "one two three four five six seven eight nine ten",
            Duration::from_millis(50),
        )
    });
    let (mut child, addr) = spawn_daemon(&write_config(dir.path(), &llm, "10")).await;
    let url = format!("ws://{addr}/ws");
    let mut sockets = Vec::new();
    for i in 0..16 {
        let (mut socket, _) = tokio_tungstenite::connect_async(url.as_str())
            .await
            .expect("connects");
        let frame =
            serde_json::json!({"type": "message", "chat_id": format!("c{i}"), "content": "talk"});
        futures::SinkExt::send(&mut socket, Message::text(frame.to_string()))
            .await
            .expect("send");
        sockets.push(socket);
    }
    llm.wait_for_requests(16, util::PATIENCE).await;
    sigterm(&child);

    for (i, socket) in sockets.iter_mut().enumerate() {
        let (mut message, mut done, mut close) = (None, false, None);
        while let Ok(Some(frame)) = tokio::time::timeout(util::PATIENCE, socket.next())
            .await
            .map(|f| f.and_then(Result::ok))
        {
            match frame {
                Message::Text(text) => {
                    let frame: Value = serde_json::from_str(text.as_str()).expect("JSON");
                    match frame["type"].as_str() {
                        Some("message") => message = frame["content"].as_str().map(str::to_owned),
                        Some("done") => done = true,
                        _ => {}
                    }
                }
                Message::Close(frame) => {
                    close = frame.map(|f| f.code);
                    break;
                }
                _ => {}
            }
        }
        assert_eq!(
            message.as_deref(),
            Some("one two three four five six seven eight nine ten"),
            "socket {i} got its final message"
        );
        assert!(done, "socket {i} got its done");
        assert_eq!(
            close,
            Some(CloseCode::Away),
            "socket {i} got a going-away close"
        );
    }
    assert!(exit_code(&mut child).await.success());
}

#[tokio::test]
async fn onboard_writes_the_starter_workspace_and_keeps_what_exists() {
    let dir = tempfile::tempdir().expect("tempdir");
    let workspace = dir.path().join("ws");
    let run = |force: bool| {
        let mut command = Command::new(BINARY);
        command.args(["onboard", "--workspace"]).arg(&workspace);
        if force {
            command.arg("--force");
        }
        command.output()
    };
    let output = run(false).await.expect("runs");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    for name in [
        "SOUL.md",
        "AGENTS.md",
        "USER.md",
        "TOOLS.md",
        "MEMORY.md",
        "skills/daily-note/SKILL.md",
    ] {
        assert!(workspace.join(name).is_file(), "{name} written");
    }
    let skill =
        std::fs::read_to_string(workspace.join("skills/daily-note/SKILL.md")).expect("skill");
    assert!(
        switchboard_tools::skills::front_matter(&skill).is_some(),
        "the sample skill has front matter"
    );

    std::fs::write(workspace.join("USER.md"), "I am Ada.").expect("write");
    let output = run(false).await.expect("runs");
    assert!(output.status.success());
    assert!(String::from_utf8_lossy(&output.stdout).contains("kept"));
    assert_eq!(
        std::fs::read_to_string(workspace.join("USER.md")).expect("read"),
        "I am Ada."
    );

    let output = run(true).await.expect("runs");
    assert!(output.status.success());
    assert_ne!(
        std::fs::read_to_string(workspace.join("USER.md")).expect("read"),
        "I am Ada."
    );
}

/// The first log line that mentions `needle`, of the binary started with `env`, in text
/// format (stderr is a pipe here, as under systemd).
async fn text_log_line(llm: &ScriptedLlm, env: &[(&str, &str)], needle: &str) -> String {
    use tokio::io::{AsyncBufReadExt, BufReader};
    let dir = tempfile::tempdir().expect("tempdir");
    let config = write_config(dir.path(), llm, "2");
    let mut command = Command::new(BINARY);
    command
        .args(["run", "--config"])
        .arg(&config)
        .env_remove("JOURNAL_STREAM")
        .env_remove("RUST_LOG")
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    for (key, value) in env {
        command.env(key, value);
    }
    let mut child = command.spawn().expect("starts");
    let mut lines = BufReader::new(child.stderr.take().expect("stderr")).lines();
    let line = tokio::time::timeout(util::PATIENCE, async {
        while let Ok(Some(line)) = lines.next_line().await {
            if line.contains(needle) {
                return line;
            }
        }
        panic!("the daemon exited without logging {needle:?}");
    })
    .await
    .expect("logged in time");
    sigterm(&child);
    exit_code(&mut child).await;
    line
}

/// Logs are journald-friendly: no colours when stderr is not a terminal, and no timestamp
/// of their own under systemd (`JOURNAL_STREAM`), where the journal stamps each line.
#[tokio::test]
async fn text_logs_have_no_colours_in_a_pipe_and_no_timestamps_under_systemd() {
    let llm = ScriptedLlm::start().await.expect("llm");
    let plain = text_log_line(&llm, &[], "switchboard is serving").await;
    assert!(!plain.contains('\u{1b}'), "no ANSI colours: {plain:?}");
    assert!(
        plain.starts_with(|c: char| c.is_ascii_digit()),
        "a timestamp first: {plain:?}"
    );
    let journal = text_log_line(
        &llm,
        &[("JOURNAL_STREAM", "8:12345")],
        "switchboard is serving",
    )
    .await;
    assert!(!journal.contains('\u{1b}'), "{journal:?}");
    assert!(
        journal.trim_start().starts_with("INFO"),
        "no timestamp: {journal:?}"
    );
}

/// A systemd credential referenced from the config is read (the token it holds opens the
/// WebSocket), and its value appears nowhere in the logs, even at debug level.
#[tokio::test]
async fn a_credential_is_read_and_never_logged() {
    use tokio::io::{AsyncBufReadExt, BufReader};
    const SECRET: &str = "credential-token-6f1c2b9a7e";
    let llm = ScriptedLlm::start().await.expect("llm");
    let dir = tempfile::tempdir().expect("tempdir");
    let credentials = dir.path().join("credentials");
    std::fs::create_dir(&credentials).expect("dir");
    std::fs::write(credentials.join("ws-token"), format!("{SECRET}\n")).expect("credential");
    let config = write_config(dir.path(), &llm, "2");
    let text = std::fs::read_to_string(&config).expect("config").replace(
        "auth = \"none\"",
        "auth = \"token\"\ntoken = \"${credential:ws-token}\"",
    );
    std::fs::write(&config, text).expect("config");

    let mut child = Command::new(BINARY)
        .args(["--log-format", "json", "run", "--config"])
        .arg(&config)
        .env("CREDENTIALS_DIRECTORY", &credentials)
        .env("RUST_LOG", "debug")
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("starts");
    let mut lines = BufReader::new(child.stderr.take().expect("stderr")).lines();
    let mut log = Vec::new();
    let addr = tokio::time::timeout(util::PATIENCE, async {
        while let Ok(Some(line)) = lines.next_line().await {
            let entry: Value = serde_json::from_str(&line).unwrap_or_default();
            log.push(line);
            if entry["message"] == "switchboard is serving" {
                return entry["addr"].as_str().unwrap_or_default().to_owned();
            }
        }
        panic!("the daemon exited: {log:?}");
    })
    .await
    .expect("serving in time");

    use tokio_tungstenite::tungstenite::client::IntoClientRequest;
    let mut request = format!("ws://{addr}/ws")
        .into_client_request()
        .expect("request");
    request.headers_mut().insert(
        "authorization",
        format!("Bearer {SECRET}").parse().expect("header"),
    );
    let mut client = WsClient::connect_request(request)
        .await
        .expect("the credential's token is accepted");
    assert_eq!(client.say("c", "hi").await.reply(), "echo: hi");

    sigterm(&child);
    exit_code(&mut child).await;
    while let Ok(Some(line)) = lines.next_line().await {
        log.push(line);
    }
    assert!(log.len() > 3, "the log was read: {log:?}");
    assert!(
        log.iter().all(|line| !line.contains(SECRET)),
        "the secret leaked into the log"
    );
}

/// systemd's notify protocol, as the unit's `Type=notify` and `WatchdogSec=` use it: READY=1
/// once serving, WATCHDOG=1 pings while alive, STOPPING=1 after SIGTERM, then exit 0.
#[tokio::test]
async fn notify_socket_gets_ready_watchdog_pings_and_stopping() {
    let llm = ScriptedLlm::start().await.expect("llm");
    let dir = tempfile::tempdir().expect("tempdir");
    let config = write_config(dir.path(), &llm, "2");
    let socket_path = dir.path().join("notify.sock");
    let socket = tokio::net::UnixDatagram::bind(&socket_path).expect("notify socket");
    let mut child = Command::new(BINARY)
        .args(["run", "--config"])
        .arg(&config)
        .env("NOTIFY_SOCKET", &socket_path)
        .env("WATCHDOG_USEC", "200000")
        .env_remove("WATCHDOG_PID")
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("starts");
    let mut seen: Vec<String> = Vec::new();
    let next = async |seen: &mut Vec<String>, what: &str| {
        let mut buf = vec![0u8; 4096];
        tokio::time::timeout(util::PATIENCE, async {
            loop {
                let n = socket.recv(&mut buf).await.expect("recv");
                let text = String::from_utf8_lossy(&buf[..n]).into_owned();
                seen.push(text.clone());
                if text.lines().any(|line| line == what) {
                    return;
                }
            }
        })
        .await
        .unwrap_or_else(|_| panic!("no {what} within {:?}; got {seen:?}", util::PATIENCE));
    };
    next(&mut seen, "READY=1").await;
    next(&mut seen, "WATCHDOG=1").await;
    next(&mut seen, "WATCHDOG=1").await;
    sigterm(&child);
    next(&mut seen, "STOPPING=1").await;
    assert!(exit_code(&mut child).await.success());
    let ready = seen.iter().position(|m| m.contains("READY=1"));
    let stopping = seen.iter().position(|m| m.contains("STOPPING=1"));
    assert!(ready < stopping, "{seen:?}");
}

/// `switchboard status` asks the running daemon at the config's `http.bind` and prints its
/// health for people; with no daemon there it says so and exits 2.
#[tokio::test]
async fn status_reports_a_running_daemon_and_a_missing_one() {
    let llm = ScriptedLlm::start().await.expect("llm");
    let dir = tempfile::tempdir().expect("tempdir");
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let config = write_config(dir.path(), &llm, "2");
    let text = std::fs::read_to_string(&config)
        .expect("config")
        .replace("127.0.0.1:0", &format!("127.0.0.1:{port}"));
    std::fs::write(&config, text).expect("config");
    let status = || async {
        Command::new(BINARY)
            .args(["status", "--config"])
            .arg(&config)
            .output()
            .await
            .expect("status runs")
    };

    let (mut daemon, _) = spawn_daemon(&config).await;
    let output = status().await;
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{text}");
    assert!(text.starts_with("✓ switchboard "), "{text}");
    assert!(text.contains("✓ websocket: running"), "{text}");
    assert!(text.contains("✓ store: ok"), "{text}");

    sigterm(&daemon);
    exit_code(&mut daemon).await;
    let output = status().await;
    let text = String::from_utf8_lossy(&output.stdout);
    assert_eq!(output.status.code(), Some(2), "{text}");
    assert!(
        text.contains(&format!("no switchboard answers at 127.0.0.1:{port}")),
        "{text}"
    );
}

/// 5. SIGHUP with a changed model: the next request uses it, and a changed key that needs a
/// restart is named; SIGHUP with a broken config: the daemon keeps serving with the old one
/// and logs the error with its line.
#[tokio::test]
async fn sighup_reloads_the_model_and_refuses_a_broken_config() {
    use tokio::io::{AsyncBufReadExt, BufReader};
    let llm = ScriptedLlm::start().await.expect("llm");
    let dir = tempfile::tempdir().expect("tempdir");
    let config = write_config(dir.path(), &llm, "2");
    let original = std::fs::read_to_string(&config).expect("config");
    let mut child = Command::new(BINARY)
        .args(["--log-format", "json", "run", "--config"])
        .arg(&config)
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("starts");
    let (logs_tx, mut logs) = tokio::sync::mpsc::unbounded_channel::<Value>();
    let mut lines = BufReader::new(child.stderr.take().expect("stderr")).lines();
    tokio::spawn(async move {
        while let Ok(Some(line)) = lines.next_line().await {
            if let Ok(entry) = serde_json::from_str::<Value>(&line) {
                let _ = logs_tx.send(entry);
            }
        }
    });
    let mut wait_for = async |message: &str| -> Value {
        tokio::time::timeout(util::PATIENCE, async {
            while let Some(entry) = logs.recv().await {
                if entry["message"] == message {
                    return entry;
                }
            }
            panic!("the daemon exited before logging {message:?}");
        })
        .await
        .unwrap_or_else(|_| panic!("no {message:?} logged in time"))
    };
    let serving = wait_for("switchboard is serving").await;
    let addr = serving["addr"]
        .as_str()
        .expect("addr")
        .parse()
        .expect("addr");
    let mut client = WsClient::connect(addr).await;
    client.say("c", "one").await;
    assert_eq!(llm.requests()[0]["model"], "scripted");

    let changed = original
        .replace("model = \"scripted\"", "model = \"scripted-2\"")
        .replace("[agent]", "[agent]\nmax_iterations = 7");
    std::fs::write(&config, changed).expect("config");
    util::signal(&child, "-HUP");
    wait_for("config reloaded").await;
    let restart = wait_for(
        "these changed keys take effect only after a restart (systemctl restart switchboard)",
    )
    .await;
    assert!(
        restart["keys"]
            .as_str()
            .unwrap_or_default()
            .contains("agent.max_iterations"),
        "{restart}"
    );
    client.say("c", "two").await;
    assert_eq!(
        llm.requests()[1]["model"],
        "scripted-2",
        "the new model answers"
    );

    std::fs::write(&config, "[llm]\nmodel = 42\n").expect("config");
    util::signal(&child, "-HUP");
    let refused = wait_for("config reload refused; the running config is kept").await;
    let error = refused["error"].as_str().unwrap_or_default();
    assert!(
        error.contains(":2:") && error.contains("llm.model"),
        "{error}"
    );
    assert_eq!(client.say("c", "three").await.reply(), "echo: three");
    assert_eq!(
        llm.requests()[2]["model"],
        "scripted-2",
        "the running config was kept"
    );

    sigterm(&child);
    assert!(exit_code(&mut child).await.success());
}

/// `onboard` with flags (no terminal: nothing is asked) writes a commented config that the
/// daemon reads, and the workspace it names; run again, it keeps the config.
#[tokio::test]
async fn onboard_writes_a_config_from_flags_and_keeps_it_after() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = dir.path().join("etc/config.toml");
    let workspace = dir.path().join("agent");
    let run = || {
        Command::new(BINARY)
            .args([
                "onboard",
                "--provider",
                "anthropic",
                "--api-key-env",
                "MY_KEY",
                "--config",
            ])
            .arg(&config)
            .arg("--workspace")
            .arg(&workspace)
            .stdin(Stdio::null())
            .output()
    };
    let output = run().await.expect("runs");
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        stdout.contains(&format!("wrote   {}", config.display())),
        "{stdout}"
    );
    let read = Config::load(&config).expect("the daemon reads it");
    assert_eq!(read.llm.provider.get_ref().to_string(), "anthropic");
    assert_eq!(read.llm.model, "claude-sonnet-4-5");
    assert!(workspace.join("SOUL.md").is_file());

    let output = run().await.expect("runs");
    assert!(String::from_utf8_lossy(&output.stdout).contains("kept    "));
}
