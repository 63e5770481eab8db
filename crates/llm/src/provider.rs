//! The [`LlmProvider`] trait and the provider-neutral request and response.

use std::sync::Arc;

use async_trait::async_trait;
use switchboard_core::{ChatMessage, ToolCall, ToolDefinition, Usage};

use crate::error::LlmError;

/// Where a streaming call sends text as it arrives: called once per piece, in order.
pub type DeltaSink<'a> = dyn Fn(String) + Send + Sync + 'a;

/// One request to a model.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ChatRequest {
    /// The system prompt (may be empty).
    pub system: String,
    /// History and the new messages, oldest first. Shared, so building a request from a
    /// session's history copies pointers, not text.
    pub messages: Vec<Arc<ChatMessage>>,
    /// The tools the model may call.
    pub tools: Vec<ToolDefinition>,
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
    /// Why it stopped, as the provider says (`stop`, `tool_calls`, `length`).
    pub finish_reason: Option<String>,
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

    /// Sends one request. With `deltas`, the response is streamed and each piece of text
    /// is sent there as it arrives; the returned response holds the whole of it. Dropping
    /// the future cancels the call.
    async fn chat(
        &self,
        request: &ChatRequest,
        deltas: Option<&DeltaSink<'_>>,
    ) -> Result<ChatResponse, LlmError>;
}
