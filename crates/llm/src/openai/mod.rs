//! The OpenAI-compatible provider: chat completions, whole or streamed.

mod client;
pub(crate) mod stream;
pub(crate) mod wire;

pub use client::OpenAiProvider;
#[cfg(test)]
pub(crate) use client::parse_whole;
