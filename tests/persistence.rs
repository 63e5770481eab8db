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
