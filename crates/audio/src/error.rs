//! Typed errors of audio calls: what the person is told (one line, with the config key to
//! fix where there is one), and what the retry layer acts on.

use std::time::Duration;

/// Why a transcription or a spoken reply failed.
#[derive(Debug, thiserror::Error)]
pub enum AudioError {
    /// The config refers to an API key that cannot be resolved.
    #[error("no API key: {reason} (config key {key})")]
    MissingApiKey {
        /// Which reference, and why.
        reason: String,
        /// The config key.
        key: String,
    },
    /// The server could not be reached.
    #[error("cannot reach {url} (config key {key}): {message}")]
    Connect {
        /// The URL called.
        url: String,
        /// Why, in plain words.
        message: String,
        /// The config key of the URL.
        key: String,
    },
    /// No answer in time.
    #[error("no answer within {} (config key {key})", secs(*.after))]
    Timeout {
        /// The deadline.
        after: Duration,
        /// The config key that sets it.
        key: String,
    },
    /// The server asked to slow down (HTTP 429).
    #[error("the server is rate limiting requests (HTTP 429)")]
    RateLimited {
        /// How long it asked to wait, if it said.
        retry_after: Option<Duration>,
    },
    /// The key was refused (HTTP 401/403).
    #[error("the server refused the API key (HTTP {status}): {body} — check {key}")]
    Unauthorized {
        /// The status code.
        status: u16,
        /// The start of the response body.
        body: String,
        /// The config key of the API key.
        key: String,
    },
    /// Any other non-success status.
    #[error("the server answered HTTP {status}: {body}")]
    Status {
        /// The status code.
        status: u16,
        /// The start of the response body.
        body: String,
    },
    /// The answer was larger than allowed.
    #[error("the server's answer is larger than {limit} bytes")]
    TooLarge {
        /// The limit.
        limit: usize,
    },
    /// The answer could not be read.
    #[error("the server's answer could not be read: {0}")]
    Decode(String),
    /// The file to send could not be read.
    #[error("the file could not be read: {0}")]
    File(String),
    /// A transient failure persisted through every retry.
    #[error("{last} (gave up after {attempts} attempts)")]
    Exhausted {
        /// Attempts made.
        attempts: u32,
        /// The last attempt's error.
        last: Box<AudioError>,
    },
    /// One server's error, naming it (`whisper-1 at https://api.openai.com/v1`).
    #[error("{server}: {error}")]
    Server {
        /// Its model and URL.
        server: String,
        /// What went wrong.
        error: Box<AudioError>,
    },
    /// Every configured server failed; each error names its server.
    #[error("{}", join(.0))]
    AllFailed(Vec<AudioError>),
}

impl AudioError {
    /// Whether trying again may work: a timeout, a refused connection, 429, 5xx.
    pub fn is_transient(&self) -> bool {
        match self {
            Self::Connect { .. } | Self::Timeout { .. } | Self::RateLimited { .. } => true,
            Self::Status { status, .. } => *status >= 500,
            Self::Server { error, .. } => error.is_transient(),
            _ => false,
        }
    }

    /// Whether the error cannot heal by itself (a missing or refused key): health counts it
    /// at once.
    pub fn is_permanent(&self) -> bool {
        match self {
            Self::MissingApiKey { .. } | Self::Unauthorized { .. } => true,
            Self::Server { error, .. } | Self::Exhausted { last: error, .. } => {
                error.is_permanent()
            }
            Self::AllFailed(errors) => errors.iter().all(Self::is_permanent),
            _ => false,
        }
    }

    /// A short name of the kind of error, for metrics.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::MissingApiKey { .. } => "missing_key",
            Self::Connect { .. } => "connect",
            Self::Timeout { .. } => "timeout",
            Self::RateLimited { .. } => "rate_limited",
            Self::Unauthorized { .. } => "unauthorized",
            Self::Status { .. } => "status",
            Self::TooLarge { .. } => "too_large",
            Self::Decode(_) => "decode",
            Self::File(_) => "file",
            Self::Exhausted { last, .. } => last.kind(),
            Self::Server { error, .. } => error.kind(),
            Self::AllFailed(errors) => errors.last().map_or("failed", Self::kind),
        }
    }

    /// The wait the server asked for, if it did.
    pub(crate) fn retry_after(&self) -> Option<Duration> {
        match self {
            Self::RateLimited { retry_after } => *retry_after,
            _ => None,
        }
    }
}

fn join(errors: &[AudioError]) -> String {
    errors
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ")
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
