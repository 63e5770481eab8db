//! switchboard-core: the vocabulary every other crate speaks, and the bus they meet on.
//!
//! Channel adapters never see the agent and the agent never sees a platform: they only
//! exchange the types defined here over a [`ChatHub`]. This crate does no network I/O.
//!
//! # Layout
//! - `ids`: newtypes for identity ([`ChannelName`], [`ChatId`], [`SenderId`], [`SessionKey`]).
//! - `conversation`: the provider-neutral conversation model ([`ChatMessage`], [`ToolCall`], [`Usage`]).
//! - `message`: what travels on the hub ([`InboundMessage`], [`OutboundMessage`]).
//! - `channel`: the [`Channel`] trait adapters implement.
//! - `hub`: [`ChatHub`], the bounded inbound queue and the outbound router.
//! - `shutdown`: [`Shutdown`], the one shutdown pattern (tokens + task tracker).
//! - `error`: [`CoreError`].

mod channel;
mod conversation;
mod error;
mod hub;
mod ids;
mod message;
mod shutdown;

pub use channel::{Channel, ChannelContext};
pub use conversation::{ChatMessage, ToolCall, ToolDefinition, Usage, make_call_ids_unique};
pub use error::CoreError;
pub use hub::ChatHub;
pub use ids::{ChannelName, ChatId, SenderId, SessionKey};
pub use message::{Attachment, InboundMessage, OutboundKind, OutboundMessage, ToolStatus};
pub use shutdown::Shutdown;
