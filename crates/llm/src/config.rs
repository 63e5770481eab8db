//! [`ProviderConfig`]: what every provider client is configured with, and [`ApiKey`].

use std::fmt;
use std::time::Duration;

use crate::error::LlmError;
use crate::limits::ResponseLimits;

/// An API key, or why there is none.
#[derive(Clone, Default)]
pub enum ApiKey {
    /// No key is configured (local servers such as Ollama or llama.cpp).
    #[default]
    None,
    /// The key (a bearer token for OpenAI-compatible servers, `x-api-key` for Anthropic,
    /// `x-goog-api-key` for Gemini).
    Key(String),
    /// The config's reference (an environment variable, a credential) cannot be resolved;
    /// every call fails with an error saying which and why.
    Missing {
        /// Which reference, and why.
        reason: String,
    },
}

impl ApiKey {
    /// The key to send, `None` when there is none to send; an error naming the unresolved
    /// reference when the config's cannot be resolved (every call fails so).
    pub(crate) fn to_send(&self) -> Result<Option<&str>, LlmError> {
        match self {
            Self::None => Ok(None),
            Self::Key(key) => Ok(Some(key)),
            Self::Missing { reason } => Err(LlmError::MissingApiKey {
                reason: reason.clone(),
            }),
        }
    }
}

impl fmt::Debug for ApiKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::None => f.write_str("None"),
            Self::Key(_) => f.write_str("Key(<redacted>)"),
            Self::Missing { reason } => write!(f, "Missing({reason})"),
        }
    }
}

/// Settings of one provider client ([`OpenAiProvider`](crate::OpenAiProvider) or
/// [`AnthropicProvider`](crate::AnthropicProvider)). `base_url` and `model` have no
/// default: a client refuses an empty base URL.
#[derive(Clone, Debug)]
pub struct ProviderConfig {
    /// The API root, e.g. `https://api.openai.com/v1`; the client appends its endpoint
    /// (`/chat/completions`, `/messages`).
    pub base_url: String,
    /// The key.
    pub api_key: ApiKey,
    /// The model name.
    pub model: String,
    /// Sampling temperature; the server's default when `None`.
    pub temperature: Option<f32>,
    /// Upper bound on tokens per response; the server's default when `None` (Anthropic
    /// requires one: 4096 then).
    pub max_tokens: Option<u32>,
    /// Deadline for the response headers (the first byte).
    pub first_byte_timeout: Duration,
    /// Deadline between two chunks of the response body.
    pub idle_timeout: Duration,
    /// Caps on what one response may hold.
    pub limits: ResponseLimits,
    /// Connections to the server open at once (each call holds one until its response is
    /// read); further calls wait for one, within `first_byte_timeout`.
    pub max_connections: usize,
    /// An idle kept-alive connection is closed after this.
    pub pool_idle_timeout: Duration,
    /// Whether the model takes images: `false` leaves every image out of its requests (the
    /// text still names where each was saved).
    pub images: bool,
}

impl Default for ProviderConfig {
    fn default() -> Self {
        Self {
            base_url: String::new(),
            api_key: ApiKey::None,
            model: String::new(),
            temperature: None,
            max_tokens: None,
            first_byte_timeout: Duration::from_secs(30),
            idle_timeout: Duration::from_secs(60),
            limits: ResponseLimits::default(),
            max_connections: 64,
            pool_idle_timeout: Duration::from_secs(30),
            images: true,
        }
    }
}
