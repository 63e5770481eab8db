//! `switchboard onboard`: the starter workspace, a config from flags, the service's path
//! (its tokens generated as credentials, the daemon run with them as the unit hands them),
//! and the install steps the unit and deployment.md give.

use std::path::Path;
use std::process::Stdio;

use switchboard::config::Config;
use switchboard_testkit::{Reply, ScriptedLlm};
use tokio::process::Command;

use crate::util::{self, BINARY, WsClient};

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

/// `switchboard onboard` writing `config` and its workspace, with nothing to ask (no
/// terminal).
fn onboard(config: &Path, workspace: &Path) -> Command {
    let mut command = Command::new(BINARY);
    command
        .args(["onboard", "--config"])
        .arg(config)
        .arg("--workspace")
        .arg(workspace)
        .stdin(Stdio::null());
    command
}

/// 8. `onboard` for the service, as deployment.md runs it: the state directory and a
/// credential for the key are written in (no edit by hand afterwards), the WebSocket and the
/// panel take tokens generated as credentials (never `auth = "none"` for a service every
/// local user reaches), and it ends with what to do next. The daemon then runs with the
/// credentials directory as the unit loads it (`switchboard_FILE`): the page needs the token,
/// the panel its own.
#[tokio::test]
async fn onboard_for_the_service_generates_its_tokens_and_says_what_is_next() {
    use std::os::unix::fs::PermissionsExt;
    let llm = ScriptedLlm::start().await.expect("llm");
    let dir = tempfile::tempdir().expect("tempdir");
    let config = dir.path().join("etc/config.toml");
    let output = onboard(&config, &dir.path().join("agent"))
        .arg("--state-dir")
        .arg(dir.path().join("state"))
        .args(["--credential-key", "openai-key"])
        .args(["--base-url", &llm.base_url(), "--model", "scripted"])
        .output()
        .await
        .expect("runs");
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(output.status.success(), "{stdout}");
    let read = Config::load_with(&config, switchboard::config::Secrets::Skip).expect("reads");
    assert_eq!(
        read.agent.state_dir,
        dir.path().join("state").display().to_string()
    );
    assert_eq!(
        read.llm.api_key.as_ref().map(|k| k.get_ref().as_str()),
        Some("${credential:openai-key}")
    );
    let credentials = dir.path().join("etc/credentials");
    let mode = |path: &Path| std::fs::metadata(path).expect("there").permissions().mode() & 0o777;
    assert_eq!(mode(&credentials), 0o700);
    let token = |name: &str| {
        let path = credentials.join(name);
        assert_eq!(mode(&path), 0o600, "{name}");
        let token = std::fs::read_to_string(path).expect("token");
        assert_eq!(token.trim().len(), 48, "{name}: {token}");
        token.trim().to_owned()
    };
    let (chat_token, panel_token) = (token("ws-token"), token("admin-token"));
    assert_ne!(chat_token, panel_token);
    let config_arg = format!("--config {}", config.display());
    for next in [
        format!("1. switchboard doctor {config_arg}"),
        format!(
            "(first the key: sudo install -m 0600 /dev/stdin {}",
            credentials.join("openai-key").display()
        ),
        "2. sudo systemctl enable --now switchboard".to_owned(),
        format!(
            "3. open http://127.0.0.1:8080/?token=$(sudo cat {})",
            credentials.join("ws-token").display()
        ),
        format!(
            "the control panel: http://127.0.0.1:8080/admin (its token: sudo cat {})",
            credentials.join("admin-token").display()
        ),
    ] {
        assert!(stdout.contains(&next), "{next}:\n{stdout}");
    }

    // A second onboard, even replacing the config, keeps the tokens.
    let again = onboard(&config, &dir.path().join("agent"))
        .args(["--credential-key", "openai-key", "--force"])
        .args(["--base-url", &llm.base_url(), "--model", "scripted"])
        .output()
        .await
        .expect("runs");
    assert!(again.status.success());
    assert_eq!(token("ws-token"), chat_token, "kept");

    // As the service: the unit loads the directory, each file as switchboard_FILE.
    let loaded = dir.path().join("run-credentials");
    std::fs::create_dir(&loaded).expect("dir");
    for name in ["ws-token", "admin-token"] {
        std::fs::copy(
            credentials.join(name),
            loaded.join(format!("switchboard_{name}")),
        )
        .expect("copy");
    }
    std::fs::write(loaded.join("switchboard_openai-key"), "sk-test\n").expect("key");
    let text = std::fs::read_to_string(&config)
        .expect("config")
        .replace("bind = \"127.0.0.1:8080\"", "bind = \"127.0.0.1:0\"");
    std::fs::write(&config, text).expect("config");
    let (mut daemon, addr) = util::spawn_daemon_with(
        &config,
        &[],
        &format!("export CREDENTIALS_DIRECTORY='{}'", loaded.display()),
    )
    .await;
    let refused = util::raw_http(
        addr,
        "GET /ws HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n",
        util::PATIENCE,
    )
    .await;
    assert!(refused.starts_with("HTTP/1.1 401"), "{refused}");
    use tokio_tungstenite::tungstenite::client::IntoClientRequest;
    let mut request = format!("ws://{addr}/ws?token={chat_token}")
        .into_client_request()
        .expect("request");
    request
        .headers_mut()
        .insert("host", "127.0.0.1".parse().expect("host"));
    let mut chat = WsClient::connect_request(request)
        .await
        .expect("the generated token opens the chat");
    llm.push(Reply::text("hello from the service"));
    assert_eq!(chat.say("c", "hi").await.reply(), "hello from the service");
    let panel = util::raw_http(
        addr,
        &format!(
            "GET /admin/api/overview HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {panel_token}\r\nConnection: close\r\n\r\n"
        ),
        util::PATIENCE,
    )
    .await;
    assert!(panel.starts_with("HTTP/1.1 200"), "{panel}");
    daemon.start_kill().expect("kill");
}

