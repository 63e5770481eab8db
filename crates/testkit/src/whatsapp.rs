//! [`FakeWhatsApp`]: the WhatsApp Cloud API for tests — the Graph API the bot calls, and Meta's
//! side of the webhook — speaking the real wire format over real sockets.
//!
//! Graph (`/v21.0/…`, every call with the access token): `GET /{phone}` (the number; each one
//! is a "session": the channel checks it at every start), `POST /{phone}/messages` (text,
//! media by id, the read mark with "typing…"; text over 4,096 characters refused with code
//! 100, a chat told to be rate limited answered 429 with code 130429 and a `Retry-After`, a
//! chat whose window is closed refused with code 131047), `POST /{phone}/media` (a multipart
//! upload; held for a kill when asked), `GET /{media id}` (where a file people sent is) and
//! the file itself on the fake's own host. Webhook: what a person writes is posted to the
//! attached daemon's `/whatsapp/webhook`, signed with the app secret, and posted again until it
//! is answered 200 — as Meta does — so a daemon that answered before taking a message in would
//! lose it; one person's messages are posted one after another, in their order. Everything is recorded.

use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde_json::{Value, json};
use tokio::sync::Notify;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

pub use self::meta::signature;
use self::meta::{exchange, post_webhook, status_of};

mod meta;

/// The access token tests configure.
pub const ACCESS_TOKEN: &str = "EAAtest0000000000whatsapp";
/// The app secret notifications are signed with.
pub const APP_SECRET: &str = "test-app-secret-0000";
/// The verify token of the webhook's handshake.
pub const VERIFY_TOKEN: &str = "test-verify-token";
/// The business number's id.
pub const PHONE_NUMBER_ID: &str = "106540352242922";
/// The longest text the fake takes.
pub const MAX_TEXT: usize = 4096;

/// A message the bot sent.
#[derive(Clone, Debug)]
pub struct Sent {
    /// The person's number: the chat.
    pub to: String,
    /// Its id (`wamid.…`).
    pub id: String,
    /// Its text (a file's caption, for a file).
    pub text: String,
    /// The person's message it answers (its `context`).
    pub reply_to: Option<String>,
    /// `text`, `image`, `audio`, `document`, …
    pub kind: String,
    /// When it arrived.
    pub at: Instant,
}

#[derive(Default)]
struct Inner {
    /// The daemon notifications go to.
    webhook: Option<SocketAddr>,
    sessions: u64,
    next: u64,
    sent: Vec<Sent>,
    /// "typing…" shown, by chat.
    typing: HashMap<String, usize>,
    /// Messages the bot marked read.
    read: HashSet<String>,
    /// Each person's message: its chat and its notification's body.
    written: HashMap<String, (String, Value)>,
    /// Messages whose notification was answered 200.
    acked: HashSet<String>,
    /// Chats answering 429: (Retry-After seconds, answers left).
    limited: HashMap<String, (u64, u32)>,
    limited_at: Vec<(String, Instant)>,
    /// Chats whose customer service window is closed.
    closed: HashSet<String>,
    /// Files people sent, by media id: (bytes, MIME type).
    files: HashMap<String, (Vec<u8>, String)>,
    file_delay: Duration,
    /// Files are served with their last byte changed (their hash no longer matches).
    corrupt_files: bool,
    files_served: Vec<Instant>,
    /// Files the bot uploaded, by media id: (name, MIME type, bytes).
    media: HashMap<String, (String, String, Vec<u8>)>,
    uploads: Vec<crate::multipart::Uploaded>,
    holding: crate::multipart::Holding,
    /// Webhook posts answered, by status.
    answers: HashMap<u16, u64>,
}

struct Shared {
    inner: Mutex<Inner>,
    changed: Notify,
    /// Where the fake listens, once it does.
    addr: std::sync::OnceLock<SocketAddr>,
    stop: CancellationToken,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn addr(&self) -> SocketAddr {
        self.addr
            .get()
            .copied()
            .unwrap_or_else(|| SocketAddr::from(([127, 0, 0, 1], 0)))
    }
}

/// A running fake WhatsApp; it stops when dropped.
pub struct FakeWhatsApp {
    shared: Arc<Shared>,
    /// What people write, posted one after another in the order they wrote it.
    written: tokio::sync::mpsc::UnboundedSender<(String, Value)>,
}

