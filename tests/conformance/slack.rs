//! Slack in the conformance suite: direct messages through the fake Socket Mode socket,
//! answers on its Web API (a reply names the message it answers in its metadata).

use std::time::Duration;

use switchboard_testkit::FakeSlack;
use switchboard_testkit::slack::{APP_TOKEN, BOT_TOKEN};
use tokio::time::Instant;

use super::{ADA, CAROL, Platform, Posted, Received, Written};
use crate::util::PATIENCE;

pub(crate) struct Slack(FakeSlack);

/// A person's Slack user id.
fn user(person: u64) -> String {
    format!("U{person}")
}

impl Platform for Slack {
    const NAME: &'static str = "slack";
    const LIMIT: usize = switchboard_slack::MESSAGE_LIMIT;
    const DOCUMENT_LIMIT: u64 = switchboard_core::MAX_MEDIA_BYTES;

    async fn start() -> Self {
        Self(FakeSlack::start().await.expect("fake Slack"))
    }

    fn table(&self, interval: f64, extra: &str) -> String {
        format!(
            r#"[channels.slack]
enabled = true
bot_token = "{BOT_TOKEN}"
app_token = "{APP_TOKEN}"
api_url = "{api}"
allow_from = ["{ada}", "{carol}"]
edit_interval_secs = {interval:?}
{extra}
"#,
            api = self.0.api_url(),
            ada = user(ADA),
            carol = user(CAROL),
        )
    }

    fn sessions(&self) -> u64 {
        self.0.connections()
    }

    fn dm(&self, person: u64, text: &str) -> Written {
        let ts = self.0.dm(&user(person), text);
        Written {
            chat: self.chat_of(person),
            id: ts,
        }
    }

    fn dm_file(&self, person: u64, caption: &str, bytes: Vec<u8>) -> Written {
        let ts = self.0.dm_file(&user(person), caption, "notes.bin", bytes);
        Written {
            chat: self.chat_of(person),
            id: ts,
        }
    }

    fn dm_voice(&self, person: u64, bytes: Vec<u8>, _seconds: u32) -> Written {
        // Slack says no length: the daemon reads it from the recording.
        let ts = self.0.dm_audio(&user(person), bytes);
        Written {
            chat: self.chat_of(person),
            id: ts,
        }
    }

    fn deliver_again(&self, written: &Written) {
        self.0.deliver_again(&written.id);
    }

    fn chat_of(&self, person: u64) -> String {
        FakeSlack::dm_channel(&user(person))
    }

    fn posted(&self, chat: &str) -> Vec<Posted> {
        self.0
            .messages_to(chat)
            .into_iter()
            .map(|sent| Posted {
                text: self
                    .0
                    .current_text(&sent.channel, &sent.ts)
                    .unwrap_or(sent.text),
                id: sent.ts,
                reply_to: sent.reply_to,
                at: sent.at,
            })
            .collect()
    }

    fn files(&self, chat: &str) -> Vec<Received> {
        self.0
            .uploads_to(chat)
            .into_iter()
            .map(Received::by_type)
            .collect()
    }

    fn hold_uploads(&self) {
        self.0.hold_uploads();
    }

    fn release_uploads(&self, keep: bool) {
        self.0.release_uploads(keep);
    }

    fn uploads_started(&self) -> u64 {
        self.0.uploads_started()
    }

    fn writes(&self, chat: &str, message: Option<&str>) -> Vec<Instant> {
        self.0
            .sent()
            .into_iter()
            .filter(|sent| sent.channel == chat)
            .filter(|sent| message.is_none_or(|m| sent.ts == m))
            .map(|sent| sent.at)
            .collect()
    }

    fn typing(&self, _chat: &str) -> Option<usize> {
        // Slack shows bots no "typing…" outside its assistant threads.
        None
    }

    fn rate_limit(&self, chat: &str, retry_after: Duration, times: u32) {
        self.0.rate_limit(chat, retry_after, times);
    }

    fn limited_at(&self, chat: &str) -> Vec<Instant> {
        self.0.limited_at(chat)
    }

    fn taken_in(&self, state_dir: &std::path::Path, written: &Written) -> bool {
        // Slack's envelope is acknowledged once the message is in the channel's inbox.
        std::fs::read_to_string(state_dir.join("slack/inbox.jsonl"))
            .is_ok_and(|inbox| inbox.contains(&format!("\"message\":\"{}\"", written.id)))
    }

    fn set_file_delay(&self, delay: Duration) {
        self.0.set_file_delay(delay);
    }

    fn files_served(&self) -> Vec<Instant> {
        self.0.files_served()
    }

    async fn wait(&self, what: &str, check: impl Fn(&Self) -> bool) {
        self.0.wait_until(PATIENCE, what, |_| check(self)).await;
    }
}

suite!(Slack);