/// `onboard` for a person's own config (in their home) does not offer the system service,
/// which runs the config in /etc/switchboard.
#[tokio::test]
async fn onboard_in_a_home_does_not_offer_the_system_service() {
    let home = tempfile::tempdir().expect("tempdir");
    let config = home.path().join(".config/switchboard/config.toml");
    let output = onboard(&config, &home.path().join("agent"))
        .env("HOME", home.path())
        .output()
        .await
        .expect("runs");
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(output.status.success(), "{stdout}");
    assert!(stdout.contains("2. switchboard run --config"), "{stdout}");
    assert!(!stdout.contains("systemctl"), "{stdout}");
}

/// 10. The unit's opening comment and deployment.md give the same install steps.
#[test]
fn the_unit_and_the_deployment_guide_give_the_same_install_steps() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let unit = std::fs::read_to_string(root.join("systemd/switchboard.service")).expect("unit");
    let guide = std::fs::read_to_string(root.join("docs/deployment.md")).expect("guide");
    let command = |line: &str| {
        line.split("   # ")
            .next()
            .unwrap_or_default()
            .trim()
            .to_owned()
    };
    let in_unit: Vec<String> = unit
        .lines()
        .take_while(|line| !line.starts_with('['))
        .filter_map(|line| line.strip_prefix("#   "))
        .map(command)
        .collect();
    let section = guide
        .split("## As a systemd service")
        .nth(1)
        .expect("the section");
    let in_guide: Vec<String> = section
        .split("```sh\n")
        .nth(1)
        .and_then(|block| block.split("```").next())
        .expect("a shell block")
        .lines()
        .map(command)
        .collect();
    assert!(in_unit.len() >= 8, "{in_unit:?}");
    assert_eq!(in_guide[..in_unit.len()], in_unit[..], "{in_guide:#?}");
}
