//! Typed errors of LLM calls. The agent decides from them whether to retry and what to
//! tell the person.

use std::time::Duration;

/// Why an LLM call failed.
#[derive(Debug, thiserror::Error)]
pub enum LlmError {
    /// The config refers to an API key in an environment variable that is not set.
    #[error("no API key: the environment variable {variable} is not set (config key llm.api_key)")]
    MissingApiKey {
        /// The variable to set.
        variable: String,
    },
    /// The configured base URL is not a URL.
    #[error("llm.base_url `{url}` is not a valid URL: {message}")]
    InvalidBaseUrl {
        /// The configured value.
        url: String,
        /// What is wrong with it.
        message: String,
    },
    /// The server could not be reached.
    #[error("cannot reach the LLM at {url} (config key llm.base_url): {message}")]
    Connect {
        /// The URL called.
        url: String,
        /// What the HTTP client said.
        message: String,
    },
    /// No answer in time.
    #[error("the LLM did not answer within {after:?} ({what})")]
    Timeout {
        /// Which deadline passed (first byte, whole response).
        what: &'static str,
        /// The deadline.
        after: Duration,
    },
    /// The server asked us to slow down (HTTP 429).
    #[error("the LLM is rate limiting requests (HTTP 429){}", retry_after_text(*.retry_after))]
    RateLimited {
        /// How long the server asked us to wait, if it said.
        retry_after: Option<Duration>,
    },
    /// The key was refused (HTTP 401/403).
    #[error("the LLM refused the API key (HTTP {status}): {body} — check llm.api_key")]
    Unauthorized {
        /// The status code.
        status: u16,
        /// The start of the response body.
        body: String,
    },
    /// Any other non-success status.
    #[error("the LLM answered HTTP {status}: {body}")]
    Status {
        /// The status code.
        status: u16,
        /// The start of the response body.
        body: String,
        /// The Retry-After the server sent, if any.
        retry_after: Option<Duration>,
    },
    /// The response could not be understood.
    #[error("the LLM's response could not be read: {0}")]
    Decode(String),
    /// The stream broke off or carried an error event.
    #[error("the LLM's stream failed: {0}")]
    Stream(String),
}

fn retry_after_text(retry_after: Option<Duration>) -> String {
    retry_after
        .map(|d| format!("; retry after {}s", d.as_secs()))
        .unwrap_or_default()
}

impl LlmError {
    /// Whether the same request may succeed if sent again (timeouts, connection errors,
    /// 429, 5xx, broken streams).
    pub fn is_transient(&self) -> bool {
        match self {
            Self::Connect { .. } | Self::Timeout { .. } | Self::RateLimited { .. } => true,
            Self::Stream(_) => true,
            Self::Status { status, .. } => *status >= 500 || *status == 408,
            Self::MissingApiKey { .. }
            | Self::InvalidBaseUrl { .. }
            | Self::Unauthorized { .. }
            | Self::Decode(_) => false,
        }
    }

    /// The wait the server asked for, if it did.
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            Self::RateLimited { retry_after } | Self::Status { retry_after, .. } => *retry_after,
            _ => None,
        }
    }
}
