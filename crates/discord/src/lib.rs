//! switchboard-discord: talk to the agent from Discord — direct messages, server channels
//! and threads.
//!
//! Events arrive over the gateway (a WebSocket; resumed where it left off when it drops)
//! and are taken one at a time in the order Discord sent them. Senders not on the allow
//! list get a pairing code in a DM. Replies stream into one message edited in place, then
//! arrive split at 2000 characters with code fences kept valid, replying to the person's
//! message, with "typing…" kept alive meanwhile; nothing the model writes can ping anyone
//! but that person. Delivery (one lane per chat, retries after a 429) is the hub's; this
//! crate is only the adapter.
//!
//! # Layout
//! - `config`: [`DiscordSection`], the config file's part, and [`DiscordSettings`].
//! - `convert`: messages ⇄ switchboard's types, without a network.
//! - `model`: the parts of Discord's payloads the channel reads.
//! - `gateway`: the gateway connection, its events in order.
//! - `identify`: the budget of new sessions (IDENTIFYs).
//! - `kept`: the gateway session kept in the state store, for the next connection.
//! - `intake`: from an event to the hub (who may talk, files, slash commands).
//! - `limits`: Discord's rate limits as its answers state them — buckets, the global
//!   limit, the invalid-request guard.
//! - `rest`: REST calls within them, errors mapped for delivery; Discord as a `Surface`.
//! - `channel`: [`DiscordChannel`]: start, reconnects, shutdown.

mod channel;
mod config;
mod convert;
mod gateway;
mod identify;
mod intake;
mod kept;
mod limits;
mod model;
mod rest;

pub use channel::{DiscordChannel, intents};
pub use config::{DiscordSection, DiscordSettings, GuildPolicy};
pub use rest::{CHANNEL_NAME, MESSAGE_LIMIT};
