//! Scheduled work nobody watches as it runs: a job in a session of its own posts to its
//! chat only what is worth saying, and the heartbeat speaks once when it has something to
//! say and is quiet otherwise (what a person schedules in a chat: `scheduler.rs`).

use std::time::Duration;

use serde_json::json;
use switchboard_testkit::Reply;

use crate::scheduler::cron;
use crate::util::{self, Extra, Harness};

#[tokio::test]
async fn a_job_in_its_own_session_posts_only_what_is_worth_saying_to_its_chat() {
    let tables = "[[scheduler.jobs]]\nname = \"build\"\nchat = \"websocket:c\"\n\
                  message = \"Check the build; say only if it broke.\"\nevery = \"1h\"\n\
                  session = \"isolated\"\n";
    let mut h = Harness::with_config(Extra {
        tables,
        ..Extra::default()
    })
    .await;
    let config = h.dir.path().join("config.toml");
    let text = util::config_text_with(
        &h.llm.base_url(),
        h.dir.path(),
        Extra {
            tables,
            ..Extra::default()
        },
    );
    std::fs::write(&config, text).expect("config");
    h.client
        .send_json(json!({"type": "subscribe", "chat_id": "c"}))
        .await;
    let runs = |outcome: &'static str| {
        let config = config.clone();
        async move {
            let deadline = std::time::Instant::now() + util::PATIENCE;
            loop {
                let (_, runs) = cron(&config, &["runs", "build"]).await;
                if runs.lines().nth(1).is_some_and(|l| l.ends_with(outcome))
                    || std::time::Instant::now() > deadline
                {
                    return runs;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    };

    // All is well: nothing is posted, and the run is recorded quiet.
    h.llm.push(Reply::text("HEARTBEAT_OK"));
    assert!(cron(&config, &["run", "build"]).await.0);
    let quiet = runs("quiet").await;
    assert!(
        quiet.lines().nth(1).is_some_and(|l| l.ends_with("  quiet")),
        "{quiet}"
    );
    assert!(
        h.client
            .try_next_frame(Duration::from_millis(300))
            .await
            .is_none(),
        "a quiet run posts nothing"
    );

    // It broke: the answer, alone, is posted to the chat (no turn there).
    h.llm.push(Reply::text("The build broke at 14:02."));
    assert!(cron(&config, &["run", "build"]).await.0);
    let post = h.client.wait_for("post").await;
    assert_eq!(post["chat_id"], "c");
    assert_eq!(post["content"], "The build broke at 14:02.");
    let answered = runs("answered").await;
    assert!(
        answered
            .lines()
            .nth(1)
            .is_some_and(|l| l.ends_with("  answered")),
        "{answered}"
    );
    // Counted: one quiet, one answered (at least: the recorder is the test process's),
    // and how late each started. A run is counted once what follows it is noted on its job,
    // just after its outcome is recorded: wait for the count.
    let answered_series = r#"switchboard_scheduled_runs_total{outcome="answered"}"#;
    let deadline = std::time::Instant::now() + util::PATIENCE;
    let metrics = loop {
        let metrics = scheduled_metrics(&h).await;
        if metrics.get(answered_series).is_some_and(|v| *v >= 1.0)
            || std::time::Instant::now() > deadline
        {
            break metrics;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    for series in [
        r#"switchboard_scheduled_runs_total{outcome="quiet"}"#,
        r#"switchboard_scheduled_runs_total{outcome="answered"}"#,
    ] {
        assert!(
            metrics.get(series).is_some_and(|v| *v >= 1.0),
            "{series}: {metrics:?}"
        );
    }
    assert!(
        metrics
            .get("switchboard_scheduled_run_lateness_seconds_count")
            .is_some_and(|v| *v >= 2.0),
        "{metrics:?}"
    );
    // Its own session holds both runs; the chat's holds none of it.
    let own = util::read_session_file(&h.dir.path().join("state/sessions/cron_build.jsonl"));
    assert_eq!(
        own.iter().filter(|r| r["role"] == "user").count(),
        2,
        "{own:#?}"
    );
    assert!(!util::session_file(h.dir.path(), "c").exists());
    // The model was told what the run is, and that a quiet answer posts nothing is the
    // job's own wording.
    let request = h.llm.requests().pop().expect("request");
    let last = util::conversation(&request).pop().expect("message");
    assert!(
        last["content"]
            .as_str()
            .is_some_and(|t| t.starts_with("[Scheduled task \"build\" (job build)")),
        "{last}"
    );
    h.daemon.shutdown().await;
}

#[tokio::test]
async fn the_heartbeat_speaks_once_when_it_has_something_to_say_and_is_quiet_otherwise() {
    let tables = "[scheduler]\nmin_interval_secs = 1\n\n\
                  [heartbeat]\nevery = \"1s\"\nchat = \"websocket:c\"\n";
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::create_dir_all(dir.path().join("workspace")).expect("workspace");
    std::fs::write(
        dir.path().join("workspace/HEARTBEAT.md"),
        "Look at the disk; say only if it is nearly full.",
    )
    .expect("HEARTBEAT.md");
    let llm = switchboard_testkit::ScriptedLlm::start()
        .await
        .expect("llm");
    llm.push(Reply::text("HEARTBEAT_OK"));
    llm.push(Reply::text("The disk is 95% full."));
    llm.respond_with(|_| Reply::text("HEARTBEAT_OK"));
    let extra = Extra {
        tables,
        ..Extra::default()
    };
    let daemon = util::start_configured(&llm, dir.path(), extra, Vec::new()).await;
    let mut client = util::WsClient::connect(daemon.addr()).await;
    client
        .send_json(json!({"type": "subscribe", "chat_id": "c"}))
        .await;

    let post = client.wait_for("post").await;
    assert_eq!(post["content"], "The disk is 95% full.");
    // More beats, all quiet: nothing more is posted.
    let deadline = std::time::Instant::now() + util::PATIENCE;
    while llm.requests().len() < 4 {
        assert!(
            std::time::Instant::now() < deadline,
            "the heartbeat goes on beating"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let mut more = Vec::new();
    while let Some(frame) = client.try_next_frame(Duration::from_millis(500)).await {
        more.push(frame);
    }
    assert!(more.iter().all(|f| f["type"] != "post"), "{more:#?}");
    // Each beat was told what it is and given the instructions as they are.
    let first = util::conversation(&llm.requests()[0])
        .pop()
        .expect("message");
    let text = first["content"].as_str().unwrap_or_default();
    assert!(
        text.starts_with("[Heartbeat: a regular check")
            && text.contains("answer exactly HEARTBEAT_OK")
            && text.ends_with("Look at the disk; say only if it is nearly full."),
        "{text}"
    );
    daemon.shutdown().await;
}

/// The scheduler's samples on `/metrics`, by series.
async fn scheduled_metrics(h: &Harness) -> std::collections::BTreeMap<String, f64> {
    let response = crate::chat::http_get(h.daemon.addr(), "/metrics").await;
    let body = response
        .split_once("\r\n\r\n")
        .map(|(_, body)| body)
        .unwrap_or_default();
    body.lines()
        .filter(|line| line.starts_with("switchboard_scheduled_"))
        .filter_map(|line| {
            let (series, value) = line.rsplit_once(' ')?;
            Some((series.to_owned(), value.parse().ok()?))
        })
        .collect()
}
