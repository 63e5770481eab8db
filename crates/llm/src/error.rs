//! Typed errors of LLM calls. The agent decides from them what to tell the person; the
//! retry layer decides from them whether to try again.

use std::time::Duration;

/// Why an LLM call failed.
#[derive(Debug, thiserror::Error)]
pub enum LlmError {
    /// The config refers to an API key that cannot be resolved (an unset environment
    /// variable, an unreadable credential).
    #[error("no API key: {reason} (config key llm.api_key)")]
    MissingApiKey {
        /// Which reference, and why (e.g. "the environment variable X is not set").
        reason: String,
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
        /// Why, in plain words ("the connection was refused").
        message: String,
        /// What the HTTP client said, every layer of it: for the log ([`LlmError::detail`]).
        detail: String,
    },
    /// No answer in time.
    #[error("the LLM did not answer within {} ({what}; config key llm.{key})", secs(*.after))]
    Timeout {
        /// Which deadline passed (first byte, between chunks).
        what: &'static str,
        /// The deadline.
        after: Duration,
        /// The config key that sets it.
        key: &'static str,
    },
    /// The whole call, retries and waits included, took longer than allowed.
    #[error("the LLM call did not finish within {} ({attempts} attempts; config key llm.request_timeout_secs)", secs(*.after))]
    CallTimeout {
        /// The deadline.
        after: Duration,
        /// Attempts made.
        attempts: u32,
    },
    /// The response passed one of the [`ResponseLimits`](crate::ResponseLimits).
    #[error(
        "the LLM's response was cut off: its {what} passed the limit of {limit} bytes (config key llm.{key})"
    )]
    TooLarge {
        /// What grew too large (reply text, tool-call arguments, response body).
        what: &'static str,
        /// The limit.
        limit: usize,
        /// The config key that sets it.
        key: &'static str,
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
    /// A transient failure persisted through every retry.
    #[error("{last} (gave up after {attempts} attempts)")]
    Exhausted {
        /// Attempts made.
        attempts: u32,
        /// The last attempt's error.
        last: Box<LlmError>,
    },
    /// One provider's error, naming the provider (`openai gpt-4o-mini`), so a failover
    /// chain's errors say which of its entries failed.
    #[error("{provider}: {error}")]
    Provider {
        /// The provider's kind and model.
        provider: String,
        /// What went wrong.
        error: Box<LlmError>,
    },
    /// Every provider of a failover chain failed (or was cooling down); each error names
    /// its provider.
    #[error("every configured model failed: {}", join(.0))]
    AllFailed(Vec<LlmError>),
}

fn join(errors: &[LlmError]) -> String {
    errors
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ")
}

fn retry_after_text(retry_after: Option<Duration>) -> String {
    retry_after
        .map(|d| format!("; retry after {}", secs(d)))
        .unwrap_or_default()
}

/// A duration as people read it: `30 s`, `0.5 s`.
pub(crate) fn secs(duration: Duration) -> String {
    let secs = duration.as_secs_f64();
    if secs.fract() == 0.0 {
        format!("{secs:.0} s")
    } else {
        format!("{secs:.1} s")
    }
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
            | Self::Decode(_)
            | Self::TooLarge { .. }
            | Self::CallTimeout { .. }
            | Self::Exhausted { .. }
            | Self::AllFailed(_) => false,
            Self::Provider { error, .. } => error.is_transient(),
        }
    }

    /// The error under its provider's name.
    pub fn root(&self) -> &LlmError {
        match self {
            Self::Provider { error, .. } => error.root(),
            other => other,
        }
    }

    /// Whether a failover chain moves the call on to its next provider: the provider is
    /// unreachable, slow or overloaded even after its retries. An error about the request
    /// or the key would fail the same way anywhere, or needs the operator.
    pub fn fails_over(&self) -> bool {
        match self.root() {
            Self::Exhausted { .. } | Self::CallTimeout { .. } => true,
            other => other.is_transient(),
        }
    }

    /// Whether the response could not be read (not JSON, no choices, a malformed event):
    /// a new call may well go better, so a turn tries again. (A response past its size
    /// limit is not retried: it would most likely be as large again.)
    pub fn is_bad_output(&self) -> bool {
        matches!(self.root(), Self::Decode(_))
    }

    /// The wait the server asked for, if it did.
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            Self::RateLimited { retry_after } | Self::Status { retry_after, .. } => *retry_after,
            Self::Provider { error, .. } => error.retry_after(),
            _ => None,
        }
    }

    /// What kind of failure this is, as a metric label: `missing_key`, `invalid_url`,
    /// `connect`, `timeout`, `call_timeout`, `too_large`, `rate_limited`, `unauthorized`,
    /// `status_4xx`, `status_5xx`, `decode`, `stream`, `exhausted`, `all_failed`.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::MissingApiKey { .. } => "missing_key",
            Self::InvalidBaseUrl { .. } => "invalid_url",
            Self::Connect { .. } => "connect",
            Self::Timeout { .. } => "timeout",
            Self::CallTimeout { .. } => "call_timeout",
            Self::TooLarge { .. } => "too_large",
            Self::RateLimited { .. } => "rate_limited",
            Self::Unauthorized { .. } => "unauthorized",
            Self::Status { status, .. } if *status >= 500 => "status_5xx",
            Self::Status { .. } => "status_4xx",
            Self::Decode(_) => "decode",
            Self::Stream(_) => "stream",
            Self::Exhausted { .. } => "exhausted",
            Self::Provider { error, .. } => error.kind(),
            Self::AllFailed(_) => "all_failed",
        }
    }

    /// Every [`kind`](Self::kind) an attempt of one provider can end with.
    pub const ATTEMPT_KINDS: [&'static str; 11] = [
        "missing_key",
        "invalid_url",
        "connect",
        "timeout",
        "too_large",
        "rate_limited",
        "unauthorized",
        "status_4xx",
        "status_5xx",
        "decode",
        "stream",
    ];

    /// The error as the log tells it: as displayed, with a connection failure's whole
    /// chain of causes instead of its plain words.
    pub fn detail(&self) -> String {
        match self {
            Self::Connect { url, detail, .. } => format!("cannot reach the LLM at {url}: {detail}"),
            Self::Provider { provider, error } => format!("{provider}: {}", error.detail()),
            Self::Exhausted { last, .. } => last.detail(),
            other => other.to_string(),
        }
    }

    /// A few words on what went wrong, for a status line in a chat (no bodies, no URLs).
    pub fn summary(&self) -> String {
        match self {
            Self::MissingApiKey { .. } => "no API key".into(),
            Self::InvalidBaseUrl { .. } => "the base URL is invalid".into(),
            Self::Connect { .. } => "the model's server could not be reached".into(),
            Self::Timeout { what, .. } => format!("the model did not answer in time ({what})"),
            Self::CallTimeout { .. } => "the model took too long".into(),
            Self::TooLarge { .. } => "the model's response was too large".into(),
            Self::RateLimited { .. } => "the model's server is rate limiting requests".into(),
            Self::Unauthorized { status, .. } | Self::Status { status, .. } => {
                format!("the model's server answered HTTP {status}")
            }
            Self::Decode(_) => "the model's response could not be read".into(),
            Self::Stream(_) => "the model's stream broke off".into(),
            Self::Exhausted { last, .. } => last.summary(),
            Self::Provider { provider, error } => format!("{} ({provider})", error.summary()),
            Self::AllFailed(errors) => match errors.as_slice() {
                [only] => only.summary(),
                _ => format!("all {} configured models failed", errors.len()),
            },
        }
    }
}
