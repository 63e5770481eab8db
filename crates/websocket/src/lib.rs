//! switchboard-websocket: the WebSocket channel and the web chat page.
//!
//! Clients connect to `GET /ws` (with a token unless auth is off on a loopback bind) and
//! speak a small JSON protocol (`docs/protocol.md`): they send `message` frames for any
//! number of chats and receive `ready`, `delta`, `message`, `tool`, `error` and `done`.
//! Every socket that sent to (or subscribed to) a chat receives that chat's frames.
//! `GET /` serves a web chat page, embedded in the binary, that uses the same protocol. Who
//! may connect is `switchboard-http`'s (shared with `/metrics` and the panel).
//!
//! # Layout
//! - `protocol`: the frames, and parsing a client frame into a clear error.
//! - `connection`: one socket, as a send task and a receive task.
//! - `channel`: [`WebSocketChannel`], the `Channel` impl and the `/ws` route.
//! - `subscribers`: which sockets receive each chat's frames, and what is kept for a chat
//!   whose sockets are gone.
//! - `live`: what each chat's running turn is doing (for a page shown again mid-turn).
//! - `conversations`: the web page's list of conversations, kept by the server.
//! - `upload`: `POST /upload`, files a web client attaches.
//! - `files`: files sent to a chat, at signed links that expire (`GET /files/…`).
//! - `page`: the web chat page and its assets.
//! - `config`: [`WsSection`] (the config file's part) and [`WsConfig`] (the settings).

mod channel;
mod config;
mod connection;
mod conversations;
mod files;
mod history;
mod live;
mod page;
mod protocol;
mod subscribers;
mod upload;

pub use channel::WebSocketChannel;
pub use config::CHANNEL_NAME;
pub use config::{
    AuthMode, DEFAULT_ATTACHMENT_BYTES, MAX_ATTACHMENT_BYTES_LIMIT, MAX_FRAME_BYTES_LIMIT,
    WsConfig, WsSection,
};
pub use conversations::{MAX_CONVERSATIONS, titles};
pub use files::LINK_TTL;
pub use history::said_of;
pub use page::vendored;
pub use protocol::{
    AttachmentRef, ClientFrame, Conversation, Said, SaidTool, ServerFrame, Waiting,
};
