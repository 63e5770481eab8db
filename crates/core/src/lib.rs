//! switchboard-core: the vocabulary every other crate speaks, and the bus they meet on.
//!
//! Channel adapters never see the agent and the agent never sees a platform: they only
//! exchange the types defined here over a [`Bus`] — in one process the [`ChatHub`]. This crate
//! does no network I/O.
//!
//! # Layout
//! - `ids`: newtypes for identity ([`ChannelName`], [`ChatId`], [`SenderId`], [`SessionKey`],
//!   [`MessageId`]).
//! - `conversation`: the provider-neutral conversation model ([`ChatMessage`], [`ToolCall`], [`Usage`]).
//! - `message`: what travels on the hub ([`InboundMessage`], [`OutboundMessage`]).
//! - `media`: files going out ([`OutboundFile`]), where their bytes wait ([`MediaStore`]),
//!   what a platform takes ([`MediaLimits`]).
//! - `memory`: what an agent's memory is asked and finds ([`Memory`], [`MemoryQuery`],
//!   [`MemoryHit`]).
//! - `origin`: [`Origin`], where a message comes from (a person, a schedule, the heartbeat).
//! - `ack`: [`Ack`], how a channel learns the [`Fate`] of an inbound message.
//! - `channel`: the [`Channel`] trait adapters implement, and [`Internal`] for the daemon's own
//!   channels (sub-agents', isolated runs').
//! - `config`: what adapter config sections share ([`ConfigProblem`], [`expand_env`]).
//! - `environment`: the process environment as the config sees it, secrets withdrawn.
//! - `bus`: the [`Bus`] trait, what adapters and agents meet on.
//! - `hub`: [`ChatHub`], the bus of one process: a bounded inbound queue and the outbound router.
//! - `lanes`: [`Lanes`], outbound delivery in one bounded lane per chat.
//! - `retry`: [`RetryingChannel`], retries of rate-limited or failed sends around any channel.
//! - `shutdown`: [`Shutdown`], the one shutdown pattern (tokens + task tracker).
//! - `tenure`: [`Tenure`], a holding of a lease (a worker's partition), checked without asking
//!   the server.
//! - `wire`: the versioned JSON form of what crosses between processes.
//! - `error`: [`CoreError`].

mod ack;
mod bus;
mod channel;
mod commands;
mod config;
mod conversation;
pub mod environment;
mod error;
mod hub;
mod ids;
mod lanes;
pub mod media;
mod memory;
mod message;
mod origin;
mod retry;
mod shutdown;
pub mod state;
mod tenure;
pub mod wire;

pub use ack::{Ack, Fate};
pub use bus::Bus;
pub use channel::{
    Channel, ChannelContext, ChannelScope, Internal, InternalChannel, Sent, Transcripts, Trouble,
};
pub use commands::{COMMANDS, CommandSpec, Takes, command_named, commands_help};
pub use config::{
    ConfigError, ConfigProblem, ConfigSource, Unresolved, expand_env, positive_seconds,
    read_credentials_from,
};
pub use conversation::{
    ChatMessage, ImagePart, ToolCall, ToolDefinition, Usage, make_call_ids_unique,
};
pub use error::{CoreError, error_chain, plain_cause, without_userinfo};
pub use hub::{ChannelLanes, ChatHub};
pub use ids::{AgentName, ChannelName, ChatId, MessageId, SenderId, SessionKey};
pub use lanes::{LaneOptions, Lanes};
pub use media::{
    KeptFile, MAX_MEDIA_BYTES, MediaError, MediaKind, MediaLimits, MediaStore, OutboundFile,
};
pub use memory::{
    Memory, MemoryError, MemoryHit, MemoryQuery, MemoryScope, memory_lines, parse_utc, utc_minute,
};
pub use message::{
    Attachment, Awaiting, InboundMessage, OutboundKind, OutboundMessage, ScheduledRun,
    TOOL_DETAIL_BYTES, ToolActivity, ToolStatus, TurnEnd, cut_at, preview,
};
pub use origin::{Origin, QUIET_TOKEN, SCHEDULED_RUN_PREFIX, is_quiet};
pub use retry::{ChannelRetry, RetryingChannel};
pub use shutdown::Shutdown;
pub use state::{Change, StateError, StateStore, Stored};
pub use tenure::Tenure;
