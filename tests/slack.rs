//! What only Slack does, against the fake Web API and Socket Mode socket (the rest is in
//! `conformance`): mentions in channels and threads as chats of their own, a `disconnect`,
//! an envelope sent again, a wrong token named in `/healthz`.

use std::time::Duration;

use switchboard_testkit::slack::{APP_TOKEN, BOT_TOKEN, BOT_USER};
use switchboard_testkit::{FakeSlack, ScriptedLlm};

use crate::util::{self, Extra, PATIENCE};

/// A person on the allow list.
const ADA: &str = "U42";

/// A daemon with Slack (and the WebSocket channel) against the fakes.
struct Slack {
    llm: ScriptedLlm,
    fake: FakeSlack,
    daemon: switchboard::app::Running,
    _dir: tempfile::TempDir,
}

impl Slack {
    async fn start(bot_token: &str) -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let llm = ScriptedLlm::start().await.expect("llm");
        let fake = FakeSlack::start().await.expect("fake Slack");
        let tables = format!(
            "[channels.slack]\nenabled = true\nbot_token = \"{bot_token}\"\napp_token = \"{APP_TOKEN}\"\n\
             api_url = \"{}\"\nallow_from = [\"{ADA}\"]\nstream = false\n",
            fake.api_url()
        );
        let config = Extra {
            tables: &tables,
            ..Extra::default()
        };
        let daemon = util::start_configured(&llm, dir.path(), config, Vec::new()).await;
        Self {
            llm,
            fake,
            daemon,
            _dir: dir,
        }
    }

    async fn connected(&self, sockets: u64) {
        self.fake
            .wait_until(PATIENCE, "the socket connected", |f| {
                f.connections() >= sockets && f.connected()
            })
            .await;
    }

    /// The bot's messages in `channel` answering `ts`, once there is one.
    async fn answers(&self, channel: &str, ts: &str) -> Vec<switchboard_testkit::slack::Sent> {
        self.fake
            .wait_until(PATIENCE, "an answer", |f| {
                f.messages_to(channel)
                    .iter()
                    .any(|m| m.reply_to.as_deref() == Some(ts))
            })
            .await;
        self.fake
            .messages_to(channel)
            .into_iter()
            .filter(|m| m.reply_to.as_deref() == Some(ts))
            .collect()
    }
}

#[tokio::test]
async fn a_mention_is_answered_in_its_channel_and_a_thread_is_a_chat_of_its_own() {
    let t = Slack::start(BOT_TOKEN).await;
    t.connected(1).await;
    let chatter = t.fake.channel_message("C1", ADA, "just talking", None);
    let mention = t
        .fake
        .channel_message("C1", ADA, &format!("<@{BOT_USER}> hello there"), None);
    let answer = t.answers("C1", &mention).await;
    assert_eq!(answer[0].text, "echo: hello there", "the mention taken out");
    assert_eq!(answer[0].thread_ts, None);
    let in_thread = t.fake.channel_message(
        "C1",
        ADA,
        &format!("<@{BOT_USER}> and in the thread?"),
        Some(&mention),
    );
    let answer = t.answers("C1", &in_thread).await;
    assert_eq!(answer[0].thread_ts.as_deref(), Some(mention.as_str()));
    // The thread's conversation is its own: the model saw only its message.
    let last = t.llm.requests().pop().expect("a request");
    let users: Vec<_> = util::conversation(&last)
        .into_iter()
        .filter(|m| m["role"] == "user")
        .collect();
    assert_eq!(users.len(), 1, "{users:?}");
    assert!(
        t.fake
            .messages_to("C1")
            .iter()
            .all(|m| m.reply_to.as_deref() != Some(chatter.as_str())),
        "a channel message without a mention is not answered"
    );
    t.daemon.shutdown().await;
}

#[tokio::test]
async fn after_a_disconnect_the_socket_comes_back_and_an_envelope_sent_again_is_answered_once() {
    let t = Slack::start(BOT_TOKEN).await;
    t.connected(1).await;
    let first = t.fake.dm(ADA, "first");
    t.answers(&FakeSlack::dm_channel(ADA), &first).await;
    t.fake
        .wait_until(PATIENCE, "the envelope acknowledged", |f| f.unacked() == 0)
        .await;
    // Slack thinks the acknowledgement came late and sends the envelope again.
    t.fake.resend_last();
    t.fake.disconnect();
    t.connected(2).await;
    let second = t.fake.dm(ADA, "second");
    t.answers(&FakeSlack::dm_channel(ADA), &second).await;
    let dm = FakeSlack::dm_channel(ADA);
    let answers_to_first = t
        .fake
        .messages_to(&dm)
        .iter()
        .filter(|m| m.reply_to.as_deref() == Some(first.as_str()))
        .count();
    assert_eq!(
        answers_to_first, 1,
        "the envelope sent again was not answered again"
    );
    assert_eq!(t.llm.requests().len(), 2);
    t.daemon.shutdown().await;
}

#[tokio::test]
async fn a_wrong_bot_token_shows_in_healthz_naming_the_fix() {
    let t = Slack::start("xoxb-wrong-0000000000-token").await;
    let deadline = tokio::time::Instant::now() + PATIENCE;
    loop {
        let health = util::health(t.daemon.addr()).await;
        if health.to_string().contains("channels.slack.bot_token") {
            assert_eq!(health["status"], "degraded", "{health}");
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "healthz never named the token: {health}"
        );
        // Polling /healthz: the channel's failure has no event to wait on.
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(
        t.fake.connections(),
        0,
        "no socket without a working bot token"
    );
    t.daemon.shutdown().await;
}
