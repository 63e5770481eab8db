//! switchboard-telegram: talk to the agent from Telegram.
//!
//! Updates arrive by long polling (`getUpdates` with the typed Bot API) or by a webhook on
//! the daemon's listener, and are confirmed to Telegram only once the agent is done with
//! them, so a crash neither loses an update nor answers one twice. Senders not on the
//! allow list get a pairing code. Replies stream into a draft edited in place, then arrive
//! as Telegram HTML split at 4096 characters, replying to the person's message, with
//! "typing…" kept alive meanwhile. Delivery (one lane per chat, retries after a 429) is
//! the hub's; this crate is only the adapter.
//!
//! # Layout
//! - `config`: [`TelegramSection`], the config file's part, and [`TelegramSettings`].
//! - `convert`: updates ⇄ switchboard's types, without a network.
//! - `cursor`: [`Cursor`], which updates may be confirmed.
//! - `intake`: from an update to the hub (who may talk, files, the ack).
//! - `media`: saving attachments in the workspace.
//! - `outbound`: typing, the draft, the final reply.
//! - `api`: Bot API calls with their errors mapped for delivery.
//! - `channel`: [`TelegramChannel`]: start, polling, the webhook route.

mod api;
mod channel;
mod config;
mod convert;
mod cursor;
mod intake;
mod media;
mod outbound;

pub use api::CHANNEL_NAME;
pub use channel::{TelegramChannel, WEBHOOK_PATH};
pub use config::{GroupPolicy, Mode, TelegramSection, TelegramSettings};
pub use cursor::Cursor;
