//! [`FakeTelegram`]: a Telegram Bot API server for tests, speaking the real wire format
//! over a real socket.
//!
//! `POST /bot<token>/<Method>` (method names in any case) answers `{ok, result}` envelopes.
//! `getUpdates` long-polls: it holds until an update comes or its `timeout` passes, and
//! delivers every update at or past its `offset` again until an `offset` above it confirms
//! it, as Telegram does. `sendMessage` and `editMessageText` refuse what Telegram refuses
//! (texts over 4096 characters once HTML is parsed, HTML it cannot parse, an edit that
//! changes nothing) with its 400s; a chat can be told to answer 429 with a `retry_after`;
//! `getMe` can be made to answer garbage. Everything the bot sends is recorded.

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde_json::{Value, json};
use tokio::sync::Notify;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

mod api;
mod html;

use html::check_text;

/// The token tests configure.
pub const TEST_TOKEN: &str = "123456:TEST-token";
/// The bot's user id.
pub const BOT_ID: u64 = 7_000_000;
/// The bot's username.
pub const BOT_USERNAME: &str = "switchboard_test_bot";

/// Something the bot sent: a new message, or an edit of one.
#[derive(Clone, Debug)]
pub struct Sent {
    /// The chat.
    pub chat: i64,
    /// The forum topic, if one was named.
    pub topic: Option<i64>,
    /// The message's id (the edited one's, for an edit).
    pub message_id: i64,
    /// The text as sent (HTML when `html`).
    pub text: String,
    /// The text as the reader sees it.
    pub visible: String,
    /// Whether it was sent as HTML.
    pub html: bool,
    /// The message it replies to.
    pub reply_to: Option<i64>,
    /// Whether this is an edit.
    pub edit: bool,
    /// When it arrived.
    pub at: Instant,
}

#[derive(Default)]
struct Inner {
    /// Updates not confirmed yet, by id.
    updates: BTreeMap<u32, Value>,
    next_update: u32,
    next_message: HashMap<i64, i64>,
    /// Each message people wrote, by (chat, id), to deliver again.
    messages: HashMap<(i64, i64), Value>,
    /// Every send and edit, in order.
    sent: Vec<Sent>,
    /// The current text of each message the bot sent, by (chat, id).
    texts: HashMap<(i64, i64), String>,
    /// `sendChatAction`s: (chat, action).
    actions: Vec<(i64, String)>,
    /// Chats answering 429: (retry_after seconds, answers left).
    limited: HashMap<i64, (u64, u32)>,
    /// When each 429 was answered: (chat, time).
    limited_at: Vec<(i64, Instant)>,
    get_me_garbage: bool,
    /// `getUpdates` answers a web server's 404 page (an `api_url` that is not the Bot API).
    polls_failing: bool,
    /// How long a file download waits before its bytes come.
    file_delay: Duration,
    /// When each file download was answered.
    files_served: Vec<Instant>,
    /// Refuse every HTML text as unparseable (Telegram is stricter than the bot thought).
    refuse_html: bool,
    /// Updates handed out by `getUpdates`, counting repeats.
    delivered: u64,
    /// `getUpdates` calls received.
    polls: u64,
    /// The `offset` of each `getUpdates` call, in order.
    offsets: Vec<Option<i64>>,
    /// The last methods called, oldest first (at most 32), for a failing wait to show.
    calls: std::collections::VecDeque<String>,
    /// Files by id: (path, bytes).
    files: HashMap<String, (String, Vec<u8>)>,
    /// The webhook, as set: (url, secret).
    webhook: Option<(String, Option<String>)>,
    /// The bot's command menu, as last set (`setMyCommands`).
    commands: Vec<Value>,
    /// Files the bot sent, in order.
    uploads: Vec<crate::multipart::Uploaded>,
    /// Uploads in flight held for a kill.
    holding: crate::multipart::Holding,
}

struct Shared {
    inner: Mutex<Inner>,
    /// Woken on every change, for long polls and for tests waiting on a recording.
    changed: Notify,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// A running fake Bot API; it stops when dropped.
pub struct FakeTelegram {
    addr: SocketAddr,
    shared: Arc<Shared>,
    /// Cancelled on drop; the server selects on it.
    stop: CancellationToken,
}

impl FakeTelegram {
    /// Starts on 127.0.0.1 with an ephemeral port.
    pub async fn start() -> std::io::Result<Self> {
        let shared = Arc::new(Shared {
            inner: Mutex::new(Inner {
                next_update: 100,
                ..Inner::default()
            }),
            changed: Notify::new(),
        });
        let app = Router::new()
            .route("/{bot}/{method}", post(api::method))
            .route("/file/{bot}/{*path}", get(api::file))
            .with_state(shared.clone());
        let (addr, stop) =
            crate::serve(app, std::net::SocketAddr::from(([127, 0, 0, 1], 0))).await?;
        Ok(Self { addr, shared, stop })
    }

