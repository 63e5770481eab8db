//! [`FakeSlack`]: Slack's Web API and Socket Mode for tests, speaking the real wire format
//! over real sockets.
//!
//! `POST /api/<method>` answers `{ok, …}` envelopes: `auth.test` (the bot token),
//! `apps.connections.open` (the app token; it names the fake's Socket Mode socket),
//! `chat.postMessage` and `chat.update` (refused with `msg_too_long` past 4,000 characters, and
//! with a 429 and its `Retry-After` while a channel is told to be rate limited). The socket
//! says `hello`, sends the `events_api` envelopes tests make, takes their acknowledgements,
//! and sends every envelope not acknowledged again when a socket connects — as Slack retries
//! — so a daemon that acknowledged before taking a message in would lose it. Everything is
//! recorded.

use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::ws::{Message as WsMessage, WebSocket, WebSocketUpgrade};
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{any, get};
use serde_json::{Value, json};
use tokio::sync::{Notify, mpsc};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// The bot token tests configure.
pub const BOT_TOKEN: &str = "xoxb-test-0000000000-bot-token";
/// The app-level token tests configure (Socket Mode).
pub const APP_TOKEN: &str = "xapp-1-test-0000000000-app-token";
/// The bot's user id.
pub const BOT_USER: &str = "UBOT0000001";
/// The longest text the fake takes.
pub const MAX_TEXT: usize = 4000;

/// Something the bot sent: a new message, or an edit of one.
#[derive(Clone, Debug)]
pub struct Sent {
    /// The channel.
    pub channel: String,
    /// The message's `ts` (the edited one's, for an edit).
    pub ts: String,
    /// Its text.
    pub text: String,
    /// The thread it was posted in.
    pub thread_ts: Option<String>,
    /// The person's message it answers (the `ts` in its `switchboard_reply` metadata).
    pub reply_to: Option<String>,
    /// Whether this is an edit.
    pub edit: bool,
    /// When it arrived.
    pub at: Instant,
}

#[derive(Default)]
struct Inner {
    /// The connected socket's frames out, if one is connected.
    socket: Option<mpsc::UnboundedSender<String>>,
    /// Sockets opened so far.
    connections: u64,
    /// Envelopes sent and not acknowledged, in order: (envelope id, frame).
    unacked: Vec<(String, Value)>,
    /// The last envelope sent.
    last: Option<Value>,
    /// The envelope of each message event, by the message's `ts`.
    by_ts: HashMap<String, Value>,
    acked: HashSet<String>,
    next: u64,
    sent: Vec<Sent>,
    texts: HashMap<(String, String), String>,
    /// Channels answering 429: (Retry-After seconds, answers left).
    limited: HashMap<String, (u64, u32)>,
    limited_at: Vec<(String, Instant)>,
    files: HashMap<String, Vec<u8>>,
    file_delay: Duration,
    files_served: Vec<Instant>,
    /// Uploads begun (`files.getUploadURLExternal`) and not completed, by file id.
    pending: HashMap<String, Pending>,
    /// Files the bot shared into chats, in order.
    uploads: Vec<crate::multipart::Uploaded>,
    /// Uploads in flight held for a kill.
    holding: crate::multipart::Holding,
}

/// An upload begun: the file's name, its length, and its bytes and type once posted.
type Pending = (String, usize, Option<(Vec<u8>, String)>);

struct Shared {
    inner: Mutex<Inner>,
    changed: Notify,
    addr: Mutex<Option<SocketAddr>>,
    stop: CancellationToken,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// A running fake Slack; it stops when dropped.
pub struct FakeSlack {
    addr: SocketAddr,
    shared: Arc<Shared>,
}

impl FakeSlack {
    /// Starts on 127.0.0.1 with an ephemeral port.
    pub async fn start() -> std::io::Result<Self> {
        let shared = Arc::new(Shared {
            inner: Mutex::new(Inner {
                next: 1,
                ..Inner::default()
            }),
            changed: Notify::new(),
            addr: Mutex::new(None),
            stop: CancellationToken::new(),
        });
        let app = Router::new()
            .route("/api/{method}", any(web_api))
            .route("/link", get(socket))
            .route("/link/", get(socket))
            .route("/files/{name}", get(file))
            .route("/upload/{file}", axum::routing::post(upload))
            .with_state(shared.clone());
        let (addr, stop) = crate::serve(app, SocketAddr::from(([127, 0, 0, 1], 0))).await?;
        *shared.addr.lock().unwrap_or_else(PoisonError::into_inner) = Some(addr);
        let sockets = shared.stop.clone();
        tokio::spawn(async move {
            sockets.cancelled().await;
            stop.cancel();
        });
        Ok(Self { addr, shared })
    }

