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
//! # Why not serenity
//! serenity (0.12.5, the library the design names) cannot keep two guarantees, each shown
//! on serenity's own path against the same fake in `tests/serenity.rs` (a test that fails,
//! naming what to move, when a release lifts it): *order within a chat* — its `Client`
//! hands every event to a task of its own, so a handler that awaits is overtaken by the
//! chat's next message, and a stand-alone `Shard` cannot be read from outside the crate; *a
//! 429's wait reaching the chat's lane* — its `Http` takes a base URL only with its rate
//! limiter off, and then drops the 429's `retry_after` and `Retry-After`. So the gateway
//! loop (`gateway`) and REST (`rest`, reqwest) are the channel's own: the protocol's small
//! core, written and tested here. Its data model too: reading serenity's `Message` costs
//! 0.56 MB of binary (a stripped fat-LTO binary deserializing it, against one deserializing
//! a `Value`) and refuses a payload missing a field it requires; `model` reads the dozen
//! fields the channel uses.
//!
//! # Rate limits
//! `limits` keeps them as Discord's answers state them: each route (method and path, ids
//! out but the major parameter) is mapped to the bucket its `X-RateLimit-Bucket` names, per
//! channel or guild, with what is left and when it resets; a call asks
//! `RateLimits::before` first — a bucket with nothing left, or more than 50 calls in the
//! last second, waits inline up to a second, longer becomes `RateLimited` for the chat's
//! lane (other chats go on); a global 429 holds every call; and 401/403/429 answers are
//! counted so that, near the 10,000 in ten minutes at which Discord bans an IP, no call is
//! made until they age out.
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
