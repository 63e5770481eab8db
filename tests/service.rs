//! The binary as a service: systemd's notify protocol and watchdog, journald-friendly logs,
//! credentials, `switchboard status`, and reloading the config on SIGHUP.

use std::process::Stdio;

use serde_json::Value;
use switchboard_testkit::ScriptedLlm;
use tokio::process::Command;

use crate::binary::{exit_code, sigterm, write_config};
use crate::util::{self, BINARY, WsClient, spawn_daemon};

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

/// A credentials directory in `dir`, as systemd's `LoadCredential=` makes one, holding
/// `name` with `value` (and a newline, as a file written by hand has).
fn credentials_with(dir: &std::path::Path, name: &str, value: &str) -> std::path::PathBuf {
    let credentials = dir.join("credentials");
    std::fs::create_dir(&credentials).expect("dir");
    std::fs::write(credentials.join(name), format!("{value}\n")).expect("credential");
    credentials
}

/// A systemd credential referenced from the config is read (the token it holds opens the
/// WebSocket), and its value appears nowhere in the logs, even at debug level.
#[tokio::test]
async fn a_credential_is_read_and_never_logged() {
    use tokio::io::{AsyncBufReadExt, BufReader};
    const SECRET: &str = "credential-token-6f1c2b9a7e";
    let llm = ScriptedLlm::start().await.expect("llm");
    let dir = tempfile::tempdir().expect("tempdir");
    let credentials = credentials_with(dir.path(), "ws-token", SECRET);
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

/// 7, 8. The operator's commands with the config the unit uses — its token a credential,
/// its key in the unit's environment — from a shell that has neither: `status` and
/// `pairing` need no secret; `doctor` marks what needs one `?` (not ✗) and says how to
/// check it as the service; `status` exits 3 without a (readable) config and names
/// `onboard`.
#[tokio::test]
async fn operator_commands_work_without_the_services_secrets() {
    const TOKEN: &str = "credential-token-0a9b8c7d6e";
    let llm = ScriptedLlm::start().await.expect("llm");
    let dir = tempfile::tempdir().expect("tempdir");
    // Not beside the config, where root's doctor would read them as the unit does: this is
    // a shell without the service's secrets.
    let credentials = dir.path().join("service-credentials");
    std::fs::rename(
        credentials_with(dir.path(), "ws-token", TOKEN),
        &credentials,
    )
    .expect("moved");
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let config = write_config(dir.path(), &llm, "2");
    let text = std::fs::read_to_string(&config)
        .expect("config")
        .replace("127.0.0.1:0", &format!("127.0.0.1:{port}"))
        .replace(
            "auth = \"none\"",
            "auth = \"token\"\ntoken = \"${credential:ws-token}\"",
        )
        .replace(
            "model = \"scripted\"",
            "model = \"scripted\"\napi_key = \"${SERVICE_ONLY_API_KEY}\"",
        );
    std::fs::write(&config, text).expect("config");
    let mut daemon = Command::new(BINARY)
        .args(["run", "--config"])
        .arg(&config)
        .env("CREDENTIALS_DIRECTORY", &credentials)
        .env("SERVICE_ONLY_API_KEY", "sk-service-only")
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("starts");
    // The operator's shell: neither the credentials nor the key.
    let operator = |args: &[&str]| {
        let mut command = Command::new(BINARY);
        command
            .args(args)
            .arg("--config")
            .arg(&config)
            .env_remove("CREDENTIALS_DIRECTORY")
            .env_remove("SERVICE_ONLY_API_KEY");
        command
    };
    let deadline = std::time::Instant::now() + util::PATIENCE;
    let status = loop {
        let output = operator(&["status"]).output().await.expect("status runs");
        if output.status.code() != Some(2) || std::time::Instant::now() > deadline {
            break output;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    };
    let text = String::from_utf8_lossy(&status.stdout);
    assert_eq!(
        status.status.code(),
        Some(0),
        "{text}{}",
        String::from_utf8_lossy(&status.stderr)
    );
    assert!(text.starts_with("✓ switchboard "), "{text}");

    let pairing = operator(&["pairing", "list"]).output().await.expect("runs");
    let text = String::from_utf8_lossy(&pairing.stdout);
    assert!(
        pairing.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&pairing.stderr)
    );
    assert!(text.contains("Waiting for approval (0)"), "{text}");

    let doctor = operator(&["doctor"]).output().await.expect("runs");
    let text = String::from_utf8_lossy(&doctor.stdout);
    assert!(doctor.status.success(), "{text}");
    assert!(!text.contains('✗'), "{text}");
    for needle in [
        "? channels.websocket.token: ${credential:ws-token} cannot be resolved in this shell",
        "? llm.api_key: ${SERVICE_ONLY_API_KEY} cannot be resolved in this shell",
        "? llm (openai scripted): not asked",
        "sudo systemd-run --pipe --wait",
        "doctor --config",
    ] {
        assert!(text.contains(needle), "{needle}:\n{text}");
    }
    // Under the service's secrets, doctor asks the model.
    let doctor = operator(&["doctor"])
        .env("CREDENTIALS_DIRECTORY", &credentials)
        .env("SERVICE_ONLY_API_KEY", "sk-service-only")
        .output()
        .await
        .expect("runs");
    let text = String::from_utf8_lossy(&doctor.stdout);
    assert!(doctor.status.success(), "{text}");
    assert!(text.contains("✓ llm (openai scripted) answered"), "{text}");
    assert!(!text.contains('?'), "{text}");

    sigterm(&daemon);
    exit_code(&mut daemon).await;

    // No config at all, and a broken one: 3, naming what to do.
    let home = tempfile::tempdir().expect("home");
    let none = Command::new(BINARY)
        .arg("status")
        .env_remove("SWITCHBOARD_CONFIG")
        .env_remove("XDG_CONFIG_HOME")
        .env("HOME", home.path())
        .output()
        .await
        .expect("runs");
    let said = String::from_utf8_lossy(&none.stderr);
    assert_eq!(none.status.code(), Some(3), "{said}");
    assert!(said.contains("switchboard onboard"), "{said}");
    std::fs::write(&config, "[agent]\nhistory_limit = \"many\"\n").expect("write");
    let broken = operator(&["status"]).output().await.expect("runs");
    let said = String::from_utf8_lossy(&broken.stderr);
    assert_eq!(broken.status.code(), Some(3), "{said}");
    assert!(said.contains("agent.history_limit"), "{said}");
}
