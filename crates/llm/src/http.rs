//! What every HTTP provider shares: the client, the endpoint URL, the cap on connections,
//! sending one request with a deadline for its first byte, and reading an error status as an
//! [`LlmError`].
//!
//! Connections are bounded: a call holds one of `max_connections` permits while it sends
//! and reads its response, so no more connections are ever open to the server (each costs
//! buffers, and a slow server would otherwise have one opened per waiting turn); at most
//! [`MAX_IDLE`] idle ones are kept, each closed after `pool_idle_timeout`.

use std::sync::Arc;
use std::time::Duration;

use reqwest::header::{CONTENT_TYPE, HeaderMap, RETRY_AFTER};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::body::{self, error_chain};
use crate::config::ProviderConfig;
use crate::error::LlmError;
use switchboard_core::plain_cause;

/// How much of an error response's body is kept for the error message.
const ERROR_BODY_BYTES: usize = 16 * 1024;

/// What a provider client holds: its HTTP client, its endpoint, its settings.
#[derive(Clone, Debug)]
pub(crate) struct Api {
    pub(crate) http: reqwest::Client,
    /// `{base_url}/{path}`, parsed once.
    pub(crate) url: reqwest::Url,
    pub(crate) config: ProviderConfig,
    /// The model, for responses to name.
    pub(crate) model: std::sync::Arc<str>,
    /// Permits for connections to the server, `max_connections` of them; shared by clones
    /// (each provider client is built once and shared by every turn).
    connections: Arc<Semaphore>,
}

impl Api {
    /// The client of `config.base_url`'s `path`. Fails if the base URL is not a URL or the
    /// TLS stack cannot start.
    pub(crate) fn new(config: ProviderConfig, path: &str) -> Result<Self, LlmError> {
        Ok(Self {
            http: client(&config)?,
            url: endpoint(&config.base_url, path)?,
            model: config.model.as_str().into(),
            connections: Arc::new(Semaphore::new(config.max_connections.max(1))),
            config,
        })
    }

    /// A connection permit, held until the response is read; waits at most
    /// `first_byte_timeout` for one, else fails as a timeout (which is retried).
    pub(crate) async fn connection(&self) -> Result<OwnedSemaphorePermit, LlmError> {
        let wait = self.connections.clone().acquire_owned();
        match tokio::time::timeout(self.config.first_byte_timeout, wait).await {
            Ok(Ok(permit)) => Ok(permit),
            _ => Err(LlmError::Timeout {
                what: "waiting for a free connection to the server: all are busy",
                after: self.config.first_byte_timeout,
                key: "max_connections",
            }),
        }
    }
}

/// Idle connections kept per server at most (beyond them, a connection closes when its
/// call is done): what a burst opened is not kept for the next one.
const MAX_IDLE: usize = 8;

/// An HTTP client for LLM calls (rustls, no proxy surprises, `TCP_NODELAY`), keeping at
/// most [`MAX_IDLE`] idle connections, each for `pool_idle_timeout`.
fn client(config: &ProviderConfig) -> Result<reqwest::Client, LlmError> {
    let base_url = &config.base_url;
    reqwest::Client::builder()
        .connect_timeout(Duration::from_secs(10))
        .tcp_nodelay(true)
        .pool_idle_timeout(config.pool_idle_timeout)
        .pool_max_idle_per_host(config.max_connections.clamp(1, MAX_IDLE))
        .user_agent(concat!("switchboard/", env!("CARGO_PKG_VERSION")))
        .build()
        .map_err(|err| LlmError::Connect {
            url: switchboard_core::without_userinfo(base_url),
            message: plain_cause(&err),
            detail: error_chain(&err),
        })
}

/// `{base_url}/{path}`, checked to be an http(s) URL.
pub(crate) fn endpoint(base_url: &str, path: &str) -> Result<reqwest::Url, LlmError> {
    let url = format!("{}/{path}", base_url.trim_end_matches('/'));
    reqwest::Url::parse(&url)
        .ok()
        .filter(|url| matches!(url.scheme(), "http" | "https") && url.host().is_some())
        .ok_or_else(|| LlmError::InvalidBaseUrl {
            url: switchboard_core::without_userinfo(base_url),
            message: "expected http:// or https:// followed by a host".into(),
        })
}

