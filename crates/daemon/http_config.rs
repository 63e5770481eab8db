//! `[http]`: the listener, its limits, and who may read `/metrics` and open the control
//! panel.

use std::net::SocketAddr;

use serde::Deserialize;
use switchboard_http::Auth;
use toml::Spanned;

use crate::config_error::{ConfigError, Source};
use crate::config_values::{BindAddress, seconds};

/// `[http]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct HttpSection {
    /// Where `/ws`, `/` and `/healthz` listen.
    pub bind: Spanned<BindAddress>,
    /// Seconds a client has to send a request's headers.
    pub header_timeout_secs: Spanned<f64>,
    /// Client connections open at once, WebSockets included.
    pub max_connections: Spanned<usize>,
    /// Of those, plain HTTP connections (not, or not yet, an accepted WebSocket).
    pub max_pending_connections: Spanned<usize>,
    /// Of those, from one source address.
    pub max_pending_per_client: Spanned<usize>,
    /// Plain HTTP connections beyond `max_pending_connections`, for `/healthz`, `/readyz`
    /// and requests that carry credentials.
    pub reserved_connections: usize,
    /// Host names besides loopback ones that may reach the page and `/ws` without a token.
    pub allowed_hosts: Vec<String>,
    /// Serve `/metrics` (Prometheus text).
    pub metrics: bool,
    /// The bearer token `/metrics` asks for; without one it asks for the WebSocket's token
    /// (`auth = "token"`), or only a loopback Host (`auth = "none"`).
    pub metrics_token: Option<Spanned<String>>,
    /// The bearer token of the control panel (`/admin`); no panel without one. Never the
    /// chat's token.
    pub admin_token: Option<Spanned<String>>,
}

impl Default for HttpSection {
    fn default() -> Self {
        Self {
            bind: Spanned::new(0..0, BindAddress(SocketAddr::from(([127, 0, 0, 1], 8080)))),
            header_timeout_secs: Spanned::new(0..0, 5.0),
            max_connections: Spanned::new(0..0, 4096),
            max_pending_connections: Spanned::new(0..0, 256),
            max_pending_per_client: Spanned::new(0..0, 32),
            reserved_connections: 32,
            allowed_hosts: Vec::new(),
            metrics: true,
            metrics_token: None,
            admin_token: None,
        }
    }
}

impl HttpSection {
    /// Checks the limits and the header timeout; errors name `http.<key>` at its line.
    pub(crate) fn validate(&self, source: &Source) -> Result<(), ConfigError> {
        for (value, key) in [
            (&self.max_connections, "http.max_connections"),
            (
                &self.max_pending_connections,
                "http.max_pending_connections",
            ),
            (&self.max_pending_per_client, "http.max_pending_per_client"),
        ] {
            if *value.get_ref() < 1 {
                return Err(source.error_at(
                    Some(value.span()),
                    key.into(),
                    format!("must be at least 1, got {}", value.get_ref()),
                ));
            }
        }
        seconds(&self.header_timeout_secs).map_err(|message| {
            source.error_at(
                Some(self.header_timeout_secs.span()),
                "http.header_timeout_secs".into(),
                message,
            )
        })
    }

    /// Who may read `/metrics` (it names chats and models): `http.metrics_token`'s bearer,
    /// else the chat's token (`chat_token`) when it has one, else requests with a loopback
    /// (or allowed) Host, as the page without a token.
    pub(crate) fn metrics_access(
        &self,
        chat_token: impl FnOnce() -> Result<Option<String>, ConfigError>,
        source: &Source,
    ) -> Result<Auth, ConfigError> {
        if let Some(token) = &self.metrics_token {
            return bearer(token, "http.metrics_token", source).map(Auth::Token);
        }
        match chat_token()? {
            Some(token) => Ok(Auth::Token(token)),
            None => Ok(Auth::None),
        }
    }

    /// The control panel's token (`http.admin_token`), resolved and checked; `None`: no
    /// panel. The chat's token is refused: whoever may chat may not thereby run the daemon.
    pub(crate) fn admin_access(
        &self,
        chat_token: Option<String>,
        source: &Source,
    ) -> Result<Option<String>, ConfigError> {
        let Some(token) = &self.admin_token else {
            return Ok(None);
        };
        let value = bearer(token, "http.admin_token", source)?;
        if chat_token.is_some_and(|chat| chat == value) {
            return Err(source.error_at(
                Some(token.span()),
                "http.admin_token".into(),
                "the control panel's token must not be the chat's (channels.websocket.token): \
                 whoever may chat could then run the daemon; make another"
                    .into(),
            ));
        }
        Ok(Some(value))
    }
}

/// A bearer token written at `key`: its `${…}` resolved, and strong enough.
fn bearer(token: &Spanned<String>, key: &str, source: &Source) -> Result<String, ConfigError> {
    switchboard_core::expand_env(token.get_ref())
        .map_err(|unresolved| unresolved.to_string())
        .and_then(|value| switchboard_http::check_token(&value).map(|()| value))
        .map_err(|why| source.error_at(Some(token.span()), key.into(), why))
}
