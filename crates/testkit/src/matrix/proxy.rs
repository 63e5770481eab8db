//! [`Proxy`]: what the bot's client reaches instead of the homeserver — every request
//! passed on to Synapse as it came, and what a platform fake records noted on the way: the
//! messages and edits the bot writes to each room (an encrypted message's relation stays in
//! the clear, so an edit is known as one), "typing…", uploads and downloads. It can answer a
//! room's next writes 429 (`M_LIMIT_EXCEEDED`), hold uploads mid-flight, slow downloads,
//! and make the next sync start again from an earlier token, so the homeserver delivers
//! what came after it once more (as it does for a client that lost its place).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use tokio::sync::{Notify, oneshot};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// A message or an edit the bot wrote.
#[derive(Clone, Debug)]
pub struct Write {
    pub room: String,
    /// Its event type as sent: `m.room.encrypted` in an encrypted room.
    pub event_type: String,
    /// The event the homeserver made of it.
    pub event: String,
    /// Its relation as sent (`m.relates_to`): a thread, a reply, an edit.
    pub relates_to: Value,
    pub at: Instant,
}

impl Write {
    /// The message it edits, when it is an edit.
    pub fn edits(&self) -> Option<&str> {
        (self.relates_to["rel_type"] == "m.replace")
            .then(|| self.relates_to["event_id"].as_str())
            .flatten()
    }
}

#[derive(Default)]
struct Record {
    syncs_from_a_token: u64,
    writes: Vec<Write>,
    typing: HashMap<String, usize>,
    limit: HashMap<String, (u32, Duration)>,
    limited_at: HashMap<String, Vec<Instant>>,
    hold_uploads: bool,
    held: Vec<oneshot::Sender<bool>>,
    uploads_started: u64,
    file_delay: Duration,
    files_served: Vec<Instant>,
    /// The token the sync that first delivered each event started from.
    delivered_from: HashMap<String, Option<String>>,
    rewind: Option<Option<String>>,
    /// Events to deliver again once a sync has delivered them.
    again: std::collections::HashSet<String>,
}

struct Shared {
    upstream: String,
    http: matrix_sdk::reqwest::Client,
    record: Mutex<Record>,
    changed: Arc<Notify>,
}

/// The proxy in front of a homeserver; stops when dropped.
pub struct Proxy {
    addr: SocketAddr,
    shared: Arc<Shared>,
    stop: CancellationToken,
}

impl Proxy {
    /// A proxy to `upstream` (`http://127.0.0.1:port`); `changed` is notified at every
    /// request it noted.
    pub async fn start(upstream: String, changed: Arc<Notify>) -> Self {
        let shared = Arc::new(Shared {
            upstream,
            http: matrix_sdk::reqwest::Client::new(),
            record: Mutex::new(Record::default()),
            changed,
        });
        let app = axum::Router::new()
            .fallback(pass)
            .with_state(shared.clone());
        let (addr, stop) = crate::serve(app, "127.0.0.1:0".parse().expect("addr"))
            .await
            .expect("the proxy listens");
        Self { addr, shared, stop }
    }

