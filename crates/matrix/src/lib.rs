//! switchboard-matrix: the Matrix channel, on `matrix-sdk` (the SDK behind Element X), with
//! end-to-end encryption working out of the box.
//!
//! The bot is a Matrix account of its own; the channel logs in once as a device (its
//! cross-signing set up) and keeps that session and its keys in the state directory, so
//! encrypted rooms and direct chats stay readable across restarts. It joins rooms it is
//! invited to by people in `allow_from`, and direct chats (a stranger gets a pairing code
//! there); a room is a chat, and a thread in it one of its own. Answers stream into one
//! message edited in place (`m.replace`), rendered from Markdown, and quote the message they
//! answer; files go both ways, encrypted where the room is; the person's message gets a
//! read receipt and "typing…" is shown while its answer is made.
//!
//! # Layout
//! - `config`: [`MatrixSection`] (`[channels.matrix]`) and [`MatrixSettings`].
//! - `convert`: room events in switchboard's terms, and the chats' ids (pure).
//! - `session`: the client, logged in once and restored from then on.
//! - `surface`: the rooms as the channel's `Surface`, and the files people send.
//! - `channel`: [`MatrixChannel`], the sync loop, invites and intake.

mod channel;
mod config;
mod convert;
mod session;
mod surface;

pub use channel::{KEY_WAIT, MatrixChannel, TOKEN_KEY};
pub use config::{MatrixSection, MatrixSettings};
pub use surface::{CHANNEL_NAME, MESSAGE_LIMIT};
