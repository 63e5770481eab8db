//! Signal in the conformance suite: people write through the fake signal-cli's event stream,
//! answers are read from its `send` calls (a reply quotes the message it answers). Answers
//! are not streamed, so the streaming runs are left out.

use std::time::Duration;

use switchboard_testkit::FakeSignalCli;
use switchboard_testkit::signal::ACCOUNT;
use tokio::time::Instant;

use super::{ADA, CAROL, Platform, Posted, Received, Written};
use crate::util::PATIENCE;

pub(crate) struct Signal(pub(crate) FakeSignalCli);

/// A person's number.
pub(crate) fn number(person: u64) -> String {
    format!("+49151{person:08}")
}

/// Whom the bot writes to in `chat` (a person's chat is their number's digits).
fn recipient(chat: &str) -> String {
    format!("+{chat}")
}

impl Signal {
    /// `[channels.signal]` against the fake, allowing [`ADA`] and [`CAROL`], with `extra`.
    pub(crate) fn section(&self, extra: &str) -> String {
        format!(
            "[channels.signal]\nenabled = true\nurl = \"{}\"\naccount = \"{ACCOUNT}\"\nallow_from = [\"{}\", \"{}\"]\n{extra}\n",
            self.0.url(),
            number(ADA),
            number(CAROL),
        )
    }
}

impl Platform for Signal {
    const NAME: &'static str = "signal";
    const LIMIT: usize = switchboard_signal::MESSAGE_LIMIT;
    const DOCUMENT_LIMIT: u64 = switchboard_core::MAX_MEDIA_BYTES;

    async fn start() -> Self {
        Self(FakeSignalCli::start().await.expect("fake signal-cli"))
    }

    fn table(&self, _interval: f64, extra: &str) -> String {
        // Nothing is streamed: the suite's `stream = …` is not a key here.
        let extra: Vec<&str> = extra
            .lines()
            .filter(|line| !line.trim_start().starts_with("stream"))
            .collect();
        self.section(&extra.join("\n"))
    }

    fn sessions(&self) -> u64 {
        self.0.sessions()
    }

    fn dm(&self, person: u64, text: &str) -> Written {
        Written {
            chat: self.chat_of(person),
            id: self.0.dm(&number(person), text),
        }
    }

    fn dm_file(&self, person: u64, caption: &str, bytes: Vec<u8>) -> Written {
        Written {
            chat: self.chat_of(person),
            id: self.0.dm_file(&number(person), caption, "notes.bin", bytes),
        }
    }

    fn dm_voice(&self, person: u64, bytes: Vec<u8>, _seconds: u32) -> Written {
        Written {
            chat: self.chat_of(person),
            id: self.0.dm_voice(&number(person), bytes),
        }
    }

    fn deliver_again(&self, written: &Written) {
        self.0.deliver_again(&written.id);
    }

    fn chat_of(&self, person: u64) -> String {
        number(person).trim_start_matches('+').to_owned()
    }

    fn posted(&self, chat: &str) -> Vec<Posted> {
        let files: Vec<String> = self
            .0
            .uploads_to(&recipient(chat))
            .into_iter()
            .map(|f| f.id)
            .collect();
        self.0
            .sent_to(&recipient(chat))
            .into_iter()
            .filter(|sent| !files.contains(&sent.id))
            .map(|sent| Posted {
                id: sent.id,
                text: sent.text,
                reply_to: sent.quote,
                at: sent.at,
            })
            .collect()
    }

    fn files(&self, chat: &str) -> Vec<Received> {
        self.0
            .uploads_to(&recipient(chat))
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
            .sent_to(&recipient(chat))
            .into_iter()
            .filter(|sent| message.is_none_or(|m| sent.id == m))
            .map(|sent| sent.at)
            .collect()
    }

    fn typing(&self, chat: &str) -> Option<usize> {
        Some(self.0.typing(&recipient(chat)))
    }

    fn rate_limit(&self, chat: &str, retry_after: Duration, times: u32) {
        self.0.rate_limit(&recipient(chat), retry_after, times);
    }

    fn limited_at(&self, chat: &str) -> Vec<Instant> {
        self.0.limited_at(&recipient(chat))
    }

    fn taken_in(&self, state_dir: &std::path::Path, written: &Written) -> bool {
        // signal-cli hands an event once per stream: safe once in the channel's inbox.
        std::fs::read_to_string(state_dir.join("signal/inbox.jsonl"))
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

suite!(Signal, without edits);
