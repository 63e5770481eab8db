//! switchboard-llm: talking to language models.
//!
//! The agent sees one trait, [`LlmProvider`]: a [`ChatRequest`] (system prompt, history,
//! tool definitions) in, a [`ChatResponse`] (text and tool calls) out, with what happens
//! meanwhile (streamed text, waits) sent as [`StreamEvent`]s. [`OpenAiProvider`] speaks the
//! OpenAI chat-completions protocol that OpenAI, OpenRouter, vLLM, Ollama and llama.cpp's
//! server share, whole or as server-sent events, one attempt per call, reading every
//! response within its [`ResponseLimits`]. [`Retrying`] wraps any provider: retries with
//! backoff, a deadline for the whole call, status lines for the person.
//!
//! # Layout
//! - `provider`: the [`LlmProvider`] trait, requests, responses and stream events.
//! - `limits`: [`ResponseLimits`], the caps on one response.
//! - `body`: reading a response body within limits and timeouts (whole, or as SSE).
//! - `retry`: [`RetryPolicy`] and [`Retrying`], the one retry layer.
//! - `openai`: the OpenAI-compatible client (`client`), its wire format (`wire`) and the
//!   reassembly of streamed chunks (`stream`).
//! - `error`: [`LlmError`].

mod anthropic;
mod body;
mod error;
mod failover;
mod http;
mod limits;
mod openai;
mod provider;
mod retry;

#[cfg(test)]
mod properties;

pub use anthropic::{AnthropicConfig, AnthropicProvider};
pub use error::LlmError;
pub use failover::{COOL_AFTER, Failover};
pub use limits::ResponseLimits;
pub use openai::{ApiKey, OpenAiConfig, OpenAiProvider};
pub use provider::{
    ChatRequest, ChatResponse, ImageData, LlmProvider, StopReason, StreamEvent, StreamSink,
};
pub use retry::{RetryPolicy, Retrying};
