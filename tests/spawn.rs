//! Sub-agents through the daemon, as a person meets them: the agent hands three tasks to
//! sub-agents at once, tells the person it did, and answers once with what all three found;
//! `/status` lists them, `/stop` stops them all at once; a parent that waits for its child at
//! one turn slot does not deadlock; histories stay valid for a strict provider.

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use switchboard_testkit::{Reply, ScriptedLlm};

use crate::util::{self, Extra, WsClient};

/// The text of the last message of a request.
fn last_text(request: &Value) -> String {
    let messages = util::conversation(request);
    messages
        .last()
        .and_then(|message| message["content"].as_str())
        .unwrap_or_default()
        .to_owned()
}

/// Answers as the parent and its children would be scripted: the person's request starts
/// three children; their tasks are answered (after `child_delay`) by what they "found"; the
/// parent's turn goes on with a short note; the results make the parent's summary.
fn family(child_delay: Duration) -> impl Fn(&Value) -> Reply + Send + Sync + 'static {
    move |request: &Value| {
        let last = last_text(request);
        if last.starts_with("[A task from the agent of session websocket_p") {
            let topic = ["apples", "bees", "clouds"]
                .into_iter()
                .find(|topic| last.contains(topic))
                .unwrap_or("nothing");
            return Reply::text(format!("{topic}: found")).delayed(child_delay);
        }
        if last.starts_with("[The results of the sub-agents") {
            return Reply::text("All three are in: apples, bees and clouds found.");
        }
        if last.starts_with("Started sub-agent") {
            return Reply::text("I asked three helpers; their findings come shortly.");
        }
        Reply::tools([
            (
                "spawn",
                json!({"task": "Research apples.", "label": "apples"}),
            ),
            ("spawn", json!({"task": "Research bees.", "label": "bees"})),
            (
                "spawn",
                json!({"task": "Research clouds.", "label": "clouds"}),
            ),
        ])
    }
}

#[tokio::test]
async fn three_children_run_in_parallel_and_the_parent_answers_once_with_all_they_found() {
    let dir = tempfile::tempdir().expect("tempdir");
    let llm = ScriptedLlm::start().await.expect("llm");
    llm.strict();
    llm.respond_with(family(Duration::from_millis(200)));
    let daemon = util::start_configured(&llm, dir.path(), Extra::default(), Vec::new()).await;
    let mut client = WsClient::connect(daemon.addr()).await;

    let first = client.say("p", "research apples, bees and clouds").await;
    assert_eq!(
        first.reply(),
        "I asked three helpers; their findings come shortly."
    );
    // The answer with the results: a turn of its own, which nobody typed.
    let answer = client.turn("p").await;
    assert_eq!(
        answer.reply(),
        "All three are in: apples, bees and clouds found."
    );
    assert!(
        client
            .try_next_frame(Duration::from_secs(1))
            .await
            .is_none(),
        "the parent answers once"
    );
    assert!(llm.violations().is_empty(), "{:?}", llm.violations());

    let requests = llm.requests();
    assert_eq!(requests.len(), 6, "parent ×3, three children");
    let children: Vec<&Value> = requests
        .iter()
        .filter(|r| last_text(r).starts_with("[A task from"))
        .collect();
    assert_eq!(children.len(), 3);
    for child in &children {
        let offered: Vec<&str> = child["tools"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|tool| tool["function"]["name"].as_str())
            .collect();
        for left_out in ["spawn", "message", "cron"] {
            assert!(!offered.contains(&left_out), "{offered:?}");
        }
        assert!(offered.contains(&"read_file"), "{offered:?}");
        assert_eq!(
            util::conversation(child).len(),
            1,
            "its own history: only its task"
        );
    }
    let results = last_text(requests.last().expect("the parent's last"));
    for topic in ["apples", "bees", "clouds"] {
        assert!(results.contains(&format!("{topic}: found")), "{results}");
    }
    // Every history valid, the children's sessions their own.
    let state = dir.path().join("state/sessions");
    for n in 1..=3 {
        let file = state.join(format!("spawn_websocket_p%7E{n}.jsonl"));
        let records = util::read_session_file(&file);
        let messages: Vec<Value> = records
            .into_iter()
            .filter(|r| r["role"].is_string())
            .collect();
        util::assert_no_orphans(&messages);
        assert!(messages.len() >= 2, "{file:?}");
    }
    let parent = util::read_session_file(&util::session_file(dir.path(), "p"));
    let parent: Vec<Value> = parent
        .into_iter()
        .filter(|r| r["role"].is_string())
        .collect();
    util::assert_no_orphans(&parent);
    assert!(
        parent.iter().any(|m| m["origin"]["kind"] == "sub_agents"),
        "the results are kept as the sub-agents' in history"
    );
    daemon.shutdown().await;
}

