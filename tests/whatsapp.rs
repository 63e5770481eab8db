//! What only WhatsApp does, against the fake Graph API and Meta's signed webhook posts (the
//! rest is in `conformance`): a post not signed with the app secret is refused, the verify
//! handshake wants the verify token, a message is marked read, a file whose bytes are not
//! the ones WhatsApp hashed is not saved, and outside the 24-hour
//! window nothing is sent — the agent is told why, and a message that arrives over a day
//! late is not answered into a closed window.

use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::json;
use switchboard_testkit::whatsapp::{APP_SECRET, VERIFY_TOKEN};
use switchboard_testkit::{FakeWhatsApp, Reply, ScriptedLlm, last_user_text};

use crate::conformance::whatsapp::{WhatsApp, number};
use crate::conformance::{ADA, CAROL};
use crate::util::{self, Extra, PATIENCE};

/// Now, in Unix seconds.
fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock")
        .as_secs()
}

/// A daemon with WhatsApp (and the WebSocket channel) against the fakes.
struct Run {
    llm: ScriptedLlm,
    fake: FakeWhatsApp,
    daemon: switchboard::app::Running,
    dir: tempfile::TempDir,
}

impl Run {
    async fn start() -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let llm = ScriptedLlm::start().await.expect("llm");
        let platform = WhatsApp(FakeWhatsApp::start().await.expect("fake WhatsApp"));
        let tables = platform.section("");
        let config = Extra {
            tables: &tables,
            ..Extra::default()
        };
        let daemon = util::start_configured(&llm, dir.path(), config, Vec::new()).await;
        let fake = platform.0;
        fake.attach(daemon.addr());
        fake.wait_until(PATIENCE, "the channel started", |f| f.sessions() > 0)
            .await;
        Self {
            llm,
            fake,
            daemon,
            dir,
        }
    }

    /// The texts the bot sent to `person`.
    fn texts_to(&self, person: u64) -> Vec<String> {
        self.fake
            .sent_to(&number(person))
            .into_iter()
            .map(|sent| sent.text)
            .collect()
    }
}

#[tokio::test]
async fn only_posts_signed_with_the_app_secret_are_taken_and_the_handshake_wants_the_verify_token()
{
    let t = Run::start().await;
    let (status, challenge) = t.fake.handshake(VERIFY_TOKEN).await.expect("answered");
    assert_eq!((status, challenge.as_str()), (200, "1158201444"));
    let (status, _) = t.fake.handshake("guessed-token").await.expect("answered");
    assert_eq!(status, 403);

    let forged = json!({"object": "whatsapp_business_account", "entry": [{"id": "W",
        "changes": [{"field": "messages", "value": {"metadata": {"phone_number_id":
            switchboard_testkit::whatsapp::PHONE_NUMBER_ID}, "messages": [{"from": number(ADA),
            "id": "wamid.forged", "timestamp": now().to_string(), "type": "text",
            "text": {"body": "forged"}}]}}]}]})
    .to_string();
    let refused = t
        .fake
        .post_signed(forged.as_bytes(), "not-the-app-secret")
        .await;
    assert_eq!(refused, Some(401));
    // The same body signed right is taken: the refusal was the signature's.
    assert_eq!(
        t.fake.post_signed(forged.as_bytes(), APP_SECRET).await,
        Some(200)
    );
    t.fake
        .wait_until(PATIENCE, "the signed one answered", |f| {
            f.sent_to(&number(ADA)).len() == 1
        })
        .await;
    let asked: Vec<String> = t.llm.requests().iter().map(last_user_text).collect();
    assert_eq!(asked, ["forged"], "only the signed post reached the model");
    t.daemon.shutdown().await;
}

#[tokio::test]
async fn a_message_is_marked_read_and_answered_as_a_reply_to_it() {
    let t = Run::start().await;
    let id = t.fake.dm(&number(ADA), "hello there");
    t.fake
        .wait_until(PATIENCE, "the answer", |f| {
            !f.sent_to(&number(ADA)).is_empty()
        })
        .await;
    let sent = t.fake.sent_to(&number(ADA)).remove(0);
    assert_eq!(sent.text, "echo: hello there");
    assert_eq!(sent.reply_to.as_deref(), Some(id.as_str()));
    assert!(
        t.fake.read(&id),
        "marked read (with typing…) while it was answered"
    );
    assert!(t.fake.typing(&number(ADA)) >= 1);
    t.daemon.shutdown().await;
}