    /// The URL to configure as `channels.slack.api_url`.
    pub fn api_url(&self) -> String {
        format!("http://{}/api", self.addr)
    }

    /// The direct-message channel of `user` with the bot.
    pub fn dm_channel(user: &str) -> String {
        format!("D{user}")
    }

    /// `user` writes `text` to the bot in a direct message; returns the message's `ts`.
    pub fn dm(&self, user: &str, text: &str) -> String {
        self.message(&Self::dm_channel(user), "im", user, text, None, json!({}))
    }

    /// `user` sends the bot a file (`bytes`, named `name`) with `text`, in a direct message.
    pub fn dm_file(&self, user: &str, text: &str, name: &str, bytes: Vec<u8>) -> String {
        let url = format!("http://{}/files/{name}", self.addr);
        let size = bytes.len();
        self.shared.lock().files.insert(name.to_owned(), bytes);
        let files = json!({"files": [{"id": format!("F{name}"), "name": name,
            "mimetype": "application/octet-stream", "size": size,
            "url_private": url, "url_private_download": url}]});
        self.message(&Self::dm_channel(user), "im", user, text, None, files)
    }

    /// `user` records an audio clip (`bytes`) in a direct message, as Slack's apps send it.
    pub fn dm_audio(&self, user: &str, bytes: Vec<u8>) -> String {
        let name = format!("audio_message_{}.webm", self.next_ts().replace('.', "_"));
        let url = format!("http://{}/files/{name}", self.addr);
        let size = bytes.len();
        self.shared.lock().files.insert(name.clone(), bytes);
        let files = json!({"files": [{"id": format!("F{name}"), "name": name,
            "mimetype": "audio/webm", "subtype": "slack_audio", "size": size,
            "url_private": url, "url_private_download": url}]});
        self.message(&Self::dm_channel(user), "im", user, "", None, files)
    }

    /// `user` writes `text` in channel `channel` (in thread `thread` if given), mentioning the
    /// bot if the text says `<@UBOT0000001>`: a `message` event, and an `app_mention` too.
    pub fn channel_message(
        &self,
        channel: &str,
        user: &str,
        text: &str,
        thread: Option<&str>,
    ) -> String {
        self.message(channel, "channel", user, text, thread, json!({}))
    }

    fn message(
        &self,
        channel: &str,
        channel_type: &str,
        user: &str,
        text: &str,
        thread: Option<&str>,
        extra: Value,
    ) -> String {
        let ts = self.next_ts();
        let mut event = json!({"type": "message", "channel": channel, "channel_type": channel_type,
            "user": user, "text": text, "ts": ts, "event_ts": ts,
            "client_msg_id": format!("client-{ts}")});
        if let Some(thread) = thread {
            event["thread_ts"] = json!(thread);
        }
        if let (Some(event), Some(extra)) = (event.as_object_mut(), extra.as_object()) {
            for (key, value) in extra {
                event.insert(key.clone(), value.clone());
            }
        }
        self.push_event(event.clone());
        if channel_type != "im" && text.contains(&format!("<@{BOT_USER}>")) {
            event["type"] = json!("app_mention");
            self.push_event(event);
        }
        ts
    }

