use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use serde_json::json;
use switchboard_testkit::Reply;

use crate::util::{self, Harness};

#[tokio::test]
async fn two_tool_calls_run_concurrently() {
    let mut h = Harness::start("").await;
    // Each barrier call waits until the other is waiting too: they only both succeed if
    // they really ran at the same time (each gives up after 5 s with an error).
    h.llm.push(Reply::tools([
        ("barrier", json!({})),
        ("barrier", json!({})),
    ]));
    h.llm.push(Reply::text("both arrived"));

    let turn = h.client.say("c", "meet at the barrier").await;
    assert_eq!(turn.reply(), "both arrived");
    let statuses: Vec<_> = turn
        .of_type("tool")
        .iter()
        .map(|f| f["status"].clone())
        .collect();
    assert_eq!(statuses.iter().filter(|s| **s == "started").count(), 2);
    assert_eq!(
        statuses.iter().filter(|s| **s == "finished").count(),
        2,
        "{statuses:?}"
    );

    let second = &h.llm.requests()[1];
    let results: Vec<_> = util::conversation(second)
        .into_iter()
        .filter(|m| m["role"] == "tool")
        .collect();
    assert_eq!(results.len(), 2);
    for result in results {
        assert_eq!(result["content"], "all parties arrived", "{result}");
    }
    h.daemon.shutdown().await;
}

#[tokio::test]
async fn failing_and_unknown_tools_become_error_results_for_the_model() {
    let mut h = Harness::start("").await;
    h.llm.push(Reply::tools([
        ("fail", json!({})),
        ("no_such_tool", json!({"x": 1})),
        ("echo", json!({"text": "still works"})),
    ]));
    h.llm.push(Reply::text("I saw the errors"));

    let turn = h.client.say("c", "use your tools").await;
    assert_eq!(turn.reply(), "I saw the errors");

    let requests = h.llm.requests();
    let conversation = util::conversation(&requests[1]);
    util::assert_no_orphans(&conversation);
    let calls = conversation[1]["tool_calls"]
        .as_array()
        .expect("tool calls")
        .clone();
    let results: Vec<_> = conversation
        .iter()
        .filter(|m| m["role"] == "tool")
        .collect();
    assert_eq!(results.len(), 3);
    for (call, result) in calls.iter().zip(&results) {
        assert_eq!(
            result["tool_call_id"], call["id"],
            "results in call order with their ids"
        );
    }
    assert!(
        results[0]["content"]
            .as_str()
            .expect("text")
            .contains("this tool always fails")
    );
    let unknown = results[1]["content"].as_str().expect("text");
    assert!(unknown.contains("unknown tool `no_such_tool`"), "{unknown}");
    assert!(unknown.contains("echo"), "lists the real tools: {unknown}");
    assert_eq!(results[2]["content"], "still works");
    let failed = turn
        .of_type("tool")
        .iter()
        .filter(|f| f["status"] == "failed")
        .count();
    assert_eq!(failed, 2);
    h.daemon.shutdown().await;
}

#[tokio::test]
async fn invalid_arguments_are_an_error_result_not_a_crash() {
    let mut h = Harness::start("").await;
    h.llm.push(Reply::tool("echo", json!({"text": 42})));
    h.llm.push(Reply::text("fine"));
    assert_eq!(h.client.say("c", "go").await.reply(), "fine");
    let result = util::conversation(&h.llm.requests()[1])
        .into_iter()
        .find(|m| m["role"] == "tool");
    let content = result.expect("result")["content"]
        .as_str()
        .expect("text")
        .to_owned();
    assert!(content.starts_with("error: invalid arguments"), "{content}");
    h.daemon.shutdown().await;
}

#[tokio::test]
async fn max_iterations_ends_the_turn_and_says_so() {
    let mut h = Harness::start("max_iterations = 3").await;
    for _ in 0..3 {
        h.llm.push(Reply::tool("echo", json!({"text": "again"})));
    }
    let turn = h.client.say("c", "loop forever").await;
    assert!(
        turn.reply().contains("agent.max_iterations = 3"),
        "{}",
        turn.reply()
    );
    assert_eq!(h.llm.requests().len(), 3);
    h.daemon.shutdown().await;
}

