//! The Graph API as the channel calls it: [`Graph`] is the channel's [`Surface`] — messages
//! to `/{phone_number_id}/messages` (a reply names the person's message in its `context`),
//! files uploaded to `/{phone_number_id}/media` and sent by their media id, the read mark
//! with "typing…" — and fetches the files people send (their media id to an address on
//! Meta's CDN, then the bytes, both with the token).
//!
//! Errors are mapped for delivery: WhatsApp's throttling (HTTP 429, codes 4, 80007, 130429,
//! 131056) is `RateLimited`, so the chat waits; a network failure or 5xx is `Unavailable`;
//! the window closed (131047) and everything else are final, with WhatsApp's reason.

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use async_trait::async_trait;
use futures::TryStreamExt;
use serde_json::{Value, json};
use switchboard_adapter::{
    Chunks, Fetch, FileRef, Form, Measure, Remembered, Said, Surface, Upload, media, whatsapp_text,
};
use switchboard_core::{ChatId, CoreError, MediaKind, MediaLimits};
use url::Url;

use crate::convert::Problem;

/// The channel's name: the prefix of its session keys.
pub const CHANNEL_NAME: &str = "whatsapp";

/// The longest text message WhatsApp takes, in characters.
pub const MESSAGE_LIMIT: usize = 4096;

/// The start of what a send outside the customer service window is refused with.
pub const WINDOW_CLOSED: &str = "WhatsApp lets a business write only within 24 hours";

/// What WhatsApp takes of files (Cloud API media limits).
pub(crate) const MEDIA: MediaLimits = MediaLimits {
    image: 5 * 1024 * 1024,
    voice: 16 * 1024 * 1024,
    document: 100 * 1024 * 1024,
    caption: 1024,
};

/// Chats remembered with the person's last message (its id and when it was sent).
const MAX_KNOWN_CHATS: usize = 10_000;
/// How long a call may take.
const CALL_TIMEOUT: Duration = Duration::from_secs(30);
/// How long an upload or a download may take.
const FILE_TIMEOUT: Duration = Duration::from_secs(120);
/// Hosts files are fetched from (besides the API's own, for tests and proxies).
const FILE_HOSTS: [&str; 1] = ["lookaside.fbsbx.com"];
/// A Graph answer's body read at most (they are a few hundred bytes).
const MAX_ANSWER_BYTES: usize = 256 * 1024;

/// Each chat's last message from its person: its id (what "typing…" and the read mark
/// name) and when it was sent (Unix seconds: the window runs from it).
pub(crate) type LastSeen = Remembered<String, (String, u64)>;

/// The Graph API with the channel's token and number.
pub(crate) struct Graph {
    client: reqwest::Client,
    api: Url,
    token: String,
    phone: String,
    read_receipts: bool,
    window: Duration,
    pub(crate) last_seen: Arc<LastSeen>,
}

