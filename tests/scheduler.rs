//! Scheduled work through the daemon, as a person uses it: they ask for a reminder, the
//! model calls `cron`, and the reminder comes into their chat at its time — once, as a
//! scheduled task (the model is told it is not the person speaking), with its own `done`.
//! Time is real here (a second); the scheduler's timing is tested on paused time beside
//! its code.

use std::time::Duration;

use serde_json::json;
use switchboard_testkit::Reply;

use switchboard::reload::Reloaded;

use crate::util::{self, Extra, Harness};

#[tokio::test]
async fn a_reminder_asked_for_in_a_chat_comes_there_once_as_scheduled_work() {
    let mut h = Harness::start("").await;
    h.llm.push(Reply::tools([(
        "cron",
        json!({"action": "add", "in": "1s", "name": "tea", "message": "Tell them it is time for tea."}),
    )]));
    h.llm.push(Reply::text("I will remind you in a second."));
    h.llm.push(Reply::text("Time for tea!"));
    let turn = h.client.say("c", "remind me about tea in a second").await;
    assert_eq!(turn.reply(), "I will remind you in a second.");
    let added = util::conversation(&h.llm.requests()[1])
        .into_iter()
        .find(|m| m["role"] == "tool")
        .and_then(|m| m["content"].as_str().map(str::to_owned))
        .expect("the tool's result");
    assert!(
        added.starts_with("Added job j1 \"tea\": once at "),
        "{added}"
    );

    // The reminder: a turn of its own in the same chat, started by nobody there.
    let reminder = h.client.turn("c").await;
    assert_eq!(reminder.reply(), "Time for tea!");
    assert_eq!(reminder.of_type("done")[0]["end"], "answered");
    assert_eq!(
        reminder.of_type("started")[0]["scheduled"],
        true,
        "marked as scheduled"
    );
    let request = h.llm.requests().pop().expect("the scheduled run's request");
    let last = util::conversation(&request).pop().expect("a message");
    assert_eq!(last["role"], "user");
    let text = last["content"].as_str().unwrap_or_default();
    assert!(
        text.starts_with("[Scheduled task \"tea\" (job j1), run on its schedule")
            && text.ends_with("Tell them it is time for tea."),
        "{text}"
    );
    // Kept as scheduled in history, not as something the person said.
    let records = util::read_session_file(&util::session_file(h.dir.path(), "c"));
    assert!(
        records.iter().any(|r| r["role"] == "user"
            && r["origin"] == json!({"kind": "schedule", "job": "j1", "name": "tea"})),
        "{records:#?}"
    );
    // Once.
    assert!(
        h.client
            .try_next_frame(Duration::from_secs(2))
            .await
            .is_none(),
        "nothing more comes"
    );
    assert_eq!(h.llm.requests().len(), 3);
    h.daemon.shutdown().await;
}

#[tokio::test]
async fn the_person_lists_pauses_and_removes_their_chats_jobs_with_slash_jobs() {
    let mut h = Harness::start("").await;
    h.llm.push(Reply::tools([(
        "cron",
        json!({"action": "add", "every": "1 day", "name": "plants", "message": "Water the plants."}),
    )]));
    h.llm.push(Reply::text("Every day, then."));
    assert_eq!(
        h.client
            .say("c", "remind me daily to water the plants")
            .await
            .reply(),
        "Every day, then."
    );

    let listed = h.client.say("c", "/jobs").await.reply().to_owned();
    assert!(
        listed.starts_with("job j1 \"plants\": every 24h; next ")
            && (listed.contains("(in 24h)") || listed.contains("(in 23h 59m")),
        "{listed}"
    );
    // Another chat sees none of it, and cannot touch it.
    assert_eq!(
        h.client.say("d", "/jobs").await.reply(),
        "This chat has no scheduled jobs."
    );
    assert_eq!(
        h.client.say("d", "/jobs rm j1").await.reply(),
        "there is no job j1 in this chat"
    );
    let paused = h.client.say("c", "/jobs pause j1").await.reply().to_owned();
    assert!(
        paused.starts_with("Paused job j1 \"plants\"") && paused.ends_with("; paused"),
        "{paused}"
    );
    let status = h.client.say("c", "/status").await.reply().to_owned();
    assert!(
        status.ends_with("\n1 scheduled job, none due (/jobs)."),
        "{status}"
    );
    assert!(
        h.client
            .say("c", "/jobs frobnicate")
            .await
            .reply()
            .starts_with("Usage: /jobs")
    );
    assert_eq!(
        h.client.say("c", "/jobs rm j1").await.reply(),
        "Removed job j1 \"plants\"."
    );
    assert_eq!(
        h.client.say("c", "/jobs").await.reply(),
        "This chat has no scheduled jobs."
    );
    // None of these reached the model.
    assert_eq!(h.llm.requests().len(), 2);
    h.daemon.shutdown().await;
}

