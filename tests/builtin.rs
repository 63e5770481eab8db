//! The built-in tools through the daemon, as the model uses them: a skill read and a file
//! written; `exec` confined by Landlock with none of the daemon's secrets; a kill -9 while a
//! command runs leaves no process behind and a valid conversation.

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::json;
use switchboard_testkit::process::{processes_mentioning, wait_for_line, wait_gone};
use switchboard_testkit::{Reply, ScriptedLlm};
use switchboard_tools::sandbox::Confinement;

use crate::util::{self, Extra, Harness, WsClient};

#[tokio::test]
async fn the_model_reads_a_skill_and_writes_a_file_seen_on_disk() {
    let dir = tempfile::tempdir().expect("tempdir");
    let skill = dir.path().join("workspace/skills/haiku");
    std::fs::create_dir_all(&skill).expect("mkdir");
    std::fs::write(
        skill.join("SKILL.md"),
        "---\nname: haiku\ndescription: Write a haiku into poems/\n---\nThree lines: 5, 7, 5 syllables.",
    )
    .expect("write");
    let llm = ScriptedLlm::start().await.expect("llm");
    llm.push(Reply::tools([(
        "read_file",
        json!({"path": "skills/haiku/SKILL.md"}),
    )]));
    llm.push(Reply::tools([(
        "write_file",
        json!({"path": "poems/tea.md", "content": "green tea steams\nquiet morning kettle song\nthe cup warms my hands\n"}),
    )]));
    llm.push(Reply::text("Written to poems/tea.md."));
    let daemon = util::start_configured(&llm, dir.path(), Extra::default(), Vec::new()).await;
    let mut client = WsClient::connect(daemon.addr()).await;

    let turn = client.say("c", "write me a haiku about tea").await;
    assert_eq!(turn.reply(), "Written to poems/tea.md.");
    let requests = llm.requests();
    let system = requests[0]["messages"][0].clone();
    assert_eq!(system["role"], "system");
    let system = system["content"].as_str().unwrap_or_default();
    assert!(
        system.contains("- haiku (skills/haiku/SKILL.md): Write a haiku into poems/"),
        "{system}"
    );
    assert!(
        !system.contains("5, 7, 5"),
        "the body is read on demand only"
    );
    assert!(util::tool_results(&requests[1])[0].contains("Three lines: 5, 7, 5 syllables."));
    assert_eq!(
        std::fs::read_to_string(dir.path().join("workspace/poems/tea.md")).expect("on disk"),
        "green tea steams\nquiet morning kettle song\nthe cup warms my hands\n"
    );
    daemon.shutdown().await;
}

#[tokio::test]
async fn an_escape_reaches_the_model_as_a_refusal_and_the_turn_goes_on() {
    let mut h = Harness::start("").await;
    h.llm.push(Reply::tools([
        ("read_file", json!({"path": "../../etc/passwd"})),
        ("read_file", json!({"path": "~/.ssh/id_rsa"})),
        ("list_dir", json!({"path": "/etc"})),
    ]));
    h.llm.push(Reply::text("I may not look there."));
    let turn = h.client.say("c", "show me /etc/passwd").await;
    assert_eq!(turn.reply(), "I may not look there.");
    let results = util::tool_results(&h.llm.requests()[1]);
    assert_eq!(results.len(), 3);
    for result in &results {
        assert!(result.starts_with("error: refused: "), "{result}");
        assert!(!result.contains("root:"), "{result}");
    }
}

/// Writes the config of a daemon run as the binary, with `exec` confined by the binary.
fn write_config(dir: &Path, llm: &ScriptedLlm, agent: &str) -> std::path::PathBuf {
    let config = dir.join("config.toml");
    let text = util::config_text_with(
        &llm.base_url(),
        dir,
        Extra {
            agent,
            llm: "api_key = \"${OPENAI_API_KEY}\"",
            ..Extra::default()
        },
    );
    std::fs::write(&config, text).expect("write");
    config
}

#[tokio::test]
async fn exec_runs_confined_with_none_of_the_daemons_secrets() {
    let dir = tempfile::tempdir().expect("tempdir");
    let llm = ScriptedLlm::start().await.expect("llm");
    let command = "echo \"key=[$OPENAI_API_KEY]\"; \
                   touch inside.txt && echo inside=ok; \
                   touch ../outside.txt 2>/dev/null && echo outside=written || echo outside=refused; \
                   cat ../config.toml >/dev/null 2>&1 && echo config=read || echo config=refused";
    llm.push(Reply::tools([("exec", json!({"command": command}))]));
    llm.push(Reply::text("ran it"));
    let config = write_config(dir.path(), &llm, "");
    let (mut child, addr) =
        util::spawn_daemon_with(&config, &[], "export OPENAI_API_KEY=sk-daemon-secret-4711").await;
    let mut client = WsClient::connect(addr).await;
    let turn = client.say("c", "run it").await;
    assert_eq!(turn.reply(), "ran it");
    let result = util::tool_results(&llm.requests()[1]).remove(0);
    assert!(result.contains("key=[]"), "{result}");
    assert!(!result.contains("4711"), "{result}");
    assert!(result.contains("inside=ok"), "{result}");
    assert!(dir.path().join("workspace/inside.txt").exists());
    match Confinement::probe() {
        Confinement::Full | Confinement::Partial => {
            assert!(result.contains("outside=refused"), "{result}");
            assert!(result.contains("config=refused"), "{result}");
            assert!(!dir.path().join("outside.txt").exists());
        }
        Confinement::None => {
            eprintln!("skipped the Landlock half: this kernel offers no Landlock");
            assert!(result.contains("NOT confined"), "{result}");
        }
    }
    util::signal(&child, "-TERM");
    assert!(child.wait().await.expect("wait").success());
}

