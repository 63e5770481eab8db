//! Calls to MCP servers' tools, as a turn makes them: `/stop` mid-call (the server is
//! told), an approval asked first, read-only tools side by side and others alone, a call
//! that hangs timed out. (Starting, restarting and reloading servers: `mcp.rs`.)

use std::time::{Duration, Instant};

use serde_json::json;
use switchboard_testkit::Reply;

use crate::mcp::{TOOLS, results, server_table, wait_for_file, wait_for_tools, with_server};
use crate::util::{self, Extra, Harness};

#[tokio::test]
async fn stop_during_a_server_call_ends_the_turn_and_the_server_is_told() {
    let marks = crate::mcp::marks_dir();
    let cancelled = marks.path().join("cancelled");
    let mut h = with_server(
        &format!(
            "env = {{ MCP_TEST_CANCELLED = \"{}\" }}\n",
            cancelled.display()
        ),
        TOOLS,
    )
    .await;
    h.llm.push(Reply::tool("test__slow", json!({"ms": 60_000})));
    h.client.send("c", "take your time").await;
    loop {
        let frame = h.client.next_frame().await;
        if frame["type"] == "tool" && frame["name"] == "test__slow" && frame["status"] == "started"
        {
            break;
        }
    }
    let stopped_at = Instant::now();
    let (turn, _) = h.client.stop("c").await;
    assert!(
        stopped_at.elapsed() < Duration::from_secs(1),
        "took {:?}",
        stopped_at.elapsed()
    );
    assert_eq!(turn.of_type("done")[0]["end"], "cancelled");
    wait_for_file(&cancelled).await;
    h.llm
        .push(Reply::tool("test__echo", json!({"text": "still here"})));
    h.llm.push(Reply::text("Yes."));
    assert_eq!(h.client.say("c", "are you there?").await.reply(), "Yes.");
    let last = h.llm.requests().pop().expect("request");
    assert_eq!(
        results(&last).last().expect("a result").1,
        "mcp echo: still here"
    );
    h.daemon.shutdown().await;
}

#[tokio::test]
async fn a_server_tool_an_approval_pattern_names_asks_in_the_chat_first() {
    let tables = format!(
        "[agent.approvals]\ntools = [\"test__*\"]\n\n{}",
        server_table("")
    );
    let mut h = Harness::with_config(Extra {
        tables: &tables,
        ..Extra::default()
    })
    .await;
    wait_for_tools(h.daemon.addr(), TOOLS).await;
    h.llm
        .push(Reply::tool("test__echo", json!({"text": "careful"})));
    h.llm.push(Reply::text("Done, with your consent."));
    h.client.send("c", "echo carefully").await;
    let asked = loop {
        let frame = h.client.next_frame().await;
        if frame["waiting_for"] == "approval" {
            break frame;
        }
        assert_ne!(frame["type"], "done", "the turn ended without asking");
        assert!(
            !(frame["type"] == "tool" && frame["status"] == "finished"),
            "it ran before consent"
        );
    };
    assert!(
        asked["text"]
            .as_str()
            .is_some_and(|t| t.contains("test__echo")),
        "{asked}"
    );
    h.client.send("c", "/approve").await;
    let turn = h.client.turn("c").await;
    assert_eq!(turn.reply(), "Done, with your consent.");
    assert_eq!(
        results(h.llm.requests().last().expect("request"))[0].1,
        "mcp echo: careful"
    );
    h.daemon.shutdown().await;
}