    /// Sends an `events_api` envelope with `event` (or keeps it for the next socket).
    fn push_event(&self, event: Value) {
        let mut inner = self.shared.lock();
        let number = inner.next;
        inner.next += 1;
        let envelope = format!("envelope-{number}");
        let frame = json!({"envelope_id": envelope, "type": "events_api",
            "accepts_response_payload": false, "retry_attempt": 0, "retry_reason": "",
            "payload": {"type": "event_callback", "team_id": "T0000001", "api_app_id": "A0000001",
                "event": event, "event_id": format!("Ev{number:08}"), "event_time": 1_700_000_000,
                "authorizations": [{"team_id": "T0000001", "user_id": BOT_USER, "is_bot": true}]}});
        inner.unacked.push((envelope, frame.clone()));
        inner.last = Some(frame.clone());
        if let Some(ts) = frame["payload"]["event"]["ts"].as_str() {
            inner.by_ts.insert(ts.to_owned(), frame.clone());
        }
        if let Some(socket) = &inner.socket {
            let _ = socket.send(frame.to_string());
        }
    }

    /// Sends the last envelope again, as Slack does when it thinks an acknowledgement came
    /// too late (`retry_attempt` 1): same envelope, same event.
    pub fn resend_last(&self) {
        let mut inner = self.shared.lock();
        let Some(mut frame) = inner.last.clone() else {
            return;
        };
        frame["retry_attempt"] = json!(1);
        frame["retry_reason"] = json!("timeout");
        if let Some(envelope) = frame["envelope_id"].as_str() {
            let envelope = envelope.to_owned();
            inner.unacked.push((envelope, frame.clone()));
        }
        if let Some(socket) = &inner.socket {
            let _ = socket.send(frame.to_string());
        }
    }

    /// Delivers the message `ts` again as Slack retries an event it thinks was not taken in
    /// time: a new envelope with the same event (and event id), `retry_attempt` 1.
    pub fn deliver_again(&self, ts: &str) {
        let mut inner = self.shared.lock();
        let Some(mut frame) = inner.by_ts.get(ts).cloned() else {
            return;
        };
        let number = inner.next;
        inner.next += 1;
        let envelope = format!("envelope-{number}");
        frame["envelope_id"] = json!(envelope);
        frame["retry_attempt"] = json!(1);
        frame["retry_reason"] = json!("timeout");
        inner.unacked.push((envelope, frame.clone()));
        if let Some(socket) = &inner.socket {
            let _ = socket.send(frame.to_string());
        }
    }

    /// Asks the connected socket to reconnect (Slack's `disconnect`, as it sends every few
    /// hours).
    pub fn disconnect(&self) {
        let frame = json!({"type": "disconnect", "reason": "refresh_requested",
            "debug_info": {"host": "fake-slack"}});
        if let Some(socket) = &self.shared.lock().socket {
            let _ = socket.send(frame.to_string());
        }
    }

    fn next_ts(&self) -> String {
        let mut inner = self.shared.lock();
        inner.next += 1;
        format!("1700000000.{:06}", inner.next)
    }

    /// Sockets opened so far.
    pub fn connections(&self) -> u64 {
        self.shared.lock().connections
    }

    /// Whether a socket is connected.
    pub fn connected(&self) -> bool {
        self.shared.lock().socket.is_some()
    }

    /// Envelopes sent and not acknowledged yet.
    pub fn unacked(&self) -> usize {
        self.shared.lock().unacked.len()
    }

    /// How many uploads arrived so far (held and refused ones too).
    pub fn uploads_started(&self) -> u64 {
        self.shared.lock().holding.started
    }

    /// Holds every upload that arrives until [`FakeSlack::release_uploads`] (an upload in
    /// flight, for a kill in the middle of it).
    pub fn hold_uploads(&self) {
        self.shared.lock().holding.hold();
    }

    /// Lets held uploads go: kept as sent (`keep`), or dropped as if the connection broke
    /// before the platform had the whole file. Later uploads are not held.
    pub fn release_uploads(&self, keep: bool) {
        self.shared.lock().holding.release(keep);
        self.shared.changed.notify_waiters();
    }

    /// The files the bot shared into `chat` (a channel, or `channel:thread`), in order.
    pub fn uploads_to(&self, chat: &str) -> Vec<crate::multipart::Uploaded> {
        self.shared
            .lock()
            .uploads
            .iter()
            .filter(|upload| upload.chat == chat)
            .cloned()
            .collect()
    }

    /// Everything the bot sent so far.
    pub fn sent(&self) -> Vec<Sent> {
        self.shared.lock().sent.clone()
    }