impl Graph {
    pub(crate) fn new(settings: &crate::WhatsAppSettings) -> Result<Self, CoreError> {
        let client = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(10))
            .timeout(CALL_TIMEOUT)
            .build()
            .map_err(|err| channel_error(format!("cannot start the HTTP client: {err}")))?;
        Ok(Self {
            client,
            api: settings.api_url.clone(),
            token: settings.access_token.clone(),
            phone: settings.phone_number_id.clone(),
            read_receipts: settings.read_receipts,
            window: settings.window,
            last_seen: Arc::new(Remembered::new(MAX_KNOWN_CHATS)),
        })
    }

    fn url(&self, path: &str) -> String {
        format!("{}/{path}", self.api.as_str().trim_end_matches('/'))
    }

    /// The business number as WhatsApp shows it (`GET /{phone_number_id}`): the token
    /// and the id checked.
    pub(crate) async fn whoami(&self) -> Result<String, CoreError> {
        let request = self
            .client
            .get(self.url(&self.phone))
            .query(&[("fields", "display_phone_number,verified_name")]);
        let answer = self.answer(request).await?;
        Ok(format!(
            "{} ({})",
            answer["display_phone_number"].as_str().unwrap_or("?"),
            answer["verified_name"].as_str().unwrap_or("unnamed")
        ))
    }

    /// `POST /{phone_number_id}/messages`; the new message's id.
    async fn message(&self, body: Value) -> Result<String, CoreError> {
        let request = self
            .client
            .post(self.url(&format!("{}/messages", self.phone)))
            .json(&body);
        let answer = self.answer(request).await?;
        answer["messages"][0]["id"]
            .as_str()
            .map(str::to_owned)
            .ok_or_else(|| unavailable("WhatsApp's answer named no message".into()))
    }

    /// Sends `request` with the token; its JSON answer, or the error mapped for delivery.
    async fn answer(&self, request: reqwest::RequestBuilder) -> Result<Value, CoreError> {
        let mut response = request
            .bearer_auth(&self.token)
            .send()
            .await
            .map_err(|err| unavailable(switchboard_core::error_chain(&err)))?;
        let status = response.status();
        let retry_after = response
            .headers()
            .get(reqwest::header::RETRY_AFTER)
            .and_then(|value| value.to_str().ok())
            .and_then(|value| value.trim().parse::<u64>().ok())
            .map(Duration::from_secs);
        let mut body = Vec::new();
        while let Some(chunk) = response
            .chunk()
            .await
            .map_err(|err| unavailable(switchboard_core::error_chain(&err)))?
        {
            if body.len() + chunk.len() > MAX_ANSWER_BYTES {
                return Err(unavailable(format!(
                    "WhatsApp's answer ({status}) was over {MAX_ANSWER_BYTES} bytes"
                )));
            }
            body.extend_from_slice(&chunk);
        }
        if status.is_success() {
            return serde_json::from_slice(&body)
                .map_err(|err| unavailable(format!("WhatsApp's answer cannot be read: {err}")));
        }
        let problem = serde_json::from_slice::<Value>(&body)
            .ok()
            .and_then(|value| serde_json::from_value::<Problem>(value["error"].clone()).ok())
            .unwrap_or_default();
        Err(mapped(status.as_u16(), retry_after, &problem))
    }

    /// The window of `chat`, if its person's last message is known to be over a day old:
    /// the refusal, named. Unknown (not seen since the start) is left to WhatsApp.
    fn window_closed(&self, chat: &str) -> Option<CoreError> {
        let (_, at) = self.last_seen.get(chat)?;
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |now| now.as_secs());
        (now.saturating_sub(at) > self.window.as_secs()).then(|| window_closed(chat))
    }

    /// The reply context of `said`, if it is shown as a reply.
    fn context(answering: Option<&switchboard_core::MessageId>, as_reply: bool) -> Value {
        match answering.filter(|_| as_reply) {
            Some(message) => json!({"message_id": message.as_str()}),
            None => Value::Null,
        }
    }

    /// Uploads the file of `upload`; its media id.
    async fn upload(&self, upload: &Upload<'_>) -> Result<String, CoreError> {
        let name = &upload.file.name;
        let bytes = tokio::fs::read(upload.path)
            .await
            .map_err(|err| channel_error(format!("cannot read {name}: {err}")))?;
        let part = reqwest::multipart::Part::bytes(bytes)
            .file_name(name.clone())
            .mime_str(&upload.file.mime)
            .map_err(|err| channel_error(format!("its type {}: {err}", upload.file.mime)))?;
        let form = reqwest::multipart::Form::new()
            .text("messaging_product", "whatsapp")
            .text("type", upload.file.mime.clone())
            .part("file", part);
        let request = self
            .client
            .post(self.url(&format!("{}/media", self.phone)))
            .timeout(FILE_TIMEOUT)
            .multipart(form);
        let answer = self.answer(request).await?;
        answer["id"]
            .as_str()
            .map(str::to_owned)
            .ok_or_else(|| unavailable("WhatsApp's answer to an upload had no id".into()))
    }
}

/// The place of a chat: the person's number, digits only.
#[derive(Clone, Debug)]
pub(crate) struct Number(String);

#[async_trait]
impl Surface for Graph {
    type Place = Number;
    const CHANNEL: &'static str = CHANNEL_NAME;
    const PLATFORM: &'static str = "WhatsApp";

    fn place(&self, chat: &ChatId) -> Result<Number, CoreError> {
        let chat = chat.as_str();
        if (5..=20).contains(&chat.len()) && chat.bytes().all(|b| b.is_ascii_digit()) {
            Ok(Number(chat.to_owned()))
        } else {
            Err(channel_error(format!(
                "`{chat}` is not a WhatsApp number (digits with the country code)"
            )))
        }
    }

