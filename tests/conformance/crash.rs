//! The conformance runs that kill the daemon: the binary, started and killed with -9 at a
//! chosen moment, then started again on the same state.

use std::path::{Path, PathBuf};
use std::time::Duration;

use switchboard_testkit::{Reply, ScriptedLlm};
use tokio::time::Instant;

use super::{ADA, Platform, Written, replies};
use crate::util::{self, Extra, PATIENCE};

/// Writes the config of a daemon in `dir` with the platform's channel against `fake`.
fn write_config<P: Platform>(dir: &tempfile::TempDir, llm: &ScriptedLlm, fake: &P) -> PathBuf {
    let config = dir.path().join("config.toml");
    let tables = fake.table(0.3, "stream = false");
    let extra = Extra {
        tables: &tables,
        ..Extra::default()
    };
    std::fs::write(
        &config,
        util::config_text_with(&llm.base_url(), dir.path(), extra),
    )
    .expect("write");
    config
}

/// Starts the binary with `config` and waits until its channel listens on `fake`.
async fn spawn_listening<P: Platform>(config: &Path, fake: &P) -> tokio::process::Child {
    let before = fake.sessions();
    let (child, addr) = util::spawn_daemon(config).await;
    fake.attach(addr);
    fake.wait("the channel listening", |f| f.sessions() > before)
        .await;
    child
}

pub(crate) async fn nothing_is_answered_twice_across_a_kill_9<P: Platform>() {
    let dir = tempfile::tempdir().expect("tempdir");
    let llm = ScriptedLlm::start().await.expect("llm");
    let fake = P::start().await;
    let config = write_config(&dir, &llm, &fake);
    let answered = |f: &P, said: &Written| replies(f, said).len();

    let mut child = spawn_listening(&config, &fake).await;
    let first = fake.dm(ADA, "before the kill");
    fake.wait("the first answer", |f| answered(f, &first) > 0)
        .await;
    // Killed the moment the answer is journaled delivered, whatever the platform was told.
    // (Between the platform taking an answer and the journal recording it, a kill makes the
    // answer go out again: no platform takes an idempotency key for a message.)
    journaled_delivered(&fake, dir.path(), &first).await;
    child.start_kill().expect("kill -9");
    child.wait().await.expect("ended");

    let mut child = spawn_listening(&config, &fake).await;
    let second = fake.dm(ADA, "after the restart");
    fake.wait("the second answer", |f| answered(f, &second) > 0)
        .await;
    // The chat's messages are taken in order: had the first come again and been answered,
    // its answer would be out before the second's.
    assert_eq!(
        answered(&fake, &first),
        1,
        "the first message answered once"
    );
    assert_eq!(answered(&fake, &second), 1);
    assert_eq!(
        llm.requests().len(),
        2,
        "the model was asked once per message"
    );
    child.start_kill().expect("kill -9");
    child.wait().await.expect("ended");
}

pub(crate) async fn messages_in_flight_at_a_kill_9_are_answered_once_after_the_restart<
    P: Platform,
