//! Scheduled work through the daemon, as a person uses it: they ask for a reminder, the
//! model calls `cron`, and the reminder comes into their chat at its time — once, as a
//! scheduled task (the model is told it is not the person speaking), with its own `done`.
//! Time is real here (a second); the scheduler's timing is tested on paused time beside
//! its code.

use std::time::Duration;

use serde_json::json;
use switchboard_testkit::Reply;

use crate::util::{self, Harness};

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
