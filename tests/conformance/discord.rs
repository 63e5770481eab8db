//! Discord in the conformance suite: DMs through the fake gateway, answers on its REST API.

use std::time::Duration;

use switchboard_testkit::FakeDiscord;
use switchboard_testkit::discord::TEST_TOKEN;
use tokio::time::Instant;

use super::{ADA, CAROL, Platform, Posted, Received, Written};
use crate::util::PATIENCE;

pub(crate) struct Discord(FakeDiscord);

fn id(text: &str) -> u64 {
    text.parse().expect("a Discord id")
}

impl Platform for Discord {
    const NAME: &'static str = "discord";
    const LIMIT: usize = 2000;
    const DOCUMENT_LIMIT: u64 = 10 * 1024 * 1024;

    async fn start() -> Self {
        Self(FakeDiscord::start().await.expect("fake Discord"))
    }

    fn table(&self, interval: f64, extra: &str) -> String {
        format!(
            r#"[channels.discord]
enabled = true
token = "{TEST_TOKEN}"
api_url = "{api}"
allow_from = ["{ADA}", "{CAROL}"]
edit_interval_secs = {interval:?}
{extra}
"#,
            api = self.0.api_url()
        )
    }

    fn sessions(&self) -> u64 {
        // A daemon started again after a kill -9 resumes the session it kept.
        u64::from(self.0.identifies()) + u64::from(self.0.resumes())
    }

    fn dm(&self, person: u64, text: &str) -> Written {
        let message = self.0.dm(person, text);
        Written {
            chat: self.chat_of(person),
            id: message.to_string(),
        }
    }

    fn dm_file(&self, person: u64, caption: &str, bytes: Vec<u8>) -> Written {
        let message = self.0.dm_file(person, caption, "notes.bin", bytes);
        Written {
            chat: self.chat_of(person),
            id: message.to_string(),
        }
    }

    fn dm_voice(&self, person: u64, bytes: Vec<u8>, seconds: u32) -> Written {
        let message = self.0.dm_voice(person, bytes, f64::from(seconds));
        Written {
            chat: self.chat_of(person),
            id: message.to_string(),
        }
    }

    fn deliver_again(&self, written: &Written) {
        self.0
            .deliver_again(written.id.parse().expect("a Discord id"));
    }

    fn chat_of(&self, person: u64) -> String {
        FakeDiscord::dm_channel(person).to_string()
    }

    fn posted(&self, chat: &str) -> Vec<Posted> {
        self.0
            .messages_to(id(chat))
            .into_iter()
            .map(|sent| Posted {
                id: sent.message_id.to_string(),
                text: self
                    .0
                    .current_text(sent.channel, sent.message_id)
                    .unwrap_or(sent.content),
                reply_to: sent.reply_to.map(|id| id.to_string()),
                at: sent.at,
            })
            .collect()
    }

    fn files(&self, chat: &str) -> Vec<Received> {
        self.0
            .uploads_to(id(chat))
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
        let message = message.map(id);
        self.0
            .sent()
            .into_iter()
            .filter(|sent| sent.channel == id(chat))
            .filter(|sent| message.is_none_or(|m| sent.message_id == m))
            .map(|sent| sent.at)
            .collect()
    }

    fn typing(&self, chat: &str) -> Option<usize> {
        Some(self.0.typing_in(id(chat)))
    }

    fn rate_limit(&self, chat: &str, retry_after: Duration, times: u32) {
        self.0.rate_limit(id(chat), retry_after, times);
    }

    fn limited_at(&self, chat: &str) -> Vec<Instant> {
        self.0.limited_at(id(chat))
    }

    fn taken_in(&self, state_dir: &std::path::Path, written: &Written) -> bool {
        // Discord delivers a message once: it is safe once in the channel's inbox.
        std::fs::read_to_string(state_dir.join("discord/inbox.jsonl"))
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

suite!(Discord);
