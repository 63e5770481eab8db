//! switchboard-llm: talking to language models.
//!
//! The agent sees one trait, [`LlmProvider`]: a [`ChatRequest`] (system prompt, history,
//! tool definitions) in, a [`ChatResponse`] (text and tool calls) out, with text deltas
//! streamed to a [`DeltaSink`] when one is given. [`OpenAiProvider`] speaks the OpenAI
//! chat-completions protocol that OpenAI, OpenRouter, vLLM, Ollama and llama.cpp's server
//! share, whole or as server-sent events, and retries transient failures.
//!
//! # Layout
//! - `provider`: the [`LlmProvider`] trait, requests and responses.
//! - `retry`: [`RetryPolicy`], exponential backoff with jitter honouring Retry-After.
//! - `openai`: the OpenAI-compatible client (`client`), its wire format (`wire`) and the
//!   reassembly of streamed chunks (`stream`).
//! - `error`: [`LlmError`].

mod error;
mod openai;
mod provider;
mod retry;

pub use error::LlmError;
pub use openai::{ApiKey, OpenAiConfig, OpenAiProvider};
pub use provider::{ChatRequest, ChatResponse, DeltaSink, LlmProvider};
pub use retry::RetryPolicy;
