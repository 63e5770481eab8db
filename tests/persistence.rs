use serde_json::json;
use switchboard_testkit::{Reply, ScriptedLlm};

use crate::util::{self, Harness, WsClient};

#[tokio::test]
async fn after_a_restart_the_next_request_carries_the_earlier_history() {
    let dir = tempfile::tempdir().expect("tempdir");
    let llm = ScriptedLlm::start().await.expect("llm");
    llm.push(Reply::tool(
        "echo",
        json!({"text": "tool output before restart"}),
    ));
    llm.push(Reply::text("noted: your name is Ada"));

    let daemon = util::start(&llm, dir.path(), "").await;
    let mut client = WsClient::connect(daemon.addr()).await;
    assert_eq!(
        client.say("c", "my name is Ada").await.reply(),
        "noted: your name is Ada"
    );
    drop(client);
    assert!(daemon.shutdown().await);

    let daemon = util::start(&llm, dir.path(), "").await;
    let mut client = WsClient::connect(daemon.addr()).await;
    client.say("c", "what is my name?").await;

    let requests = llm.requests();
    let after_restart = util::conversation(requests.last().expect("request"));
    let roles: Vec<_> = after_restart
        .iter()
        .map(|m| m["role"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(roles, ["user", "assistant", "tool", "assistant", "user"]);
    assert_eq!(after_restart[0]["content"], "my name is Ada");
    assert_eq!(after_restart[2]["content"], "tool output before restart");
    assert_eq!(after_restart[3]["content"], "noted: your name is Ada");
    assert_eq!(after_restart[4]["content"], "what is my name?");
    util::assert_no_orphans(&after_restart);
    daemon.shutdown().await;
}

#[tokio::test]
async fn sixty_exchanges_keep_at_most_fifty_history_messages_and_no_orphans() {
    let mut h = Harness::start("history_limit = 50").await;

    for exchange in 0..60 {
        if exchange % 4 == 1 {
            // Some turns call tools (two at once, so a turn is four messages).
            h.llm.push(Reply::tools([
                ("echo", json!({"text": format!("a{exchange}")})),
                ("echo", json!({"text": format!("b{exchange}")})),
            ]));
            h.llm.push(Reply::text(format!("tools done {exchange}")));
        }
        let turn = h.client.say("long", &format!("message {exchange}")).await;
        assert!(turn.error().is_none(), "{:?}", turn.frames);
    }
    let requests = h.llm.requests();
    let last = util::conversation(requests.last().expect("request"));
    let history = &last[..last.len() - 1];
    assert!(history.len() <= 50, "history of {} messages", history.len());
    assert!(
        history.len() >= 40,
        "trimming keeps most of the window: {}",
        history.len()
    );
    util::assert_no_orphans(&last);
    assert_eq!(last.last().expect("new message")["content"], "message 59");
    h.daemon.shutdown().await;
}

#[tokio::test]
async fn a_conversation_survives_many_restarts_and_compaction() {
    let dir = tempfile::tempdir().expect("tempdir");
    let llm = ScriptedLlm::start().await.expect("llm");
    for round in 0..3 {
        let daemon = util::start(&llm, dir.path(), "history_limit = 4").await;
        let mut client = WsClient::connect(daemon.addr()).await;
        for i in 0..10 {
            client.say("c", &format!("r{round} m{i}")).await;
        }
        daemon.shutdown().await;
    }
    // history_limit = 4 keeps two exchanges; compaction keeps the file small.
    let records = util::read_session_file(&util::session_file(dir.path(), "c"));
    assert!(
        records.len() <= 4 * 3 + 8 + 2,
        "file was not compacted: {} records",
        records.len()
    );
    let last = util::conversation(llm.requests().last().expect("request"));
    let contents: Vec<_> = last
        .iter()
        .map(|m| m["content"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(
        contents,
        ["r2 m7", "echo: r2 m7", "r2 m8", "echo: r2 m8", "r2 m9"]
    );
}

#[tokio::test]
async fn an_idle_session_leaves_memory_and_is_read_back() {
    let mut h = Harness::start("idle_timeout_secs = 0.2").await;
    h.client.say("c", "the code word is heron").await;
    assert_eq!(util::health(h.daemon.addr()).await["active_sessions"], 1);

    let deadline = tokio::time::Instant::now() + util::PATIENCE;
    while util::health(h.daemon.addr()).await["active_sessions"] != 0 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the idle worker never exited"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }

    h.client.say("c", "what was the code word?").await;
    let conversation = util::conversation(h.llm.requests().last().expect("request"));
    assert_eq!(conversation[0]["content"], "the code word is heron");
    assert_eq!(conversation.len(), 3);
    h.daemon.shutdown().await;
}

/// An upgrade from a version that kept a chat's model, the month's spending and the jobs in
/// files of their own (`choices.json`, `usage/YYYY-MM.jsonl`, `scheduler/jobs.jsonl`): an
/// operator's command before the new daemon's first start moves nothing, the start moves
/// them into the state store, and the chat, `/usage` and `switchboard cron` go on from them.
#[tokio::test]
async fn an_upgrade_moves_the_files_of_before_into_the_state_store() {
    let dir = tempfile::tempdir().expect("tempdir");
    let llm = ScriptedLlm::start().await.expect("llm");
    let state = dir.path().join("state");
    for made in ["usage", "scheduler"] {
        std::fs::create_dir_all(state.join(made)).expect("dir");
    }
    std::fs::write(
        state.join("choices.json"),
        r#"{"websocket_c": {"model": "big"}}"#,
    )
    .expect("choices");
    let today = jiff::Timestamp::now()
        .to_zoned(jiff::tz::TimeZone::UTC)
        .date();
    let month = state.join(format!("usage/{}.jsonl", today.strftime("%Y-%m")));
    std::fs::write(
        &month,
        format!(
            "{}\n{}\n",
            json!({"kind": "spent", "day": today.to_string(), "agent": "default",
                "session": "websocket_c", "model": "big", "input": 300, "output": 20, "usd": 0.3}),
            json!({"kind": "spent", "day": today.to_string(), "agent": "default",
                "session": "websocket_c", "model": "big", "input": 100, "output": 5, "usd": 0.1}),
        ),
    )
    .expect("usage");
    let jobs = state.join("scheduler/jobs.jsonl");
    std::fs::write(
        &jobs,
        format!(
            "{}\n{}\n",
            json!({"record": "counter", "next": 3}),
            json!({"record": "job", "id": "j2", "name": "weekly report",
                "message": "Summarise the week.",
                "schedule": {"kind": "cron", "expr": "0 9 * * 1", "tz": "UTC"},
                "channel": "websocket", "chat_id": "c", "created_by": "operator",
                "catch_up_secs": 3600, "created_at": "2026-11-01T00:00:00Z",
                "next_due": "2099-01-05T09:00:00Z"}),
        ),
    )
    .expect("jobs");
    let text = util::config_text_with(
        &llm.base_url(),
        dir.path(),
        util::Extra {
            llm: "models = [\"big\"]",
            tables: "[limits]\ntimezone = \"UTC\"",
            ..util::Extra::default()
        },
    );
    let config = dir.path().join("config.toml");
    std::fs::write(&config, text).expect("config");

    let before = tokio::process::Command::new(util::BINARY)
        .args(["cron", "list", "--config"])
        .arg(&config)
        .output()
        .await
        .expect("runs");
    let (listed, told) = (
        String::from_utf8_lossy(&before.stdout),
        String::from_utf8_lossy(&before.stderr),
    );
    assert!(!listed.contains("weekly report"), "{listed}");
    assert!(
        told.contains("jobs.jsonl") && told.contains("at the daemon's next start"),
        "the operator is told why the jobs are not listed yet: {told}"
    );
    assert!(jobs.exists(), "an operator's command moves nothing");

    let (daemon, addr) = util::spawn_daemon(&config).await;
    let mut client = WsClient::connect(addr).await;
    let model = client.say("c", "/model").await;
    assert!(
        model.reply().starts_with("This chat uses big."),
        "{}",
        model.reply()
    );
    let usage = client.say("c", "/usage").await;
    assert!(
        usage.reply().starts_with("Today: 400 tokens in, 25 out"),
        "{}",
        usage.reply()
    );
    let listed = util::cli(&["cron", "list"], &config).await;
    assert!(
        listed.contains("j2") && listed.contains("weekly report"),
        "{listed}"
    );
    let added = util::cli(
        &[
            "cron",
            "add",
            "--chat",
            "websocket:c",
            "--every",
            "1h",
            "-m",
            "hi",
        ],
        &config,
    )
    .await;
    assert!(
        added.contains("j3"),
        "ids go on from the old counter: {added}"
    );
    for moved in [&state.join("choices.json"), &month, &jobs] {
        assert!(!moved.exists(), "{} is still there", moved.display());
        let mut done = moved.as_os_str().to_owned();
        done.push(".migrated");
        assert!(
            std::path::Path::new(&done).exists(),
            "{} kept for the operator",
            moved.display()
        );
    }
    drop(daemon);
}
