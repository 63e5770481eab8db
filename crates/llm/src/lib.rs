//! switchboard-llm: talking to language models.
//!
//! The agent sees one trait, [`LlmProvider`]: a [`ChatRequest`] (system prompt, history,
//! tool definitions) in, a [`ChatResponse`] (text and tool calls) out, with what happens
//! meanwhile (streamed text, waits) sent as [`StreamEvent`]s. [`OpenAiProvider`] speaks the
//! OpenAI chat-completions protocol that OpenAI, OpenRouter, vLLM, Ollama and llama.cpp's
//! server share; [`AnthropicProvider`] Anthropic's Messages API; [`GeminiProvider`]
//! Google's Gemini API. Each maps to and from the one internal model, whole or as server-sent events, one attempt per call, reading every
//! response within its [`ResponseLimits`]. [`Retrying`] wraps any provider: retries with
//! backoff, a deadline for the whole call, status lines for the person, errors named by
//! provider. [`Failover`] chains providers, with a cooldown for one that keeps failing.
//!
//! # Layout
//! - `provider`: the [`LlmProvider`] trait, requests, responses and stream events.
//! - `config`: [`ProviderConfig`] and [`ApiKey`], what every client is configured with.
//! - `limits`: [`ResponseLimits`], the caps on one response.
//! - `http`: the HTTP client, endpoints, sending with a first-byte deadline, error statuses.
//! - `body`: reading a response body within limits and timeouts (whole, or as SSE).
//! - `retry`: [`RetryPolicy`] and [`Retrying`], the one retry layer.
//! - `failover`: [`Failover`], the chain of providers.
//! - `observe`: [`Observed`], each attempt's outcome told to an [`Observer`] (health,
//!   metrics).
//! - `openai`: the OpenAI-compatible client (`client`), its wire format (`wire`) and the
//!   reassembly of streamed chunks (`stream`).
//! - `anthropic`: the Messages API client, its wire format and stream reassembly.
//! - `gemini`: the Gemini API client, its wire format, its subset of JSON Schema for tool
//!   declarations (`schema`) and the reassembly of its responses.
//! - `arguments`: a call's arguments as text and as the object Anthropic and Gemini send.
//! - `error`: [`LlmError`].

mod anthropic;
mod arguments;
mod body;
mod config;
mod error;
mod failover;
mod gemini;
mod http;
mod limits;
mod observe;
mod openai;
mod provider;
mod retry;
pub mod section;

#[cfg(test)]
mod properties;

pub use anthropic::AnthropicProvider;
pub use config::{ApiKey, ProviderConfig};
pub use error::LlmError;
pub use failover::{COOL_AFTER, Failover};
pub use gemini::GeminiProvider;
pub use limits::ResponseLimits;
pub use observe::{Observed, Observer};
pub use openai::OpenAiProvider;
pub use provider::{
    ChatRequest, ChatResponse, ImageData, LlmProvider, StopReason, StreamEvent, StreamSink,
};
pub use retry::{RetryPolicy, Retrying};
pub use section::{LlmSection, ProviderKind};
