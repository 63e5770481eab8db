//! The WebSocket channel's config: [`WsSection`], its part of the config file (parsed,
//! checked, turned into) [`WsConfig`], the settings the channel runs with.

use std::net::SocketAddr;
use std::path::PathBuf;

use switchboard_core::{ConfigProblem, expand_env};
use toml::Spanned;

use switchboard_http::{Auth, check_token};

/// The channel's name, and the prefix of its session keys.
pub const CHANNEL_NAME: &str = "websocket";

/// The most `max_frame_bytes` may be: the WebSocket reader holds at most this much of a
/// client's frame per socket.
pub const MAX_FRAME_BYTES_LIMIT: usize = 1024 * 1024;

/// How the WebSocket channel behaves. The daemon fills it from `[channels.websocket]`.
#[derive(Clone, Debug)]
pub struct WsConfig {
    /// Who may connect.
    pub auth: Auth,
    /// The largest client frame (and message) the reader accepts, 1 to
    /// [`MAX_FRAME_BYTES_LIMIT`]. A larger one is refused as soon as its header announces
    /// its length: the client gets an error frame and the socket is closed (1009).
    pub max_frame_bytes: usize,
    /// Frames queued for one socket before it counts as too slow and is closed.
    pub send_queue: usize,
    /// Host names (besides loopback ones) a browser may use to reach the page and `/ws`
    /// when auth is off; see [`Auth::None`].
    pub allowed_hosts: Vec<String>,
    /// The largest file `POST /upload` takes; 0 turns uploads off.
    pub max_attachment_bytes: u64,
    /// Where uploads are saved (under `media/websocket/`); `None`: uploads are off.
    pub workspace: Option<PathBuf>,
    /// Where the web page's list of conversations is kept (`websocket/conversations.json`);
    /// `None`: in memory only.
    pub state_dir: Option<PathBuf>,
}

/// The default `max_attachment_bytes`.
pub const DEFAULT_ATTACHMENT_BYTES: u64 = 10 * 1024 * 1024;
/// The most `max_attachment_bytes` may be.
pub const MAX_ATTACHMENT_BYTES_LIMIT: u64 = 100 * 1024 * 1024;

impl Default for WsConfig {
    fn default() -> Self {
        Self {
            auth: Auth::None,
            max_frame_bytes: 64 * 1024,
            send_queue: 1024,
            allowed_hosts: Vec::new(),
            max_attachment_bytes: DEFAULT_ATTACHMENT_BYTES,
            workspace: None,
            state_dir: None,
        }
    }
}

/// How WebSocket clients authenticate, as written in the config.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AuthMode {
    /// A token is required.
    Token,
    /// No token: allowed only when `http.bind` is a loopback address.
    None,
}

/// `[channels.websocket]`: the channel's section of the config file.
#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct WsSection {
    /// Serve `/ws` and the web chat page.
    pub enabled: bool,
    /// `token` (default) or `none`.
    pub auth: Spanned<AuthMode>,
    /// The token, usually `${SWITCHBOARD_WS_TOKEN}`.
    pub token: Option<Spanned<String>>,
    /// The largest client frame; a larger one closes the socket (after an error frame).
    pub max_frame_bytes: Spanned<usize>,
    /// The largest file a web client may attach (`POST /upload`); 0 turns uploads off.
    pub max_attachment_bytes: Spanned<u64>,
}

impl Default for WsSection {
    fn default() -> Self {
        Self {
            enabled: true,
            auth: Spanned::new(0..0, AuthMode::Token),
            token: None,
            max_frame_bytes: Spanned::new(0..0, 64 * 1024),
            max_attachment_bytes: Spanned::new(0..0, DEFAULT_ATTACHMENT_BYTES),
        }
    }
}

impl WsSection {
    /// Checks the section; `bind` is the HTTP listener's address (no token is allowed only
    /// on a loopback one).
    pub fn check(&self, bind: SocketAddr) -> Result<(), ConfigProblem> {
        let frame = &self.max_frame_bytes;
        if !(1..=MAX_FRAME_BYTES_LIMIT).contains(frame.get_ref()) {
            return Err(ConfigProblem::new(
                Some(frame.span()),
                "max_frame_bytes",
                format!(
                    "must be from 1 to {MAX_FRAME_BYTES_LIMIT} (1 MiB), got {}",
                    frame.get_ref()
                ),
            ));
        }
        let attachment = &self.max_attachment_bytes;
        if *attachment.get_ref() > MAX_ATTACHMENT_BYTES_LIMIT {
            return Err(ConfigProblem::new(
                Some(attachment.span()),
                "max_attachment_bytes",
                format!(
                    "must be at most {MAX_ATTACHMENT_BYTES_LIMIT} (100 MiB; 0 turns uploads off), got {}",
                    attachment.get_ref()
                ),
            ));
        }
        if !self.enabled {
            return Ok(());
        }
        match self.auth.get_ref() {
            AuthMode::None if !bind.ip().is_loopback() => Err(ConfigProblem::new(
                Some(self.auth.span()),
                "auth",
                format!(
                    "auth = \"none\" is allowed only when http.bind is a loopback address, and \
                     it is {bind}; set a token instead"
                ),
            )),
            AuthMode::None => match &self.token {
                // A token that is silently ignored would leave a socket open that its
                // operator believes closed.
                Some(token) => Err(ConfigProblem::new(
                    Some(token.span()),
                    "token",
                    "a token is set but auth = \"none\" ignores it: set auth = \"token\" to \
                     require it, or remove the token",
                )),
                None => Ok(()),
            },
            AuthMode::Token => self.token().map(|_| ()),
        }
    }

    /// The token, read from the environment.
    pub fn token(&self) -> Result<String, ConfigProblem> {
        let Some(token) = &self.token else {
            return Err(ConfigProblem::new(
                Some(self.auth.span()),
                "token",
                "a token is required (e.g. token = \"${SWITCHBOARD_WS_TOKEN}\"), or set \
                 auth = \"none\" on a loopback bind",
            ));
        };
        match expand_env(token.get_ref()) {
            Ok(value) => check_token(&value)
                .map(|()| value)
                .map_err(|why| ConfigProblem::new(Some(token.span()), "token", why)),
            Err(unresolved) => Err(ConfigProblem::new(
                Some(token.span()),
                "token",
                unresolved.to_string(),
            )),
        }
    }

    /// The channel's settings; `allowed_hosts` are the Host names (besides loopback ones)
    /// served without a token.
    pub fn settings(&self, allowed_hosts: Vec<String>) -> Result<WsConfig, ConfigProblem> {
        let auth = match self.auth.get_ref() {
            AuthMode::None => Auth::None,
            AuthMode::Token => Auth::Token(self.token()?),
        };
        Ok(WsConfig {
            auth,
            max_frame_bytes: *self.max_frame_bytes.get_ref(),
            max_attachment_bytes: *self.max_attachment_bytes.get_ref(),
            allowed_hosts,
            ..WsConfig::default()
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_must_be_long_without_whitespace_and_not_one_character() {
        assert!(check_token("e2e-token-0123456789abcdef").is_ok());
        for (token, why) in [
            ("                    ", "whitespace"),
            ("\t\n", "whitespace"),
            (" padded-token-0123456789 ", "whitespace"),
            ("short-token", "at least 16"),
            ("aaaaaaaaaaaaaaaaaaaaaaaa", "too easy"),
        ] {
            let err = check_token(token).expect_err(token);
            assert!(err.contains(why), "{token:?}: {err}");
        }
    }
}
