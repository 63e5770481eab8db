//! [`OpenAiProvider`]: the HTTP client for `POST {base_url}/chat/completions`.
//!
//! One call is one attempt; retries, the deadline of the whole call and the person's
//! status lines are the [`Retrying`](crate::Retrying) wrapper's. An attempt waits at most
//! `first_byte_timeout` for the response headers and `idle_timeout` between two chunks of
//! the body, and reads the body within its [`ResponseLimits`].

use std::fmt;
use std::time::Duration;

use async_trait::async_trait;
use reqwest::header::{CONTENT_TYPE, HeaderMap, RETRY_AFTER};

use super::stream::{Assembler, MAX_TOOL_CALLS, check_calls, check_reply, too_many_calls};
use super::wire::{self, Settings};
use crate::body::{self, error_chain};
use crate::error::LlmError;
use crate::limits::ResponseLimits;
use crate::provider::{
    ChatRequest, ChatResponse, LlmProvider, StopReason, StreamEvent, StreamSink,
};

/// How much of an error response's body is kept for the error message.
const ERROR_BODY_BYTES: usize = 16 * 1024;

/// An API key, or why there is none.
#[derive(Clone, Default)]
pub enum ApiKey {
    /// No key is configured (local servers such as Ollama or llama.cpp).
    #[default]
    None,
    /// The key to send as a bearer token.
    Key(String),
    /// The config names an environment variable that is not set; every call fails with
    /// an error naming it.
    Missing {
        /// The variable's name.
        variable: String,
    },
}

impl fmt::Debug for ApiKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::None => f.write_str("None"),
            Self::Key(_) => f.write_str("Key(<redacted>)"),
            Self::Missing { variable } => write!(f, "Missing({variable})"),
        }
    }
}

/// Settings of an OpenAI-compatible provider.
#[derive(Clone, Debug)]
pub struct OpenAiConfig {
    /// The API root, e.g. `https://api.openai.com/v1`; `/chat/completions` is appended.
    pub base_url: String,
    /// The bearer token.
    pub api_key: ApiKey,
    /// The model name.
    pub model: String,
    /// Sampling temperature; the server's default when `None`.
    pub temperature: Option<f32>,
    /// Upper bound on tokens per response; the server's default when `None`.
    pub max_tokens: Option<u32>,
    /// Deadline for the response headers (the first byte).
    pub first_byte_timeout: Duration,
    /// Deadline between two chunks of the response body.
    pub idle_timeout: Duration,
    /// Caps on what one response may hold.
    pub limits: ResponseLimits,
}

impl Default for OpenAiConfig {
    fn default() -> Self {
        Self {
            base_url: "https://api.openai.com/v1".into(),
            api_key: ApiKey::None,
            model: "gpt-4o-mini".into(),
            temperature: None,
            max_tokens: None,
            first_byte_timeout: Duration::from_secs(30),
            idle_timeout: Duration::from_secs(60),
            limits: ResponseLimits::default(),
        }
    }
}

/// A client of one OpenAI-compatible server.
#[derive(Clone, Debug)]
pub struct OpenAiProvider {
    http: reqwest::Client,
    /// `{base_url}/chat/completions`, parsed once.
    url: reqwest::Url,
    config: OpenAiConfig,
}