/// A daemon (the binary) whose model runs a long command in chat `c`: it returns once the
/// command's background processes are up — one in the shell's group, one in a session of
/// its own — all of them running `marker`.
async fn start_a_long_command(
    dir: &Path,
    llm: &ScriptedLlm,
    marker: &str,
) -> (tokio::process::Child, WsClient) {
    let command = format!(
        "{marker} & setsid sh -c 'echo > escaped; exec {marker}' & \
         until [ -e escaped ]; do sleep 0.01; done; echo > started; {marker}"
    );
    llm.push(Reply::tools([("exec", json!({"command": command}))]));
    let config = write_config(dir, llm, "");
    let (child, addr) =
        util::spawn_daemon_with(&config, &[], "export OPENAI_API_KEY=sk-test").await;
    let mut client = WsClient::connect(addr).await;
    client.send("c", "run the long thing").await;
    wait_for_line(&dir.join("workspace/started"), util::PATIENCE).await;
    (child, client)
}

#[tokio::test]
async fn kill_9_while_exec_runs_leaves_no_process_and_a_valid_conversation() {
    let dir = tempfile::tempdir().expect("tempdir");
    let llm = ScriptedLlm::start().await.expect("llm");
    llm.strict();
    let marker = format!("sleep 311{}", std::process::id() % 1000);
    let (mut child, _client) = start_a_long_command(dir.path(), &llm, &marker).await;
    let workspace = dir.path().join("workspace").display().to_string();
    let helpers = processes_mentioning(&workspace);
    assert!(!helpers.is_empty(), "the sandbox helper runs");
    let commands = processes_mentioning(&marker);
    // The helper and the shells mention it too; at least the three `sleep`s run.
    assert!(commands.len() >= 3, "{commands:?}");

    util::signal(&child, "-KILL");
    child.wait().await.expect("wait");
    // The lifeline closed: the helper kills every process the command started and exits.
    wait_gone(&helpers, Duration::from_secs(5)).await;
    wait_gone(&commands, Duration::from_secs(5)).await;

    // Restarted, the chat's next request is valid: the interrupted call has its result.
    llm.push(Reply::text("back again"));
    let config = dir.path().join("config.toml");
    let (mut child, addr) =
        util::spawn_daemon_with(&config, &[], "export OPENAI_API_KEY=sk-test").await;
    let mut client = WsClient::connect(addr).await;
    let turn = client.say("c", "are you there?").await;
    assert_eq!(turn.reply(), "back again");
    let last = llm.requests().pop().expect("a request");
    util::assert_no_orphans(&util::conversation(&last));
    assert!(llm.violations().is_empty(), "{:?}", llm.violations());
    util::signal(&child, "-TERM");
    assert!(child.wait().await.expect("wait").success());
}

#[tokio::test]
async fn stop_during_a_long_command_ends_the_turn_within_a_second_and_kills_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let llm = ScriptedLlm::start().await.expect("llm");
    let marker = format!("sleep 207{}", std::process::id() % 1000);
    let (mut child, mut client) = start_a_long_command(dir.path(), &llm, &marker).await;
    let commands = processes_mentioning(&marker);
    assert!(commands.len() >= 3, "{commands:?}");
    let stopped_at = Instant::now();
    let (turn, _) = client.stop("c").await;
    assert!(
        stopped_at.elapsed() < Duration::from_secs(1),
        "took {:?}",
        stopped_at.elapsed()
    );
    assert_eq!(turn.reply(), "Stopped.");
    wait_gone(&commands, Duration::from_secs(5)).await;
    util::signal(&child, "-TERM");
    assert!(child.wait().await.expect("wait").success());
}

#[tokio::test]
async fn the_agent_posts_to_another_websocket_chat_outside_its_turn() {
    let mut h = Harness::start("").await;
    h.llm.push(Reply::text("noted"));
    assert_eq!(
        h.client.say("a", "remind me about tea").await.reply(),
        "noted"
    );
    h.llm.push(Reply::tools([(
        "message",
        json!({"channel": "websocket", "chat_id": "a", "text": "Tea time!"}),
    )]));
    h.llm.push(Reply::text("reminded"));
    let turn = h.client.say("b", "remind chat a").await;
    assert_eq!(turn.reply(), "reminded");
    let post = h.client.wait_for("post").await;
    assert_eq!(post["chat_id"], "a");
    assert_eq!(post["content"], "Tea time!");
}