impl FakeWhatsApp {
    /// Starts on 127.0.0.1 with an ephemeral port.
    pub async fn start() -> std::io::Result<Self> {
        let shared = Arc::new(Shared {
            inner: Mutex::new(Inner {
                next: 1,
                ..Inner::default()
            }),
            changed: Notify::new(),
            addr: std::sync::OnceLock::new(),
            stop: CancellationToken::new(),
        });
        let app = Router::new()
            .route("/v21.0/{id}", get(object))
            .route("/v21.0/{phone}/messages", post(message))
            .route("/v21.0/{phone}/media", post(upload))
            .route("/files/{id}", get(file))
            .with_state(shared.clone());
        let (addr, stop) = crate::serve(app, SocketAddr::from(([127, 0, 0, 1], 0))).await?;
        let _ = shared.addr.set(addr);
        let stopping = shared.stop.clone();
        tokio::spawn(async move {
            stopping.cancelled().await;
            stop.cancel();
        });
        let (written, mut queue) = tokio::sync::mpsc::unbounded_channel::<(String, Value)>();
        let delivering = shared.clone();
        tokio::spawn(async move {
            while let Some((id, body)) = queue.recv().await {
                deliver(delivering.clone(), id, body).await;
            }
        });
        Ok(Self { shared, written })
    }

    /// The URL to configure as `channels.whatsapp.api_url`.
    pub fn api_url(&self) -> String {
        format!("http://{}/v21.0", self.shared.addr())
    }

    /// Sends notifications to the daemon listening on `addr` from now on (as an app's
    /// webhook is pointed at a server); the ones not yet answered 200 go there too.
    pub fn attach(&self, addr: SocketAddr) {
        self.shared.lock().webhook = Some(addr);
        self.shared.changed.notify_waiters();
    }

    /// Times the channel checked the number (once at each start).
    pub fn sessions(&self) -> u64 {
        self.shared.lock().sessions
    }

    /// `person` (a number) writes `text`; returns the message's id.
    pub fn dm(&self, person: &str, text: &str) -> String {
        self.write(person, "text", json!({"text": {"body": text}}), None)
    }

    /// `person` writes `text` at `sent` (Unix seconds): an old message, for the window.
    pub fn dm_sent_at(&self, person: &str, text: &str, sent: u64) -> String {
        self.write(person, "text", json!({"text": {"body": text}}), Some(sent))
    }

    /// `person` sends a document (`bytes`, named `name`) with `caption`.
    pub fn dm_file(&self, person: &str, caption: &str, name: &str, bytes: Vec<u8>) -> String {
        let id = self.keep_file(bytes, "application/octet-stream");
        let document = json!({"document": {"id": id, "mime_type": "application/octet-stream",
            "sha256": "x", "filename": name, "caption": caption}});
        self.write(person, "document", document, None)
    }

    /// `person` records a voice message (`bytes`, OGG/Opus), as WhatsApp's apps send one.
    pub fn dm_voice(&self, person: &str, bytes: Vec<u8>) -> String {
        let id = self.keep_file(bytes, "audio/ogg; codecs=opus");
        let audio = json!({"audio": {"id": id, "mime_type": "audio/ogg; codecs=opus",
            "sha256": "x", "voice": true}});
        self.write(person, "audio", audio, None)
    }

    fn keep_file(&self, bytes: Vec<u8>, mime: &str) -> String {
        let mut inner = self.shared.lock();
        inner.next += 1;
        let id = format!("{}", 900_000 + inner.next);
        inner.files.insert(id.clone(), (bytes, mime.to_owned()));
        id
    }