#[tokio::test]
async fn through_the_tool_a_chat_neither_sees_nor_removes_another_chats_jobs_and_reads_the_limits()
{
    let mut h = Harness::start("").await;
    h.llm.push(Reply::tools([(
        "cron",
        json!({"action": "add", "every": "1 day", "name": "plants", "message": "Water the plants."}),
    )]));
    h.llm.push(Reply::text("Every day, then."));
    h.client
        .say("c", "remind me daily to water the plants")
        .await;

    // Another chat's model tries to list, remove and add too often.
    h.llm.push(Reply::tools([
        ("cron", json!({"action": "list"})),
        ("cron", json!({"action": "remove", "id": "j1"})),
        (
            "cron",
            json!({"action": "add", "every": "10s", "message": "Spam."}),
        ),
    ]));
    h.llm.push(Reply::text("I cannot."));
    assert_eq!(
        h.client.say("d", "drop their jobs").await.reply(),
        "I cannot."
    );
    let results = util::tool_results(h.llm.requests().last().expect("request"));
    assert_eq!(results.len(), 3, "{results:?}");
    assert_eq!(results[0], "This chat has no scheduled jobs.");
    assert!(
        results[1].contains("there is no job j1 in this chat"),
        "{results:?}"
    );
    assert!(
        results[2].contains("the shortest interval allowed is 60 s (scheduler.min_interval_secs)"),
        "{results:?}"
    );
    // The job is still there, in its own chat.
    assert!(
        h.client
            .say("c", "/jobs")
            .await
            .reply()
            .starts_with("job j1 \"plants\"")
    );
    h.daemon.shutdown().await;
}

/// `switchboard cron …` as the operator, while the daemon runs.
pub(crate) async fn cron(config: &std::path::Path, args: &[&str]) -> (bool, String) {
    let output = tokio::process::Command::new(util::BINARY)
        .arg("cron")
        .args(args)
        .arg("--config")
        .arg(config)
        .output()
        .await
        .expect("switchboard cron runs");
    let text = String::from_utf8_lossy(if output.status.success() {
        &output.stdout
    } else {
        &output.stderr
    })
    .into_owned();
    (output.status.success(), text)
}

