//! What the suite asks of a platform: its people, what they wrote and what the bot posted
//! as the suite compares them, and [`Platform`] — a channel and its platform (a fake, or a
//! real server) as the runs drive them.

use std::time::Duration;

use tokio::time::Instant;

/// A person on the allow list, another, and a stranger.
pub(crate) const ADA: u64 = 42;
pub(crate) const CAROL: u64 = 44;
pub(crate) const STRANGER: u64 = 77;

/// A message a person wrote: its chat and its id, as the channel names them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Written {
    pub chat: String,
    pub id: String,
}

/// A new message the bot posted (edits are not posts).
#[derive(Clone, Debug)]
pub(crate) struct Posted {
    pub id: String,
    /// Its text as the reader sees it (now, after any edits).
    pub text: String,
    /// The person's message it replies to.
    pub reply_to: Option<String>,
    pub at: Instant,
}

/// How a platform shows a file the bot sent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Shown {
    /// A picture, in the chat.
    Picture,
    /// A voice message, or audio played in the chat.
    Voice,
    /// A file to download.
    Document,
}

/// A file the bot sent, as the person sees it.
#[derive(Clone)]
pub(crate) struct Received {
    pub shown: Shown,
    pub name: String,
    pub bytes: Vec<u8>,
    pub caption: Option<String>,
}

impl std::fmt::Debug for Received {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Received")
            .field("shown", &self.shown)
            .field("name", &self.name)
            .field("bytes", &self.bytes.len())
            .field("caption", &self.caption)
            .finish()
    }
}

impl Received {
    /// A file as a platform that shows files by their type shows it (Discord, Slack).
    pub(crate) fn by_type(upload: switchboard_testkit::multipart::Uploaded) -> Self {
        let mime = upload.mime.clone().unwrap_or_default();
        let shown = if switchboard_core::ImagePart::shown_type(&mime) {
            Shown::Picture
        } else if mime.starts_with("audio/") {
            Shown::Voice
        } else {
            Shown::Document
        };
        Self {
            shown,
            name: upload.name,
            bytes: upload.bytes,
            caption: upload.caption,
        }
    }
}

/// A platform's channel and its fake, as the suite drives them.
pub(crate) trait Platform: Sized {
    /// The channel's name (`[channels.<name>]`, `<name>:<chat>`).
    const NAME: &'static str;
    /// The longest message, in characters of plain ASCII text.
    const LIMIT: usize;
    /// The largest document the platform takes from a bot, in bytes.
    const DOCUMENT_LIMIT: u64;
    /// The `retry_after` of the suite's 429s: long enough for another chat's whole answer
    /// to arrive within it while the held chat waits.
    const RETRY_AFTER: Duration = Duration::from_secs(3);

    /// Starts the fake.
    async fn start() -> Self;

    /// `[channels.<name>]` pointing at the fake: allowing [`ADA`] and [`CAROL`], editing
    /// drafts at most every `interval` seconds, with `extra` lines.
    fn table(&self, interval: f64, extra: &str) -> String;

    /// The daemon listening on `daemon` is the one the platform pushes to from now on (a
    /// webhook's address, as the platform's settings name it); platforms the daemon calls
    /// out to need nothing.
    fn attach(&self, _daemon: std::net::SocketAddr) {}

    /// How many sessions the channel opened with the fake so far (polls begun, gateway
    /// sessions identified or resumed): one more means a (re)started daemon is listening.
    fn sessions(&self) -> u64;

    /// `person` writes `text` to the bot in a private chat.
    fn dm(&self, person: u64, text: &str) -> Written;

    /// `person` sends the bot a file (`bytes`) with `caption` in a private chat.
    fn dm_file(&self, person: u64, caption: &str, bytes: Vec<u8>) -> Written;

    /// `person` records a voice note (`bytes`, `seconds` long) to the bot in a private chat,
    /// as the platform's apps send one.
    fn dm_voice(&self, person: u64, bytes: Vec<u8>, seconds: u32) -> Written;

    /// The platform delivers `written` again, as it does when it thinks the bot did not take
    /// it (Slack's retried event, Discord's replayed dispatch, Telegram's repeated update).
    fn deliver_again(&self, written: &Written);

    /// The id the platform gave `written` (the channel and its journal know it by that),
    /// once it has one: the suite's own where the suite names messages (Matrix's event ids
    /// are the homeserver's, known once sent).
    fn platform_id(&self, written: &Written) -> Option<String> {
        Some(written.id.clone())
    }

    /// The private chat of `person`.
    fn chat_of(&self, person: u64) -> String;

    /// What the bot posted in `chat`, oldest first.
    fn posted(&self, chat: &str) -> Vec<Posted>;

    /// The files the bot sent to `chat`, oldest first.
    fn files(&self, chat: &str) -> Vec<Received>;

    /// Holds the uploads that arrive from now on, mid-flight, until released: kept as sent,
    /// or dropped as if the connection broke before the platform had the whole file.
    fn hold_uploads(&self);

    /// Lets held uploads go (`keep`: the platform took them).
    fn release_uploads(&self, keep: bool);

    /// How many uploads arrived (held ones too).
    fn uploads_started(&self) -> u64;

    /// When the bot wrote to `chat` (sends and edits alike), oldest first; with `message`,
    /// only the writes of that message.
    fn writes(&self, chat: &str, message: Option<&str>) -> Vec<Instant>;

    /// How often "typing…" was shown in `chat`; `None` where the platform shows bots none.
    fn typing(&self, chat: &str) -> Option<usize>;

    /// The next `times` writes to `chat` are answered 429 with `retry_after`.
    fn rate_limit(&self, chat: &str, retry_after: Duration, times: u32);

    /// When `chat`'s 429s were answered.
    fn limited_at(&self, chat: &str) -> Vec<Instant>;

    /// Whether `written` is safe from a crash of the daemon in `state_dir`: the platform will
    /// deliver it again (Telegram, until its update is confirmed), or the channel took it
    /// into its inbox (Discord).
    fn taken_in(&self, state_dir: &std::path::Path, written: &Written) -> bool;

    /// Files are served after `delay`.
    fn set_file_delay(&self, delay: Duration);

    /// When each file was served.
    fn files_served(&self) -> Vec<Instant>;

    /// Waits until `check` holds (woken by every change the fake records), or panics.
    async fn wait(&self, what: &str, check: impl Fn(&Self) -> bool);
}