#[tokio::test]
async fn read_only_tools_run_side_by_side_and_a_flood_of_stderr_harms_nothing() {
    let mut h = with_server("", TOOLS).await;
    // `meet` (marked read-only) answers "met" only when the two calls run at once.
    h.llm.push(Reply::tools([
        ("test__meet", json!({"wait_ms": 5000})),
        ("test__meet", json!({"wait_ms": 5000})),
    ]));
    h.llm.push(Reply::text("Met."));
    assert_eq!(h.client.say("c", "meet").await.reply(), "Met.");
    let got = results(&h.llm.requests()[1]);
    assert_eq!(
        got.iter().map(|(_, r)| r.as_str()).collect::<Vec<_>>(),
        ["met", "met"]
    );
    // 20 MB on stderr: logged in part, and the server and daemon go on.
    h.llm
        .push(Reply::tool("test__flood", json!({"lines": 5000})));
    h.llm.push(Reply::text("Flooded."));
    assert_eq!(h.client.say("c", "flood").await.reply(), "Flooded.");
    assert_eq!(
        results(h.llm.requests().last().expect("request"))
            .last()
            .expect("a result")
            .1,
        "wrote 5000 lines"
    );
    h.llm
        .push(Reply::tool("test__echo", json!({"text": "after"})));
    h.llm.push(Reply::text("Fine."));
    assert_eq!(h.client.say("c", "still?").await.reply(), "Fine.");
    h.daemon.shutdown().await;
}

#[tokio::test]
async fn a_call_that_hangs_times_out_and_the_server_is_told() {
    let marks = crate::mcp::marks_dir();
    let cancelled = marks.path().join("cancelled");
    let mut h = with_server(
        &format!(
            "timeout_secs = 0.5\nenv = {{ MCP_TEST_CANCELLED = \"{}\" }}\n",
            cancelled.display()
        ),
        TOOLS,
    )
    .await;
    h.llm.push(Reply::tool("test__slow", json!({"ms": 60_000})));
    h.llm.push(Reply::text("It hung."));
    let started = Instant::now();
    assert_eq!(h.client.say("c", "wait forever").await.reply(), "It hung.");
    assert!(started.elapsed() < Duration::from_secs(10));
    let got = results(h.llm.requests().last().expect("request"));
    assert!(got[0].1.contains("timed out"), "{got:?}");
    wait_for_file(&cancelled).await;
    h.daemon.shutdown().await;
}

#[tokio::test]
async fn a_server_hung_in_a_call_is_found_out_and_started_again() {
    let mut h = with_server("timeout_secs = 0.5\n", TOOLS).await;
    h.llm
        .push(Reply::tool("test__freeze", json!({"ms": 600_000})));
    h.llm.push(Reply::text("It hung."));
    assert_eq!(h.client.say("c", "hang").await.reply(), "It hung.");
    // Its call timed out; it does not answer a ping: health says so, and it is replaced.
    let deadline = Instant::now() + util::PATIENCE;
    let why = loop {
        let health = util::health(h.daemon.addr()).await;
        if let Some(why) = health["checks"]["mcp"]["servers_down"]["test"].as_str() {
            break why.to_owned();
        }
        assert!(Instant::now() < deadline, "never found hung: {health}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(why.contains("did not answer a ping"), "{why}");
    wait_for_tools(h.daemon.addr(), TOOLS).await;
    h.llm
        .push(Reply::tool("test__echo", json!({"text": "back"})));
    h.llm.push(Reply::text("Fine."));
    let started = Instant::now();
    assert_eq!(h.client.say("c", "again?").await.reply(), "Fine.");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "the next call did not wait out a timeout"
    );
    let got = results(h.llm.requests().last().expect("request"));
    assert!(
        got.iter().any(|(_, text)| text.contains("mcp echo: back")),
        "{got:?}"
    );
    h.daemon.shutdown().await;
}

#[tokio::test]
async fn a_tool_runs_alone_unless_marked_or_configured_read_only() {
    for (extra, expected) in [
        ("", ["alone", "alone"]),
        ("read_only_tools = [\"gather\"]\n", ["met", "met"]),
    ] {
        let mut h = with_server(extra, TOOLS).await;
        // Run one after another, each waits its 300 ms for the other in vain.
        let wait = if extra.is_empty() { 300 } else { 5000 };
        h.llm.push(Reply::tools([
            ("test__gather", json!({"wait_ms": wait})),
            ("test__gather", json!({"wait_ms": wait})),
        ]));
        h.llm.push(Reply::text("Gathered."));
        assert_eq!(h.client.say("c", "gather").await.reply(), "Gathered.");
        let got = results(&h.llm.requests()[1]);
        assert_eq!(
            got.iter().map(|(_, r)| r.as_str()).collect::<Vec<_>>(),
            expected,
            "{extra}"
        );
        h.daemon.shutdown().await;
    }
}
