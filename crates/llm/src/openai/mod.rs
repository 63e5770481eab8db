//! The OpenAI-compatible provider: chat completions, whole or streamed.

mod client;
pub(crate) mod stream;
pub(crate) mod wire;

#[cfg(test)]
pub(crate) use client::parse_whole;
pub use client::{ApiKey, OpenAiConfig, OpenAiProvider};