#[tokio::test]
async fn slash_stop_stops_every_child_within_a_second_and_their_results_never_come() {
    let dir = tempfile::tempdir().expect("tempdir");
    let llm = ScriptedLlm::start().await.expect("llm");
    llm.strict();
    llm.respond_with(family(Duration::from_secs(60)));
    let daemon = util::start_configured(&llm, dir.path(), Extra::default(), Vec::new()).await;
    let mut client = WsClient::connect(daemon.addr()).await;
    client.say("p", "research apples, bees and clouds").await;
    // The children are on their way to the model.
    let deadline = Instant::now() + util::PATIENCE;
    while llm.requests().len() < 5 {
        assert!(Instant::now() < deadline, "the children did not start");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let status = client.say("p", "/status").await;
    assert!(
        status.reply().contains("3 sub-agents running"),
        "{}",
        status.reply()
    );

    let stopped_at = Instant::now();
    let stop = client.say("p", "/stop").await;
    assert_eq!(stop.reply(), "Stopped 3 sub-agents.");
    // Each child's turn ends, stopped, its session saying so — within a second.
    let state = dir.path().join("state/sessions");
    for n in 1..=3 {
        let file = state.join(format!("spawn_websocket_p%7E{n}.jsonl"));
        loop {
            let records = util::read_session_file(&file);
            if records
                .iter()
                .any(|r| r["content"] == "[This turn was stopped before it finished.]")
            {
                util::assert_no_orphans(
                    &records
                        .into_iter()
                        .filter(|r| r["role"].is_string())
                        .collect::<Vec<_>>(),
                );
                break;
            }
            assert!(
                stopped_at.elapsed() < Duration::from_secs(1),
                "child {n} still runs a second after /stop"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
    let status = client.say("p", "/status").await;
    assert!(!status.reply().contains("sub-agent"), "{}", status.reply());
    assert!(
        client
            .try_next_frame(Duration::from_secs(1))
            .await
            .is_none(),
        "no results after a /stop"
    );
    assert_eq!(llm.requests().len(), 5, "nothing more was asked");
    daemon.shutdown().await;
}

#[tokio::test]
async fn a_parent_waiting_for_its_child_at_one_turn_slot_does_not_deadlock() {
    let dir = tempfile::tempdir().expect("tempdir");
    let llm = ScriptedLlm::start().await.expect("llm");
    llm.strict();
    llm.respond_with(|request: &Value| {
        let last = last_text(request);
        if last.starts_with("[A task from") {
            Reply::text("The answer is 42.")
        } else if last.starts_with("Sub-agent websocket_w~1") {
            Reply::text(format!(
                "My helper says: {}",
                last.lines().last().unwrap_or_default()
            ))
        } else {
            Reply::tool(
                "spawn",
                json!({"task": "Work out the answer.", "label": "answer", "wait": true}),
            )
        }
    });
    let extra = Extra {
        agent: "max_concurrent_turns = 1",
        ..Extra::default()
    };
    let daemon = util::start_configured(&llm, dir.path(), extra, Vec::new()).await;
    let mut client = WsClient::connect(daemon.addr()).await;
    let turn = client.say("w", "what is the answer?").await;
    assert_eq!(turn.reply(), "My helper says: The answer is 42.");
    assert!(llm.violations().is_empty(), "{:?}", llm.violations());
    daemon.shutdown().await;
}

#[tokio::test]
async fn a_message_that_fans_out_at_every_depth_is_held_to_its_chats_limits_and_other_chats_go_on()
{
    let dir = tempfile::tempdir().expect("tempdir");
    let llm = ScriptedLlm::start().await.expect("llm");
    // Every turn that may spawn hands eight tasks to sub-agents and waits for them: the
    // person's, and each sub-agent's (a second apart), four deep — 8⁴ asked for.
    llm.respond_with(|request: &Value| {
        let messages = util::conversation(request);
        let last = messages.last().cloned().unwrap_or_default();
        let text = last["content"].as_str().unwrap_or_default();
        let offered = request["tools"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|tool| tool["function"]["name"] == "spawn");
        let fan_out = || {
            Reply::ToolCalls(
                (0..8)
                    .map(|n| {
                        let task = json!({"task": format!("Part {n} of it."), "wait": true});
                        ("spawn".to_owned(), task)
                    })
                    .collect(),
            )
        };
        if last["role"] == "tool" {
            Reply::text("done")
        } else if text.starts_with("hello from") {
            Reply::text("hi")
        } else if !offered {
            Reply::text("a leaf").delayed(Duration::from_secs(1))
        } else if text.starts_with("[A task from") {
            fan_out().delayed(Duration::from_secs(1))
        } else {
            fan_out()
        }
    });
    let extra = Extra {
        agent: "max_concurrent_turns = 8",
        tables: "[agent.spawn]\nmax_depth = 4\nmax_children = 32\n\
                 exclude_tools = [\"message\", \"cron\"]\n",
        ..Extra::default()
    };
    let daemon = util::start_configured(&llm, dir.path(), extra, Vec::new()).await;
    let mut bomb = WsClient::connect(daemon.addr()).await;
    bomb.send("b", "do everything at once").await;
    let bombed = tokio::spawn(async move {
        let turn = bomb.turn("b").await;
        (turn, Instant::now())
    });
    // Sub-agents hold the most slots they may (half of eight) …
    let deadline = Instant::now() + util::PATIENCE;
    while llm.in_flight() < 4 {
        assert!(Instant::now() < deadline, "the sub-agents never ran");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // … and six other chats are answered meanwhile.
    let mut others = WsClient::connect(daemon.addr()).await;
    for n in 0..6 {
        others
            .send(&format!("o{n}"), &format!("hello from {n}"))
            .await;
    }
    for n in 0..6 {
        assert_eq!(others.turn(&format!("o{n}")).await.reply(), "hi");
    }
    let others_answered = Instant::now();
    let (turn, bomb_answered) = bombed.await.expect("the bomb's turn");
    assert_eq!(turn.reply(), "done");
    assert!(
        others_answered < bomb_answered,
        "the other chats were answered while the sub-agents ran"
    );

    let requests = llm.requests();
    let tasks = requests
        .iter()
        .filter(|r| last_text(r).starts_with("[A task from"))
        .count();
    assert!(
        (8..=16).contains(&tasks),
        "{tasks} sub-agents ran; one message may start 16 (agent.spawn.max_per_turn)"
    );
    let refused = requests.iter().any(|r| {
        util::conversation(r).iter().any(|m| {
            m["role"] == "tool"
                && m["content"]
                    .as_str()
                    .is_some_and(|c| c.contains("agent.spawn.max_per_turn"))
        })
    });
    assert!(refused, "the model was told why a spawn was refused");
    daemon.shutdown().await;
}