#[tokio::test]
async fn a_file_whose_bytes_are_not_the_ones_whatsapp_hashed_is_not_saved() {
    let t = Run::start().await;
    let good = t
        .fake
        .dm_file(&number(ADA), "the first", "a.bin", b"first bytes".to_vec());
    t.fake
        .wait_until(PATIENCE, "the first answer", |f| {
            f.sent_to(&number(ADA))
                .iter()
                .any(|sent| sent.reply_to.as_deref() == Some(good.as_str()))
        })
        .await;
    assert!(
        last_user_text(&t.llm.requests()[0]).contains("saved in the workspace at"),
        "a file with its hash is saved"
    );
    t.fake.corrupt_files();
    let bad = t.fake.dm_file(
        &number(ADA),
        "the second",
        "b.bin",
        b"second bytes".to_vec(),
    );
    t.fake
        .wait_until(PATIENCE, "the second answer", |f| {
            f.sent_to(&number(ADA))
                .iter()
                .any(|sent| sent.reply_to.as_deref() == Some(bad.as_str()))
        })
        .await;
    let told = last_user_text(&t.llm.requests()[1]);
    assert!(
        told.contains("sha256") && !told.contains("saved in the workspace at"),
        "the agent is told the file was not saved, and why: {told}"
    );
    let saved: Vec<_> = std::fs::read_dir(t.dir.path().join("workspace/media/whatsapp"))
        .expect("the media folder")
        .filter_map(Result::ok)
        .map(|entry| entry.file_name().to_string_lossy().into_owned())
        .collect();
    assert!(
        saved.iter().all(|name| !name.ends_with("b.bin")),
        "nothing of the changed file stays: {saved:?}"
    );
    t.daemon.shutdown().await;
}

#[tokio::test]
async fn outside_the_24_hour_window_nothing_is_sent_and_the_agent_is_told_why() {
    let t = Run::start().await;
    // A message Meta delivers over a day late (the daemon was down): its answer would land
    // in a closed window, so none is sent.
    t.fake
        .dm_sent_at(&number(CAROL), "are you there?", now() - 25 * 3600);
    // The operator sees it in /healthz (and the log names the window).
    let deadline = tokio::time::Instant::now() + PATIENCE;
    while util::health(t.daemon.addr()).await["whatsapp_undeliverable"] != 1 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the late answer was not counted undeliverable"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert_eq!(t.llm.requests().len(), 1, "the late message was heard");
    assert!(
        t.texts_to(CAROL).is_empty(),
        "nothing went into the closed window"
    );
    // Carol writes again: the window is open, and only this one is answered.
    let fresh = t.fake.dm(&number(CAROL), "hello again");
    t.fake
        .wait_until(PATIENCE, "the fresh answer", |f| {
            f.sent_to(&number(CAROL))
                .iter()
                .any(|sent| sent.reply_to.as_deref() == Some(fresh.as_str()))
        })
        .await;
    assert_eq!(t.texts_to(CAROL), ["echo: hello again"]);

    // Ada talked; a day later (her window closed at WhatsApp) the agent is asked to write.
    t.fake.dm(&number(ADA), "hi");
    t.fake
        .wait_until(PATIENCE, "Ada's answer", |f| {
            f.sent_to(&number(ADA)).len() == 1
        })
        .await;
    t.fake.close_window(&number(ADA));
    t.llm.push(Reply::tools([(
        "message",
        json!({"channel": "whatsapp", "chat_id": number(ADA), "text": "Your tea is ready."}),
    )]));
    t.llm.push(Reply::text("tried"));
    let mut client = util::WsClient::connect(t.daemon.addr()).await;
    assert_eq!(
        client.say("ops", "tell Ada her tea is ready").await.reply(),
        "tried"
    );
    let asked = t.llm.requests();
    let results = util::tool_results(asked.last().expect("a request"));
    assert!(
        results[0].contains(switchboard_whatsapp::WINDOW_CLOSED),
        "the agent is told why: {}",
        results[0]
    );
    assert_eq!(t.texts_to(ADA), ["echo: hi"], "nothing more reached Ada");
    t.daemon.shutdown().await;
}
