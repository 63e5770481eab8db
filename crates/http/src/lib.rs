//! switchboard-http: what the daemon's HTTP endpoints for people and operators share — who
//! may reach one (a bearer token in a header, the WebSocket's `bearer` subprotocol or the
//! query; a loopback Host without a token; a browser only from its own origin), how strong a
//! token must be, and files embedded in the binary served with a strict
//! Content-Security-Policy. The WebSocket channel, `/metrics` and the control panel all use
//! it; it knows nothing of chats.
//!
//! # Layout
//! - `auth`: [`Auth`], the token checks, the Origin and Host checks, [`check_token`].
//! - `embedded`: [`embedded!`], [`serve_embedded`] and the pages' [`CSP`].

mod auth;
mod embedded;

pub use auth::{Auth, BEARER_PROTOCOL, MIN_TOKEN_CHARS, check_host, check_token};
pub use embedded::{CSP, serve_embedded};
