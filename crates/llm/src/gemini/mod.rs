//! [`GeminiProvider`]: the native client of Google's Gemini API —
//! `POST {base_url}/models/{model}:generateContent`, or `:streamGenerateContent?alt=sse`
//! for a streamed call — with the key in `x-goog-api-key`.
//!
//! Like the other clients, one call is one attempt, each within its first-byte and idle
//! timeouts and its [`ResponseLimits`]; retries and failover wrap it. Google's errors come
//! as `{"error": {"code", "message", "status"}}` with the HTTP status retries read (429,
//! 5xx); a key Google does not know comes as HTTP 400 and is told as the key to fix.

mod schema;
mod stream;
mod wire;

use async_trait::async_trait;
use reqwest::header::CONTENT_TYPE;

use self::stream::Assembler;
use crate::body;
use crate::config::ProviderConfig;
use crate::error::LlmError;
use crate::http;
use crate::provider::{ChatRequest, ChatResponse, LlmProvider, StreamEvent, StreamSink};

/// A client of the Gemini API.
#[derive(Clone, Debug)]
pub struct GeminiProvider {
    /// `generateContent`'s endpoint (and the client, config and connections).
    api: http::Api,
    /// `streamGenerateContent`'s, as server-sent events.
    stream_url: reqwest::Url,
}

impl GeminiProvider {
    /// A provider for the configured server. Fails if the base URL is not a URL or the
    /// TLS stack cannot start.
    pub fn new(config: ProviderConfig) -> Result<Self, LlmError> {
        // `models/gemini-2.5-flash`, as Google's own listings name models, means the same.
        let model = config.model.trim_start_matches("models/").to_owned();
        let stream_url = http::endpoint(
            &config.base_url,
            &format!("models/{model}:streamGenerateContent?alt=sse"),
        )?;
        Ok(Self {
            api: http::Api::new(config, &format!("models/{model}:generateContent"))?,
            stream_url,
        })
    }
}

#[async_trait]
impl LlmProvider for GeminiProvider {
    fn name(&self) -> &str {
        "gemini"
    }

    fn model(&self) -> &str {
        &self.api.config.model
    }

    async fn chat(
        &self,
        request: &ChatRequest,
        events: &StreamSink<'_>,
    ) -> Result<ChatResponse, LlmError> {
        let mut response = self.call(request, events).await.map_err(key_refused)?;
        response.provider = "gemini";
        response.model = self.api.model.clone();
        Ok(response)
    }
}

impl GeminiProvider {
    /// One attempt.
    async fn call(
        &self,
        request: &ChatRequest,
        events: &StreamSink<'_>,
    ) -> Result<ChatResponse, LlmError> {
        let settings = wire::Settings {
            temperature: self.api.config.temperature,
            max_tokens: self.api.config.max_tokens,
            images: self.api.config.images,
        };
        let body = serde_json::to_vec(&wire::request(&settings, request))
            .map_err(|err| LlmError::Decode(err.to_string()))?;
        let url = if request.stream {
            &self.stream_url
        } else {
            &self.api.url
        };
        let mut builder = self
            .api
            .http
            .post(url.clone())
            .header(CONTENT_TYPE, "application/json")
            .body(body);
        if let Some(key) = self.api.config.api_key.to_send()? {
            builder = builder.header("x-goog-api-key", key);
        }
        let idle = self.api.config.idle_timeout;
        // Held until the response is read: the connection is busy until then.
        let _connection = self.api.connection().await?;
        let response = http::send(builder, url, self.api.config.first_byte_timeout, idle).await?;
        let limits = &self.api.config.limits;
        let mut assembler = Assembler::new(*limits);
        if request.stream && http::is_sse(&response) {
            body::read_sse(response.bytes_stream(), idle, limits, |event| {
                let data = event.data.trim();
                if data.is_empty() {
                    return Ok(true);
                }
                let event: wire::Response = http::decode(data.as_bytes(), "stream event")?;
                if let Some(text) = assembler.push(event)? {
                    events(StreamEvent::Text(text));
                }
                Ok(!assembler.is_complete())
            })
            .await?;
            return assembler.finish(true);
        }
        let bytes =
            body::read_whole(response.bytes_stream(), idle, limits.max_response_bytes).await?;
        // A whole response is one event of a stream: what it holds, at once.
        let text = assembler.push(http::decode(&bytes, "the response")?)?;
        if request.stream
            && let Some(text) = text
        {
            events(StreamEvent::Text(text));
        }
        assembler.finish(false)
    }
}

/// Google answers a key it does not know (or one expired) with HTTP 400, not 401: told as
/// the key to fix, like every provider's refused key, and not retried.
fn key_refused(err: LlmError) -> LlmError {
    match err {
        LlmError::Status {
            status: 400, body, ..
        } if body.contains("API key") => LlmError::Unauthorized { status: 400, body },
        other => other,
    }
}