fn probes(hold_ms: u64) -> (Arc<AtomicUsize>, Vec<Arc<dyn switchboard_tools::Tool>>) {
    let running = Arc::new(AtomicUsize::new(0));
    let max_seen = Arc::new(AtomicUsize::new(0));
    let probe = |name, exclusive| -> Arc<dyn switchboard_tools::Tool> {
        Arc::new(util::Probe {
            name,
            exclusive,
            hold: Duration::from_millis(hold_ms),
            running: running.clone(),
            max_seen: max_seen.clone(),
        })
    };
    let tools = vec![probe("probe", false), probe("exclusive_probe", true)];
    (max_seen, tools)
}

#[tokio::test]
async fn an_exclusive_tool_runs_alone() {
    let (max_seen, tools) = probes(150);
    let mut h = Harness::with_tools("", tools).await;
    h.llm.push(Reply::tools([
        ("probe", json!({})),
        ("probe", json!({})),
        ("exclusive_probe", json!({})),
        ("probe", json!({})),
    ]));
    h.llm.push(Reply::text("done"));
    assert_eq!(h.client.say("c", "probe").await.reply(), "done");

    let results: Vec<String> = util::conversation(&h.llm.requests()[1])
        .into_iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| m["content"].as_str().unwrap_or_default().to_owned())
        .collect();
    assert_eq!(results[2], "exclusive_probe saw 1 running", "{results:?}");
    assert_eq!(
        max_seen.load(Ordering::SeqCst),
        2,
        "the first two probes ran together"
    );
    h.daemon.shutdown().await;
}

#[tokio::test]
async fn sessions_run_concurrently() {
    let mut h = Harness::start("").await;
    // One barrier call in each of two chats: both succeed only if the chats' turns overlap.
    h.llm.push(Reply::tool("barrier", json!({})));
    h.llm.push(Reply::tool("barrier", json!({})));
    h.client.send("a", "meet").await;
    h.client.send("b", "meet").await;
    let (a, b) = (h.client.turn("a").await, h.client.turn("b").await);
    for turn in [a, b] {
        let failed = turn
            .of_type("tool")
            .iter()
            .filter(|f| f["status"] == "failed")
            .count();
        assert_eq!(failed, 0, "{:?}", turn.frames);
    }
    h.daemon.shutdown().await;
}

#[tokio::test]
async fn the_global_turn_limit_holds_across_sessions() {
    let (max_seen, tools) = probes(100);
    let mut h = Harness::with_tools("max_concurrent_turns = 1", tools).await;
    for _ in 0..3 {
        h.llm.push(Reply::tool("probe", json!({})));
    }
    for chat in ["a", "b", "c"] {
        h.client.send(chat, "probe").await;
    }
    for chat in ["a", "b", "c"] {
        h.client.turn(chat).await;
    }
    assert_eq!(max_seen.load(Ordering::SeqCst), 1, "one turn at a time");
    h.daemon.shutdown().await;
}

/// A tool with a bug: it panics.
struct Panics;

#[async_trait::async_trait]
impl switchboard_tools::Tool for Panics {
    fn name(&self) -> &str {
        "panics"
    }
    fn description(&self) -> &str {
        "Always panics."
    }
    fn parameters(&self) -> serde_json::Value {
        json!({"type": "object"})
    }
    async fn call(
        &self,
        _: serde_json::Value,
        _: &switchboard_tools::ToolContext,
    ) -> Result<switchboard_tools::ToolOutput, switchboard_tools::ToolError> {
        panic!("index out of bounds in a buggy tool")
    }
}

#[tokio::test]
async fn a_panicking_tool_is_an_error_result_and_the_daemon_goes_on() {
    let mut h = Harness::with_tools("", vec![Arc::new(Panics)]).await;
    h.llm.push(Reply::tool("panics", json!({})));
    h.llm.push(Reply::text("recovered"));
    assert_eq!(h.client.say("c", "try it").await.reply(), "recovered");
    let result = util::conversation(&h.llm.requests()[1])
        .into_iter()
        .find(|m| m["role"] == "tool")
        .expect("a result");
    let text = result["content"].as_str().unwrap_or_default();
    assert!(
        text.contains("the tool crashed: index out of bounds"),
        "{text}"
    );
    assert_eq!(
        h.client.say("c", "still there?").await.reply(),
        "echo: still there?"
    );
    h.daemon.shutdown().await;
}