impl OpenAiProvider {
    /// A provider for the configured server. Fails only if the TLS stack cannot start.
    pub fn new(config: OpenAiConfig) -> Result<Self, LlmError> {
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(10))
            .tcp_nodelay(true)
            .pool_idle_timeout(Duration::from_secs(90))
            .user_agent(concat!("switchboard/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|err| LlmError::Connect {
                url: config.base_url.clone(),
                message: error_chain(&err),
            })?;
        let url = format!("{}/chat/completions", config.base_url.trim_end_matches('/'));
        let url = reqwest::Url::parse(&url)
            .ok()
            .filter(|url| matches!(url.scheme(), "http" | "https"))
            .ok_or_else(|| LlmError::InvalidBaseUrl {
                url: config.base_url.clone(),
                message: "expected http:// or https:// followed by a host".into(),
            })?;
        Ok(Self { http, url, config })
    }

    /// One attempt.
    async fn attempt(
        &self,
        body: Vec<u8>,
        key: Option<&str>,
        stream: bool,
        events: &StreamSink<'_>,
    ) -> Result<ChatResponse, LlmError> {
        let idle = self.config.idle_timeout;
        let mut builder = self
            .http
            .post(self.url.clone())
            .header(CONTENT_TYPE, "application/json")
            .body(body);
        if let Some(key) = key {
            builder = builder.bearer_auth(key);
        }
        let response = tokio::time::timeout(self.config.first_byte_timeout, builder.send())
            .await
            .map_err(|_| LlmError::Timeout {
                what: "waiting for the first byte",
                after: self.config.first_byte_timeout,
                key: "timeout_secs",
            })?
            .map_err(|err| self.transport_error(&err))?;

        let status = response.status();
        if !status.is_success() {
            let retry_after = retry_after(response.headers());
            let body = body::read_prefix(response.bytes_stream(), idle, ERROR_BODY_BYTES).await;
            let body: String = body.chars().take(500).collect();
            return Err(match status.as_u16() {
                429 => LlmError::RateLimited { retry_after },
                401 | 403 => LlmError::Unauthorized {
                    status: status.as_u16(),
                    body,
                },
                code => LlmError::Status {
                    status: code,
                    body,
                    retry_after,
                },
            });
        }

        let is_sse = response
            .headers()
            .get(CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with("text/event-stream"));
        let limits = &self.config.limits;
        if stream && is_sse {
            let mut assembler = Assembler::new(*limits);
            body::read_sse(response.bytes_stream(), idle, limits, |event| {
                let data = event.data.trim();
                if data == "[DONE]" {
                    return Ok(false);
                }
                if data.is_empty() {
                    return Ok(true);
                }
                let chunk: wire::Chunk = serde_json::from_str(data).map_err(|err| {
                    let data: String = data.chars().take(200).collect();
                    LlmError::Decode(format!("{err} in stream event `{data}`"))
                })?;
                if let Some(text) = assembler.push(chunk)? {
                    events(StreamEvent::Text(text));
                }
                Ok(true)
            })
            .await?;
            // Some servers close without `[DONE]`; what arrived is the response.
            return Ok(assembler.finish());
        }
        let bytes =
            body::read_whole(response.bytes_stream(), idle, limits.max_response_bytes).await?;
        let response = parse_whole(&bytes, limits)?;
        if stream && !response.content.is_empty() {
            events(StreamEvent::Text(response.content.clone()));
        }
        Ok(response)
    }

    fn transport_error(&self, err: &reqwest::Error) -> LlmError {
        if err.is_timeout() {
            LlmError::Timeout {
                what: "connecting",
                after: Duration::from_secs(10),
                key: "base_url",
            }
        } else {
            LlmError::Connect {
                url: self.url.to_string(),
                message: error_chain(err),
            }
        }
    }
}

#[async_trait]
impl LlmProvider for OpenAiProvider {
    fn name(&self) -> &str {
        "openai"
    }

    fn model(&self) -> &str {
        &self.config.model
    }

    async fn chat(
        &self,
        request: &ChatRequest,
        events: &StreamSink<'_>,
    ) -> Result<ChatResponse, LlmError> {
        let key = match &self.config.api_key {
            ApiKey::None => None,
            ApiKey::Key(key) => Some(key.as_str()),
            ApiKey::Missing { variable } => {
                return Err(LlmError::MissingApiKey {
                    variable: variable.clone(),
                });
            }
        };
        let settings = Settings {
            model: &self.config.model,
            temperature: self.config.temperature,
            max_tokens: self.config.max_tokens,
        };
        let body = serde_json::to_vec(&wire::request(&settings, request, request.stream))
            .map_err(|err| LlmError::Decode(err.to_string()))?;
        self.attempt(body, key, request.stream, events).await
    }
}

pub(crate) fn parse_whole(bytes: &[u8], limits: &ResponseLimits) -> Result<ChatResponse, LlmError> {
    let response: wire::Response = serde_json::from_slice(bytes).map_err(|err| {
        let text: String = String::from_utf8_lossy(bytes).chars().take(200).collect();
        LlmError::Decode(format!("{err} in `{text}`"))
    })?;
    let usage = response.usage.map(Into::into).unwrap_or_default();
    let choice = response
        .choices
        .into_iter()
        .next()
        .ok_or_else(|| LlmError::Decode("the response has no choices".into()))?;
    let content = choice.message.content.unwrap_or_default();
    check_reply(content.len(), limits)?;
    let calls = choice.message.tool_calls.unwrap_or_default();
    if calls.len() > MAX_TOOL_CALLS {
        return Err(too_many_calls());
    }
    let tool_calls = wire::tool_calls(calls);
    let call_bytes = tool_calls
        .iter()
        .map(|call| call.id.len() + call.name.len() + call.arguments.len())
        .sum();
    check_calls(call_bytes, limits)?;
    Ok(ChatResponse {
        content,
        tool_calls,
        usage,
        stop: choice.finish_reason.as_deref().map(StopReason::parse),
    })
}

/// Retry-After in seconds (the HTTP-date form is rare from APIs and is ignored).
fn retry_after(headers: &HeaderMap) -> Option<Duration> {
    let value = headers.get(RETRY_AFTER)?.to_str().ok()?.trim();
    let secs = value.parse::<f64>().ok().filter(|secs| *secs >= 0.0)?;
    // A server's `Retry-After: 1e300` must not panic the daemon: it is a wait longer than
    // any we accept, so the error is passed on at once.
    Some(Duration::try_from_secs_f64(secs).unwrap_or(Duration::MAX))
}