    fn limit(&self) -> (usize, Measure) {
        (MESSAGE_LIMIT, Measure::Chars)
    }

    fn typing_every(&self) -> Duration {
        // WhatsApp shows it for 25 s, or until the answer comes.
        Duration::from_secs(20)
    }

    async fn send(&self, place: &Number, said: Said<'_>) -> Result<String, CoreError> {
        if let Some(closed) = self.window_closed(&place.0) {
            return Err(closed);
        }
        let text = match said.form {
            Form::Reply => whatsapp_text(said.text),
            Form::Draft | Form::Notice => said.text.to_owned(),
        };
        let mut body = json!({"messaging_product": "whatsapp", "recipient_type": "individual",
            "to": place.0, "type": "text", "text": {"preview_url": false, "body": text}});
        let context = Self::context(said.answering, said.as_reply);
        if !context.is_null() {
            body["context"] = context;
        }
        self.message(body).await
    }

    async fn edit(
        &self,
        _place: &Number,
        _message: &str,
        _said: Said<'_>,
    ) -> Result<(), CoreError> {
        // Not reached: the channel never streams (WhatsApp has no edits).
        Err(channel_error("WhatsApp messages cannot be edited".into()))
    }

    async fn typing(&self, place: &Number) -> Result<(), CoreError> {
        let Some((message, _)) = self.last_seen.get(&place.0).filter(|_| self.read_receipts) else {
            return Ok(());
        };
        let body = json!({"messaging_product": "whatsapp", "status": "read",
            "message_id": message, "typing_indicator": {"type": "text"}});
        let request = self
            .client
            .post(self.url(&format!("{}/messages", self.phone)))
            .json(&body);
        self.answer(request).await.map(drop)
    }

    fn media(&self) -> MediaLimits {
        MEDIA
    }

    async fn send_file(&self, place: &Number, upload: Upload<'_>) -> Result<String, CoreError> {
        if let Some(closed) = self.window_closed(&place.0) {
            return Err(closed);
        }
        let id = self.upload(&upload).await?;
        let kind = match upload.file.kind {
            MediaKind::Image => "image",
            MediaKind::Voice => "audio",
            MediaKind::Document => "document",
        };
        let mut media = json!({"id": id});
        // Audio takes no caption (it goes out as text after it); a document keeps its name.
        if let (Some(caption), false) = (upload.caption, kind == "audio") {
            media["caption"] = json!(whatsapp_text(caption));
        }
        if kind == "document" {
            media["filename"] = json!(upload.file.name);
        }
        let mut body = json!({"messaging_product": "whatsapp", "recipient_type": "individual",
            "to": place.0, "type": kind, kind: media});
        let context = Self::context(upload.answering, upload.as_reply);
        if !context.is_null() {
            body["context"] = context;
        }
        self.message(body).await
    }
}

/// The files people send: their media id to an address on Meta's CDN, then the bytes.
pub(crate) struct Files {
    pub(crate) graph: Arc<Graph>,
}

#[async_trait]
impl Fetch for Files {
    async fn fetch(&self, file: &FileRef) -> Result<Chunks, String> {
        let graph = &self.graph;
        let id = &file.url;
        if id.is_empty() || !id.bytes().all(|b| b.is_ascii_alphanumeric()) {
            return Err("its media id cannot be read".into());
        }
        let request = graph.client.get(graph.url(id));
        let meta = graph
            .answer(request)
            .await
            .map_err(|err| format!("WhatsApp did not say where it is: {err}"))?;
        let url = meta["url"].as_str().unwrap_or_default();
        let url = media::file_url(url, &FILE_HOSTS, graph.api.host_str(), "WhatsApp")?;
        let response = graph
            .client
            .get(url)
            .bearer_auth(&graph.token)
            .timeout(FILE_TIMEOUT)
            .send()
            .await
            .and_then(reqwest::Response::error_for_status)
            .map_err(|err| format!("it could not be fetched: {err}"))?;
        let body = response.bytes_stream().map_err(|err| err.to_string());
        Ok(match meta["sha256"].as_str().and_then(digest_of) {
            Some(expected) => checked(body, expected),
            None => Box::pin(body),
        })
    }
}