    fn write(&self, person: &str, kind: &str, content: Value, sent: Option<u64>) -> String {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |now| now.as_secs());
        let id = {
            let mut inner = self.shared.lock();
            inner.next += 1;
            inner.closed.remove(person);
            format!("wamid.HBgN{:010}", inner.next)
        };
        let mut message = json!({"from": person, "id": id,
            "timestamp": sent.unwrap_or(now).to_string(), "type": kind});
        if let (Some(message), Some(content)) = (message.as_object_mut(), content.as_object()) {
            for (key, value) in content {
                message.insert(key.clone(), value.clone());
            }
        }
        let body = json!({"object": "whatsapp_business_account", "entry": [{"id": "WABA0001",
            "changes": [{"field": "messages", "value": {"messaging_product": "whatsapp",
                "metadata": {"display_phone_number": "15550001111", "phone_number_id": PHONE_NUMBER_ID},
                "contacts": [{"profile": {"name": format!("Person {person}")}, "wa_id": person}],
                "messages": [message]}}]}]});
        self.shared
            .lock()
            .written
            .insert(id.clone(), (person.to_owned(), body.clone()));
        let _ = self.written.send((id.clone(), body));
        id
    }

    /// Posts the notification of `message` again at once (beside what is being posted), as
    /// Meta does when it thinks the webhook did not take it.
    pub fn deliver_again(&self, message: &str) {
        let written = self.shared.lock().written.get(message).cloned();
        if let Some((_, body)) = written {
            tokio::spawn(deliver(self.shared.clone(), message.to_owned(), body));
        }
    }

    /// Posts `body` to the webhook signed with `secret` once; the status it was answered.
    pub async fn post_signed(&self, body: &[u8], secret: &str) -> Option<u16> {
        let addr = self.shared.lock().webhook?;
        post_webhook(addr, body, &signature(secret, body)).await
    }

    /// The webhook's verify handshake with `token`: the status and the body answered.
    pub async fn handshake(&self, token: &str) -> Option<(u16, String)> {
        let addr = self.shared.lock().webhook?;
        let path = format!(
            "/whatsapp/webhook?hub.mode=subscribe&hub.verify_token={token}&hub.challenge=1158201444"
        );
        let request =
            format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n");
        let answer = exchange(addr, request.as_bytes()).await?;
        let status = status_of(&answer)?;
        let body = answer
            .split("\r\n\r\n")
            .nth(1)
            .unwrap_or_default()
            .to_owned();
        Some((status, body))
    }

    /// Whether the notification of `message` was answered 200.
    pub fn acked(&self, message: &str) -> bool {
        self.shared.lock().acked.contains(message)
    }

    /// How many webhook posts were answered with `status`.
    pub fn answered(&self, status: u16) -> u64 {
        self.shared
            .lock()
            .answers
            .get(&status)
            .copied()
            .unwrap_or(0)
    }

    /// Closes `person`'s customer service window (as 24 hours without a message would): sends
    /// are refused with code 131047 until they write again.
    pub fn close_window(&self, person: &str) {
        self.shared.lock().closed.insert(person.to_owned());
    }

    /// Everything the bot sent so far.
    pub fn sent(&self) -> Vec<Sent> {
        self.shared.lock().sent.clone()
    }

    /// What the bot sent to `person`.
    pub fn sent_to(&self, person: &str) -> Vec<Sent> {
        self.sent()
            .into_iter()
            .filter(|sent| sent.to == person)
            .collect()
    }

    /// How often "typing…" was shown to `person`.
    pub fn typing(&self, person: &str) -> usize {
        self.shared.lock().typing.get(person).copied().unwrap_or(0)
    }

    /// Whether the bot marked `message` read.
    pub fn read(&self, message: &str) -> bool {
        self.shared.lock().read.contains(message)
    }

    /// The files the bot sent to `person`, in order.
    pub fn uploads_to(&self, person: &str) -> Vec<crate::multipart::Uploaded> {
        self.shared
            .lock()
            .uploads
            .iter()
            .filter(|upload| upload.chat == person)
            .cloned()
            .collect()
    }

    /// How many uploads arrived so far (held and refused ones too).
    pub fn uploads_started(&self) -> u64 {
        self.shared.lock().holding.started
    }

    /// Holds every upload that arrives until [`FakeWhatsApp::release_uploads`].
    pub fn hold_uploads(&self) {
        self.shared.lock().holding.hold();
    }

    /// Lets held uploads go: kept (`keep`), or dropped as if the connection broke.
    pub fn release_uploads(&self, keep: bool) {
        self.shared.lock().holding.release(keep);
        self.shared.changed.notify_waiters();
    }

    /// The next `times` sends to `person` answer 429 with `Retry-After`.
    pub fn rate_limit(&self, person: &str, retry_after: Duration, times: u32) {
        self.shared
            .lock()
            .limited
            .insert(person.to_owned(), (retry_after.as_secs().max(1), times));
    }

    /// When the 429s for `person` were answered.
    pub fn limited_at(&self, person: &str) -> Vec<Instant> {
        self.shared
            .lock()
            .limited_at
            .iter()
            .filter(|(chat, _)| chat == person)
            .map(|(_, at)| *at)
            .collect()
    }

    /// Files are served changed from here on: not the bytes their media object's `sha256`
    /// names.
    pub fn corrupt_files(&self) {
        self.shared.lock().corrupt_files = true;
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
        check: impl Fn(&FakeWhatsApp) -> bool,
    ) {
        let what = format!("the fake WhatsApp seeing {what}");
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

impl Drop for FakeWhatsApp {
    fn drop(&mut self) {
        self.shared.stop.cancel();
    }
}

/// Posts `body` to the attached daemon until it answers 200 (the fake stopping ends it).
async fn deliver(shared: Arc<Shared>, id: String, body: Value) {
    let body = body.to_string().into_bytes();
    let signature = signature(APP_SECRET, &body);
    loop {
        let addr = shared.lock().webhook;
        let status = match addr {
            Some(addr) => post_webhook(addr, &body, &signature).await,
            None => None,
        };
        if let Some(status) = status {
            let mut inner = shared.lock();
            *inner.answers.entry(status).or_default() += 1;
            if status == 200 {
                inner.acked.insert(id);
                drop(inner);
                shared.changed.notify_waiters();
                return;
            }
        }
        tokio::select! {
            () = shared.stop.cancelled() => return,
            () = tokio::time::sleep(Duration::from_millis(100)) => {}
        }
    }
}

fn authorized(headers: &HeaderMap) -> bool {
    headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        == Some(ACCESS_TOKEN)
}

/// A Graph error answer.
fn graph_error(status: StatusCode, code: u64, message: &str) -> Response {
    let body = json!({"error": {"message": message, "type": "OAuthException", "code": code,
        "error_data": {"messaging_product": "whatsapp", "details": message},
        "fbtrace_id": "AbCdEf"}});
    (status, axum::Json(body)).into_response()
}

fn unauthorized() -> Response {
    graph_error(
        StatusCode::UNAUTHORIZED,
        190,
        "Invalid OAuth access token - Cannot parse access token",
    )
}

/// `GET /{id}`: the business number, or where a file people sent is.
async fn object(
    State(shared): State<Arc<Shared>>,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Response {
    if !authorized(&headers) {
        return unauthorized();
    }
    if id == PHONE_NUMBER_ID {
        shared.lock().sessions += 1;
        shared.changed.notify_waiters();
        return axum::Json(json!({"display_phone_number": "+1 555-000-1111",
            "verified_name": "Fake Business", "id": PHONE_NUMBER_ID}))
        .into_response();
    }
    let file = shared.lock().files.get(&id).cloned();
    match file {
        Some((bytes, mime)) => axum::Json(
            json!({"url": format!("http://{}/files/{id}", shared.addr()),
            "mime_type": mime, "sha256": hex_sha256(&bytes), "file_size": bytes.len(), "id": id,
            "messaging_product": "whatsapp"}),
        )
        .into_response(),
        None => graph_error(StatusCode::BAD_REQUEST, 100, "Unsupported get request"),
    }
}

/// A file people sent, with the token.
async fn file(
    State(shared): State<Arc<Shared>>,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Response {
    if !authorized(&headers) {
        return StatusCode::UNAUTHORIZED.into_response();
    }
    let (file, delay, corrupt) = {
        let inner = shared.lock();
        (
            inner.files.get(&id).cloned(),
            inner.file_delay,
            inner.corrupt_files,
        )
    };
    tokio::time::sleep(delay).await;
    shared.lock().files_served.push(Instant::now());
    shared.changed.notify_waiters();
    match file {
        Some((mut bytes, _)) => {
            if corrupt && let Some(last) = bytes.last_mut() {
                *last ^= 0xff;
            }
            bytes.into_response()
        }
        None => StatusCode::NOT_FOUND.into_response(),
    }
}

/// A file's SHA-256, as the media object names it.
fn hex_sha256(bytes: &[u8]) -> String {
    ring::digest::digest(&ring::digest::SHA256, bytes)
        .as_ref()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// `POST /{phone}/media`: a file the bot uploads.
async fn upload(State(shared): State<Arc<Shared>>, headers: HeaderMap, body: Bytes) -> Response {
    if !authorized(&headers) {
        return unauthorized();
    }
    let boundary = headers
        .get(axum::http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(crate::multipart::boundary);
    let Some(boundary) = boundary else {
        return graph_error(StatusCode::BAD_REQUEST, 100, "not a multipart upload");
    };
    let parts = crate::multipart::parts(&body, &boundary);
    let field = |name: &str| parts.iter().find(|part| part.name == name);
    let (Some(file), Some(product)) = (field("file"), field("messaging_product")) else {
        return graph_error(
            StatusCode::BAD_REQUEST,
            100,
            "file and messaging_product are required",
        );
    };
    if product.text() != "whatsapp" {
        return graph_error(
            StatusCode::BAD_REQUEST,
            100,
            "messaging_product must be whatsapp",
        );
    }
    if !crate::multipart::arrive(&shared.changed, |read| read(&mut shared.lock().holding)).await {
        return (StatusCode::INTERNAL_SERVER_ERROR, "the upload broke off").into_response();
    }
    let mime = field("type")
        .map(crate::multipart::Part::text)
        .or(file.content_type.clone())
        .unwrap_or_default();
    let mut inner = shared.lock();
    inner.next += 1;
    let id = format!("{}", 700_000 + inner.next);
    let name = file.filename.clone().unwrap_or_default();
    inner
        .media
        .insert(id.clone(), (name, mime, file.bytes.clone()));
    axum::Json(json!({"id": id})).into_response()
}

/// `POST /{phone}/messages`: a message, or the read mark with "typing…".
async fn message(
    State(shared): State<Arc<Shared>>,
    Path(phone): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    if !authorized(&headers) {
        return unauthorized();
    }
    let Ok(params) = serde_json::from_slice::<Value>(&body) else {
        return graph_error(StatusCode::BAD_REQUEST, 100, "the body is not JSON");
    };
    if phone != PHONE_NUMBER_ID || params["messaging_product"] != "whatsapp" {
        return graph_error(StatusCode::BAD_REQUEST, 100, "Invalid parameter");
    }
    if params["status"] == "read" {
        return mark_read(&shared, &params);
    }
    let to = params["to"].as_str().unwrap_or_default().to_owned();
    let kind = params["type"].as_str().unwrap_or("text").to_owned();
    let mut inner = shared.lock();
    if let Some((secs, left)) = inner.limited.get_mut(&to)
        && *left > 0
    {
        *left -= 1;
        let secs = *secs;
        inner.limited_at.push((to, Instant::now()));
        drop(inner);
        shared.changed.notify_waiters();
        let mut response = graph_error(
            StatusCode::TOO_MANY_REQUESTS,
            130429,
            "Rate limit hit: Cloud API message throughput has been reached.",
        );
        if let Ok(value) = secs.to_string().parse() {
            response.headers_mut().insert("retry-after", value);
        }
        return response;
    }
    if inner.closed.contains(&to) {
        return graph_error(
            StatusCode::BAD_REQUEST,
            131047,
            "Message failed to send because more than 24 hours have passed since the customer last replied to this number.",
        );
    }
    let text = match kind.as_str() {
        "text" => params["text"]["body"]
            .as_str()
            .unwrap_or_default()
            .to_owned(),
        _ => params[&kind]["caption"]
            .as_str()
            .unwrap_or_default()
            .to_owned(),
    };
    if kind == "text" && (text.is_empty() || text.chars().count() > MAX_TEXT) {
        return graph_error(
            StatusCode::BAD_REQUEST,
            100,
            "Invalid parameter: text.body must be 1 to 4096 characters",
        );
    }
    let reply_to = params["context"]["message_id"].as_str().map(str::to_owned);
    inner.next += 1;
    let id = format!("wamid.OUT{:010}", inner.next);
    if kind != "text" {
        let media = params[&kind]["id"].as_str().unwrap_or_default();
        let Some((name, mime, bytes)) = inner.media.get(media).cloned() else {
            return graph_error(StatusCode::BAD_REQUEST, 131053, "Media upload error");
        };
        inner.uploads.push(crate::multipart::Uploaded {
            chat: to.clone(),
            id: id.clone(),
            method: kind.clone(),
            name: params[&kind]["filename"]
                .as_str()
                .map_or(name, str::to_owned),
            mime: Some(mime),
            bytes,
            caption: (!text.is_empty()).then(|| text.clone()),
            reply_to: reply_to.clone(),
            at: Instant::now(),
        });
    }
    inner.sent.push(Sent {
        to: to.clone(),
        id: id.clone(),
        text,
        reply_to,
        kind,
        at: Instant::now(),
    });
    drop(inner);
    shared.changed.notify_waiters();
    axum::Json(json!({"messaging_product": "whatsapp",
        "contacts": [{"input": to, "wa_id": to}], "messages": [{"id": id}]}))
    .into_response()
}

fn mark_read(shared: &Shared, params: &Value) -> Response {
    let message = params["message_id"].as_str().unwrap_or_default().to_owned();
    let mut inner = shared.lock();
    let Some((person, _)) = inner.written.get(&message).cloned() else {
        return graph_error(
            StatusCode::BAD_REQUEST,
            100,
            "Invalid parameter: message_id",
        );
    };
    inner.read.insert(message);
    if params["typing_indicator"]["type"] == "text" {
        *inner.typing.entry(person).or_default() += 1;
    }
    drop(inner);
    shared.changed.notify_waiters();
    axum::Json(json!({"success": true})).into_response()
}