    /// Its address, the homeserver the bot is given.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    fn record(&self) -> std::sync::MutexGuard<'_, Record> {
        self.shared.record.lock().expect("record")
    }

    /// How many syncs began from a token (a client listening for what is new).
    pub fn syncs(&self) -> u64 {
        self.record().syncs_from_a_token
    }

    /// The messages and edits the bot wrote to `room`, oldest first.
    pub fn writes(&self, room: &str) -> Vec<Write> {
        self.record()
            .writes
            .iter()
            .filter(|write| write.room == room)
            .cloned()
            .collect()
    }

    /// How often "typing…" was shown in `room`.
    pub fn typing(&self, room: &str) -> usize {
        self.record().typing.get(room).copied().unwrap_or(0)
    }

    /// The next `times` writes to `room` are answered 429 with `retry_after`.
    pub fn rate_limit(&self, room: &str, retry_after: Duration, times: u32) {
        self.record()
            .limit
            .insert(room.to_owned(), (times, retry_after));
    }

    /// When `room`'s 429s were answered.
    pub fn limited_at(&self, room: &str) -> Vec<Instant> {
        self.record()
            .limited_at
            .get(room)
            .cloned()
            .unwrap_or_default()
    }

    /// Holds the uploads that arrive from now on until [`Proxy::release_uploads`].
    pub fn hold_uploads(&self) {
        self.record().hold_uploads = true;
    }

    /// Lets the held uploads go: on to the homeserver (`keep`), or failed as if the
    /// connection broke.
    pub fn release_uploads(&self, keep: bool) {
        let mut record = self.record();
        record.hold_uploads = false;
        for held in record.held.drain(..) {
            let _ = held.send(keep);
        }
    }

    /// How many uploads arrived (held ones too).
    pub fn uploads_started(&self) -> u64 {
        self.record().uploads_started
    }

    /// Downloads are answered after `delay`.
    pub fn set_file_delay(&self, delay: Duration) {
        self.record().file_delay = delay;
    }

    /// When each download was answered.
    pub fn files_served(&self) -> Vec<Instant> {
        self.record().files_served.clone()
    }

    /// The next sync starts from the token that first delivered `event`, so it comes
    /// again; an event not delivered yet comes again right after its first delivery.
    pub fn deliver_again(&self, event: &str) {
        let mut record = self.record();
        match record.delivered_from.get(event).cloned() {
            Some(from) => record.rewind = Some(from),
            None => {
                record.again.insert(event.to_owned());
            }
        }
    }

    /// Whether a sync delivered `event` to the bot.
    pub fn delivered(&self, event: &str) -> bool {
        self.record().delivered_from.contains_key(event)
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

/// What a request is, as the proxy notes it.
enum Kind {
    Sync,
    Send { room: String, event_type: String },
    Typing { room: String },
    Upload,
    Download,
    Other,
}

fn kind(method: &Method, path: &str) -> Kind {
    let parts: Vec<String> = path.split('/').map(decoded).collect();
    let room_after = |word: &str| {
        parts
            .iter()
            .position(|part| part == "rooms")
            .filter(|at| parts.get(at + 2).is_some_and(|part| part == word))
            .and_then(|at| parts.get(at + 1).cloned())
    };
    if path.ends_with("/sync") {
        Kind::Sync
    } else if *method == Method::PUT
        && let Some(room) = room_after("send")
    {
        let event_type = parts.iter().rev().nth(1).map(String::as_str);
        if let Some(event_type @ ("m.room.message" | "m.room.encrypted")) = event_type {
            Kind::Send {
                room,
                event_type: event_type.to_owned(),
            }
        } else {
            Kind::Other
        }
    } else if *method == Method::PUT
        && let Some(room) = room_after("typing")
    {
        Kind::Typing { room }
    } else if *method == Method::POST && path.contains("/media/") && path.ends_with("/upload") {
        Kind::Upload
    } else if *method == Method::GET && path.contains("/media/") && path.contains("/download/") {
        Kind::Download
    } else {
        Kind::Other
    }
}

/// A path part percent-decoded.
fn decoded(part: &str) -> String {
    let bytes = part.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut at = 0;
    while at < bytes.len() {
        if bytes[at] == b'%'
            && let Some(byte) = part
                .get(at + 1..at + 3)
                .and_then(|hex| u8::from_str_radix(hex, 16).ok())
        {
            out.push(byte);
            at += 3;
        } else {
            out.push(bytes[at]);
            at += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

async fn pass(
    State(shared): State<Arc<Shared>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let path = uri.path().to_owned();
    let mut query = uri.query().unwrap_or_default().to_owned();
    let kind = kind(&method, &path);
    let mut since = None;
    match &kind {
        Kind::Sync => {
            let mut record = shared.record.lock().expect("record");
            if let Some(from) = record.rewind.take() {
                query = with_since(&query, from.as_deref());
            }
            since = since_of(&query);
            if since.is_some() {
                record.syncs_from_a_token += 1;
            }
        }
        Kind::Send { room, .. } => {
            let mut record = shared.record.lock().expect("record");
            if let Some((left, wait)) = record.limit.get_mut(room)
                && *left > 0
            {
                *left -= 1;
                let wait = *wait;
                record
                    .limited_at
                    .entry(room.clone())
                    .or_default()
                    .push(Instant::now());
                drop(record);
                shared.changed.notify_waiters();
                let body = json!({"errcode": "M_LIMIT_EXCEEDED", "error": "Too many requests",
                                  "retry_after_ms": wait.as_millis() as u64});
                return (StatusCode::TOO_MANY_REQUESTS, axum::Json(body)).into_response();
            }
        }
        Kind::Typing { room } => {
            let typing =
                serde_json::from_slice::<Value>(&body).is_ok_and(|body| body["typing"] == true);
            if typing {
                *shared
                    .record
                    .lock()
                    .expect("record")
                    .typing
                    .entry(room.clone())
                    .or_default() += 1;
                shared.changed.notify_waiters();
            }
        }
        Kind::Upload => {
            let held = {
                let mut record = shared.record.lock().expect("record");
                record.uploads_started += 1;
                record.hold_uploads.then(|| {
                    let (tx, rx) = oneshot::channel();
                    record.held.push(tx);
                    rx
                })
            };
            shared.changed.notify_waiters();
            if let Some(held) = held
                && !held.await.unwrap_or(false)
            {
                return (StatusCode::BAD_GATEWAY, "the upload broke off").into_response();
            }
        }
        Kind::Download => {
            let delay = shared.record.lock().expect("record").file_delay;
            tokio::time::sleep(delay).await;
            shared
                .record
                .lock()
                .expect("record")
                .files_served
                .push(Instant::now());
            shared.changed.notify_waiters();
        }
        Kind::Other => {}
    }
    let target = if query.is_empty() {
        format!("{}{path}", shared.upstream)
    } else {
        format!("{}{path}?{query}", shared.upstream)
    };
    let mut request = shared.http.request(method, target).body(body.clone());
    for (name, value) in &headers {
        if name != "host" && name != "content-length" {
            request = request.header(name, value);
        }
    }
    let answer = match request.send().await {
        Ok(answer) => answer,
        Err(err) => return (StatusCode::BAD_GATEWAY, err.to_string()).into_response(),
    };
    let status = answer.status();
    let content_type = answer.headers().get("content-type").cloned();
    let Ok(bytes) = answer.bytes().await else {
        return (StatusCode::BAD_GATEWAY, "the homeserver's answer broke off").into_response();
    };
    if status.is_success() {
        note(&shared, &kind, &body, &bytes, since);
    }
    let mut response = (status, bytes).into_response();
    if let Some(content_type) = content_type {
        response.headers_mut().insert("content-type", content_type);
    }
    response
}

/// Notes what a request that succeeded did.
fn note(shared: &Shared, kind: &Kind, sent: &[u8], answer: &[u8], since: Option<String>) {
    let mut record = shared.record.lock().expect("record");
    match kind {
        Kind::Sync => {
            let Ok(answer) = serde_json::from_slice::<Value>(answer) else {
                return;
            };
            let rooms = answer["rooms"]["join"].as_object().into_iter().flatten();
            for (_, room) in rooms {
                for event in room["timeline"]["events"].as_array().into_iter().flatten() {
                    if let Some(id) = event["event_id"].as_str() {
                        record
                            .delivered_from
                            .entry(id.to_owned())
                            .or_insert_with(|| since.clone());
                        if record.again.remove(id) {
                            record.rewind = Some(since.clone());
                        }
                    }
                }
            }
        }
        Kind::Send { room, event_type } => {
            let relates_to = serde_json::from_slice::<Value>(sent)
                .map(|sent| sent["m.relates_to"].clone())
                .unwrap_or_default();
            let event = serde_json::from_slice::<Value>(answer)
                .ok()
                .and_then(|answer| answer["event_id"].as_str().map(str::to_owned))
                .unwrap_or_default();
            record.writes.push(Write {
                room: room.clone(),
                event_type: event_type.clone(),
                event,
                relates_to,
                at: Instant::now(),
            });
        }
        _ => return,
    }
    drop(record);
    shared.changed.notify_waiters();
}

fn since_of(query: &str) -> Option<String> {
    query
        .split('&')
        .find_map(|pair| pair.strip_prefix("since="))
        .map(decoded)
}

/// `query` with its `since` replaced by `from` (or taken out).
fn with_since(query: &str, from: Option<&str>) -> String {
    let mut pairs: Vec<String> = query
        .split('&')
        .filter(|pair| !pair.is_empty() && !pair.starts_with("since="))
        .map(str::to_owned)
        .collect();
    if let Some(from) = from {
        let encoded: String = from
            .bytes()
            .map(|byte| {
                if byte.is_ascii_alphanumeric() || b"-._~".contains(&byte) {
                    (byte as char).to_string()
                } else {
                    format!("%{byte:02X}")
                }
            })
            .collect();
        pairs.push(format!("since={encoded}"));
    }
    pairs.join("&")
}
