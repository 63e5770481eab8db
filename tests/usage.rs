//! What the models cost, as a person and an operator see it: a chat told once at 80 % of its
//! daily cap and refused at 100 % without the model being called, `/usage`, a scheduled run
//! skipped while capped, `switchboard usage`, `/metrics` — and a kill -9 that loses none of
//! the day's total; what a chat's sub-agents, its isolated scheduled runs and its answers'
//! judge spend counting against that chat's cap. (The next day is tested on paused time
//! beside `Spending`.)

use std::time::Duration;

use serde_json::json;
use switchboard_testkit::{Reply, ScriptedLlm, TokenUsage};

use crate::util::{self, WsClient};

/// $1 per thousand input tokens, nothing for output: a call of N input tokens costs N/1000 $.
const PRICED: &str = r#"
[llm.prices.scripted]
input_per_mtok = 1000
output_per_mtok = 0

[limits]
daily_usd_per_chat = 1.0
timezone = "UTC"
"#;

fn tokens(input: u64) -> TokenUsage {
    TokenUsage {
        input,
        output: 5,
        cached: 0,
        thinking: 0,
    }
}

/// The `notice` frames of a turn.
fn notices(turn: &util::TurnFrames) -> Vec<String> {
    turn.of_type("notice")
        .iter()
        .filter_map(|frame| frame["text"].as_str().map(str::to_owned))
        .collect()
}

/// A daemon (the binary) in `dir` against `llm`, with `tables` in its config (the prices and
/// caps); its config's path, the process and its address.
async fn priced_daemon(
    llm: &ScriptedLlm,
    dir: &std::path::Path,
    tables: &str,
) -> (
    std::path::PathBuf,
    tokio::process::Child,
    std::net::SocketAddr,
) {
    let text = util::config_text_with(
        &llm.base_url(),
        dir,
        util::Extra {
            tables,
            ..util::Extra::default()
        },
    );
    let config = dir.join("config.toml");
    std::fs::write(&config, text).expect("config");
    let (daemon, addr) = util::spawn_daemon(&config).await;
    (config, daemon, addr)
}

