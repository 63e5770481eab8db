//! Discord's REST API as the channel calls it: a small reqwest client (not serenity's
//! `Http`: with its rate limiter on it retries a 429 inside the call, where the delivery
//! lanes cannot see it, and ignores a custom base URL; with it off it drops the wait Discord
//! states — `tests/serenity.rs` shows it), each call within a time limit and each answer
//! within a size cap, and within Discord's rate limits as its answers state them (buckets,
//! the global limit, the invalid-request guard: `limits.rs`). Errors are mapped for
//! delivery: a 429 — or a bucket with nothing left for longer than a moment — is
//! `RateLimited` with the wait, a network failure or 5xx `Unavailable`, the rest final.
//!
//! [`Discord`] is the channel's [`Surface`]: messages with `allowed_mentions` that let no
//! one be pinged but the author being answered, replies as message references, embeds of
//! links suppressed, "typing…".

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use futures::StreamExt;
use serde_json::{Value, json};
use switchboard_adapter::{Measure, Remembered, Said, Surface, Upload};
use switchboard_core::{ChatId, CoreError, MediaLimits, error_chain};
use url::Url;

use crate::limits::{Answered, Gate, INLINE_WAIT, RateLimits, Route};

/// The channel's name, and the prefix of its session keys.
pub const CHANNEL_NAME: &str = "discord";
/// Discord's longest message, in characters.
pub const MESSAGE_LIMIT: usize = 2000;
/// How long one REST call may take.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(30);
/// The largest answer read from the REST API.
const MAX_ANSWER_BYTES: usize = 1024 * 1024;
/// "typing…" lasts ten seconds on Discord; it is renewed a little sooner.
const TYPING_EVERY: Duration = Duration::from_secs(8);
/// The message flag that turns off link embeds.
const SUPPRESS_EMBEDS: u64 = 1 << 2;
/// Authors remembered for the messages being answered; beyond, the table starts over.
pub(crate) const MAX_KNOWN_AUTHORS: usize = 10_000;

/// How long an upload may take.
const UPLOAD_TIMEOUT: Duration = Duration::from_secs(300);

/// What a bot may upload: files of up to 10 MiB (Discord's limit without boosts), with
/// the message's 2,000 characters as the caption.
pub const MEDIA: MediaLimits = MediaLimits {
    image: 10 * 1024 * 1024,
    voice: 10 * 1024 * 1024,
    document: 10 * 1024 * 1024,
    caption: MESSAGE_LIMIT,
};

/// What a call sends.
pub(crate) enum Body<'a> {
    /// JSON.
    Json(&'a Value),
    /// Files, with the message as `payload_json`.
    Files(reqwest::multipart::Form),
}

/// The REST API.
#[derive(Clone)]
pub(crate) struct Rest {
    client: reqwest::Client,
    /// `<api_url>/api/v10/`.
    base: Url,
    authorization: String,
    limits: Arc<RateLimits>,
}