    /// New messages (not edits) the bot sent to `channel`.
    pub fn messages_to(&self, channel: &str) -> Vec<Sent> {
        self.sent()
            .into_iter()
            .filter(|s| s.channel == channel && !s.edit)
            .collect()
    }

    /// What message `ts` in `channel` says now.
    pub fn current_text(&self, channel: &str, ts: &str) -> Option<String> {
        self.shared
            .lock()
            .texts
            .get(&(channel.to_owned(), ts.to_owned()))
            .cloned()
    }

    /// The next `times` writes to `channel` answer 429 with `Retry-After`.
    pub fn rate_limit(&self, channel: &str, retry_after: Duration, times: u32) {
        self.shared
            .lock()
            .limited
            .insert(channel.to_owned(), (retry_after.as_secs().max(1), times));
    }

    /// When the 429s for `channel` were answered.
    pub fn limited_at(&self, channel: &str) -> Vec<Instant> {
        self.shared
            .lock()
            .limited_at
            .iter()
            .filter(|(c, _)| c == channel)
            .map(|(_, at)| *at)
            .collect()
    }

    /// File downloads wait `delay` before their bytes come.
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
        check: impl Fn(&FakeSlack) -> bool,
    ) {
        let what = format!("the fake Slack seeing {what}");
        let context = || format!("sent: {:#?}", self.shared.lock().sent);
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

impl Drop for FakeSlack {
    fn drop(&mut self) {
        self.shared.stop.cancel();
    }
}

fn ok(body: Value) -> Response {
    let mut body = body;
    body["ok"] = json!(true);
    axum::Json(body).into_response()
}

fn fail(error: &str) -> Response {
    axum::Json(json!({"ok": false, "error": error})).into_response()
}

/// The token of a request: its bearer header, or a `token` parameter.
fn token(headers: &HeaderMap, params: &Value) -> Option<String> {
    headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::to_owned)
        .or_else(|| params["token"].as_str().map(str::to_owned))
}

/// A Web API request's parameters: a JSON body, or a form.
fn params(body: &Bytes) -> Value {
    if let Ok(value) = serde_json::from_slice::<Value>(body) {
        return value;
    }
    let text = String::from_utf8_lossy(body);
    let mut map = serde_json::Map::new();
    for pair in text.split('&').filter(|pair| !pair.is_empty()) {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        let decode = |s: &str| {
            url::form_urlencoded::parse(format!("x={s}").as_bytes())
                .next()
                .map(|(_, v)| v.into_owned())
                .unwrap_or_default()
        };
        map.insert(decode(key), json!(decode(value)));
    }
    Value::Object(map)
}

async fn web_api(
    State(shared): State<Arc<Shared>>,
    Path(method): Path<String>,
    axum::extract::RawQuery(query): axum::extract::RawQuery,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let mut params = params(&body);
    if let (Some(query), Some(fields)) = (query, params.as_object_mut()) {
        for (key, value) in url::form_urlencoded::parse(query.as_bytes()) {
            fields.insert(key.into_owned(), json!(value.into_owned()));
        }
    }
    let token = token(&headers, &params);
    match method.as_str() {
        "apps.connections.open" => {
            if token.as_deref() != Some(APP_TOKEN) {
                return fail("invalid_auth");
            }
            let addr = *shared.addr.lock().unwrap_or_else(PoisonError::into_inner);
            let url = addr
                .map(|a| format!("ws://{a}/link/?ticket=fake"))
                .unwrap_or_default();
            ok(json!({"url": url}))
        }
        _ if token.as_deref() != Some(BOT_TOKEN) => fail("invalid_auth"),
        "auth.test" => ok(json!({"url": "https://fake.slack.com/", "team": "Fake",
            "user": "switchboard", "team_id": "T0000001", "user_id": BOT_USER, "bot_id": "B0000001"})),
        "chat.postMessage" | "chat.update" => write(&shared, &method, &params),
        "files.getUploadURLExternal" => upload_url(&shared, &params),
        "files.completeUploadExternal" => {
            if !crate::multipart::arrive(&shared.changed, |read| read(&mut shared.lock().holding))
                .await
            {
                return (StatusCode::INTERNAL_SERVER_ERROR, "the upload broke off").into_response();
            }
            complete_upload(&shared, &params)
        }
        _ => fail("unknown_method"),
    }
}

/// `files.getUploadURLExternal`: an address on the fake to post the file's bytes to.
fn upload_url(shared: &Shared, params: &Value) -> Response {
    let name = params["filename"].as_str().unwrap_or_default().to_owned();
    let length = params["length"]
        .as_str()
        .and_then(|length| length.parse().ok())
        .or_else(|| params["length"].as_u64().map(|length| length as usize));
    let (Some(length), false) = (length, name.is_empty()) else {
        return fail("invalid_arguments");
    };
    let addr = *shared.addr.lock().unwrap_or_else(PoisonError::into_inner);
    let mut inner = shared.lock();
    inner.next += 1;
    let id = format!("F{:08}", inner.next);
    inner.pending.insert(id.clone(), (name, length, None));
    let url = addr
        .map(|addr| format!("http://{addr}/upload/{id}"))
        .unwrap_or_default();
    ok(json!({"upload_url": url, "file_id": id}))
}

/// The bytes of an upload begun before, posted to its address.
async fn upload(
    State(shared): State<Arc<Shared>>,
    Path(id): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let mime = headers
        .get(axum::http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    let mut inner = shared.lock();
    match inner.pending.get_mut(&id) {
        Some((_, length, posted)) if *length == body.len() => {
            *posted = Some((body.to_vec(), mime));
            (StatusCode::OK, format!("OK - {}", body.len())).into_response()
        }
        Some(_) => (
            StatusCode::BAD_REQUEST,
            "the length is not the one asked for",
        )
            .into_response(),
        None => StatusCode::NOT_FOUND.into_response(),
    }
}

/// `files.completeUploadExternal`: each uploaded file shared into the chat (its thread), with
/// the comment.
fn complete_upload(shared: &Shared, params: &Value) -> Response {
    let channel = params["channel_id"].as_str().unwrap_or_default().to_owned();
    let thread = params["thread_ts"].as_str().map(str::to_owned);
    let comment = params["initial_comment"].as_str().map(str::to_owned);
    let files: Vec<String> = params["files"]
        .as_array()
        .map(|files| {
            files
                .iter()
                .filter_map(|file| file["id"].as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default();
    let mut inner = shared.lock();
    if let Some((secs, left)) = inner.limited.get_mut(&channel)
        && *left > 0
    {
        *left -= 1;
        let secs = *secs;
        inner.limited_at.push((channel, Instant::now()));
        drop(inner);
        shared.changed.notify_waiters();
        let mut response = axum::Json(json!({"ok": false, "error": "ratelimited"})).into_response();
        *response.status_mut() = StatusCode::TOO_MANY_REQUESTS;
        if let Ok(value) = secs.to_string().parse() {
            response.headers_mut().insert("retry-after", value);
        }
        return response;
    }
    let mut shared_files = Vec::new();
    for id in files {
        let Some((name, _, Some((bytes, mime)))) = inner.pending.remove(&id) else {
            return fail("file_not_found");
        };
        let chat = match &thread {
            Some(thread) => format!("{channel}:{thread}"),
            None => channel.clone(),
        };
        shared_files.push(json!({"id": id, "name": name, "title": name, "mimetype": mime}));
        inner.uploads.push(crate::multipart::Uploaded {
            chat,
            id,
            method: "files.completeUploadExternal".into(),
            name,
            mime: Some(mime),
            bytes,
            caption: comment.clone(),
            reply_to: None,
            at: Instant::now(),
        });
    }
    drop(inner);
    shared.changed.notify_waiters();
    ok(json!({"files": shared_files}))
}

/// A new message or an edit, as Slack takes it.
fn write(shared: &Shared, method: &str, params: &Value) -> Response {
    let channel = params["channel"].as_str().unwrap_or_default().to_owned();
    let text = params["text"].as_str().unwrap_or_default().to_owned();
    let mut inner = shared.lock();
    if let Some((secs, left)) = inner.limited.get_mut(&channel)
        && *left > 0
    {
        *left -= 1;
        let secs = *secs;
        inner.limited_at.push((channel, Instant::now()));
        drop(inner);
        shared.changed.notify_waiters();
        let mut response = axum::Json(json!({"ok": false, "error": "ratelimited"})).into_response();
        *response.status_mut() = StatusCode::TOO_MANY_REQUESTS;
        if let Ok(value) = secs.to_string().parse() {
            response.headers_mut().insert("retry-after", value);
        }
        return response;
    }
    if text.is_empty() {
        return fail("no_text");
    }
    if text.chars().count() > MAX_TEXT {
        return fail("msg_too_long");
    }
    let edit = method == "chat.update";
    let ts = if edit {
        let ts = params["ts"].as_str().unwrap_or_default().to_owned();
        if !inner.texts.contains_key(&(channel.clone(), ts.clone())) {
            return fail("message_not_found");
        }
        ts
    } else {
        inner.next += 1;
        format!("1700000001.{:06}", inner.next)
    };
    inner
        .texts
        .insert((channel.clone(), ts.clone()), text.clone());
    inner.sent.push(Sent {
        channel: channel.clone(),
        ts: ts.clone(),
        text: text.clone(),
        thread_ts: params["thread_ts"].as_str().map(str::to_owned),
        reply_to: params["metadata"]["event_payload"]["reply_to"]
            .as_str()
            .map(str::to_owned),
        edit,
        at: Instant::now(),
    });
    drop(inner);
    shared.changed.notify_waiters();
    ok(json!({"channel": channel, "ts": ts, "text": text,
        "message": {"type": "message", "text": text, "user": BOT_USER, "ts": ts}}))
}

async fn file(
    State(shared): State<Arc<Shared>>,
    Path(name): Path<String>,
    headers: HeaderMap,
) -> Response {
    if token(&headers, &Value::Null).as_deref() != Some(BOT_TOKEN) {
        return StatusCode::FORBIDDEN.into_response();
    }
    let (bytes, delay) = {
        let inner = shared.lock();
        (inner.files.get(&name).cloned(), inner.file_delay)
    };
    tokio::time::sleep(delay).await;
    shared.lock().files_served.push(Instant::now());
    shared.changed.notify_waiters();
    match bytes {
        Some(bytes) => bytes.into_response(),
        None => StatusCode::NOT_FOUND.into_response(),
    }
}

async fn socket(State(shared): State<Arc<Shared>>, upgrade: WebSocketUpgrade) -> Response {
    upgrade.on_upgrade(move |socket| session(shared, socket))
}

/// One Socket Mode connection: `hello`, then every unacknowledged envelope, then what comes.
async fn session(shared: Arc<Shared>, mut socket: WebSocket) {
    let (tx, mut rx) = mpsc::unbounded_channel::<String>();
    let backlog = {
        let mut inner = shared.lock();
        inner.connections += 1;
        inner.socket = Some(tx.clone());
        inner.unacked.clone()
    };
    shared.changed.notify_waiters();
    let hello = json!({"type": "hello", "num_connections": 1,
        "debug_info": {"host": "fake-slack", "approximate_connection_time": 18060},
        "connection_info": {"app_id": "A0000001"}});
    let _ = tx.send(hello.to_string());
    for (_, frame) in backlog {
        let _ = tx.send(frame.to_string());
    }
    loop {
        tokio::select! {
            () = shared.stop.cancelled() => break,
            frame = rx.recv() => {
                let Some(frame) = frame else { break };
                if socket.send(WsMessage::text(frame)).await.is_err() {
                    break;
                }
            }
            message = socket.recv() => {
                let Some(Ok(message)) = message else { break };
                let WsMessage::Text(text) = message else {
                    if matches!(message, WsMessage::Close(_)) { break } else { continue }
                };
                let Ok(ack) = serde_json::from_str::<Value>(text.as_str()) else { continue };
                if let Some(envelope) = ack["envelope_id"].as_str() {
                    let mut inner = shared.lock();
                    inner.unacked.retain(|(id, _)| id != envelope);
                    inner.acked.insert(envelope.to_owned());
                    drop(inner);
                    shared.changed.notify_waiters();
                }
            }
        }
    }
    let mut inner = shared.lock();
    if inner
        .socket
        .as_ref()
        .is_some_and(|socket| socket.same_channel(&tx))
    {
        inner.socket = None;
    }
    drop(inner);
    shared.changed.notify_waiters();
}
