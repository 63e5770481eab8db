//! Telegram in the conformance suite: private chats with the fake Bot API.

use std::time::Duration;

use switchboard_testkit::FakeTelegram;
use switchboard_testkit::telegram::TEST_TOKEN;
use tokio::time::Instant;

use super::{ADA, CAROL, Platform, Posted, Received, Shown, Written};
use crate::util::PATIENCE;

pub(crate) struct Telegram(FakeTelegram);

fn id(text: &str) -> i64 {
    text.parse().expect("a Telegram id")
}

impl Platform for Telegram {
    const NAME: &'static str = "telegram";
    const LIMIT: usize = 4096;
    const DOCUMENT_LIMIT: u64 = 50 * 1000 * 1000;

    async fn start() -> Self {
        Self(FakeTelegram::start().await.expect("fake Telegram"))
    }

    fn table(&self, interval: f64, extra: &str) -> String {
        format!(
            r#"[channels.telegram]
enabled = true
token = "{TEST_TOKEN}"
api_url = "{api}"
allow_from = ["{ADA}", "{CAROL}"]
poll_timeout_secs = 1
watchdog_secs = 10
edit_interval_secs = {interval:?}
{extra}
"#,
            api = self.0.api_url()
        )
    }

    fn sessions(&self) -> u64 {
        self.0.polls()
    }

    fn dm(&self, person: u64, text: &str) -> Written {
        let message = self.0.private_text(person, text);
        Written {
            chat: self.chat_of(person),
            id: message.to_string(),
        }
    }

    fn dm_file(&self, person: u64, caption: &str, bytes: Vec<u8>) -> Written {
        let message = self.0.private_photo(person, caption, bytes);
        Written {
            chat: self.chat_of(person),
            id: message.to_string(),
        }
    }

    fn dm_voice(&self, person: u64, bytes: Vec<u8>, seconds: u32) -> Written {
        let message = self.0.private_voice(person, bytes, seconds);
        Written {
            chat: self.chat_of(person),
            id: message.to_string(),
        }
    }

    fn deliver_again(&self, written: &Written) {
        self.0.deliver_again(id(&written.chat), id(&written.id));
    }

    fn chat_of(&self, person: u64) -> String {
        person.to_string()
    }

    fn posted(&self, chat: &str) -> Vec<Posted> {
        self.0
            .messages_to(id(chat))
            .into_iter()
            .map(|sent| Posted {
                id: sent.message_id.to_string(),
                text: self
                    .0
                    .current_text(sent.chat, sent.message_id)
                    .unwrap_or(sent.visible),
                reply_to: sent.reply_to.map(|id| id.to_string()),
                at: sent.at,
            })
            .collect()
    }

    fn files(&self, chat: &str) -> Vec<Received> {
        self.0
            .uploads_to(id(chat))
            .into_iter()
            .map(|upload| Received {
                shown: match upload.method.to_ascii_lowercase().as_str() {
                    "sendphoto" => Shown::Picture,
                    "sendvoice" | "sendaudio" => Shown::Voice,
                    _ => Shown::Document,
                },
                name: upload.name,
                bytes: upload.bytes,
                caption: upload.caption,
            })
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
            .filter(|sent| sent.chat == id(chat))
            .filter(|sent| message.is_none_or(|m| sent.message_id == m))
            .map(|sent| sent.at)
            .collect()
    }

    fn typing(&self, chat: &str) -> Option<usize> {
        Some(self.0.actions_in(id(chat)).len())
    }

    fn rate_limit(&self, chat: &str, retry_after: Duration, times: u32) {
        self.0.rate_limit(id(chat), retry_after, times);
    }

    fn limited_at(&self, chat: &str) -> Vec<Instant> {
        self.0.limited_at(id(chat))
    }

    fn taken_in(&self, _state_dir: &std::path::Path, _written: &Written) -> bool {
        // Telegram keeps every update until a poll confirms it.
        true
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

suite!(Telegram);
