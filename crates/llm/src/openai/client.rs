//! [`OpenAiProvider`]: the HTTP client for `POST {base_url}/chat/completions`.
//!
//! One call is one attempt; retries, the deadline of the whole call and the person's
//! status lines are the [`Retrying`](crate::Retrying) wrapper's. An attempt waits at most
//! `first_byte_timeout` for the response headers and `idle_timeout` between two chunks of
//! the body, and reads the body within its [`ResponseLimits`].

use async_trait::async_trait;
use reqwest::header::CONTENT_TYPE;

use super::stream::{Assembler, MAX_TOOL_CALLS, check_calls, check_reply, too_many_calls};
use super::wire::{self, Settings};
use crate::body;
use crate::config::ProviderConfig;
use crate::error::LlmError;
use crate::http;
use crate::limits::ResponseLimits;
use crate::provider::{
    ChatRequest, ChatResponse, LlmProvider, StopReason, StreamEvent, StreamSink,
};

/// A client of one OpenAI-compatible server.
#[derive(Clone, Debug)]
pub struct OpenAiProvider {
    api: http::Api,
}

impl OpenAiProvider {
    /// A provider for the configured server. Fails if the base URL is not a URL or the
    /// TLS stack cannot start.
    pub fn new(config: ProviderConfig) -> Result<Self, LlmError> {
        Ok(Self {
            api: http::Api::new(config, "chat/completions")?,
        })
    }

    /// One attempt.
    async fn attempt(
        &self,
        body: Vec<u8>,
        key: Option<&str>,
        stream: bool,
        events: &StreamSink<'_>,
    ) -> Result<ChatResponse, LlmError> {
        let idle = self.api.config.idle_timeout;
        // Held until the response is read: the connection is busy until then.
        let _connection = self.api.connection().await?;
        let mut builder = self
            .api
            .http
            .post(self.api.url.clone())
            .header(CONTENT_TYPE, "application/json")
            .body(body);
        if let Some(key) = key {
            builder = builder.bearer_auth(key);
        }
        let response = http::send(
            builder,
            &self.api.url,
            self.api.config.first_byte_timeout,
            idle,
        )
        .await?;
        let limits = &self.api.config.limits;
        if stream && http::is_sse(&response) {
            let mut assembler = Assembler::new(*limits);
            body::read_sse(response.bytes_stream(), idle, limits, |event| {
                let data = event.data.trim();
                if data == "[DONE]" {
                    return Ok(false);
                }
                if data.is_empty() {
                    return Ok(true);
                }
                let chunk: wire::Chunk = http::decode(data.as_bytes(), "stream event")?;
                if let Some(text) = assembler.push(chunk)? {
                    events(StreamEvent::Text(text));
                }
                Ok(true)
            })
            .await?;
            // Some servers close without `[DONE]`; what arrived is the response, unless it
            // broke off inside a tool call.
            return assembler.finish();
        }
        let bytes =
            body::read_whole(response.bytes_stream(), idle, limits.max_response_bytes).await?;
        let response = parse_whole(&bytes, limits)?;
        if stream && !response.content.is_empty() {
            events(StreamEvent::Text(response.content.clone()));
        }
        Ok(response)
    }
}

#[async_trait]
impl LlmProvider for OpenAiProvider {
    fn name(&self) -> &str {
        "openai"
    }

    fn model(&self) -> &str {
        &self.api.config.model
    }

    async fn chat(
        &self,
        request: &ChatRequest,
        events: &StreamSink<'_>,
    ) -> Result<ChatResponse, LlmError> {
        let key = self.api.config.api_key.to_send()?;
        let settings = Settings {
            model: &self.api.config.model,
            temperature: self.api.config.temperature,
            max_tokens: self.api.config.max_tokens,
            images: self.api.config.images,
        };
        let body = serde_json::to_vec(&wire::request(&settings, request, request.stream))
            .map_err(|err| LlmError::Decode(err.to_string()))?;
        let mut response = self.attempt(body, key, request.stream, events).await?;
        response.provider = "openai";
        response.model = self.api.model.clone();
        Ok(response)
    }
}

pub(crate) fn parse_whole(bytes: &[u8], limits: &ResponseLimits) -> Result<ChatResponse, LlmError> {
    let response: wire::Response = http::decode(bytes, "the response")?;
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
        ..ChatResponse::default()
    })
}
