//! [`FakeSignalCli`]: `signal-cli daemon --http` for tests, speaking its wire format over a
//! real socket: `POST /api/v1/rpc` (JSON-RPC: `listAccounts`, `send` — text, a quote, files
//! as data URIs; refused with signal-cli's rate-limit error while a chat is told to be limited —
//! `sendTyping`, `sendReceipt`, `getAttachment`) and `GET /api/v1/events`, server-sent events
//! with ids: a client that comes back with `Last-Event-ID` gets what came after it, one with
//! an id the fake does not know gets every event it keeps — as signal-cli does. Everything is
//! recorded.

use std::collections::HashMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::sse::{Event, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use base64::Engine;
use serde_json::{Value, json};
use tokio::sync::{Notify, mpsc};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// The bot's number.
pub const ACCOUNT: &str = "+15550001111";

/// A message the bot sent.
#[derive(Clone, Debug)]
pub struct Sent {
    /// The person's number, or `group.<id>`.
    pub to: String,
    /// Its timestamp: its id.
    pub id: String,
    pub text: String,
    /// The timestamp of the message it quotes.
    pub quote: Option<String>,
    pub at: Instant,
}

#[derive(Default)]
struct Inner {
    /// Every event, with its id.
    events: Vec<(u64, Value)>,
    /// The open event streams.
    streams: Vec<mpsc::UnboundedSender<(u64, Value)>>,
    sessions: u64,
    next: u64,
    /// Each person's message by its timestamp: its event.
    written: HashMap<String, Value>,
    sent: Vec<Sent>,
    typing: HashMap<String, usize>,
    receipts: Vec<(String, u64)>,
    /// Chats refusing sends with a rate limit: (seconds, answers left).
    limited: HashMap<String, (u64, u32)>,
    limited_at: Vec<(String, Instant)>,
    files: HashMap<String, Vec<u8>>,
    file_delay: Duration,
    files_served: Vec<Instant>,
    uploads: Vec<crate::multipart::Uploaded>,
    holding: crate::multipart::Holding,
}

struct Shared {
    inner: Mutex<Inner>,
    changed: Notify,
    stop: CancellationToken,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// A running fake signal-cli; it stops when dropped.
pub struct FakeSignalCli {
    addr: SocketAddr,
    shared: Arc<Shared>,
}

impl FakeSignalCli {
    /// Starts on 127.0.0.1 with an ephemeral port.
    pub async fn start() -> std::io::Result<Self> {
        let shared = Arc::new(Shared {
            inner: Mutex::new(Inner {
                next: 1,
                ..Inner::default()
            }),
            changed: Notify::new(),
            stop: CancellationToken::new(),
        });
        let app = Router::new()
            .route("/api/v1/rpc", post(rpc))
            .route("/api/v1/events", get(events))
            .route("/api/v1/check", get(|| async { "" }))
            .with_state(shared.clone());
        let (addr, stop) = crate::serve(app, SocketAddr::from(([127, 0, 0, 1], 0))).await?;
        let stopping = shared.stop.clone();
        tokio::spawn(async move {
            stopping.cancelled().await;
            stop.cancel();
        });
        Ok(Self { addr, shared })
    }

    /// The URL to configure as `channels.signal.url`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Event streams opened so far.
    pub fn sessions(&self) -> u64 {
        self.shared.lock().sessions
    }

    /// `person` (a number) writes `text`; returns the message's timestamp.
    pub fn dm(&self, person: &str, text: &str) -> String {
        self.write(person, json!({"message": text}))
    }

    /// `person` sends a file (`bytes`, named `name`) with `text`.
    pub fn dm_file(&self, person: &str, text: &str, name: &str, bytes: Vec<u8>) -> String {
        let id = self.keep_file(name, bytes.clone());
        self.write(
            person,
            json!({"message": text, "attachments": [{"contentType": "application/octet-stream",
                "filename": name, "id": id, "size": bytes.len()}]}),
        )
    }

    /// `person` records a voice message (`bytes`), as Signal's apps send one.
    pub fn dm_voice(&self, person: &str, bytes: Vec<u8>) -> String {
        let id = self.keep_file("voice.ogg", bytes.clone());
        self.write(
            person,
            json!({"message": null, "attachments": [{"contentType": "audio/ogg",
                "id": id, "size": bytes.len(), "voiceNote": true}]}),
        )
    }

    fn keep_file(&self, name: &str, bytes: Vec<u8>) -> String {
        let mut inner = self.shared.lock();
        inner.next += 1;
        let id = format!("att{}-{name}", inner.next);
        inner.files.insert(id.clone(), bytes);
        id
    }

    fn write(&self, person: &str, message: Value) -> String {
        let mut inner = self.shared.lock();
        inner.next += 1;
        let timestamp = 1_700_000_000_000 + inner.next;
        let mut data = message;
        data["timestamp"] = json!(timestamp);
        let event = json!({"envelope": {"source": person, "sourceNumber": person,
            "sourceUuid": format!("uuid-{person}"), "sourceName": format!("Person {person}"),
            "sourceDevice": 1, "timestamp": timestamp, "dataMessage": data}, "account": ACCOUNT});
        inner.written.insert(timestamp.to_string(), event.clone());
        drop(inner);
        self.push(event);
        timestamp.to_string()
    }

    /// Sends `event` to the open streams, and keeps it for the ones to come.
    fn push(&self, event: Value) {
        let mut inner = self.shared.lock();
        inner.next += 1;
        let id = inner.next;
        inner.events.push((id, event.clone()));
        inner
            .streams
            .retain(|stream| stream.send((id, event.clone())).is_ok());
    }

    /// Sends the event of message `timestamp` again (as signal-cli does with what it kept,
    /// for a client whose last event id it does not know).
    pub fn deliver_again(&self, timestamp: &str) {
        let event = self.shared.lock().written.get(timestamp).cloned();
        if let Some(event) = event {
            self.push(event);
        }
    }

    /// Ends every open event stream (signal-cli restarted, the connection dropped).
    pub fn drop_streams(&self) {
        self.shared.lock().streams.clear();
    }

    /// Everything the bot sent.
    pub fn sent(&self) -> Vec<Sent> {
        self.shared.lock().sent.clone()
    }

    /// What the bot sent to `chat`.
    pub fn sent_to(&self, chat: &str) -> Vec<Sent> {
        self.sent()
            .into_iter()
            .filter(|sent| sent.to == chat)
            .collect()
    }

    /// How often "typing…" was shown in `chat`.
    pub fn typing(&self, chat: &str) -> usize {
        self.shared.lock().typing.get(chat).copied().unwrap_or(0)
    }

    /// The read receipts the bot sent: (to whom, for which timestamp).
    pub fn receipts(&self) -> Vec<(String, u64)> {
        self.shared.lock().receipts.clone()
    }

    /// The files the bot sent to `chat`.
    pub fn uploads_to(&self, chat: &str) -> Vec<crate::multipart::Uploaded> {
        self.shared
            .lock()
            .uploads
            .iter()
            .filter(|upload| upload.chat == chat)
            .cloned()
            .collect()
    }

    /// Sends with files that arrived so far (held ones too).
    pub fn uploads_started(&self) -> u64 {
        self.shared.lock().holding.started
    }

    /// Holds every send with a file until [`FakeSignalCli::release_uploads`].
    pub fn hold_uploads(&self) {
        self.shared.lock().holding.hold();
    }

    /// Lets held sends go: kept, or dropped as if the connection broke.
    pub fn release_uploads(&self, keep: bool) {
        self.shared.lock().holding.release(keep);
        self.shared.changed.notify_waiters();
    }

    /// The next `times` sends to `chat` are refused with a rate limit of `retry_after`.
    pub fn rate_limit(&self, chat: &str, retry_after: Duration, times: u32) {
        self.shared
            .lock()
            .limited
            .insert(chat.to_owned(), (retry_after.as_secs().max(1), times));
    }

    /// When `chat`'s sends were refused.
    pub fn limited_at(&self, chat: &str) -> Vec<Instant> {
        self.shared
            .lock()
            .limited_at
            .iter()
            .filter(|(c, _)| c == chat)
            .map(|(_, at)| *at)
            .collect()
    }

    /// `getAttachment` answers after `delay`.
    pub fn set_file_delay(&self, delay: Duration) {
        self.shared.lock().file_delay = delay;
    }

    /// When each file was given.
    pub fn files_served(&self) -> Vec<Instant> {
        self.shared.lock().files_served.clone()
    }

    /// Waits until `check` holds of what was recorded, or panics after `timeout`.
    pub async fn wait_until(
        &self,
        timeout: Duration,
        what: &str,
        check: impl Fn(&FakeSignalCli) -> bool,
    ) {
        let what = format!("the fake signal-cli seeing {what}");
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

impl Drop for FakeSignalCli {
    fn drop(&mut self) {
        self.shared.stop.cancel();
    }
}

/// `GET /api/v1/events`: what came after `Last-Event-ID` (everything kept, for an id the
/// fake does not know), then each new event.
async fn events(State(shared): State<Arc<Shared>>, headers: HeaderMap) -> Response {
    let last = headers
        .get("last-event-id")
        .and_then(|value| value.to_str().ok())
        .map(str::to_owned);
    let (tx, rx) = mpsc::unbounded_channel();
    {
        let mut inner = shared.lock();
        inner.sessions += 1;
        if let Some(last) = last {
            let known = last
                .parse::<u64>()
                .ok()
                .and_then(|last| inner.events.iter().position(|(id, _)| *id == last));
            let from = known.map_or(0, |at| at + 1);
            for event in &inner.events[from..] {
                let _ = tx.send(event.clone());
            }
        }
        inner.streams.push(tx);
    }
    shared.changed.notify_waiters();
    let stop = shared.stop.clone();
    let stream = futures::stream::unfold((rx, stop), |(mut rx, stop)| async move {
        let next = tokio::select! {
            () = stop.cancelled() => None,
            next = rx.recv() => next,
        };
        let (id, event) = next?;
        let sse = Event::default()
            .event("receive")
            .id(id.to_string())
            .data(event.to_string());
        Some((Ok::<_, Infallible>(sse), (rx, stop)))
    });
    Sse::new(stream).into_response()
}

/// A JSON-RPC answer.
fn answer(id: &Value, result: Value) -> Response {
    axum::Json(json!({"jsonrpc": "2.0", "result": result, "id": id})).into_response()
}

fn refuse(id: &Value, code: i64, message: &str, data: Value) -> Response {
    axum::Json(
        json!({"jsonrpc": "2.0", "error": {"code": code, "message": message, "data": data},
        "id": id}),
    )
    .into_response()
}

/// `POST /api/v1/rpc`.
async fn rpc(State(shared): State<Arc<Shared>>, body: axum::body::Bytes) -> Response {
    let Ok(request) = serde_json::from_slice::<Value>(&body) else {
        return refuse(&Value::Null, -32700, "Parse error", Value::Null);
    };
    let id = request["id"].clone();
    let params = &request["params"];
    if params
        .get("account")
        .is_some_and(|account| account != ACCOUNT)
    {
        return refuse(&id, -32602, "Specified account does not exist", Value::Null);
    }
    match request["method"].as_str().unwrap_or_default() {
        "listAccounts" => answer(&id, json!([{"number": ACCOUNT}])),
        "send" => send(&shared, &id, params).await,
        "sendTyping" => {
            let chat = chat_of(params);
            *shared.lock().typing.entry(chat).or_default() += 1;
            shared.changed.notify_waiters();
            answer(&id, json!({"timestamp": 1}))
        }
        "sendReceipt" => {
            let to = params["recipient"].as_str().unwrap_or_default().to_owned();
            let mut inner = shared.lock();
            for timestamp in params["targetTimestamp"].as_array().into_iter().flatten() {
                inner
                    .receipts
                    .push((to.clone(), timestamp.as_u64().unwrap_or(0)));
            }
            drop(inner);
            shared.changed.notify_waiters();
            answer(&id, json!({"timestamp": 1}))
        }
        "getAttachment" => {
            let name = params["id"].as_str().unwrap_or_default().to_owned();
            let (file, delay) = {
                let inner = shared.lock();
                (inner.files.get(&name).cloned(), inner.file_delay)
            };
            tokio::time::sleep(delay).await;
            shared.lock().files_served.push(Instant::now());
            shared.changed.notify_waiters();
            match file {
                Some(bytes) => answer(
                    &id,
                    json!({"data": base64::engine::general_purpose::STANDARD.encode(bytes)}),
                ),
                None => refuse(&id, -1, "Attachment not found", Value::Null),
            }
        }
        other => refuse(
            &id,
            -32601,
            &format!("Method not implemented: {other}"),
            Value::Null,
        ),
    }
}

/// The chat a call names: its recipient, or `group.<id>`.
fn chat_of(params: &Value) -> String {
    if let Some(group) = params["groupId"].as_str() {
        return format!("group.{group}");
    }
    let recipient = &params["recipient"];
    recipient
        .as_array()
        .and_then(|all| all.first())
        .unwrap_or(recipient)
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

async fn send(shared: &Shared, id: &Value, params: &Value) -> Response {
    let chat = chat_of(params);
    let files: Vec<(String, String, Vec<u8>)> = params["attachments"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|uri| data_uri(uri.as_str()?))
        .collect();
    if !files.is_empty()
        && !crate::multipart::arrive(&shared.changed, |read| read(&mut shared.lock().holding)).await
    {
        return (
            axum::http::StatusCode::INTERNAL_SERVER_ERROR,
            "the send broke off",
        )
            .into_response();
    }
    let mut inner = shared.lock();
    if let Some((secs, left)) = inner.limited.get_mut(&chat)
        && *left > 0
    {
        *left -= 1;
        let secs = *secs;
        inner.limited_at.push((chat, Instant::now()));
        drop(inner);
        shared.changed.notify_waiters();
        return refuse(
            id,
            -5,
            "Failed to send message due to rate limiting",
            json!({"retryAfterSeconds": secs}),
        );
    }
    let text = params["message"].as_str().unwrap_or_default().to_owned();
    if text.is_empty() && files.is_empty() {
        return refuse(id, -1, "No message given", Value::Null);
    }
    inner.next += 1;
    let timestamp = (1_800_000_000_000 + inner.next).to_string();
    let quote = params["quoteTimestamp"].as_u64().map(|t| t.to_string());
    for (name, mime, bytes) in files {
        inner.uploads.push(crate::multipart::Uploaded {
            chat: chat.clone(),
            id: timestamp.clone(),
            method: "send".into(),
            name,
            mime: Some(mime),
            bytes,
            caption: (!text.is_empty()).then(|| text.clone()),
            reply_to: quote.clone(),
            at: Instant::now(),
        });
    }
    inner.sent.push(Sent {
        to: chat,
        id: timestamp.clone(),
        text,
        quote,
        at: Instant::now(),
    });
    drop(inner);
    shared.changed.notify_waiters();
    answer(
        id,
        json!({"timestamp": timestamp.parse::<u64>().unwrap_or(0),
        "results": [{"type": "SUCCESS"}]}),
    )
}

/// `data:<mime>;filename=<name>;base64,<data>`: the name, type and bytes.
fn data_uri(uri: &str) -> Option<(String, String, Vec<u8>)> {
    let (head, data) = uri.strip_prefix("data:")?.split_once(',')?;
    let mut fields = head.split(';');
    let mime = fields.next()?.to_owned();
    let name = fields
        .find_map(|field| field.strip_prefix("filename="))
        .unwrap_or("file")
        .to_owned();
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(data)
        .ok()?;
    Some((name, mime, bytes))
}
