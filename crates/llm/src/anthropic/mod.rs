//! [`AnthropicProvider`]: the native client of Anthropic's Messages API
//! (`POST {base_url}/messages`), whole or streamed as server-sent events.
//!
//! Like the OpenAI client, one call is one attempt, each within its first-byte and idle
//! timeouts and its [`ResponseLimits`]; retries and failover wrap it.

mod stream;
mod wire;

use async_trait::async_trait;
use reqwest::header::CONTENT_TYPE;

use self::stream::Assembler;
use crate::body;
use crate::config::ProviderConfig;
use crate::error::LlmError;
use crate::http;
use crate::limits::ResponseLimits;
use crate::openai::stream::{MAX_TOOL_CALLS, check_calls, check_reply, too_many_calls};
use crate::provider::{ChatRequest, ChatResponse, LlmProvider, StreamEvent, StreamSink};

/// The API version sent with every request.
const API_VERSION: &str = "2023-06-01";

/// A client of the Messages API.
#[derive(Clone, Debug)]
pub struct AnthropicProvider {
    api: http::Api,
}

impl AnthropicProvider {
    /// A provider for the configured server. Fails if the base URL is not a URL or the
    /// TLS stack cannot start.
    pub fn new(config: ProviderConfig) -> Result<Self, LlmError> {
        Ok(Self {
            api: http::Api::new(config, "messages")?,
        })
    }
}

#[async_trait]
impl LlmProvider for AnthropicProvider {
    fn name(&self) -> &str {
        "anthropic"
    }

    fn model(&self) -> &str {
        &self.api.config.model
    }

    async fn chat(
        &self,
        request: &ChatRequest,
        events: &StreamSink<'_>,
    ) -> Result<ChatResponse, LlmError> {
        let mut response = self.call(request, events).await?;
        response.provider = "anthropic";
        response.model = self.api.model.clone();
        Ok(response)
    }
}

impl AnthropicProvider {
    /// One attempt.
    async fn call(
        &self,
        request: &ChatRequest,
        events: &StreamSink<'_>,
    ) -> Result<ChatResponse, LlmError> {
        let settings = wire::Settings {
            model: &self.api.config.model,
            temperature: self.api.config.temperature,
            max_tokens: self.api.config.max_tokens,
            images: self.api.config.images,
        };
        let body = serde_json::to_vec(&wire::request(&settings, request))
            .map_err(|err| LlmError::Decode(err.to_string()))?;
        let mut builder = self
            .api
            .http
            .post(self.api.url.clone())
            .header(CONTENT_TYPE, "application/json")
            .header("anthropic-version", API_VERSION)
            .body(body);
        if let Some(key) = self.api.config.api_key.to_send()? {
            builder = builder.header("x-api-key", key);
        }
        let idle = self.api.config.idle_timeout;
        // Held until the response is read: the connection is busy until then.
        let _connection = self.api.connection().await?;
        let response = http::send(
            builder,
            &self.api.url,
            self.api.config.first_byte_timeout,
            idle,
        )
        .await?;
        let limits = &self.api.config.limits;
        if request.stream && http::is_sse(&response) {
            let mut assembler = Assembler::new(*limits);
            body::read_sse(response.bytes_stream(), idle, limits, |event| {
                let data = event.data.trim();
                if data.is_empty() {
                    return Ok(true);
                }
                let event: wire::Event = http::decode(data.as_bytes(), "stream event")?;
                if let Some(text) = assembler.push(event)? {
                    events(StreamEvent::Text(text));
                }
                Ok(!assembler.is_complete())
            })
            .await?;
            return assembler.finish();
        }
        let bytes =
            body::read_whole(response.bytes_stream(), idle, limits.max_response_bytes).await?;
        let response = parse_whole(&bytes, limits)?;
        if request.stream && !response.content.is_empty() {
            events(StreamEvent::Text(response.content.clone()));
        }
        Ok(response)
    }
}

fn parse_whole(bytes: &[u8], limits: &ResponseLimits) -> Result<ChatResponse, LlmError> {
    let response: wire::Response = http::decode(bytes, "the response")?;
    let (content, tool_calls) = wire::parts(response.content);
    check_reply(content.len(), limits)?;
    if tool_calls.len() > MAX_TOOL_CALLS {
        return Err(too_many_calls());
    }
    let call_bytes = tool_calls
        .iter()
        .map(|call| call.id.len() + call.name.len() + call.arguments.len())
        .sum();
    check_calls(call_bytes, limits)?;
    Ok(ChatResponse {
        content,
        tool_calls,
        usage: response.usage.into(),
        stop: wire::stop(response.stop_reason.as_deref()),
        ..ChatResponse::default()
    })
}
