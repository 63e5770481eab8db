//! [`FakeAudio`]: an OpenAI-compatible audio server for tests — `POST /v1/audio/transcriptions`
//! (a form with the file; answers `{"text": …}`) and `POST /v1/audio/speech` (JSON; answers
//! OGG/Opus bytes) — with scripted transcripts, failures and delays, every request recorded.
//! And [`voice_note`], the bytes of an OGG/Opus recording of a given length, as phones send.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use serde_json::{Value, json};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

/// A transcription the fake was asked for.
#[derive(Clone)]
pub struct Heard {
    /// The model asked for.
    pub model: String,
    /// The language, if one was named.
    pub language: Option<String>,
    /// The file's name.
    pub name: String,
    /// Its type, as sent.
    pub mime: Option<String>,
    /// Its bytes.
    pub bytes: Vec<u8>,
    /// The bearer token it came with.
    pub token: Option<String>,
}

impl std::fmt::Debug for Heard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Heard")
            .field("model", &self.model)
            .field("language", &self.language)
            .field("name", &self.name)
            .field("mime", &self.mime)
            .field("bytes", &self.bytes.len())
            .finish()
    }
}

/// A spoken answer the fake was asked for.
#[derive(Clone, Debug)]
pub struct Said {
    /// The model.
    pub model: String,
    /// The text to speak.
    pub input: String,
    /// The voice.
    pub voice: String,
    /// The format asked for.
    pub format: String,
}

#[derive(Default)]
struct Inner {
    transcripts: VecDeque<String>,
    heard: Vec<Heard>,
    said: Vec<Said>,
    /// The next calls answered with this status (and how many of them).
    failing: Option<(u16, u32)>,
    delay: Duration,
}

struct Shared {
    inner: Mutex<Inner>,
    changed: Notify,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// A running fake audio server; it stops when dropped.
pub struct FakeAudio {
    addr: SocketAddr,
    shared: Arc<Shared>,
    stop: CancellationToken,
}

/// What the fake says it heard when no transcript was scripted.
pub const DEFAULT_TRANSCRIPT: &str = "this is what the voice note said";

impl FakeAudio {
    /// Starts on 127.0.0.1 with an ephemeral port.
    pub async fn start() -> std::io::Result<Self> {
        Self::start_on(SocketAddr::from(([127, 0, 0, 1], 0))).await
    }

    /// Starts on `addr` (a port freed by an earlier fake: a server that comes back).
    pub async fn start_on(addr: SocketAddr) -> std::io::Result<Self> {
        let shared = Arc::new(Shared {
            inner: Mutex::new(Inner::default()),
            changed: Notify::new(),
        });
        let app = Router::new()
            .route("/v1/audio/transcriptions", post(transcribe))
            .route("/v1/audio/speech", post(speak))
            .route("/v1/models", axum::routing::get(models))
            .with_state(shared.clone());
        let (addr, stop) = crate::serve(app, addr).await?;
        Ok(Self { addr, shared, stop })
    }

    /// The URL to configure as `base_url`.
    pub fn base_url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    /// Its address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The next transcription answers `text` (then the next scripted one, then the default).
    pub fn push_transcript(&self, text: &str) -> &Self {
        self.shared.lock().transcripts.push_back(text.to_owned());
        self
    }

    /// The next `times` calls are answered with HTTP `status`.
    pub fn fail(&self, status: u16, times: u32) {
        self.shared.lock().failing = Some((status, times));
    }

    /// Every answer waits `delay` first.
    pub fn set_delay(&self, delay: Duration) {
        self.shared.lock().delay = delay;
    }

    /// The transcriptions asked for, in order.
    pub fn heard(&self) -> Vec<Heard> {
        self.shared.lock().heard.clone()
    }

    /// The spoken answers asked for, in order.
    pub fn said(&self) -> Vec<Said> {
        self.shared.lock().said.clone()
    }

