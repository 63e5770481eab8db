//! A message delivered again is answered exactly once: ignored when it was answered,
//! answered from what was saved when the answer may not have gone out, taken up where it
//! was when a crash interrupted its turn. (WebSocket clients opt in with a message `id`;
//! Telegram's updates always have one.)

use std::time::Duration;

use serde_json::json;
use switchboard_testkit::{Reply, ScriptedLlm};

use crate::util::{self, Harness, WsClient};

fn with_id(chat: &str, id: &str, content: &str) -> serde_json::Value {
    json!({"type": "message", "chat_id": chat, "id": id, "content": content})
}

#[tokio::test]
async fn a_message_sent_again_with_its_id_is_not_answered_again() {
    let mut h = Harness::start("").await;
    h.client.send_json(with_id("c", "m1", "first")).await;
    assert_eq!(h.client.turn("c").await.reply(), "echo: first");

    // The same message again (a client resending after a lost connection), then another.
    h.client.send_json(with_id("c", "m1", "first")).await;
    h.client.send_json(with_id("c", "m2", "second")).await;
    let turn = h.client.turn("c").await;
    assert_eq!(turn.reply(), "echo: second", "{:?}", turn.frames);
    assert_eq!(
        h.llm.requests().len(),
        2,
        "the repeat never reached the model"
    );
    let conversation = util::conversation(&h.llm.requests()[1]);
    let firsts = conversation
        .iter()
        .filter(|m| m["content"] == "first")
        .count();
    assert_eq!(firsts, 1, "{conversation:?}");
    h.daemon.shutdown().await;
}

#[tokio::test]
async fn an_answer_that_may_not_have_gone_out_is_sent_from_what_was_saved() {
    let dir = tempfile::tempdir().expect("tempdir");
    let llm = ScriptedLlm::start().await.expect("llm");
    // What a crash between saving an answer and delivering it leaves.
    let sessions = dir.path().join("state/sessions");
    std::fs::create_dir_all(&sessions).expect("mkdir");
    let records = [
        json!({"role": "user", "content": "what is 2+2?"}),
        json!({"inbound": {"id": "m1", "state": "received"}}),
        json!({"role": "assistant", "content": "4, as ever."}),
        json!({"inbound": {"id": "m1", "state": "answered", "end": "answered"}}),
    ];
    let text: String = records.iter().map(|r| format!("{r}\n")).collect();
    std::fs::write(sessions.join("websocket_c.jsonl"), text).expect("write");

    let daemon = util::start(&llm, dir.path(), "").await;
    let mut client = WsClient::connect(daemon.addr()).await;
    client.send_json(with_id("c", "m1", "what is 2+2?")).await;
    let turn = client.turn("c").await;
    assert_eq!(turn.reply(), "4, as ever.");
    assert!(llm.requests().is_empty(), "not asked again");

    // Now it is delivered: once more, and it is ignored.
    client.send_json(with_id("c", "m1", "what is 2+2?")).await;
    client.send_json(with_id("c", "m2", "thanks")).await;
    assert_eq!(client.turn("c").await.reply(), "echo: thanks");
    assert_eq!(llm.requests().len(), 1);
    daemon.shutdown().await;
}

#[tokio::test]
async fn a_turn_a_crash_interrupted_runs_on_when_its_message_comes_again() {
    let dir = tempfile::tempdir().expect("tempdir");
    let llm = ScriptedLlm::start().await.expect("llm");
    llm.push(Reply::text("never sent").delayed(Duration::from_secs(600)));
    let config = dir.path().join("config.toml");
    std::fs::write(&config, util::config_text(&llm.base_url(), dir.path(), "")).expect("write");

    let (mut child, addr) = util::spawn_daemon(&config).await;
    let mut client = WsClient::connect(addr).await;
    client
        .send_json(with_id("c", "m1", "tell me a story"))
        .await;
    llm.wait_for_requests(1, util::PATIENCE).await;
    util::signal(&child, "-KILL");
    child.wait().await.expect("wait");

    let (mut child, addr) = util::spawn_daemon(&config).await;
    let mut client = WsClient::connect(addr).await;
    client
        .send_json(with_id("c", "m1", "tell me a story"))
        .await;
    let turn = client.turn("c").await;
    assert_eq!(turn.reply(), "echo: tell me a story");
    let conversation = util::conversation(&llm.requests()[1]);
    assert_eq!(
        conversation,
        [json!({"role": "user", "content": "tell me a story"})],
        "the saved message, not a second copy"
    );
    let records = util::read_session_file(&util::session_file(dir.path(), "c"));
    let users = records.iter().filter(|r| r["role"] == "user").count();
    assert_eq!(users, 1, "{records:?}");
    util::signal(&child, "-TERM");
    assert!(child.wait().await.expect("wait").success());
}
