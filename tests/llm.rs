//! A misbehaving LLM, seen from the chat: endless or huge responses end the turn with a
//! clear error and nothing huge is kept; a stalled or silent model is reported while the
//! chat waits and gives up within the configured time; a stream that breaks is retried
//! without showing its text twice; tool-call ids the model repeats never break a chat.

use std::time::{Duration, Instant};

use serde_json::json;
use switchboard_testkit::{Reply, ScriptedLlm};

use crate::util::{self, Extra, Harness, TurnFrames, WsClient};

/// The text a client shows at the end of a turn: deltas since the last `reset`.
fn shown(turn: &TurnFrames) -> String {
    let mut shown = String::new();
    for frame in &turn.frames {
        match frame["type"].as_str() {
            Some("delta") => shown.push_str(frame["text"].as_str().unwrap_or_default()),
            Some("reset") => shown.clear(),
            _ => {}
        }
    }
    shown
}

#[tokio::test]
async fn an_endless_llm_stream_ends_the_turn_at_the_reply_limit() {
    let mut h = Harness::with_config(Extra {
        llm: "max_reply_bytes = 65536",
        ..Extra::default()
    })
    .await;
    h.llm.push(Reply::Endless);
    let turn = h.client.say("c", "talk forever").await;
    let error = turn.error().expect("an error frame");
    assert!(error.contains("llm.max_reply_bytes"), "{error}");
    assert!(turn.of_type("message").is_empty(), "no reply is made of it");
    let streamed = turn.streamed().len();
    assert!(streamed <= 65536, "{streamed} bytes were streamed");

    // Nothing huge was kept: the file holds the user message and a line saying it failed
    // (so the next request does not carry two user messages in a row).
    let records = util::read_session_file(&util::session_file(h.dir.path(), "c"));
    assert_eq!(records.len(), 2, "{records:?}");
    assert_eq!(records[0]["content"], "talk forever");
    let note = records[1]["content"].as_str().expect("a note");
    assert!(
        note.starts_with("[This request was not answered."),
        "{note}"
    );
    assert!(note.len() < 1024, "{note}");
    assert_eq!(
        h.client.say("c", "are you back?").await.reply(),
        "echo: are you back?"
    );
    h.daemon.shutdown().await;
}

#[tokio::test]
async fn a_huge_llm_reply_is_refused_not_saved_or_sent() {
    let mut h = Harness::start("stream = false").await;
    h.llm.push(Reply::text("x".repeat(2 * 1024 * 1024)));
    let turn = h.client.say("c", "write a novel").await;
    let error = turn.error().expect("an error frame");
    assert!(error.contains("llm.max_reply_bytes"), "{error}");
    assert!(turn.of_type("message").is_empty());
    let file = std::fs::metadata(util::session_file(h.dir.path(), "c")).expect("file");
    assert!(
        file.len() < 1024,
        "the session file is {} bytes",
        file.len()
    );
    h.daemon.shutdown().await;
}

#[tokio::test]
async fn a_stalled_stream_is_reported_and_times_out_between_chunks() {
    let mut h = Harness::with_config(Extra {
        llm: "idle_timeout_secs = 1\nslow_notice_secs = 0.3\nmax_retries = 0",
        ..Extra::default()
    })
    .await;
    h.llm.push(Reply::StallAfter("the first words".into()));
    let started = Instant::now();
    let turn = h.client.say("c", "hello?").await;
    assert!(started.elapsed() < util::PATIENCE);
    assert_eq!(turn.streamed(), "the first words");
    assert!(
        turn.statuses()
            .iter()
            .any(|s| s.starts_with("Still waiting for the model")),
        "{:?}",
        turn.frames
    );
    let error = turn.error().expect("an error frame");
    assert!(error.contains("llm.idle_timeout_secs"), "{error}");
    h.daemon.shutdown().await;
}

#[tokio::test]
async fn a_silent_llm_is_reported_and_the_call_ends_within_the_request_timeout() {
    let mut h = Harness::with_config(Extra {
        llm: "request_timeout_secs = 2\nslow_notice_secs = 0.5",
        ..Extra::default()
    })
    .await;
    h.llm
        .push(Reply::text("far too late").delayed(Duration::from_secs(60)));
    let started = Instant::now();
    let turn = h.client.say("c", "hello?").await;
    let took = started.elapsed();
    assert!(
        took >= Duration::from_secs(2) && took < Duration::from_secs(8),
        "{took:?}"
    );
    let statuses = turn.statuses();
    assert!(statuses.len() >= 2, "told while waiting: {statuses:?}");
    let error = turn.error().expect("an error frame");
    assert!(error.contains("llm.request_timeout_secs"), "{error}");
    h.daemon.shutdown().await;
}