#[tokio::test]
async fn the_operator_adds_runs_and_removes_a_job_and_reads_its_runs_while_the_daemon_runs() {
    let mut h = Harness::start("").await;
    let config = h.dir.path().join("config.toml");
    std::fs::write(
        &config,
        util::config_text(&h.llm.base_url(), h.dir.path(), ""),
    )
    .expect("config");
    h.client
        .send_json(json!({"type": "subscribe", "chat_id": "c"}))
        .await;

    let (ok, added) = cron(
        &config,
        &[
            "add",
            "--chat",
            "websocket:c",
            "--every",
            "1h",
            "--name",
            "digest",
            "--message",
            "Summarise the day.",
        ],
    )
    .await;
    assert!(ok, "{added}");
    assert!(
        added.starts_with("Added job j1 \"digest\": every 1h; next "),
        "{added}"
    );
    let (_, listed) = cron(&config, &["list"]).await;
    assert!(
        listed.contains("job j1 \"digest\": every 1h")
            && listed.contains("in websocket:c (chat session), made by operator"),
        "{listed}"
    );
    // When, as a person reads it (`Fri 27 Nov 14:30 UTC`), not ISO 8601.
    let made = listed
        .split("made by operator at ")
        .nth(1)
        .unwrap_or_default();
    assert!(
        ["Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"]
            .iter()
            .any(|day| made.starts_with(day)),
        "{listed}"
    );
    let (ok, wrong) = cron(
        &config,
        &["add", "--chat", "irc:x", "--in", "1m", "--message", "hi"],
    )
    .await;
    assert!(
        !ok && wrong.contains("the config enables no channel `irc` (enabled: websocket)"),
        "{wrong}"
    );

    // Run now: the running daemon starts it, in the chat, as scheduled work.
    h.llm.push(Reply::text("Here is your digest."));
    let (ok, running) = cron(&config, &["run", "j1"]).await;
    assert!(
        ok && running.starts_with("Running job j1 \"digest\" now."),
        "{running}"
    );
    let digest = h.client.turn("c").await;
    assert_eq!(digest.reply(), "Here is your digest.");

    // Its runs: recorded answered (the record follows the reply's `done`).
    let deadline = std::time::Instant::now() + util::PATIENCE;
    let runs = loop {
        let (ok, runs) = cron(&config, &["runs", "j1"]).await;
        assert!(ok, "{runs}");
        if runs.contains("answered") || std::time::Instant::now() > deadline {
            break runs;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let lines: Vec<&str> = runs.lines().collect();
    assert_eq!(lines.len(), 2, "{runs}");
    assert!(
        lines[0].starts_with("due") && lines[1].ends_with("  answered"),
        "{runs}"
    );

    let (ok, removed) = cron(&config, &["rm", "j1"]).await;
    assert!(
        ok && removed.trim() == "Removed job j1 \"digest\".",
        "{removed}"
    );
    let (_, listed) = cron(&config, &["list"]).await;
    assert_eq!(listed.trim(), "There are no scheduled jobs.");
    assert_eq!(h.llm.requests().len(), 1, "it ran once");
    h.daemon.shutdown().await;
}

#[tokio::test]
async fn stop_in_the_chat_ends_a_scheduled_turn_and_it_is_not_tried_again() {
    let mut h = Harness::start("").await;
    let config = h.dir.path().join("config.toml");
    std::fs::write(
        &config,
        util::config_text(&h.llm.base_url(), h.dir.path(), ""),
    )
    .expect("config");
    h.client
        .send_json(json!({"type": "subscribe", "chat_id": "c"}))
        .await;
    let (ok, added) = cron(
        &config,
        &[
            "add",
            "--chat",
            "websocket:c",
            "--every",
            "1h",
            "--name",
            "build",
            "--message",
            "Check the build.",
        ],
    )
    .await;
    assert!(ok, "{added}");
    h.llm.push(Reply::tool("sleep", json!({"ms": 60_000})));
    let (ok, running) = cron(&config, &["run", "j1"]).await;
    assert!(ok, "{running}");
    loop {
        let frame = h.client.next_frame().await;
        if frame["type"] == "tool" && frame["name"] == "sleep" && frame["status"] == "started" {
            break;
        }
    }
    // The person stops it, as they would a turn of their own.
    let (turn, _) = h.client.stop("c").await;
    assert_eq!(turn.reply(), "Stopped.");
    assert_eq!(turn.of_type("done")[0]["end"], "cancelled");

    let deadline = std::time::Instant::now() + util::PATIENCE;
    let runs = loop {
        let (ok, runs) = cron(&config, &["runs", "j1"]).await;
        assert!(ok, "{runs}");
        if runs.contains("stopped") || std::time::Instant::now() > deadline {
            break runs;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(
        runs.lines()
            .nth(1)
            .is_some_and(|l| l.ends_with("  stopped")),
        "{runs}"
    );
    // Stopped is an end, not a failure to try again.
    let (_, listed) = cron(&config, &["list"]).await;
    assert!(
        listed.contains("last: stopped") && !listed.contains("trying again"),
        "{listed}"
    );
    assert_eq!(h.llm.requests().len(), 1);
    h.daemon.shutdown().await;
}

#[tokio::test]
async fn jobs_the_config_declares_follow_it_at_start_and_on_reload() {
    let job = |name: &str, every: &str| {
        format!(
            "[[scheduler.jobs]]\nname = \"{name}\"\nchat = \"websocket:c\"\n\
             message = \"Check the build.\"\nevery = \"{every}\"\n"
        )
    };
    let first = job("build", "1h");
    let mut h = Harness::with_config(Extra {
        tables: &first,
        ..Extra::default()
    })
    .await;
    let path = h.dir.path().join("config.toml");
    let (base_url, dir) = (h.llm.base_url(), h.dir.path().to_owned());
    let write = |tables: &str| {
        let extra = Extra {
            tables,
            ..Extra::default()
        };
        std::fs::write(&path, util::config_text_with(&base_url, &dir, extra)).expect("config");
    };
    let applied = Reloaded::Applied {
        need_restart: Vec::new(),
    };

    let listed = h.client.say("c", "/jobs").await.reply().to_owned();
    assert!(
        listed.starts_with("job build \"build\": every 1h; next "),
        "{listed}"
    );
    let refused = h.client.say("c", "/jobs rm build").await.reply().to_owned();
    assert!(refused.contains("declared in the config"), "{refused}");
    let paused = h
        .client
        .say("c", "/jobs pause build")
        .await
        .reply()
        .to_owned();
    assert!(paused.ends_with("; paused"), "{paused}");

    // Another job added; `build` unchanged keeps its state (paused).
    write(&format!("{first}\n{}", job("nightly", "1 day")));
    assert_eq!(h.daemon.reload(&path).await, applied);
    let listed = h.client.say("c", "/jobs").await.reply().to_owned();
    let lines: Vec<&str> = listed.lines().collect();
    assert_eq!(lines.len(), 2, "{listed}");
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("job build ") && l.ends_with("; paused")),
        "{listed}"
    );
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("job nightly \"nightly\": every 24h; next ")),
        "{listed}"
    );

    // `build` changed: it starts afresh (running); `nightly` is gone.
    write(&job("build", "2h"));
    assert_eq!(h.daemon.reload(&path).await, applied);
    let listed = h.client.say("c", "/jobs").await.reply().to_owned();
    assert!(
        listed.starts_with("job build \"build\": every 2h; next ") && !listed.contains('\n'),
        "{listed}"
    );

    write("");
    assert_eq!(h.daemon.reload(&path).await, applied);
    assert_eq!(
        h.client.say("c", "/jobs").await.reply(),
        "This chat has no scheduled jobs."
    );
    assert!(h.llm.requests().is_empty(), "none of it reached the model");
    h.daemon.shutdown().await;
}