/// A media object's `sha256`, as hex or base64, when it is a SHA-256 digest.
fn digest_of(text: &str) -> Option<Vec<u8>> {
    let text = text.trim();
    if text.len() == 64 && text.bytes().all(|b| b.is_ascii_hexdigit()) {
        return (0..32)
            .map(|i| u8::from_str_radix(&text[2 * i..2 * i + 2], 16).ok())
            .collect();
    }
    use base64::Engine;
    base64::engine::general_purpose::STANDARD
        .decode(text)
        .ok()
        .filter(|digest| digest.len() == 32)
}

/// `body`, ending in an error when its bytes are not the ones WhatsApp hashed (a file cut
/// short or changed on the way is not saved).
fn checked(
    body: impl futures::Stream<Item = Result<axum::body::Bytes, String>> + Send + 'static,
    expected: Vec<u8>,
) -> Chunks {
    use futures::StreamExt;
    let hash = Arc::new(std::sync::Mutex::new(ring::digest::Context::new(
        &ring::digest::SHA256,
    )));
    let hashing = hash.clone();
    let body = body.map_ok(move |chunk| {
        hashing
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .update(&chunk);
        chunk
    });
    let end = futures::stream::once(async move {
        let digest = hash
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
            .finish();
        (digest.as_ref() != expected.as_slice())
            .then(|| Err("its bytes are not the ones WhatsApp sent (sha256)".to_owned()))
    })
    .filter_map(|end| async move { end });
    Box::pin(body.chain(end))
}

/// A Graph error, mapped for delivery.
fn mapped(status: u16, retry_after: Option<Duration>, problem: &Problem) -> CoreError {
    match problem.code {
        // Throttled: the app (4, 80007), the number (130429), this person (131056: about
        // one message in six seconds).
        4 | 80007 | 130429 | 131056 => CoreError::RateLimited {
            retry_after: retry_after.or(Some(Duration::from_secs(if problem.code == 131056 {
                6
            } else {
                2
            }))),
        },
        _ if status == 429 => CoreError::RateLimited {
            retry_after: retry_after.or(Some(Duration::from_secs(2))),
        },
        131047 => channel_error(format!(
            "{WINDOW_CLOSED} of the person's last message, and theirs was longer ago: \
             not delivered ({})",
            problem.said()
        )),
        190 => channel_error(format!(
            "WhatsApp refused the access token ({}); check channels.whatsapp.access_token",
            problem.said()
        )),
        _ if status >= 500 => {
            unavailable(format!("WhatsApp answered {status}: {}", problem.said()))
        }
        _ => channel_error(format!(
            "WhatsApp refused it ({status}): {}",
            problem.said()
        )),
    }
}

/// The refusal of a send to `chat` outside its window.
fn window_closed(chat: &str) -> CoreError {
    tracing::warn!(
        chat,
        "WhatsApp: an answer was not sent: the person last wrote over 24 hours ago"
    );
    channel_error(format!(
        "{WINDOW_CLOSED} of the person's last message, and +{chat} last wrote longer ago: \
         not delivered (they can write again to open it)"
    ))
}

pub(crate) fn channel_error(message: String) -> CoreError {
    CoreError::Channel {
        channel: CHANNEL_NAME.into(),
        message,
    }
}

fn unavailable(message: String) -> CoreError {
    CoreError::Unavailable {
        channel: CHANNEL_NAME.into(),
        message,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn problem(code: u64) -> Problem {
        Problem {
            code,
            message: "said".into(),
            ..Problem::default()
        }
    }

    #[test]
    fn throttling_holds_the_chat_and_a_closed_window_is_named() {
        assert!(matches!(
            mapped(400, None, &problem(131056)),
            CoreError::RateLimited { retry_after: Some(wait) } if wait == Duration::from_secs(6)
        ));
        assert!(matches!(
            mapped(429, Some(Duration::from_secs(3)), &problem(0)),
            CoreError::RateLimited { retry_after: Some(wait) } if wait == Duration::from_secs(3)
        ));
        let closed = mapped(400, None, &problem(131047));
        assert!(!closed.is_transient());
        assert!(closed.to_string().contains(WINDOW_CLOSED), "{closed}");
        assert!(mapped(503, None, &problem(1)).is_transient());
        assert!(
            mapped(401, None, &problem(190))
                .to_string()
                .contains("access_token")
        );
    }
}