#[tokio::test]
async fn a_retry_after_streamed_text_resets_the_draft_instead_of_repeating_it() {
    let mut h = Harness::start("").await;
    h.llm.push(Reply::BreakAfter("thinking thinking".into()));
    h.llm.push(Reply::text("thinking, then the answer"));
    let turn = h.client.say("c", "think").await;
    assert_eq!(turn.reply(), "thinking, then the answer");
    assert_eq!(shown(&turn), turn.reply(), "{:?}", turn.frames);
    assert_eq!(turn.of_type("reset").len(), 1, "{:?}", turn.frames);
    assert!(
        turn.statuses().iter().any(|s| s.contains("trying again")),
        "{:?}",
        turn.frames
    );
    assert!(turn.error().is_none());
    h.daemon.shutdown().await;
}

#[tokio::test]
async fn duplicate_tool_call_ids_from_the_model_never_break_the_chat() {
    let mut h = Harness::start("").await;
    h.llm.strict();
    let dup = |text: &str| ("dup".to_owned(), "echo".to_owned(), json!({"text": text}));
    // Two calls with one id in one response, and the same id again in a later turn.
    h.llm
        .push(Reply::ToolCallsWithIds(vec![dup("one"), dup("two")]));
    h.llm.push(Reply::text("both echoed"));
    h.llm.push(Reply::ToolCallsWithIds(vec![dup("three")]));
    h.llm.push(Reply::text("echoed again"));

    assert_eq!(h.client.say("c", "first").await.reply(), "both echoed");
    assert_eq!(h.client.say("c", "second").await.reply(), "echoed again");
    assert_eq!(h.client.say("c", "third").await.reply(), "echo: third");
    assert!(h.llm.violations().is_empty(), "{:?}", h.llm.violations());

    let last = util::conversation(h.llm.requests().last().expect("request"));
    util::assert_no_orphans(&last);
    let results: Vec<_> = last
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| m["content"].as_str().unwrap_or_default())
        .collect();
    assert_eq!(
        results,
        ["one", "two", "three"],
        "each result kept its call"
    );

    // And across a restart: the saved session replays to the strict provider.
    drop(h.client);
    assert!(h.daemon.shutdown().await);
    let daemon = util::start(&h.llm, h.dir.path(), "").await;
    let mut client = WsClient::connect(daemon.addr()).await;
    assert_eq!(client.say("c", "fourth").await.reply(), "echo: fourth");
    assert!(h.llm.violations().is_empty(), "{:?}", h.llm.violations());
    daemon.shutdown().await;
}

#[tokio::test]
async fn a_session_saved_with_duplicate_ids_is_repaired_on_load() {
    let dir = tempfile::tempdir().expect("tempdir");
    let llm = ScriptedLlm::start().await.expect("llm");
    llm.strict();
    // What an earlier version saved: two calls sharing an id, each with its result.
    let sessions = dir.path().join("state/sessions");
    std::fs::create_dir_all(&sessions).expect("mkdir");
    let call = |text: &str| json!({"id": "dup", "name": "echo", "arguments": json!({"text": text}).to_string()});
    let records = [
        json!({"role": "user", "content": "earlier"}),
        json!({"role": "assistant", "content": "", "tool_calls": [call("a"), call("b")]}),
        json!({"role": "tool", "tool_call_id": "dup", "name": "echo", "content": "a"}),
        json!({"role": "tool", "tool_call_id": "dup", "name": "echo", "content": "b"}),
        json!({"role": "assistant", "content": "done"}),
    ];
    let text: String = records.iter().map(|r| format!("{r}\n")).collect();
    std::fs::write(sessions.join("websocket_c.jsonl"), text).expect("write");

    let daemon = util::start(&llm, dir.path(), "").await;
    let mut client = WsClient::connect(daemon.addr()).await;
    let turn = client.say("c", "still there?").await;
    assert!(turn.error().is_none(), "{:?}", turn.frames);
    assert_eq!(turn.reply(), "echo: still there?");
    assert!(llm.violations().is_empty(), "{:?}", llm.violations());
    let conversation = util::conversation(&llm.requests()[0]);
    util::assert_no_orphans(&conversation);
    daemon.shutdown().await;
}

/// A slow server gets no more connections than `llm.max_connections`: the other turns wait
/// for one (each connection costs the daemon buffers), and every chat is answered.
#[tokio::test]
async fn a_slow_server_gets_no_more_connections_than_the_cap() {
    let mut h = Harness::with_config(Extra {
        llm: "max_connections = 2",
        ..Extra::default()
    })
    .await;
    h.llm.respond_with(|request| {
        let text = switchboard_testkit::last_user_text(request);
        Reply::text(format!("slowly: {text}")).delayed(Duration::from_millis(200))
    });
    let chats = ["a", "b", "c", "d", "e", "f"];
    for chat in chats {
        h.client.send(chat, &format!("hi {chat}")).await;
    }
    for _ in chats {
        let done = h.client.wait_for("done").await;
        assert_eq!(done["end"], "answered", "{done}");
    }
    assert_eq!(h.llm.requests().len(), 6);
    assert_eq!(
        h.llm.most_in_flight(),
        2,
        "the server answered {} requests at once",
        h.llm.most_in_flight()
    );
}