impl Rest {
    pub(crate) fn new(api_url: &Url, token: &str) -> Result<Self, CoreError> {
        let client = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(10))
            .timeout(CALL_TIMEOUT)
            .tcp_nodelay(true)
            .user_agent(concat!(
                "DiscordBot (https://example.invalid/switchboard, ",
                env!("CARGO_PKG_VERSION"),
                ")"
            ))
            .build()
            .map_err(|err| channel_error(format!("cannot start the HTTP client: {err}")))?;
        let base = api_url
            .join("api/v10/")
            .map_err(|err| channel_error(format!("api_url: {err}")))?;
        Ok(Self {
            client,
            base,
            authorization: format!("Bot {token}"),
            limits: Arc::default(),
        })
    }

    /// A call: `path` is relative to `/api/v10/`. Returns the answer's JSON (`null` for an
    /// empty one).
    pub(crate) async fn call(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<&Value>,
    ) -> Result<Value, CoreError> {
        self.call_with(method, path, body.map(Body::Json)).await
    }

    /// A call with a body of files (`multipart/form-data`), within [`UPLOAD_TIMEOUT`].
    pub(crate) async fn upload(
        &self,
        path: &str,
        form: reqwest::multipart::Form,
    ) -> Result<Value, CoreError> {
        self.call_with(reqwest::Method::POST, path, Some(Body::Files(form)))
            .await
    }

    async fn call_with(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<Body<'_>>,
    ) -> Result<Value, CoreError> {
        let url = self
            .base
            .join(path)
            .map_err(|err| channel_error(format!("bad path {path}: {err}")))?;
        let route = Route::of(&method, path);
        loop {
            match self.limits.before(&route, tokio::time::Instant::now()) {
                Gate::Go => break,
                Gate::Wait(wait) if wait <= INLINE_WAIT => tokio::time::sleep(wait).await,
                // Longer: the delivery lane holds the chat, and other chats go on.
                Gate::Wait(wait) => {
                    return Err(CoreError::RateLimited {
                        retry_after: Some(wait),
                    });
                }
                Gate::Refused(why) => {
                    return Err(CoreError::Unavailable {
                        channel: CHANNEL_NAME.into(),
                        message: why,
                    });
                }
            }
        }
        let mut request = self
            .client
            .request(method.clone(), url)
            .header("authorization", &self.authorization);
        match body {
            Some(Body::Json(body)) => request = request.json(body),
            Some(Body::Files(form)) => request = request.multipart(form).timeout(UPLOAD_TIMEOUT),
            None => {}
        }
        let response = request.send().await.map_err(|err| unavailable(&err))?;
        let status = response.status();
        let headers = response.headers().clone();
        let retry_header = response
            .headers()
            .get("retry-after")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<f64>().ok());
        let bytes = read_capped(response).await?;
        let answer: Value = if bytes.is_empty() {
            Value::Null
        } else {
            serde_json::from_slice(&bytes).unwrap_or(Value::Null)
        };
        let retry_after = answer["retry_after"]
            .as_f64()
            .or(retry_header)
            .filter(|s| s.is_finite() && *s >= 0.0)
            .map(|s| Duration::from_secs_f64(s.min(3600.0)));
        let answered = Answered {
            status: status.as_u16(),
            retry_after,
            global: answer["global"].as_bool() == Some(true),
        };
        self.limits
            .after(&route, &headers, &answered, tokio::time::Instant::now());
        if status.is_success() {
            return Ok(answer);
        }
        let said = answer["message"].as_str().unwrap_or("").to_owned();
        Err(match status.as_u16() {
            429 => CoreError::RateLimited { retry_after },
            401 => channel_error(
                "Discord refused the bot token (401); check channels.discord.token".into(),
            ),
            code if code >= 500 => CoreError::Unavailable {
                channel: CHANNEL_NAME.into(),
                message: format!("{method} {path}: Discord answered {status}"),
            },
            _ => channel_error(format!(
                "{method} {path}: Discord answered {status}: {said}"
            )),
        })
    }

    /// Fetches a file by its full URL (an attachment), within `max_bytes`.
    pub(crate) fn download(
        &self,
        url: Url,
    ) -> impl Future<Output = Result<reqwest::Response, String>> + use<> {
        let request = self.client.get(url).timeout(Duration::from_secs(120));
        async move {
            let response = request
                .send()
                .await
                .map_err(|err| format!("the download failed: {}", error_chain(&err)))?;
            if !response.status().is_success() {
                return Err(format!("the download failed: {}", response.status()));
            }
            Ok(response)
        }
    }

    /// The host the API is on (attachments are fetched only from Discord's hosts or it).
    pub(crate) fn host(&self) -> Option<&str> {
        self.base.host_str()
    }
}

