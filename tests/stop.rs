use std::time::{Duration, Instant};

use serde_json::json;
use switchboard_sessions::{JsonlStore, SessionStore, repair};
use switchboard_testkit::Reply;

use crate::util::{self, Harness};

#[tokio::test]
async fn stop_during_a_slow_tool_ends_the_turn_within_a_second() {
    let mut h = Harness::start("").await;
    h.llm.push(Reply::tools([
        ("sleep", json!({"ms": 60_000})),
        ("echo", json!({"text": "quick"})),
    ]));

    h.client.send("c", "take your time").await;
    loop {
        let frame = h.client.next_frame().await;
        if frame["type"] == "tool" && frame["name"] == "sleep" && frame["status"] == "started" {
            break;
        }
    }
    let stopped_at = Instant::now();
    let (turn, answer) = h.client.stop("c").await;
    assert!(
        stopped_at.elapsed() < Duration::from_secs(1),
        "took {:?}",
        stopped_at.elapsed()
    );
    assert_eq!(turn.reply(), "Stopped.");
    assert_eq!(turn.of_type("done")[0]["end"], "cancelled");
    assert!(answer.of_type("message").is_empty(), "{:?}", answer.frames);

    // The saved session is valid: the sleep call has a (synthetic) result.
    let store = JsonlStore::open(&h.dir.path().join("state")).expect("store");
    let loaded = store.load(&"websocket_c".into()).await.expect("load");
    assert_eq!(
        repair(loaded.messages.clone()),
        loaded.messages,
        "saved history needs no repair"
    );

    // The next request carries the call and its cancellation result.
    h.client.say("c", "never mind").await;
    let conversation = util::conversation(h.llm.requests().last().expect("request"));
    util::assert_no_orphans(&conversation);
    let sleep_result = conversation.iter().find(|m| {
        m["role"] == "tool"
            && m["content"]
                .as_str()
                .is_some_and(|c| c.contains("cancelled"))
    });
    assert!(sleep_result.is_some(), "{conversation:#?}");
    h.daemon.shutdown().await;
}

#[tokio::test]
async fn stop_with_nothing_running_says_so() {
    let mut h = Harness::start("").await;
    assert_eq!(h.client.say("c", "/stop").await.reply(), "Nothing to stop.");
    assert!(h.llm.requests().is_empty());
    h.daemon.shutdown().await;
}

#[tokio::test]
async fn stop_while_the_model_is_thinking_cancels_the_llm_call() {
    let mut h = Harness::start("").await;
    h.llm
        .push(Reply::text("too late").delayed(Duration::from_secs(60)));
    h.client.send("c", "think hard").await;
    h.llm.wait_for_requests(1, util::PATIENCE).await;
    let stopped_at = Instant::now();
    assert_eq!(h.client.stop("c").await.0.reply(), "Stopped.");
    assert!(stopped_at.elapsed() < Duration::from_secs(1));
    h.daemon.shutdown().await;
}

/// A page reloaded mid-turn sends the message it waits on again (the same `id`): a `/stop`
/// then stops the turn and reports no dropped message — the person sent only one.
#[tokio::test]
async fn stop_after_a_reload_counts_no_resent_message_as_dropped() {
    let mut h = Harness::start("").await;
    h.llm
        .push(Reply::text("too late").delayed(Duration::from_secs(60)));
    let frame = json!({"type": "message", "chat_id": "c", "id": "m-1", "content": "think hard"});
    h.client.send_json(frame.clone()).await;
    h.llm.wait_for_requests(1, util::PATIENCE).await;
    // The reloaded page: a socket of its own, the running message sent again.
    let mut reloaded = util::WsClient::connect(h.daemon.addr()).await;
    reloaded.send_json(frame).await;
    let (stopped, answer) = reloaded.stop("c").await;
    assert_eq!(stopped.reply(), "Stopped.");
    let said: Vec<String> = stopped
        .frames
        .iter()
        .chain(&answer.frames)
        .filter_map(|frame| frame["content"].as_str().map(str::to_owned))
        .collect();
    assert!(
        said.iter().all(|text| !text.contains("Dropped")),
        "{said:?}"
    );
    h.daemon.shutdown().await;
}

/// `/stop` while the answer streams keeps what was shown — as the reply and in history —
/// marked as stopped; the next turn's history is valid.
#[tokio::test]
async fn stop_while_the_answer_streams_keeps_what_was_shown() {
    let mut h = Harness::start("").await;
    h.llm.strict();
    h.llm.push(Reply::paced(
        "one two three four five six seven eight nine ten eleven twelve",
        Duration::from_millis(150),
    ));
    h.client.send("c", "count slowly").await;
    let mut shown = String::new();
    while shown.split_whitespace().count() < 2 {
        let frame = h.client.next_frame().await;
        if frame["type"] == "delta" {
            shown.push_str(frame["text"].as_str().expect("text"));
        }
    }
    let (turn, _) = h.client.stop("c").await;
    let reply = turn.reply().to_owned();
    assert!(
        reply.starts_with(shown.trim_end()),
        "{reply:?} keeps {shown:?}"
    );
    assert!(reply.ends_with("(stopped)"), "{reply}");
    assert!(!reply.contains("twelve"), "it was stopped: {reply}");
    assert_eq!(turn.of_type("done")[0]["end"], "cancelled");

    let records = util::read_session_file(&util::session_file(h.dir.path(), "c"));
    assert_eq!(records.last().expect("a record")["content"], reply.as_str());
    assert_eq!(h.client.say("c", "go on").await.reply(), "echo: go on");
    assert!(h.llm.violations().is_empty(), "{:?}", h.llm.violations());
    h.daemon.shutdown().await;
}
