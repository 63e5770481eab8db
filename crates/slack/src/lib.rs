//! switchboard-slack: the Slack channel, over Socket Mode (no public URL needed), on
//! slack-morphism: direct messages, mentions in channels (or every message, by
//! `channel_policy`), a thread as a chat of its own, replies streamed by `chat.update`,
//! rendered in mrkdwn and split at Slack's advised length; `allow_from` and pairing; a 429's
//! `Retry-After` held for the whole chat; every envelope acknowledged only once its message
//! is in the channel's inbox, so nothing is lost across a restart or a kill.
//!
//! # Layout
//! - `config`: [`SlackSection`] (`[channels.slack]`) and [`SlackSettings`].
//! - `convert`: Slack's events in switchboard's terms (pure).
//! - `outbound`: the Web API calls, as the channel's `Surface`.
//! - `channel`: [`SlackChannel`], the Socket Mode listener and intake.

mod channel;
mod config;
mod convert;
mod outbound;

pub use channel::SlackChannel;
pub use config::{ChannelPolicy, SlackSection, SlackSettings};
pub use outbound::{CHANNEL_NAME, MESSAGE_LIMIT};