async fn read_capped(response: reqwest::Response) -> Result<Vec<u8>, CoreError> {
    let mut body = Vec::new();
    let mut stream = response.bytes_stream();
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(|err| unavailable(&err))?;
        if body.len() + chunk.len() > MAX_ANSWER_BYTES {
            return Err(CoreError::Unavailable {
                channel: CHANNEL_NAME.into(),
                message: format!("Discord answered more than {MAX_ANSWER_BYTES} bytes"),
            });
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

fn unavailable(err: &reqwest::Error) -> CoreError {
    CoreError::Unavailable {
        channel: CHANNEL_NAME.into(),
        message: if err.is_timeout() {
            format!("Discord did not answer within {CALL_TIMEOUT:?}")
        } else {
            error_chain(err)
        },
    }
}

pub(crate) fn channel_error(message: String) -> CoreError {
    CoreError::Channel {
        channel: CHANNEL_NAME.into(),
        message,
    }
}

/// Who wrote the messages being answered, by message id: their mention (and only theirs)
/// may ping. Filled by intake.
pub(crate) type Authors = Remembered<String, u64>;

/// Discord as a [`Surface`].
pub(crate) struct Discord {
    pub(crate) rest: Rest,
    pub(crate) authors: Arc<Authors>,
}

impl Discord {
    /// Mentions allowed in a text: none of `@everyone`, `@here` or roles, no user but the
    /// author being answered (and the reply's own ping only for them).
    fn allowed_mentions(&self, said: &Said<'_>) -> Value {
        let author = said
            .answering
            .and_then(|message| self.authors.get(message.as_str()));
        let users: Vec<String> = author.iter().map(u64::to_string).collect();
        json!({
            "parse": [],
            "users": users,
            "roles": [],
            "replied_user": said.as_reply && author.is_some(),
        })
    }
}

#[async_trait]
impl Surface for Discord {
    type Place = u64;
    const CHANNEL: &'static str = CHANNEL_NAME;
    const PLATFORM: &'static str = "Discord";

    fn place(&self, chat: &ChatId) -> Result<u64, CoreError> {
        chat.as_str()
            .parse()
            .map_err(|_| channel_error(format!("`{chat}` is not a Discord channel")))
    }

    fn limit(&self) -> (usize, Measure) {
        (MESSAGE_LIMIT, Measure::Chars)
    }

    fn typing_every(&self) -> Duration {
        TYPING_EVERY
    }

    async fn send(&self, &channel: &u64, said: Said<'_>) -> Result<String, CoreError> {
        let mut body = json!({
            "content": said.text,
            "allowed_mentions": self.allowed_mentions(&said),
            "flags": SUPPRESS_EMBEDS,
        });
        if let Some(message) = said.answering.filter(|_| said.as_reply) {
            body["message_reference"] = json!({
                "message_id": message.as_str(),
                "fail_if_not_exists": false,
            });
        }
        let path = format!("channels/{channel}/messages");
        let answer = self
            .rest
            .call(reqwest::Method::POST, &path, Some(&body))
            .await?;
        answer["id"]
            .as_str()
            .map(str::to_owned)
            .ok_or_else(|| CoreError::Unavailable {
                channel: CHANNEL_NAME.into(),
                message: "Discord's answer to a new message had no id".into(),
            })
    }

    async fn edit(&self, &channel: &u64, message: &str, said: Said<'_>) -> Result<(), CoreError> {
        let body = json!({
            "content": said.text,
            "allowed_mentions": self.allowed_mentions(&said),
        });
        let path = format!("channels/{channel}/messages/{message}");
        self.rest
            .call(reqwest::Method::PATCH, &path, Some(&body))
            .await
            .map(drop)
    }

    fn media(&self) -> MediaLimits {
        MEDIA
    }

    /// A message with the file as its attachment: Discord shows pictures, plays audio and
    /// offers the rest to download. Read whole (at most 10 MiB) into the request.
    async fn send_file(&self, &channel: &u64, upload: Upload<'_>) -> Result<String, CoreError> {
        let said = Said {
            text: upload.caption.unwrap_or_default(),
            form: switchboard_adapter::Form::Reply,
            answering: upload.answering,
            as_reply: upload.as_reply,
        };
        let mut payload = json!({
            "content": said.text,
            "allowed_mentions": self.allowed_mentions(&said),
            "flags": SUPPRESS_EMBEDS,
            "attachments": [{"id": 0, "filename": upload.file.name}],
        });
        if let Some(message) = upload.answering.filter(|_| upload.as_reply) {
            payload["message_reference"] = json!({
                "message_id": message.as_str(),
                "fail_if_not_exists": false,
            });
        }
        let bytes = tokio::fs::read(upload.path)
            .await
            .map_err(|err| channel_error(format!("cannot read {}: {err}", upload.file.name)))?;
        let part = reqwest::multipart::Part::bytes(bytes)
            .file_name(upload.file.name.clone())
            .mime_str(&upload.file.mime)
            .map_err(|err| channel_error(format!("its type {}: {err}", upload.file.mime)))?;
        let form = reqwest::multipart::Form::new()
            .text("payload_json", payload.to_string())
            .part("files[0]", part);
        let path = format!("channels/{channel}/messages");
        let answer = self.rest.upload(&path, form).await?;
        answer["id"]
            .as_str()
            .map(str::to_owned)
            .ok_or_else(|| CoreError::Unavailable {
                channel: CHANNEL_NAME.into(),
                message: "Discord's answer to an upload had no id".into(),
            })
    }

    async fn typing(&self, &channel: &u64) -> Result<(), CoreError> {
        let path = format!("channels/{channel}/typing");
        self.rest
            .call(reqwest::Method::POST, &path, None)
            .await
            .map(drop)
    }
}
