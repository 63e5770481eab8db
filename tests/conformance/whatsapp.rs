//! WhatsApp in the conformance suite: people write through the fake's signed webhook posts
//! (sent again until answered 200, as Meta does), answers are read from its Graph API. It
//! has no edits, so the streaming runs are left out.

use std::time::Duration;

use switchboard_testkit::FakeWhatsApp;
use switchboard_testkit::whatsapp::{ACCESS_TOKEN, APP_SECRET, PHONE_NUMBER_ID, VERIFY_TOKEN};
use tokio::time::Instant;

use super::{ADA, CAROL, Platform, Posted, Received, Written};
use crate::util::PATIENCE;

pub(crate) struct WhatsApp(pub(crate) FakeWhatsApp);

/// A person's number.
pub(crate) fn number(person: u64) -> String {
    format!("49151{person:08}")
}

impl WhatsApp {
    /// `[channels.whatsapp]` against the fake, allowing [`ADA`] and [`CAROL`], with `extra`.
    pub(crate) fn section(&self, extra: &str) -> String {
        format!(
            r#"[channels.whatsapp]
enabled = true
access_token = "{ACCESS_TOKEN}"
app_secret = "{APP_SECRET}"
verify_token = "{VERIFY_TOKEN}"
phone_number_id = "{PHONE_NUMBER_ID}"
api_url = "{api}"
allow_from = ["+{ada}", "{carol}"]
{extra}
"#,
            api = self.0.api_url(),
            ada = number(ADA),
            carol = number(CAROL),
        )
    }
}

impl Platform for WhatsApp {
    const NAME: &'static str = "whatsapp";
    const LIMIT: usize = switchboard_whatsapp::MESSAGE_LIMIT;
    const DOCUMENT_LIMIT: u64 = switchboard_core::MAX_MEDIA_BYTES;

    async fn start() -> Self {
        Self(FakeWhatsApp::start().await.expect("fake WhatsApp"))
    }

    fn table(&self, _interval: f64, extra: &str) -> String {
        // Nothing is streamed (no edits): the suite's `stream = …` is not a key here.
        let extra: Vec<&str> = extra
            .lines()
            .filter(|line| !line.trim_start().starts_with("stream"))
            .collect();
        self.section(&extra.join("\n"))
    }

    fn attach(&self, daemon: std::net::SocketAddr) {
        self.0.attach(daemon);
    }

    fn sessions(&self) -> u64 {
        self.0.sessions()
    }

    fn dm(&self, person: u64, text: &str) -> Written {
        Written {
            chat: number(person),
            id: self.0.dm(&number(person), text),
        }
    }

    fn dm_file(&self, person: u64, caption: &str, bytes: Vec<u8>) -> Written {
        Written {
            chat: number(person),
            id: self.0.dm_file(&number(person), caption, "notes.bin", bytes),
        }
    }

    fn dm_voice(&self, person: u64, bytes: Vec<u8>, _seconds: u32) -> Written {
        // WhatsApp says no length: the daemon reads it from the recording.
        Written {
            chat: number(person),
            id: self.0.dm_voice(&number(person), bytes),
        }
    }

    fn deliver_again(&self, written: &Written) {
        self.0.deliver_again(&written.id);
    }

    fn chat_of(&self, person: u64) -> String {
        number(person)
    }

    fn posted(&self, chat: &str) -> Vec<Posted> {
        self.0
            .sent_to(chat)
            .into_iter()
            .filter(|sent| sent.kind == "text")
            .map(|sent| Posted {
                id: sent.id,
                text: sent.text,
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
            .sent_to(chat)
            .into_iter()
            .filter(|sent| message.is_none_or(|m| sent.id == m))
            .map(|sent| sent.at)
            .collect()
    }

    fn typing(&self, chat: &str) -> Option<usize> {
        Some(self.0.typing(chat))
    }

    fn rate_limit(&self, chat: &str, retry_after: Duration, times: u32) {
        self.0.rate_limit(chat, retry_after, times);
    }

    fn limited_at(&self, chat: &str) -> Vec<Instant> {
        self.0.limited_at(chat)
    }

    fn taken_in(&self, _state_dir: &std::path::Path, written: &Written) -> bool {
        // Meta posts a notification again until it is answered 200, which the webhook does
        // once the message is in the channel's inbox.
        self.0.acked(&written.id)
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

suite!(WhatsApp, without edits);
