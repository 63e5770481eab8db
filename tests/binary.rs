use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use serde_json::Value;
use switchboard_sessions::repair;
use switchboard_testkit::{Reply, ScriptedLlm};
use tokio::process::{Child, Command};

use crate::util::{self, BINARY, WsClient, spawn_daemon};

/// Writes the test config to `dir/config.toml` with the given shutdown grace (seconds).
pub(crate) fn write_config(dir: &Path, llm: &ScriptedLlm, grace_secs: &str) -> std::path::PathBuf {
    let config = dir.join("config.toml");
    let text = util::config_text(&llm.base_url(), dir, "").replace(
        "shutdown_grace_secs = 2",
        &format!("shutdown_grace_secs = {grace_secs}"),
    );
    std::fs::write(&config, text).expect("write config");
    config
}

pub(crate) fn sigterm(child: &Child) {
    util::signal(child, "-TERM");
}

pub(crate) async fn exit_code(child: &mut Child) -> std::process::ExitStatus {
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

/// Runs the binary on a config of `text` that must be refused; returns its stderr and
/// the config's path.
async fn refused_config(dir: &Path, text: &str) -> (String, std::path::PathBuf) {
    let config = dir.join("bad.toml");
    std::fs::write(&config, text).expect("write");
    let output = Command::new(BINARY)
        .args(["run", "--config"])
        .arg(&config)
        .output()
        .await
        .expect("runs");
    assert_eq!(output.status.code(), Some(2), "{text}");
    (String::from_utf8_lossy(&output.stderr).into_owned(), config)
}

#[tokio::test]
async fn an_unknown_config_key_fails_with_file_line_and_key() {
    let dir = tempfile::tempdir().expect("tempdir");
    let text = "[agent]\nhistory_limit = 50\nmax_iteratons = 3\n";
    let (stderr, config) = refused_config(dir.path(), text).await;
    let expected = format!(
        "{}:3:1: agent.max_iteratons: unknown field",
        config.display()
    );
    assert!(stderr.contains(&expected), "{stderr}");
}

#[tokio::test]
async fn agents_bindings_and_prices_that_do_not_fit_fail_with_file_line_and_key() {
    let dir = tempfile::tempdir().expect("tempdir");
    let ws = "[channels.websocket]\nauth = \"none\"\n";
    for (text, expected) in [
        (
            "[[bindings]]\nagent = \"home\"\nchannel = \"telegram\"\n",
            ":4:9: bindings[0].agent: no agent is called `home`: the agents are default",
        ),
        (
            "[agent]\nworkspace = \"/srv/a\"\n[agents.home]\nworkspace = \"/srv/a\"\n",
            ":5:1: agents.home.workspace: /srv/a is the workspace of the agent `default`",
        ),
        (
            "[llm]\nmodel = \"gpt-4o\"\n[llm.prices.\"gpt-5\"]\ninput_per_mtok = 1\n\
             output_per_mtok = 2\n",
            ":5:1: llm.prices.gpt-5: no model `gpt-5` is configured: the models are gpt-4o",
        ),
    ] {
        let (stderr, config) = refused_config(dir.path(), &format!("{ws}{text}")).await;
        let expected = format!("{}{expected}", config.display());
        assert!(stderr.contains(&expected), "{stderr}");
    }
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

/// `agent -m` runs one turn, from an operator's shell that lacks the channels' secrets.
#[tokio::test]
async fn agent_m_runs_one_turn_in_the_terminal() {
    let dir = tempfile::tempdir().expect("tempdir");
    let llm = ScriptedLlm::start().await.expect("llm");
    llm.push(Reply::text("hello from the terminal"));
    let config = dir.path().join("config.toml");
    // A channel whose token only the service has: the terminal needs none of it.
    let text = util::config_text(&llm.base_url(), dir.path(), "")
        + "\n[channels.telegram]\nenabled = true\ntoken = \"${credential:telegram-token}\"\n\
           allow_from = [\"1\"]\n";
    std::fs::write(&config, text).expect("write");
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

/// The start line says where the page is (a link a terminal opens) and which channels this
/// process serves.
#[tokio::test]
async fn the_start_line_names_the_page_and_the_channels_served() {
    let dir = tempfile::tempdir().expect("tempdir");
    let llm = ScriptedLlm::start().await.expect("llm");
    let config = write_config(dir.path(), &llm, "2");
    let (child, serving) = util::spawn_daemon_serving(&config).await;
    assert_eq!(serving["channels"], r#"["websocket"]"#, "{serving}");
    assert!(
        serving["url"]
            .as_str()
            .is_some_and(|url| url.starts_with("http://127.0.0.1:")),
        "{serving}"
    );
    drop(child);
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
async fn sigterm_at_any_moment_of_the_start_and_its_start_again_exits_zero() {
    use nix::sys::signal::{SigSet, SigmaskHow, Signal, pthread_sigmask};

    let dir = tempfile::tempdir().expect("tempdir");
    let llm = ScriptedLlm::start().await.expect("llm");
    let config = write_config(dir.path(), &llm, "2");
    for attempt in 0..12u64 {
        let mut command = tokio::process::Command::new(util::BINARY);
        command
            .args(["run", "--config"])
            .arg(&config)
            // A secret-named variable: the daemon withdraws it and starts itself again.
            .env("EARLY_TEST_API_KEY", "sk-early")
            .stderr(std::process::Stdio::null())
            .kill_on_drop(true);
        // The signal is held back from before the binary's first instruction, so whenever
        // it is sent it lands in the start — before `main`, in either image, or after.
        #[allow(unsafe_code)]
        // SAFETY: between fork and exec only the async-signal-safe sigprocmask runs.
        unsafe {
            command.pre_exec(|| {
                let mut term = SigSet::empty();
                term.add(Signal::SIGTERM);
                pthread_sigmask(SigmaskHow::SIG_BLOCK, Some(&term), None)
                    .map_err(std::io::Error::from)
            });
        }
        let mut child = command.spawn().expect("starts");
        tokio::time::sleep(Duration::from_millis(attempt * 4)).await;
        sigterm(&child);
        let status = exit_code(&mut child).await;
        assert!(
            status.success(),
            "sent {} ms after the start: {status} (killed by the signal, or never told?)",
            attempt * 4
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