/// `switchboard cron runs JOB` once it says `word` (or after the test's patience).
async fn runs_once_they_say(config: &std::path::Path, job: &str, word: &str) -> String {
    let deadline = tokio::time::Instant::now() + util::PATIENCE;
    loop {
        let runs = util::cli(&["cron", "runs", job], config).await;
        if runs.contains(word) || tokio::time::Instant::now() > deadline {
            return runs;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn a_chat_is_warned_at_80_percent_refused_at_100_and_a_kill_keeps_the_days_total() {
    let dir = tempfile::tempdir().expect("tempdir");
    let llm = ScriptedLlm::start().await.expect("llm");
    let (config, daemon, addr) = priced_daemon(&llm, dir.path(), PRICED).await;
    let mut client = WsClient::connect(addr).await;

    llm.set_usage(tokens(500));
    llm.push(Reply::text("one"));
    let first = client.say("c", "hello").await;
    assert!(notices(&first).is_empty(), "{:?}", first.frames);
    llm.set_usage(tokens(350));
    llm.push(Reply::text("two"));
    let second = client.say("c", "again").await;
    let told = notices(&second);
    assert_eq!(told.len(), 1, "{told:?}");
    assert!(
        told[0].starts_with("This chat has spent $0.85 of its $1.00 a day"),
        "{told:?}"
    );
    llm.set_usage(tokens(200));
    llm.push(Reply::text("three"));
    let third = client.say("c", "once more").await;
    assert!(notices(&third).is_empty(), "told once: {:?}", third.frames);

    // Over the cap: refused, the model not called; another chat is not.
    let calls = llm.requests().len();
    let refused = client.say("c", "and now?").await;
    assert!(
        refused
            .reply()
            .starts_with("This chat has spent $1.05 of its $1.00 a day"),
        "{}",
        refused.reply()
    );
    assert!(refused.reply().contains("refused until midnight (UTC)"));
    assert_eq!(refused.of_type("done")[0]["end"], "cost_limit");
    assert_eq!(llm.requests().len(), calls, "the model was not called");
    llm.push(Reply::text("other chat"));
    assert_eq!(client.say("d", "hi").await.reply(), "other chat");
    let usage = client.say("c", "/usage").await;
    assert_eq!(
        usage.reply(),
        "Today: 1050 tokens in, 15 out, $1.0500. This month: 1050 tokens in, 15 out, $1.0500. \
         Limits: $1.00 a day for this chat (days begin at midnight, UTC)."
    );

    // A run scheduled for the capped chat is skipped, and recorded as such.
    util::cli(
        &[
            "cron",
            "add",
            "--chat",
            "websocket:c",
            "--in",
            "1s",
            "-m",
            "report",
        ],
        &config,
    )
    .await;
    let runs = runs_once_they_say(&config, "j1", "skipped").await;
    assert!(
        runs.contains("skipped") && runs.contains("limits.daily_usd_per_chat"),
        "{runs}"
    );
    assert_eq!(
        llm.requests().len(),
        calls + 1,
        "only chat d's turn called the model"
    );

    // kill -9: the day's total is on disk.
    util::signal(&daemon, "-KILL");
    let _ = tokio::time::timeout(util::PATIENCE, async {
        let mut daemon = daemon;
        daemon.wait().await
    })
    .await;
    let (daemon, addr) = util::spawn_daemon(&config).await;
    let mut client = WsClient::connect(addr).await;
    let refused = client.say("c", "after the restart").await;
    assert_eq!(refused.of_type("done")[0]["end"], "cost_limit");
    assert!(
        refused.reply().contains("$1.05 of its $1.00"),
        "{}",
        refused.reply()
    );

    let table = util::cli(&["usage", "--days", "2"], &config).await;
    let line = table
        .lines()
        .find(|line| line.contains("websocket_c"))
        .unwrap_or_else(|| panic!("{table}"));
    assert!(
        line.contains("default") && line.contains("1050") && line.contains(" 1.0500 "),
        "{table}"
    );
    assert!(table.contains("websocket_d"), "{table}");

    let metrics = crate::chat::http_get(addr, "/metrics").await;
    assert!(
        metrics.contains("switchboard_usage_usd{agent=\"default\",period=\"today\"} 1.25"),
        "{metrics}"
    );
    assert!(metrics.contains("switchboard_usage_limit_usd{scope=\"daily_per_chat\"} 1"));
    util::signal(&daemon, "-TERM");
}

#[tokio::test]
async fn what_a_chats_sub_agents_and_isolated_runs_spend_counts_against_its_cap() {
    let dir = tempfile::tempdir().expect("tempdir");
    let llm = ScriptedLlm::start().await.expect("llm");
    // Every call costs $0.30. A person's message makes the agent hand a task to a sub-agent
    // and wait for it; a scheduled run answers at once.
    llm.set_usage(tokens(300));
    llm.respond_with(|request| {
        let messages = util::conversation(request);
        let last = messages.last().cloned().unwrap_or_default();
        let text = last["content"].as_str().unwrap_or_default().to_owned();
        if last["role"] == "tool" {
            Reply::text("the sub-agent found it")
        } else if text.starts_with("[A task from") {
            Reply::text("found")
        } else if text.starts_with("[Scheduled task") {
            Reply::text("the daily report")
        } else {
            Reply::tool("spawn", json!({"task": "look it up", "wait": true}))
        }
    });
    let (config, daemon, addr) = priced_daemon(&llm, dir.path(), PRICED).await;
    let mut client = WsClient::connect(addr).await;

    // $0.30 the parent's call, $0.30 its sub-agent's, $0.30 the parent's answer: $0.90 of
    // the chat's $1.00, and it is told so.
    let first = client.say("c", "look something up").await;
    assert_eq!(first.reply(), "the sub-agent found it");
    let told = notices(&first);
    assert!(
        told.iter()
            .any(|text| text.starts_with("This chat has spent $0.90 of its $1.00 a day")),
        "{told:?}"
    );
    let usage = client.say("c", "/usage").await;
    assert!(
        usage.reply().starts_with(
            "Today: 900 tokens in, 15 out, $0.9000 (of which its sub-agents and scheduled \
             runs: 300 tokens in, 5 out, $0.3000)."
        ),
        "{}",
        usage.reply()
    );

    // An isolated run of the chat's job: $0.30 more, against the chat's cap.
    util::cli(
        &[
            "cron",
            "add",
            "--chat",
            "websocket:c",
            "--in",
            "1s",
            "--session",
            "isolated",
            "-m",
            "report",
        ],
        &config,
    )
    .await;
    let runs = runs_once_they_say(&config, "j1", "answered").await;
    assert!(runs.contains("answered"), "{runs}");

    let calls = llm.requests().len();
    let refused = client.say("c", "and another thing").await;
    assert!(
        refused
            .reply()
            .starts_with("This chat has spent $1.20 of its $1.00 a day"),
        "{}",
        refused.reply()
    );
    assert_eq!(llm.requests().len(), calls, "the model was not called");

    let table = util::cli(&["usage", "--days", "1"], &config).await;
    let line = table
        .lines()
        .find(|line| line.contains("websocket_c"))
        .unwrap_or_else(|| panic!("{table}"));
    assert!(
        line.contains(" 1.2000 ") && line.ends_with("0.6000"),
        "the chat's line holds its sub-agent's and its run's: {table}"
    );
    assert!(
        !table.contains("spawn_") && !table.contains("cron_"),
        "no line of their own: {table}"
    );
    util::signal(&daemon, "-TERM");
}

#[tokio::test]
async fn the_judges_calls_count_against_the_chat_they_check_answers_for() {
    let dir = tempfile::tempdir().expect("tempdir");
    let llm = ScriptedLlm::start().await.expect("llm");
    let judge = ScriptedLlm::start().await.expect("judge");
    llm.set_usage(tokens(300));
    judge.set_usage(tokens(300));
    judge.respond_with(|_| Reply::text("PASS"));
    let tables = format!(
        "{PRICED}\n[llm.prices.judge]\ninput_per_mtok = 1000\noutput_per_mtok = 0\n\n\
         [agent.verify]\nenabled = true\n[agent.verify.judge]\nprovider = \"openai\"\n\
         base_url = \"{}\"\nmodel = \"judge\"\n",
        judge.base_url()
    );
    let (_config, daemon, addr) = priced_daemon(&llm, dir.path(), &tables).await;
    let mut client = WsClient::connect(addr).await;
    llm.push(Reply::text("checked"));
    assert_eq!(client.say("c", "hello").await.reply(), "checked");
    assert_eq!(judge.requests().len(), 1, "the answer was judged");
    let usage = client.say("c", "/usage").await;
    assert!(
        usage
            .reply()
            .starts_with("Today: 600 tokens in, 10 out, $0.6000."),
        "the model's $0.30 and the judge's: {}",
        usage.reply()
    );
    util::signal(&daemon, "-TERM");
}

/// `switchboard usage | head -1`: a reader that stops early (the pipe closed before anything
/// was written) is no error — no "Broken pipe" message, a successful exit.
#[test]
fn a_reader_that_stops_reading_is_no_error() {
    let dir = tempfile::tempdir().expect("tempdir");
    let text = util::config_text_with("http://127.0.0.1:9/v1", dir.path(), util::Extra::default());
    let config = dir.path().join("config.toml");
    std::fs::write(&config, text).expect("config");
    let (reader, writer) = std::io::pipe().expect("pipe");
    drop(reader);
    let child = std::process::Command::new(util::BINARY)
        .args(["usage", "--config"])
        .arg(&config)
        .stdout(writer)
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("runs");
    let output = child.wait_with_output().expect("ends");
    assert!(
        output.status.success() && output.stderr.is_empty(),
        "{:?}: {}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
}
