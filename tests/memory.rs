//! Memory that is found again (`[memory]`): a fact said long out of the window is found by
//! `memory_search`, by recall and by `/memory`, with its date; never by another agent; in a
//! conversation `/new` closed; the same after a rebuild from scratch; and an index killed
//! while it is built is finished by the next start, nothing lost or doubled.

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use switchboard_testkit::{Reply, ScriptedLlm};

use crate::util::{self, Extra, PATIENCE, WsClient};

const MEMORY: &str = "[memory]\nenabled = true\nrecall = 3\n";

/// The text of every message of a request, as the model read it.
fn texts(request: &Value) -> Vec<String> {
    request["messages"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|m| m["content"].as_str().map(str::to_owned))
        .collect()
}

/// Says `n` filler messages in `chat`, each answered.
async fn chatter(llm: &ScriptedLlm, client: &mut WsClient, chat: &str, n: usize) {
    for i in 0..n {
        llm.push(Reply::text(format!("ok {i}")));
        assert_eq!(
            client
                .say(chat, &format!("filler message number {i}"))
                .await
                .reply(),
            format!("ok {i}")
        );
    }
}

/// Asks `/memory QUERY` in `chat` until its answer contains `wanted` (the index reads what was
/// written as it is written; this waits for nothing else), within `within`.
async fn memory_finds(
    client: &mut WsClient,
    chat: &str,
    query: &str,
    wanted: &str,
    within: Duration,
) -> String {
    let deadline = Instant::now() + within;
    loop {
        let answer = client
            .say(chat, &format!("/memory {query}"))
            .await
            .reply()
            .to_owned();
        if answer.contains(wanted) || Instant::now() > deadline {
            return answer;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn a_fact_said_200_messages_ago_is_found_by_the_tool_and_by_recall_with_its_date() {
    let extra = Extra {
        tables: MEMORY,
        ..Extra::default()
    };
    let mut h = util::Harness::with_config(extra).await;
    h.llm.push(Reply::text("Noted."));
    h.client.say("a", "my locker code is 4711").await;
    chatter(&h.llm, &mut h.client, "a", 100).await;

    // Long out of the window (50 messages), and the file compacted since.
    let file = std::fs::read_to_string(util::session_file(h.dir.path(), "a")).expect("file");
    assert!(
        !file.contains("4711"),
        "compacted out of the session's file"
    );

    h.llm.push(Reply::tools([(
        "memory_search",
        json!({"query": "locker code", "scope": "chat"}),
    )]));
    h.llm.push(Reply::text("It is 4711."));
    let asked = h.client.say("a", "what is the code of my locker?").await;
    assert_eq!(asked.reply(), "It is 4711.");

    let requests = h.llm.requests();
    let first = &requests[requests.len() - 2];
    // Recall: the fact, dated, before the question — not in the window otherwise.
    let question = texts(first).pop().expect("the question");
    let today = switchboard_core::utc_minute(now_millis());
    let day = &today[..10];
    assert!(question.contains("[Recalled from memory"), "{question}");
    assert!(
        question.contains(day)
            && question.contains("websocket_a, user] my **locker** **code** is 4711"),
        "{question}"
    );
    assert!(
        question.ends_with("what is the code of my locker?"),
        "{question}"
    );
    let window: Vec<String> = texts(first);
    assert_eq!(
        window.iter().filter(|t| t.contains("4711")).count(),
        1,
        "only the recalled block holds it: {window:?}"
    );
    // The tool: the fact and the answer that noted it, dated, the chat and who said it.
    let results = util::tool_results(&requests[requests.len() - 1]);
    assert_eq!(results.len(), 1);
    let found = &results[0];
    assert!(
        found.contains(day) && found.contains("websocket_a, user] my **locker** **code** is 4711"),
        "{found}"
    );
    // The saved history holds the question as it was asked, without the block.
    let saved = std::fs::read_to_string(util::session_file(h.dir.path(), "a")).expect("file");
    assert!(!saved.contains("Recalled from memory"));
}

fn now_millis() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// The chat `h` (and only it) bound to the agent `home`.
const HOME: &str = r#"
[agents.home]
workspace = "{home}"

[[bindings]]
agent = "home"
channel = "websocket"
chat = "h"
"#;

#[tokio::test]
async fn another_agents_chats_are_never_found() {
    let dir = tempfile::tempdir().expect("tempdir");
    let llm = ScriptedLlm::start().await.expect("llm");
    let tables = format!(
        "{}\n{MEMORY}",
        HOME.replace("{home}", &dir.path().join("home").display().to_string())
    );
    let extra = Extra {
        tables: &tables,
        ..Extra::default()
    };
    let daemon = util::start_configured(&llm, dir.path(), extra, Vec::new()).await;
    let mut client = WsClient::connect(daemon.addr()).await;
    llm.push(Reply::text("Noted."));
    client.say("m", "the vault password is swordfish").await;
    std::fs::create_dir_all(dir.path().join("workspace/memory")).expect("mkdir");
    std::fs::write(
        dir.path().join("workspace/memory/secrets.md"),
        "swordfish is the vault word",
    )
    .expect("note");

    // The default agent finds it (its chat and its memory file) …
    let mine = memory_finds(&mut client, "m", "swordfish", "websocket_m", PATIENCE).await;
    assert!(
        mine.contains("websocket_m, user] the vault password is **swordfish**"),
        "{mine}"
    );
    // … the home agent never: not by `/memory`, not by its tool, not by recall.
    let theirs = client
        .say("h", "/memory swordfish")
        .await
        .reply()
        .to_owned();
    assert_eq!(theirs, "Nothing in memory matches \"swordfish\".");
    llm.push(Reply::tools([(
        "memory_search",
        json!({"query": "swordfish vault"}),
    )]));
    llm.push(Reply::text("Nothing."));
    client
        .say("h", "what is the vault password? swordfish?")
        .await;
    let requests = llm.requests();
    let asked = &requests[requests.len() - 2];
    assert!(
        texts(asked).iter().all(|t| !t.contains("Recalled")),
        "nothing recalled from another agent: {:?}",
        texts(asked)
    );
    // It finds what was said in its own chat (the question itself), nothing of the other's.
    let results = util::tool_results(&requests[requests.len() - 1]);
    assert_eq!(results.len(), 1);
    assert!(
        results[0].contains("websocket_h, user] what is the"),
        "{results:?}"
    );
    assert!(
        !results[0].contains("websocket_m") && !results[0].contains("password is"),
        "{results:?}"
    );
    daemon.shutdown().await;
}

#[tokio::test]
async fn a_closed_conversation_is_found_as_archived_and_a_rebuild_agrees() {
    let dir = tempfile::tempdir().expect("tempdir");
    let llm = ScriptedLlm::start().await.expect("llm");
    let text = util::config_text_with(
        &llm.base_url(),
        dir.path(),
        Extra {
            tables: MEMORY,
            ..Extra::default()
        },
    );
    let config = dir.path().join("config.toml");
    std::fs::write(&config, &text).expect("config");
    let (mut child, addr) = util::spawn_daemon(&config).await;
    let mut client = WsClient::connect(addr).await;
    llm.push(Reply::text("Noted."));
    client.say("a", "the boat is called Aurora").await;
    assert_eq!(
        client.say("a", "/new").await.reply(),
        "Started a new session."
    );
    llm.push(Reply::text("Noted."));
    client.say("a", "the car is called Aurora too").await;

    let found = memory_finds(&mut client, "a", "Aurora", "car", PATIENCE).await;
    let lines: Vec<&str> = found.lines().collect();
    assert_eq!(lines.len(), 2, "the two facts: {found}");
    assert_eq!(
        lines.iter().filter(|l| l.contains(", archived]")).count(),
        1,
        "{found}"
    );
    assert!(
        found.contains("user, archived] the boat is called **Aurora**"),
        "{found}"
    );

    util::signal(&child, "-TERM");
    child.wait().await.expect("exits");
    let before = util::cli(&["memory", "search", "Aurora"], &config).await;
    let rebuilt = util::cli(&["memory", "reindex"], &config).await;
    assert!(
        rebuilt.starts_with("agent default: 4 entries from "),
        "{rebuilt}"
    );
    let after = util::cli(&["memory", "search", "Aurora"], &config).await;
    assert_eq!(before, after);
    assert_eq!(before.lines().count(), 2, "{before}");
    let stats = util::cli(&["memory", "stats"], &config).await;
    assert!(
        stats.starts_with("agent default: 4 entries (2 archived)"),
        "{stats}"
    );
}

#[tokio::test]
async fn a_message_is_found_within_a_second_of_being_written() {
    let extra = Extra {
        tables: "[memory]\nenabled = true\n",
        ..Extra::default()
    };
    let mut h = util::Harness::with_config(extra).await;
    for word in ["quokka", "axolotl", "pangolin"] {
        h.llm.push(Reply::text("Noted."));
        h.client
            .say("a", &format!("my favourite animal is the {word}"))
            .await;
        let written = Instant::now();
        let found = memory_finds(
            &mut h.client,
            "a",
            word,
            "favourite",
            Duration::from_secs(1),
        )
        .await;
        assert!(found.contains(&format!("**{word}**")), "{found}");
        assert!(
            written.elapsed() < Duration::from_secs(1),
            "{:?}",
            written.elapsed()
        );
    }
    let health = util::health(h.daemon.addr()).await;
    assert_eq!(health["memory"]["default"]["state"], "ready", "{health}");
    assert_eq!(health["checks"]["memory"]["state"], "ok", "{health}");
}

#[tokio::test]
async fn an_index_killed_while_it_is_built_is_finished_by_the_next_start() {
    let dir = tempfile::tempdir().expect("tempdir");
    let llm = ScriptedLlm::start().await.expect("llm");
    // A corpus written as the store writes it: 300 chats of 400 messages, each with a word of
    // its own.
    let sessions = dir.path().join("state/sessions");
    std::fs::create_dir_all(&sessions).expect("mkdir");
    for chat in 0..300 {
        let mut text = String::new();
        for i in 0..200 {
            for (role, content) in [
                (
                    "user",
                    format!("message {i} of chat{chat} about tea and biscuits"),
                ),
                ("assistant", format!("answer {i} to chat{chat}")),
            ] {
                let line =
                    json!({"role": role, "content": content, "at": 1_790_000_000_000i64 + i});
                text.push_str(&line.to_string());
                text.push('\n');
            }
        }
        std::fs::write(sessions.join(format!("websocket_c{chat}.jsonl")), text).expect("write");
    }
    let text = util::config_text_with(
        &llm.base_url(),
        dir.path(),
        Extra {
            tables: "[memory]\nenabled = true\n",
            ..Extra::default()
        },
    );
    let config = dir.path().join("config.toml");
    std::fs::write(&config, &text).expect("config");
    let (child, addr) = util::spawn_daemon(&config).await;
    // Killed part-way through its first pass.
    let deadline = Instant::now() + PATIENCE;
    loop {
        let health = util::health(addr).await;
        let entries = health["memory"]["default"]["entries"].as_u64().unwrap_or(0);
        assert_eq!(
            health["memory"]["default"]["state"], "indexing",
            "too fast to kill: {health}"
        );
        let db = dir.path().join("state/memory/index.sqlite3-wal");
        if entries > 0 || std::fs::metadata(&db).is_ok_and(|m| m.len() > 1 << 20) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the index never started: {health}"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    util::signal(&child, "-KILL");
    drop(child);

    let (mut child, addr) = util::spawn_daemon(&config).await;
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let health = util::health(addr).await;
        if health["memory"]["default"]["state"] == "ready" {
            assert_eq!(
                health["memory"]["default"]["entries"],
                300 * 400,
                "{health}"
            );
            break;
        }
        assert!(Instant::now() < deadline, "not ready in time: {health}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    util::signal(&child, "-TERM");
    child.wait().await.expect("exits");
    // Each chat's own word: all its messages, once each.
    for chat in [0, 137, 299] {
        let found = util::cli(
            &[
                "memory",
                "search",
                "--limit",
                "50",
                &format!("chat{chat}"),
                "\"message 7\"",
            ],
            &config,
        )
        .await;
        assert_eq!(found.lines().count(), 1, "{found}");
        assert!(
            found.contains(&format!("websocket_c{chat}, user]")),
            "{found}"
        );
    }
    let stats = util::cli(&["memory", "stats"], &config).await;
    assert!(
        stats.starts_with("agent default: 120000 entries (0 archived) from 300 files"),
        "{stats}"
    );
}

#[tokio::test]
async fn what_leaves_the_window_is_summarised_and_opens_the_next_requests() {
    let dir = tempfile::tempdir().expect("tempdir");
    let llm = ScriptedLlm::start().await.expect("llm");
    let extra = Extra {
        agent: "history_limit = 4",
        tables: "[memory]\nsummarize = true\n",
        ..Extra::default()
    };
    let daemon = util::start_configured(&llm, dir.path(), extra, Vec::new()).await;
    let mut client = WsClient::connect(daemon.addr()).await;
    // Seven turns: 14 messages, past the limit of 4 by more than half the overflow of 16.
    for i in 0..7 {
        llm.push(Reply::text(format!("ok {i}")));
    }
    llm.push(Reply::text("The person's sister is called Ada."));
    llm.push(Reply::text("Ada."));
    client.say("a", "my sister is called Ada").await;
    for i in 1..7 {
        client.say("a", &format!("small talk {i}")).await;
    }
    assert_eq!(
        client.say("a", "what is my sister called?").await.reply(),
        "Ada."
    );

    let requests = llm.requests();
    assert_eq!(requests.len(), 9);
    let summary_request = &requests[7];
    let asked = texts(summary_request).join("\n");
    assert!(asked.starts_with("You keep the running summary"), "{asked}");
    assert!(
        asked.contains("Person: my sister is called Ada\nAssistant: ok 0"),
        "{asked}"
    );
    assert!(
        !asked.contains("small talk 6"),
        "what stays in the window is not summarised: {asked}"
    );
    // The next request opens with the summary, and its window is back at the limit.
    let next = &requests[8];
    let system = texts(next)[0].clone();
    assert!(
        system.ends_with("## Earlier in this conversation\nA summary of what is no longer in the messages below:\nThe person's sister is called Ada."),
        "{system}"
    );
    let window = texts(next);
    assert!(
        window
            .iter()
            .all(|t| !t.contains("my sister is called Ada")),
        "{window:?}"
    );
    assert_eq!(
        window.len(),
        1 + 4 + 1,
        "system, the window of 4, the question: {window:?}"
    );
    // Kept with the session (and its cost counted): a restart reads it back.
    let file = std::fs::read_to_string(util::session_file(dir.path(), "a")).expect("file");
    assert!(
        file.contains("{\"summary\":\"The person's sister is called Ada.\"}"),
        "{file}"
    );
    // Every call counted, the summary's too: eight turns and one summary of 10 tokens in.
    let input: u64 = file
        .lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter_map(|record| record["usage"]["input_tokens"].as_u64())
        .sum();
    assert_eq!(input, 90, "{file}");
    daemon.shutdown().await;
    let daemon = util::start_configured(&llm, dir.path(), extra, Vec::new()).await;
    let mut client = WsClient::connect(daemon.addr()).await;
    llm.push(Reply::text("Still Ada."));
    client.say("a", "and now?").await;
    let requests = llm.requests();
    let system = texts(&requests[requests.len() - 1])[0].clone();
    assert!(
        system.contains("The person's sister is called Ada."),
        "{system}"
    );
    daemon.shutdown().await;
}