/// Sends `request`, waiting at most `first_byte` for the response headers; a response
/// whose status is not a success becomes the matching error (its body read within `idle`).
pub(crate) async fn send(
    request: reqwest::RequestBuilder,
    url: &reqwest::Url,
    first_byte: Duration,
    idle: Duration,
) -> Result<reqwest::Response, LlmError> {
    let response = tokio::time::timeout(first_byte, request.send())
        .await
        .map_err(|_| LlmError::Timeout {
            what: "waiting for the first byte",
            after: first_byte,
            key: "timeout_secs",
        })?
        .map_err(|err| transport_error(url, &err))?;
    let status = response.status();
    if status.is_success() {
        return Ok(response);
    }
    let retry_after = retry_after(response.headers());
    let body = body::read_prefix(response.bytes_stream(), idle, ERROR_BODY_BYTES).await;
    let body: String = what_it_said(&body).chars().take(500).collect();
    Err(match status.as_u16() {
        429 => LlmError::RateLimited { retry_after },
        401 | 403 => LlmError::Unauthorized {
            status: status.as_u16(),
            body,
        },
        code => LlmError::Status {
            status: code,
            body,
            retry_after,
        },
    })
}

/// What an error's body says: the `message` of the JSON error OpenAI-compatible servers and
/// Anthropic send (`{"error": {"message": …}}`), else the body as it is.
fn what_it_said(body: &str) -> String {
    let said = serde_json::from_str::<serde_json::Value>(body)
        .ok()
        .and_then(|value| {
            value["error"]["message"]
                .as_str()
                .or_else(|| value["message"].as_str())
                .map(str::to_owned)
        });
    said.unwrap_or_else(|| body.to_owned())
}

/// Whether the response is a server-sent event stream.
pub(crate) fn is_sse(response: &reqwest::Response) -> bool {
    response
        .headers()
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("text/event-stream"))
}

fn transport_error(url: &reqwest::Url, err: &reqwest::Error) -> LlmError {
    if err.is_timeout() {
        LlmError::Timeout {
            what: "connecting",
            after: Duration::from_secs(10),
            key: "base_url",
        }
    } else {
        LlmError::Connect {
            url: switchboard_core::without_userinfo(url.as_str()),
            message: plain_cause(err),
            detail: error_chain(err),
        }
    }
}

/// Retry-After in seconds (the HTTP-date form is rare from APIs and is ignored).
fn retry_after(headers: &HeaderMap) -> Option<Duration> {
    let value = headers.get(RETRY_AFTER)?.to_str().ok()?.trim();
    let secs = value.parse::<f64>().ok().filter(|secs| *secs >= 0.0)?;
    // A server's `Retry-After: 1e300` must not panic the daemon: it is a wait longer than
    // any we accept, so the error is passed on at once.
    Some(Duration::try_from_secs_f64(secs).unwrap_or(Duration::MAX))
}

/// Decodes one JSON value of a response, naming the start of the text that failed.
pub(crate) fn decode<T: serde::de::DeserializeOwned>(
    bytes: &[u8],
    what: &str,
) -> Result<T, LlmError> {
    serde_json::from_slice(bytes).map_err(|err| {
        let text: String = String::from_utf8_lossy(bytes).chars().take(200).collect();
        LlmError::Decode(format!("{err} in {what} `{text}`"))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_error_body_is_what_it_says() {
        let openai = r#"{"error":{"message":"The model `x` does not exist.","type":"invalid_request_error"}}"#;
        assert_eq!(what_it_said(openai), "The model `x` does not exist.");
        let anthropic =
            r#"{"type":"error","error":{"type":"not_found_error","message":"model: x"}}"#;
        assert_eq!(what_it_said(anthropic), "model: x");
        assert_eq!(what_it_said("Bad Gateway"), "Bad Gateway");
        assert_eq!(what_it_said(r#"{"detail":"no"}"#), r#"{"detail":"no"}"#);
    }
}
