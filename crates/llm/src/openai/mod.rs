//! The OpenAI-compatible provider: chat completions, whole or streamed.

mod client;
mod stream;
mod wire;

pub use client::{ApiKey, OpenAiConfig, OpenAiProvider};