    /// Waits until `check` holds, or panics after `timeout`.
    pub async fn wait_until(&self, timeout: Duration, what: &str, check: impl Fn(&Self) -> bool) {
        let context = || {
            let inner = self.shared.lock();
            format!("heard: {:?}, said: {:?}", inner.heard, inner.said)
        };
        crate::wait_on(
            &self.shared.changed,
            timeout,
            &format!("the fake audio server seeing {what}"),
            || check(self),
            context,
        )
        .await;
    }
}

impl Drop for FakeAudio {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

/// Waits the delay, then the scripted failure if one is due.
async fn before(shared: &Shared) -> Option<Response> {
    let delay = shared.lock().delay;
    tokio::time::sleep(delay).await;
    let mut inner = shared.lock();
    let (status, left) = inner.failing.as_mut()?;
    if *left == 0 {
        return None;
    }
    *left -= 1;
    let status = StatusCode::from_u16(*status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    Some(
        (
            status,
            axum::Json(json!({"error": {"message": format!("the fake says {status}")}})),
        )
            .into_response(),
    )
}

async fn transcribe(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let content_type = headers
        .get(axum::http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    let Some(boundary) = crate::multipart::boundary(content_type) else {
        return (
            StatusCode::BAD_REQUEST,
            "expected a multipart/form-data body",
        )
            .into_response();
    };
    let parts = crate::multipart::parts(&body, &boundary);
    let field = |name: &str| {
        parts
            .iter()
            .find(|part| part.name == name)
            .map(crate::multipart::Part::text)
    };
    let Some(file) = parts.iter().find(|part| part.name == "file") else {
        return (
            StatusCode::BAD_REQUEST,
            axum::Json(json!({"error": {"message": "no file"}})),
        )
            .into_response();
    };
    let heard = Heard {
        model: field("model").unwrap_or_default(),
        language: field("language"),
        name: file.filename.clone().unwrap_or_default(),
        mime: file.content_type.clone(),
        bytes: file.bytes.clone(),
        token: bearer(&headers),
    };
    shared.lock().heard.push(heard);
    shared.changed.notify_waiters();
    if let Some(failed) = before(&shared).await {
        return failed;
    }
    let text = shared
        .lock()
        .transcripts
        .pop_front()
        .unwrap_or_else(|| DEFAULT_TRANSCRIPT.to_owned());
    axum::Json(json!({"text": text})).into_response()
}

async fn speak(State(shared): State<Arc<Shared>>, body: Bytes) -> Response {
    let Ok(request) = serde_json::from_slice::<Value>(&body) else {
        return (StatusCode::BAD_REQUEST, "expected JSON").into_response();
    };
    let text = |key: &str| request[key].as_str().unwrap_or_default().to_owned();
    let said = Said {
        model: text("model"),
        input: text("input"),
        voice: text("voice"),
        format: text("response_format"),
    };
    let seconds = (said.input.chars().count() as f64 / 15.0).max(1.0);
    shared.lock().said.push(said);
    shared.changed.notify_waiters();
    if let Some(failed) = before(&shared).await {
        return failed;
    }
    ([("content-type", "audio/ogg")], voice_note(seconds)).into_response()
}

/// The models it serves, for a client checking its key: a refused key (`fail(401, …)`) is
/// refused here too.
async fn models(State(shared): State<Arc<Shared>>) -> Response {
    if let Some(failed) = before(&shared).await {
        return failed;
    }
    axum::Json(json!({"object": "list", "data": [
        {"id": "whisper-1", "object": "model"},
        {"id": "gpt-4o-mini-tts", "object": "model"}
    ]}))
    .into_response()
}

fn bearer(headers: &HeaderMap) -> Option<String> {
    headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::to_owned)
}

/// An OGG/Opus recording of `seconds` (silence, as far as any player cares): the stream's
/// header pages, then audio pages of 20 ms packets, the last page's granule position
/// saying its length — what a phone's voice note looks like to the daemon.
pub fn voice_note(seconds: f64) -> Vec<u8> {
    let mut head = b"OpusHead\x01\x01".to_vec();
    head.extend_from_slice(&312u16.to_le_bytes());
    head.extend_from_slice(&48_000u32.to_le_bytes());
    head.extend_from_slice(&[0, 0, 0]);
    let mut file = page(0, 0, &head, 0x02);
    file.extend(page(0, 1, b"OpusTags\x08\0\0\0testkit\0\0\0\0", 0));
    let total = (seconds * 48_000.0) as u64;
    // One page a second, each of fifty 20 ms packets of three bytes (a silent Opus frame).
    let mut sequence = 2;
    let mut at = 0;
    while at < total {
        at = (at + 48_000).min(total);
        let last = at == total;
        file.extend(page(
            at + 312,
            sequence,
            &[0xf8, 0xff, 0xfe].repeat(50),
            if last { 0x04 } else { 0 },
        ));
        sequence += 1;
    }
    file
}

/// One OGG page of `packet` split into 3-byte segments (each a whole packet).
fn page(granule: u64, sequence: u32, packet: &[u8], flags: u8) -> Vec<u8> {
    let mut page = b"OggS\0".to_vec();
    page.push(flags);
    page.extend_from_slice(&granule.to_le_bytes());
    page.extend_from_slice(&0x5357_4254u32.to_le_bytes());
    page.extend_from_slice(&sequence.to_le_bytes());
    page.extend_from_slice(&[0, 0, 0, 0]);
    let segments: Vec<u8> = if packet.len() <= 255 && !packet.starts_with(&[0xf8]) {
        vec![u8::try_from(packet.len()).unwrap_or(255)]
    } else {
        packet.chunks(3).map(|chunk| chunk.len() as u8).collect()
    };
    page.push(u8::try_from(segments.len()).unwrap_or(255));
    page.extend_from_slice(&segments);
    page.extend_from_slice(packet);
    page
}