    /// The URL to configure as `channels.telegram.api_url`.
    pub fn api_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// A person (`user`) writes `text` in a private chat with the bot. Returns the
    /// message's id.
    pub fn private_text(&self, user: u64, text: &str) -> i64 {
        let chat = i64::try_from(user).unwrap_or(i64::MAX);
        self.message(
            chat,
            json!({"id": chat, "type": "private", "first_name": "Tester"}),
            user,
            |m| {
                m["text"] = json!(text);
            },
        )
    }

    /// A person writes `text` in group `chat` (a negative id).
    pub fn group_text(&self, chat: i64, user: u64, text: &str) -> i64 {
        self.message(chat, json!({"id": chat, "type": "supergroup", "title": "Test group"}), user, |m| {
            m["text"] = json!(text);
            if let Some(at) = text.find(&format!("@{BOT_USERNAME}")) {
                m["entities"] = json!([{"type": "mention", "offset": at, "length": BOT_USERNAME.len() + 1}]);
            }
        })
    }

    /// A person sends a photo (`bytes`) with a caption in a private chat.
    pub fn private_photo(&self, user: u64, caption: &str, bytes: Vec<u8>) -> i64 {
        let chat = i64::try_from(user).unwrap_or(i64::MAX);
        let file_id = format!("photo-{}", fastrand_id());
        let size = bytes.len();
        self.shared
            .lock()
            .files
            .insert(file_id.clone(), (format!("photos/{file_id}.jpg"), bytes));
        self.message(
            chat,
            json!({"id": chat, "type": "private", "first_name": "Tester"}),
            user,
            |m| {
                m["caption"] = json!(caption);
                m["photo"] = json!([{"file_id": file_id, "file_unique_id": file_id, "width": 640,
                "height": 480, "file_size": size}]);
            },
        )
    }

    /// A person records a voice note (`bytes`, OGG/Opus, `seconds` long) in a private chat.
    pub fn private_voice(&self, user: u64, bytes: Vec<u8>, seconds: u32) -> i64 {
        let chat = i64::try_from(user).unwrap_or(i64::MAX);
        let file_id = format!("voice-{}", fastrand_id());
        let size = bytes.len();
        self.shared
            .lock()
            .files
            .insert(file_id.clone(), (format!("voice/{file_id}.oga"), bytes));
        self.message(
            chat,
            json!({"id": chat, "type": "private", "first_name": "Tester"}),
            user,
            |m| {
                m["voice"] = json!({"file_id": file_id, "file_unique_id": file_id,
                    "duration": seconds, "mime_type": "audio/ogg", "file_size": size});
            },
        )
    }

    fn message(
        &self,
        chat: i64,
        chat_json: Value,
        user: u64,
        fill: impl FnOnce(&mut Value),
    ) -> i64 {
        let mut inner = self.shared.lock();
        let message_id = next_message(&mut inner, chat);
        let mut message = json!({
            "message_id": message_id, "date": 1_700_000_000, "chat": chat_json,
            "from": {"id": user, "is_bot": false, "first_name": "Tester", "username": format!("user{user}")}
        });
        fill(&mut message);
        inner.messages.insert((chat, message_id), message.clone());
        drop(inner);
        self.update(message);
        message_id
    }

    /// Delivers message `message_id` of `chat` again, in an update of its own (as a bot that
    /// lost its confirmed offset is sent what it already had).
    pub fn deliver_again(&self, chat: i64, message_id: i64) {
        let message = self
            .shared
            .lock()
            .messages
            .get(&(chat, message_id))
            .cloned();
        if let Some(message) = message {
            self.update(message);
        }
    }

    fn update(&self, message: Value) {
        let mut inner = self.shared.lock();
        let id = inner.next_update;
        inner.next_update += 1;
        inner
            .updates
            .insert(id, json!({"update_id": id, "message": message}));
        drop(inner);
        self.shared.changed.notify_waiters();
    }

    /// The bot's command menu, as it last set it: `{command, description}` each.
    pub fn commands(&self) -> Vec<Value> {
        self.shared.lock().commands.clone()
    }

    /// The files the bot sent to `chat`, in order.
    pub fn uploads_to(&self, chat: i64) -> Vec<crate::multipart::Uploaded> {
        let chat = chat.to_string();
        self.shared
            .lock()
            .uploads
            .iter()
            .filter(|upload| upload.chat == chat)
            .cloned()
            .collect()
    }

    /// How many uploads arrived so far (held and refused ones too).
    pub fn uploads_started(&self) -> u64 {
        self.shared.lock().holding.started
    }

