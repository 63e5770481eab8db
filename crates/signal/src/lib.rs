//! switchboard-signal: the Signal channel, through signal-cli's JSON-RPC daemon
//! (`signal-cli daemon --http`) — the way every gateway that speaks Signal does it; the
//! pure-Rust Signal clients are git-only, with AGPL chains.
//!
//! Messages come from its event stream (`GET /api/v1/events`), followed again after any
//! break from the last event taken in, so nothing signal-cli received is lost; each is taken
//! into the channel's inbox before that event counts as taken. Direct messages are chats (a
//! person's number), groups too when `groups = true`; `allow_from` and pairing decide who is
//! answered. Replies go out with `send`, quoting the message they answer, split at 2,000
//! characters, as plain text (Signal has no markup a bot can send); files both ways; the
//! person's message gets a read receipt and "typing…" is shown while its answer is made
//! (answers are not streamed: Signal caps how often a message may be edited).
//!
//! # Layout
//! - `config`: [`SignalSection`] (`[channels.signal]`) and [`SignalSettings`].
//! - `convert`: signal-cli's events in switchboard's terms (pure).
//! - `events`: the event stream within a size (an event over it cut and skipped).
//! - `rpc`: the JSON-RPC calls, as the channel's `Surface`, and its files.
//! - `channel`: [`SignalChannel`], the event stream and intake.

mod channel;
mod config;
mod convert;
mod events;
mod rpc;

pub use channel::{EVENT_KEY, SignalChannel};
pub use config::{SignalSection, SignalSettings};
pub use events::MAX_EVENT_BYTES;
pub use rpc::{CHANNEL_NAME, MESSAGE_LIMIT};
