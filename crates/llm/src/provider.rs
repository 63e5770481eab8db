//! The [`LlmProvider`] trait and the provider-neutral request and response.

use std::sync::Arc;

use async_trait::async_trait;
use switchboard_core::{ChatMessage, ImagePart, ToolCall, ToolDefinition, Usage};

use crate::error::LlmError;

/// What a call reports while it runs, in order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StreamEvent {
    /// A piece of the reply's text (streamed calls only).
    Text(String),
    /// The text reported so far is void: the stream broke off and the call is tried again,
    /// so the reply will stream anew. Whoever shows the text drops what it has.
    Reset,
    /// What the call is waiting on (a slow model, a retry after an error), for the person.
    Status(String),
}

/// Where a call sends its [`StreamEvent`]s.
pub type StreamSink<'a> = dyn Fn(StreamEvent) + Send + Sync + 'a;

/// One request to a model.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ChatRequest {
    /// The system prompt (may be empty).
    pub system: String,
    /// History and the new messages, oldest first. Shared, so building a request from a
    /// session's history copies pointers, not text.
    pub messages: Vec<Arc<ChatMessage>>,
    /// The tools the model may call (the registry's, shared).
    pub tools: Arc<[ToolDefinition]>,
    /// Whether to stream the reply (text arrives as [`StreamEvent::Text`]).
    pub stream: bool,
    /// The bytes of the images the request shows, by the path their [`ImagePart`] names
    /// (the turn's: the new message's and its tool results'; older images are not sent
    /// again). A part without bytes here is left out of the request.
    pub images: Vec<ImageData>,
}

/// An image's bytes, base64-encoded, for a request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ImageData {
    /// The path of the [`ImagePart`] it belongs to.
    pub path: String,
    /// Its MIME type.
    pub mime: String,
    /// The bytes, base64 (standard alphabet, padded).
    pub base64: Arc<str>,
}

impl ChatRequest {
    /// The bytes of the image part at `path`, if the request carries them.
    pub fn image(&self, path: &str) -> Option<&ImageData> {
        self.images.iter().find(|image| image.path == path)
    }

    /// The bytes of the images among `parts` the request carries, in order; none when the
    /// model takes no images (`take` false: its config says `images = false`).
    pub(crate) fn shown<'a>(
        &'a self,
        parts: &'a [ImagePart],
        take: bool,
    ) -> impl Iterator<Item = &'a ImageData> + 'a {
        parts
            .iter()
            .filter(move |_| take)
            .filter_map(|part| self.image(&part.path))
    }
}

/// What the model answered.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ChatResponse {
    /// Its text (empty when it only called tools).
    pub content: String,
    /// The tools it asked to run, in order.
    pub tool_calls: Vec<ToolCall>,
    /// Tokens spent by this call.
    pub usage: Usage,
    /// Why it stopped (`None`: the provider did not say).
    pub stop: Option<StopReason>,
    /// The API that answered (`openai`, `anthropic`; empty if unknown): in a failover
    /// chain, not necessarily the first.
    pub provider: &'static str,
    /// The model that answered.
    pub model: Arc<str>,
}

/// Why a model stopped answering, the same for every provider.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StopReason {
    /// It finished its answer (OpenAI `stop`, Anthropic `end_turn` / `stop_sequence`).
    EndTurn,
    /// It asked for tools (`tool_calls`, `function_call`, `tool_use`).
    ToolUse,
    /// It ran into the output token limit: the answer (or a tool call) is cut (`length`,
    /// `max_tokens`).
    MaxTokens,
    /// The provider's filter cut or blocked it, with the reason as the provider wrote it
    /// (`content_filter`, `refusal`, Gemini's `SAFETY`, `RECITATION`, a blocked prompt's
    /// `PROHIBITED_CONTENT` …).
    Filtered(String),
    /// Something else, as the provider wrote it.
    Other(String),
}

impl StopReason {
    /// Reads a provider's stop or finish reason.
    pub fn parse(reason: &str) -> Self {
        match reason {
            "stop" | "end_turn" | "stop_sequence" => Self::EndTurn,
            "tool_calls" | "function_call" | "tool_use" => Self::ToolUse,
            "length" | "max_tokens" => Self::MaxTokens,
            "content_filter" | "refusal" => Self::Filtered(reason.to_owned()),
            other => Self::Other(other.to_owned()),
        }
    }
}

impl StopReason {
    /// The one sentence a person is told after an answer that stopped for this reason;
    /// `None` for an answer that ended as answers do (or asked for tools).
    pub fn notice(&self) -> Option<String> {
        match self {
            Self::EndTurn | Self::ToolUse => None,
            Self::MaxTokens => Some(
                "(The answer was cut off: the model reached its output limit, llm.max_tokens.)"
                    .to_owned(),
            ),
            Self::Filtered(reason) => Some(format!(
                "(The model's provider stopped this answer: its safety filter said {reason}.)"
            )),
            Self::Other(reason) => Some(format!("(The model stopped early: {reason}.)")),
        }
    }
}

impl ChatResponse {
    /// The response as an assistant message for history.
    pub fn to_message(&self) -> ChatMessage {
        ChatMessage::Assistant {
            content: self.content.clone(),
            tool_calls: self.tool_calls.clone(),
        }
    }
}

/// A language model behind some API.
#[async_trait]
pub trait LlmProvider: Send + Sync + 'static {
    /// A short name for logs (`openai`, `anthropic`).
    fn name(&self) -> &str;

    /// The model requests go to.
    fn model(&self) -> &str;

    /// Sends one request. What happens meanwhile (streamed text, waits) goes to `events`;
    /// the returned response holds the whole reply. Dropping the future cancels the call.
    async fn chat(
        &self,
        request: &ChatRequest,
        events: &StreamSink<'_>,
    ) -> Result<ChatResponse, LlmError>;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stop_reasons_of_both_providers_read_the_same() {
        for (openai, anthropic, expected) in [
            ("stop", "end_turn", StopReason::EndTurn),
            ("tool_calls", "tool_use", StopReason::ToolUse),
            ("length", "max_tokens", StopReason::MaxTokens),
        ] {
            assert_eq!(StopReason::parse(openai), expected);
            assert_eq!(StopReason::parse(anthropic), expected);
        }
        assert_eq!(
            StopReason::parse("content_filter"),
            StopReason::Filtered("content_filter".into())
        );
        assert_eq!(
            StopReason::parse("refusal"),
            StopReason::Filtered("refusal".into())
        );
        assert_eq!(
            StopReason::parse("pause_turn"),
            StopReason::Other("pause_turn".into())
        );
    }
}
