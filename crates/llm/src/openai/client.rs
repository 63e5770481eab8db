//! [`OpenAiProvider`]: the HTTP client for `POST {base_url}/chat/completions`.

use std::fmt;
use std::time::Duration;

use async_trait::async_trait;
use eventsource_stream::Eventsource;
use futures::StreamExt;
use reqwest::header::{CONTENT_TYPE, HeaderMap, RETRY_AFTER};
use tokio::time::Instant;

use super::stream::Assembler;
use super::wire::{self, Settings};
use crate::error::LlmError;
use crate::provider::{ChatRequest, ChatResponse, DeltaSink, LlmProvider};
use crate::retry::RetryPolicy;

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
    /// Deadline for the whole response, streamed or not.
    pub request_timeout: Duration,
    /// Retries of transient failures.
    pub retry: RetryPolicy,
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
            request_timeout: Duration::from_secs(300),
            retry: RetryPolicy::default(),
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

    /// One attempt. `emitted` turns true once text went to the sink: after that the
    /// request is not retried, or the person would see the text twice.
    async fn attempt(
        &self,
        body: &[u8],
        key: Option<&str>,
        deltas: Option<&DeltaSink<'_>>,
        emitted: &mut bool,
    ) -> Result<ChatResponse, LlmError> {
        let deadline = Instant::now() + self.config.request_timeout;
        let mut builder = self
            .http
            .post(self.url.clone())
            .header(CONTENT_TYPE, "application/json")
            .body(body.to_vec());
        if let Some(key) = key {
            builder = builder.bearer_auth(key);
        }
        let response = tokio::time::timeout(self.config.first_byte_timeout, builder.send())
            .await
            .map_err(|_| LlmError::Timeout {
                what: "waiting for the first byte",
                after: self.config.first_byte_timeout,
            })?
            .map_err(|err| self.transport_error(&err))?;

        let status = response.status();
        if !status.is_success() {
            let retry_after = retry_after(response.headers());
            let body = tokio::time::timeout_at(deadline, response.text())
                .await
                .ok()
                .and_then(Result::ok)
                .unwrap_or_default();
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
        match deltas {
            Some(sink) if is_sse => self.read_stream(response, sink, deadline, emitted).await,
            _ => {
                let bytes = tokio::time::timeout_at(deadline, response.bytes())
                    .await
                    .map_err(|_| self.whole_timeout())?
                    .map_err(|err| LlmError::Stream(error_chain(&err)))?;
                let response = parse_whole(&bytes)?;
                if let Some(sink) = deltas.filter(|_| !response.content.is_empty()) {
                    *emitted = true;
                    sink(response.content.clone());
                }
                Ok(response)
            }
        }
    }

    async fn read_stream(
        &self,
        response: reqwest::Response,
        sink: &DeltaSink<'_>,
        deadline: Instant,
        emitted: &mut bool,
    ) -> Result<ChatResponse, LlmError> {
        let mut events = response.bytes_stream().eventsource();
        let mut assembler = Assembler::default();
        loop {
            let event = tokio::time::timeout_at(deadline, events.next())
                .await
                .map_err(|_| self.whole_timeout())?;
            let Some(event) = event else {
                // Some servers close without `[DONE]`; what arrived is the response.
                break;
            };
            let event = event.map_err(|err| LlmError::Stream(err.to_string()))?;
            let data = event.data.trim();
            if data == "[DONE]" {
                break;
            }
            if data.is_empty() {
                continue;
            }
            let chunk: wire::Chunk = serde_json::from_str(data)
                .map_err(|err| LlmError::Decode(format!("{err} in stream event `{data}`")))?;
            if let Some(text) = assembler.push(chunk)? {
                *emitted = true;
                sink(text);
            }
        }
        Ok(assembler.finish())
    }

    fn transport_error(&self, err: &reqwest::Error) -> LlmError {
        if err.is_timeout() {
            LlmError::Timeout {
                what: "connecting",
                after: Duration::from_secs(10),
            }
        } else {
            LlmError::Connect {
                url: self.url.to_string(),
                message: error_chain(err),
            }
        }
    }

    fn whole_timeout(&self) -> LlmError {
        LlmError::Timeout {
            what: "reading the whole response",
            after: self.config.request_timeout,
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
        deltas: Option<&DeltaSink<'_>>,
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
        let body = serde_json::to_vec(&wire::request(&settings, request, deltas.is_some()))
            .map_err(|err| LlmError::Decode(err.to_string()))?;

        let mut retry = 0;
        loop {
            let mut emitted = false;
            match self.attempt(&body, key, deltas, &mut emitted).await {
                Err(err) if err.is_transient() && !emitted => {
                    let Some(wait) = self.config.retry.delay(retry, err.retry_after()) else {
                        return Err(err);
                    };
                    tracing::warn!(model = %self.config.model, retry = retry + 1,
                        wait_ms = wait.as_millis() as u64, error = %err, "retrying LLM call");
                    tokio::time::sleep(wait).await;
                    retry += 1;
                }
                other => return other,
            }
        }
    }
}

fn parse_whole(bytes: &[u8]) -> Result<ChatResponse, LlmError> {
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
    Ok(ChatResponse {
        content: choice.message.content.unwrap_or_default(),
        tool_calls: wire::tool_calls(choice.message.tool_calls.unwrap_or_default()),
        usage,
        finish_reason: choice.finish_reason,
    })
}

/// Retry-After in seconds (the HTTP-date form is rare from APIs and is ignored).
fn retry_after(headers: &HeaderMap) -> Option<Duration> {
    let value = headers.get(RETRY_AFTER)?.to_str().ok()?.trim();
    value
        .parse::<f64>()
        .ok()
        .filter(|secs| secs.is_finite() && *secs >= 0.0)
        .map(Duration::from_secs_f64)
}

/// An error with its sources, since reqwest's own text hides the useful part.
fn error_chain(err: &dyn std::error::Error) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}