>() {
    let dir = tempfile::tempdir().expect("tempdir");
    let llm = ScriptedLlm::start().await.expect("llm");
    // The first answer takes long enough to be cut off; after that the model echoes.
    llm.push(Reply::text("never sent").delayed(Duration::from_secs(60)));
    let fake = P::start().await;
    let config = write_config(&dir, &llm, &fake);

    let mut child = spawn_listening(&config, &fake).await;
    let first = fake.dm(ADA, "one");
    llm.wait_for_requests(1, PATIENCE).await;
    let second = fake.dm(ADA, "two");
    let state = dir.path().join("state");
    let deadline = Instant::now() + PATIENCE;
    while !fake.taken_in(&state, &second) {
        assert!(
            Instant::now() < deadline,
            "the second message was never taken in"
        );
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    // Killed while the first is being answered and the second waits behind it.
    child.start_kill().expect("kill -9");
    child.wait().await.expect("ended");
    assert!(replies(&fake, &first).is_empty());

    let mut child = spawn_listening(&config, &fake).await;
    fake.wait("both answered after the restart", |f| {
        !replies(f, &first).is_empty() && !replies(f, &second).is_empty()
    })
    .await;
    let answers: Vec<Option<String>> = fake
        .posted(&first.chat)
        .into_iter()
        .map(|post| post.reply_to)
        .collect();
    assert_eq!(
        answers,
        [Some(first.id.clone()), Some(second.id.clone())],
        "each answered once, in order"
    );
    assert_eq!(replies(&fake, &first)[0].text, "echo: one");
    child.start_kill().expect("kill -9");
    child.wait().await.expect("ended");
}

/// Waits until `written` is journaled delivered in its session (the journal is a file: it
/// is read again every millisecond).
async fn journaled_delivered<P: Platform>(fake: &P, dir: &std::path::Path, written: &Written) {
    let key = switchboard_core::SessionKey::from(format!("{}_{}", P::NAME, written.chat));
    let path = switchboard_sessions::transcript::file_of(&dir.join("state/sessions"), &key);
    let deadline = Instant::now() + PATIENCE;
    loop {
        let text = std::fs::read_to_string(&path).unwrap_or_default();
        let id = fake.platform_id(written);
        let delivered = text.lines().any(|line| {
            serde_json::from_str::<serde_json::Value>(line).is_ok_and(|record| {
                record["inbound"]["state"] == "delivered"
                    && id
                        .as_deref()
                        .is_some_and(|id| record["inbound"]["id"] == id)
            })
        });
        if delivered {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "message {} was never journaled delivered in {}: {text}",
            written.id,
            path.display()
        );
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

pub(crate) async fn a_file_being_uploaded_at_a_kill_9_arrives_once<P: Platform>() {
    let dir = tempfile::tempdir().expect("tempdir");
    let llm = ScriptedLlm::start().await.expect("llm");
    let fake = P::start().await;
    let config = write_config(&dir, &llm, &fake);
    let workspace = dir.path().join("workspace");
    std::fs::create_dir_all(&workspace).expect("workspace");
    std::fs::write(workspace.join("chart.png"), super::media::png()).expect("write");
    // The turn asks for the file; taken up again after the restart, it asks again.
    let send = || Reply::tool("send_file", serde_json::json!({"path": "chart.png"}));
    llm.push(send())
        .push(send())
        .push(Reply::text("The chart is there."));

    fake.hold_uploads();
    let mut child = spawn_listening(&config, &fake).await;
    let said = fake.dm(ADA, "send me the chart");
    fake.wait("the upload under way", |f| f.uploads_started() > 0)
        .await;
    child.start_kill().expect("kill -9");
    child.wait().await.expect("ended");
    // The connection broke before the platform had the whole file: it never arrived.
    fake.release_uploads(false);
    assert!(fake.files(&said.chat).is_empty());

    let mut child = spawn_listening(&config, &fake).await;
    fake.wait("the chart and the answer", |f| {
        !f.files(&said.chat).is_empty()
            && replies(f, &said)
                .iter()
                .any(|post| post.text == "The chart is there.")
    })
    .await;
    let files = fake.files(&said.chat);
    assert_eq!(files.len(), 1, "the file arrived once: {files:?}");
    assert_eq!(files[0].bytes, super::media::png());
    child.start_kill().expect("kill -9");
    child.wait().await.expect("ended");
}

pub(crate) async fn a_file_the_platform_took_before_a_kill_9_is_not_sent_again<P: Platform>() {
    let dir = tempfile::tempdir().expect("tempdir");
    let llm = ScriptedLlm::start().await.expect("llm");
    let fake = P::start().await;
    let config = write_config(&dir, &llm, &fake);
    let workspace = dir.path().join("workspace");
    std::fs::create_dir_all(&workspace).expect("workspace");
    std::fs::write(workspace.join("report.pdf"), super::media::pdf()).expect("write");
    // The file goes out beside a slow command: the turn is killed after the platform took
    // the file and before the round's results were saved. Taken up again, the model asks
    // for the same file.
    let send = serde_json::json!({"path": "report.pdf"});
    llm.push(Reply::tools([
        ("send_file", send.clone()),
        ("exec", serde_json::json!({"command": "sleep 30"})),
    ]))
    .push(Reply::tools([
        ("send_file", send),
        ("exec", serde_json::json!({"command": "true"})),
    ]))
    .push(Reply::text("The report is there."));

    let mut child = spawn_listening(&config, &fake).await;
    let said = fake.dm(ADA, "send me the report");
    fake.wait("the report", |f| !f.files(&said.chat).is_empty())
        .await;
    // Killed once the send is recorded (between the platform taking it and the record, a
    // kill sends it again: no platform takes an idempotency key for an upload).
    let state = switchboard_sessions::FileState::new(&dir.path().join("state"));
    let session = format!("{}_{}", P::NAME, said.chat);
    let key = format!(
        "outbox/default/{}",
        switchboard_core::state::segment(&session)
    );
    let deadline = Instant::now() + PATIENCE;
    loop {
        use switchboard_core::StateStore;
        if state.get(&key).await.ok().flatten().is_some() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "what was sent was never recorded"
        );
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    child.start_kill().expect("kill -9");
    child.wait().await.expect("ended");

    let mut child = spawn_listening(&config, &fake).await;
    fake.wait("the answer after the restart", |f| {
        replies(f, &said)
            .iter()
            .any(|post| post.text == "The report is there.")
    })
    .await;
    let files = fake.files(&said.chat);
    assert_eq!(files.len(), 1, "the report went out once: {files:?}");
    let requests = llm.requests();
    let results = util::tool_results(requests.last().expect("requests"));
    assert!(
        results[0].contains("sent to this chat"),
        "the model is told it was sent: {results:?}"
    );
    child.start_kill().expect("kill -9");
    child.wait().await.expect("ended");
}
