//! What the models cost, as a person and an operator see it: a chat told once at 80 % of its
//! daily cap and refused at 100 % without the model being called, `/usage`, a scheduled run
//! skipped while capped, `switchboard usage`, `/metrics` — and a kill -9 that loses none of
//! the day's total. (The next day is tested on paused time beside `Spending`.)

use std::time::Duration;

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
    }
}

/// The `notice` frames of a turn.
fn notices(turn: &util::TurnFrames) -> Vec<String> {
    turn.of_type("notice")
        .iter()
        .filter_map(|frame| frame["text"].as_str().map(str::to_owned))
        .collect()
}

/// Runs `switchboard ARGS --config CONFIG` and returns what it printed.
async fn cli(config: &std::path::Path, args: &[&str]) -> String {
    let output = tokio::process::Command::new(util::BINARY)
        .args(args)
        .arg("--config")
        .arg(config)
        .output()
        .await
        .expect("runs");
    assert!(output.status.success(), "{output:?}");
    String::from_utf8_lossy(&output.stdout).into_owned()
}

#[tokio::test]
async fn a_chat_is_warned_at_80_percent_refused_at_100_and_a_kill_keeps_the_days_total() {
    let dir = tempfile::tempdir().expect("tempdir");
    let llm = ScriptedLlm::start().await.expect("llm");
    let text = util::config_text_with(
        &llm.base_url(),
        dir.path(),
        util::Extra {
            tables: PRICED,
            ..util::Extra::default()
        },
    );
    let config = dir.path().join("config.toml");
    std::fs::write(&config, text).expect("config");
    let (daemon, addr) = util::spawn_daemon(&config).await;
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
    cli(
        &config,
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
    )
    .await;
    let deadline = tokio::time::Instant::now() + util::PATIENCE;
    let runs = loop {
        let runs = cli(&config, &["cron", "runs", "j1"]).await;
        if runs.contains("skipped") || tokio::time::Instant::now() > deadline {
            break runs;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
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

    let table = cli(&config, &["usage", "--days", "2"]).await;
    let line = table
        .lines()
        .find(|line| line.contains("websocket_c"))
        .unwrap_or_else(|| panic!("{table}"));
    assert!(
        line.contains("default") && line.contains("1050") && line.ends_with("1.0500"),
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
