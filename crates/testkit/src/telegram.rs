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
    /// The last methods called, oldest first (at most 32), for a failing wait to show.
    calls: std::collections::VecDeque<String>,
    /// Files by id: (path, bytes).
    files: HashMap<String, (String, Vec<u8>)>,
    /// The webhook, as set: (url, secret).
    webhook: Option<(String, Option<String>)>,
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
            .route("/{bot}/{method}", post(method))
            .route("/file/{bot}/{*path}", get(file))
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
        let id = inner.next_update;
        inner.next_update += 1;
        inner
            .updates
            .insert(id, json!({"update_id": id, "message": message}));
        drop(inner);
        self.shared.changed.notify_waiters();
        message_id
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

fn ok(result: Value) -> Response {
    axum::Json(json!({"ok": true, "result": result})).into_response()
}

fn fail(code: u16, description: &str) -> Response {
    let status = StatusCode::from_u16(code).unwrap_or(StatusCode::BAD_REQUEST);
    (
        status,
        axum::Json(json!({"ok": false, "error_code": code, "description": description})),
    )
        .into_response()
}

async fn method(
    State(shared): State<Arc<Shared>>,
    Path((bot, method)): Path<(String, String)>,
    headers: axum::http::HeaderMap,
    body: Bytes,
) -> Response {
    {
        let mut inner = shared.lock();
        if inner.calls.len() == 32 {
            inner.calls.pop_front();
        }
        inner.calls.push_back(method.clone());
    }
    if bot != format!("bot{TEST_TOKEN}") {
        return fail(401, "Unauthorized");
    }
    let content_type = headers
        .get(axum::http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    let params: Value = if body.is_empty() {
        json!({})
    } else if let Some(boundary) = content_type
        .strip_prefix("multipart/form-data")
        .and_then(|rest| rest.split("boundary=").nth(1))
    {
        multipart_fields(&body, boundary.trim_matches('"'))
    } else {
        match serde_json::from_slice(&body) {
            Ok(value) => value,
            Err(_) => return fail(400, "Bad Request: the body is not JSON"),
        }
    };
    match method.to_ascii_lowercase().as_str() {
        "getme" => get_me(&shared),
        "getwebhookinfo" => {
            ok(json!({"url": "", "has_custom_certificate": false, "pending_update_count": 0}))
        }
        "deletewebhook" => {
            shared.lock().webhook = None;
            ok(json!(true))
        }
        "setwebhook" => {
            let url = params["url"].as_str().unwrap_or_default().to_owned();
            let secret = params["secret_token"].as_str().map(str::to_owned);
            shared.lock().webhook = Some((url, secret));
            shared.changed.notify_waiters();
            ok(json!(true))
        }
        "getupdates" => get_updates(&shared, &params).await,
        "sendmessage" => send_message(&shared, &params),
        "editmessagetext" => edit_message(&shared, &params),
        "sendchataction" => {
            let chat = params["chat_id"].as_i64().unwrap_or_default();
            let action = params["action"].as_str().unwrap_or_default().to_owned();
            shared.lock().actions.push((chat, action));
            shared.changed.notify_waiters();
            ok(json!(true))
        }
        "getfile" => {
            let id = params["file_id"].as_str().unwrap_or_default();
            match shared.lock().files.get(id) {
                Some((path, bytes)) => ok(json!({"file_id": id, "file_unique_id": id,
                    "file_size": bytes.len(), "file_path": path})),
                None => fail(400, "Bad Request: invalid file_id"),
            }
        }
        _ => fail(404, "Not Found: method not found"),
    }
}

/// The text fields of a `multipart/form-data` body (teloxide sends methods that may carry
/// files this way), as a JSON object of strings.
fn multipart_fields(body: &[u8], boundary: &str) -> Value {
    let text = String::from_utf8_lossy(body);
    let mut fields = serde_json::Map::new();
    for part in text.split(&format!("--{boundary}")) {
        let Some((head, value)) = part.split_once("\r\n\r\n") else {
            continue;
        };
        let Some(name) = head
            .split("name=\"")
            .nth(1)
            .and_then(|rest| rest.split('"').next())
        else {
            continue;
        };
        let value = value.strip_suffix("\r\n").unwrap_or(value);
        fields.insert(name.to_owned(), json!(value));
    }
    Value::Object(fields)
}

fn get_me(shared: &Shared) -> Response {
    if shared.lock().get_me_garbage {
        return ok(json!({"id": "not a number", "is_bot": "maybe"}));
    }
    ok(json!({
        "id": BOT_ID, "is_bot": true, "first_name": "Switchboard Test", "username": BOT_USERNAME,
        "can_join_groups": true, "can_read_all_group_messages": false,
        "supports_inline_queries": false, "can_connect_to_business": false, "has_main_web_app": false
    }))
}

async fn get_updates(shared: &Shared, params: &Value) -> Response {
    let offset = params["offset"].as_i64();
    let limit = params["limit"].as_u64().unwrap_or(100).clamp(1, 100) as usize;
    let hold = Duration::from_secs(params["timeout"].as_u64().unwrap_or(0).min(60));
    let deadline = Instant::now() + hold;
    shared.lock().polls += 1;
    shared.changed.notify_waiters();
    loop {
        let changed = shared.changed.notified();
        {
            let mut inner = shared.lock();
            if let Some(offset) = offset {
                // An offset confirms every update below it.
                let below: Vec<u32> = inner
                    .updates
                    .keys()
                    .copied()
                    .filter(|id| i64::from(*id) < offset)
                    .collect();
                for id in below {
                    inner.updates.remove(&id);
                }
            }
            let batch: Vec<Value> = inner.updates.values().take(limit).cloned().collect();
            if !batch.is_empty() || Instant::now() >= deadline {
                inner.delivered += batch.len() as u64;
                drop(inner);
                shared.changed.notify_waiters();
                return ok(Value::Array(batch));
            }
        }
        let _ = tokio::time::timeout_at(deadline, changed).await;
    }
}

fn rate_limited(inner: &mut Inner, chat: i64) -> Option<Response> {
    let (secs, left) = inner.limited.get_mut(&chat)?;
    if *left == 0 {
        return None;
    }
    *left -= 1;
    let secs = *secs;
    inner.limited_at.push((chat, Instant::now()));
    Some(
        (
            StatusCode::TOO_MANY_REQUESTS,
            axum::Json(json!({"ok": false, "error_code": 429,
                "description": format!("Too Many Requests: retry after {secs}"),
                "parameters": {"retry_after": secs}})),
        )
            .into_response(),
    )
}

fn message_json(chat: i64, message_id: i64, text: &str) -> Value {
    let chat_json = if chat > 0 {
        json!({"id": chat, "type": "private", "first_name": "Tester"})
    } else {
        json!({"id": chat, "type": "supergroup", "title": "Test group"})
    };
    json!({"message_id": message_id, "date": 1_700_000_000, "chat": chat_json, "text": text,
        "from": {"id": BOT_ID, "is_bot": true, "first_name": "Switchboard Test", "username": BOT_USERNAME}})
}

/// What Telegram checks of a text before sending or editing: the chat's rate limit, the
/// HTML it can parse, the length. The text as users would see it, or the refusal.
fn accept_text(
    inner: &mut Inner,
    chat: i64,
    text: &str,
    html: bool,
) -> Result<String, Box<Response>> {
    if let Some(limited) = rate_limited(inner, chat) {
        return Err(Box::new(limited));
    }
    if html && inner.refuse_html {
        return Err(Box::new(fail(
            400,
            "Bad Request: can't parse entities: Unsupported start tag \"b\" at byte offset 0",
        )));
    }
    check_text(text, html).map_err(|refused| Box::new(fail(400, &refused)))
}

fn send_message(shared: &Shared, params: &Value) -> Response {
    let chat = params["chat_id"].as_i64().unwrap_or_default();
    let text = params["text"].as_str().unwrap_or_default();
    let html = params["parse_mode"].as_str() == Some("HTML");
    let mut inner = shared.lock();
    let visible = match accept_text(&mut inner, chat, text, html) {
        Ok(visible) => visible,
        Err(refused) => return *refused,
    };
    let message_id = next_message(&mut inner, chat);
    inner.sent.push(Sent {
        chat,
        topic: params["message_thread_id"].as_i64(),
        message_id,
        text: text.to_owned(),
        visible: visible.clone(),
        html,
        reply_to: params["reply_parameters"]["message_id"].as_i64(),
        edit: false,
        at: Instant::now(),
    });
    inner.texts.insert((chat, message_id), visible.clone());
    drop(inner);
    shared.changed.notify_waiters();
    ok(message_json(chat, message_id, &visible))
}

fn edit_message(shared: &Shared, params: &Value) -> Response {
    let chat = params["chat_id"].as_i64().unwrap_or_default();
    let message_id = params["message_id"].as_i64().unwrap_or_default();
    let text = params["text"].as_str().unwrap_or_default();
    let html = params["parse_mode"].as_str() == Some("HTML");
    let mut inner = shared.lock();
    let visible = match accept_text(&mut inner, chat, text, html) {
        Ok(visible) => visible,
        Err(refused) => return *refused,
    };
    match inner.texts.get(&(chat, message_id)) {
        None => return fail(400, "Bad Request: message to edit not found"),
        Some(current) if *current == visible => {
            return fail(
                400,
                "Bad Request: message is not modified: specified new message content and reply markup are exactly the same as a current content and reply markup of the message",
            );
        }
        Some(_) => {}
    }
    inner.sent.push(Sent {
        chat,
        topic: None,
        message_id,
        text: text.to_owned(),
        visible: visible.clone(),
        html,
        reply_to: None,
        edit: true,
        at: Instant::now(),
    });
    inner.texts.insert((chat, message_id), visible.clone());
    drop(inner);
    shared.changed.notify_waiters();
    ok(message_json(chat, message_id, &visible))
}

async fn file(
    State(shared): State<Arc<Shared>>,
    Path((bot, path)): Path<(String, String)>,
) -> Response {
    if bot != format!("bot{TEST_TOKEN}") {
        return StatusCode::UNAUTHORIZED.into_response();
    }
    let (bytes, delay) = {
        let inner = shared.lock();
        let bytes = inner
            .files
            .values()
            .find(|(p, _)| *p == path)
            .map(|(_, bytes)| bytes.clone());
        (bytes, inner.file_delay)
    };
    tokio::time::sleep(delay).await;
    shared.lock().files_served.push(Instant::now());
    shared.changed.notify_waiters();
    match bytes {
        Some(bytes) => bytes.into_response(),
        None => StatusCode::NOT_FOUND.into_response(),
    }
}