    /// Holds every upload that arrives until [`FakeTelegram::release_uploads`] (an upload
    /// in flight, for a kill in the middle of it).
    pub fn hold_uploads(&self) {
        self.shared.lock().holding.hold();
    }

    /// Lets held uploads go: kept as sent (`keep`), or dropped as if the connection broke
    /// before Telegram had the whole file. Later uploads are not held.
    pub fn release_uploads(&self, keep: bool) {
        self.shared.lock().holding.release(keep);
        self.shared.changed.notify_waiters();
    }

    /// Everything the bot sent so far.
    pub fn sent(&self) -> Vec<Sent> {
        self.shared.lock().sent.clone()
    }

    /// New messages (not edits) the bot sent to `chat`.
    pub fn messages_to(&self, chat: i64) -> Vec<Sent> {
        self.sent()
            .into_iter()
            .filter(|s| s.chat == chat && !s.edit)
            .collect()
    }

    /// The text of a message as it reads now (after edits).
    pub fn current_text(&self, chat: i64, message_id: i64) -> Option<String> {
        self.shared.lock().texts.get(&(chat, message_id)).cloned()
    }

    /// The chat actions sent to `chat`.
    pub fn actions_in(&self, chat: i64) -> Vec<String> {
        self.shared
            .lock()
            .actions
            .iter()
            .filter(|(c, _)| *c == chat)
            .map(|(_, a)| a.clone())
            .collect()
    }

    /// Updates not confirmed yet.
    pub fn unconfirmed(&self) -> usize {
        self.shared.lock().updates.len()
    }

    /// Updates handed out by `getUpdates` so far, repeats included.
    pub fn delivered(&self) -> u64 {
        self.shared.lock().delivered
    }

    /// `getUpdates` calls received so far (a long poll counts when it arrives).
    pub fn polls(&self) -> u64 {
        self.shared.lock().polls
    }

    /// The `offset` each `getUpdates` call carried, in order (`None`: none).
    pub fn poll_offsets(&self) -> Vec<Option<i64>> {
        self.shared.lock().offsets.clone()
    }

    /// The webhook the bot set: (url, secret).
    pub fn webhook(&self) -> Option<(String, Option<String>)> {
        self.shared.lock().webhook.clone()
    }

    /// The next `times` sends to `chat` answer 429 with `retry_after`.
    pub fn rate_limit(&self, chat: i64, retry_after: Duration, times: u32) {
        self.shared
            .lock()
            .limited
            .insert(chat, (retry_after.as_secs().max(1), times));
    }

    /// When the 429s for `chat` were answered.
    pub fn limited_at(&self, chat: i64) -> Vec<Instant> {
        self.shared
            .lock()
            .limited_at
            .iter()
            .filter(|(c, _)| *c == chat)
            .map(|(_, at)| *at)
            .collect()
    }

    /// Makes `getMe` answer garbage (or answer properly again).
    pub fn set_get_me_garbage(&self, garbage: bool) {
        self.shared.lock().get_me_garbage = garbage;
    }

    /// Makes every `getUpdates` fail with a web server's 404 page, a long poll in progress
    /// included (or answer again).
    pub fn set_polls_failing(&self, failing: bool) {
        self.shared.lock().polls_failing = failing;
        self.shared.changed.notify_waiters();
    }

    /// Makes every HTML send or edit fail with "can't parse entities" (or not).
    pub fn set_refuse_html(&self, refuse: bool) {
        self.shared.lock().refuse_html = refuse;
    }

    /// File downloads wait `delay` before their bytes come (a slow file server).
    pub fn set_file_delay(&self, delay: Duration) {
        self.shared.lock().file_delay = delay;
    }

    /// When each file download was answered.
    pub fn files_served(&self) -> Vec<Instant> {
        self.shared.lock().files_served.clone()
    }

    /// Waits until `check` holds of what was recorded, or panics after `timeout`.
    pub async fn wait_until(
        &self,
        timeout: Duration,
        what: &str,
        check: impl Fn(&FakeTelegram) -> bool,
    ) {
        let what = format!("the fake Telegram seeing {what}");
        let context = || {
            let inner = self.shared.lock();
            format!(
                "polls: {}, last calls: {:?}, sent: {:#?}",
                inner.polls, inner.calls, inner.sent
            )
        };
        crate::wait_on(
            &self.shared.changed,
            timeout,
            &what,
            || check(self),
            context,
        )
        .await;
    }
}

impl Drop for FakeTelegram {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

fn next_message(inner: &mut Inner, chat: i64) -> i64 {
    let next = inner.next_message.entry(chat).or_insert(1);
    let id = *next;
    *next += 1;
    id
}

fn fastrand_id() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(1);
    NEXT.fetch_add(1, Ordering::Relaxed)
}
