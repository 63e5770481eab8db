//! [`Outbox`]: where the agent's own messages go — the `message` tool's texts and
//! `send_file`'s files — and what a tool learns back: the platform took it (its message id),
//! or why not. The daemon's outbox decides who may be written to and sends through the
//! channels' lanes; a tool only asks, and says "sent" only on the platform's receipt.

use async_trait::async_trait;
use switchboard_core::{
    AgentName, ChannelName, ChatId, MediaLimits, MediaStore, MessageId, OutboundFile, Sent,
    SessionKey,
};

use crate::ToolError;

/// Who sends: the agent, the turn's session, and the inbound message the turn answers (what
/// a turn taken up again after a crash is known by, so what it sent before is not sent
/// twice).
#[derive(Clone, Copy, Debug)]
pub struct SentBy<'a> {
    /// The agent.
    pub agent: &'a AgentName,
    /// The session the turn runs in.
    pub session: &'a SessionKey,
    /// The id of the inbound message the turn answers, when it has one.
    pub turn: Option<&'a MessageId>,
}

/// Where it goes: a chat of a channel, and — when that is the turn's own chat — the person's
/// message it answers (it threads under it).
#[derive(Clone, Copy, Debug)]
pub struct SendTo<'a> {
    /// The channel.
    pub channel: &'a ChannelName,
    /// The chat.
    pub chat: &'a ChatId,
    /// Whether it is the chat the turn answers in: it may always be written to.
    pub own: bool,
    /// The person's message it answers, if any.
    pub answering: Option<&'a MessageId>,
}

/// What is sent.
#[derive(Clone, Debug)]
pub enum Outgoing {
    /// A text (Markdown).
    Text(String),
    /// A file kept in the [`Outbox::media`] store, with the SHA-256 of its bytes.
    File(OutboundFile, String),
}

/// Where the agent's own messages go: the daemon, over its channels.
#[async_trait]
pub trait Outbox: Send + Sync + std::fmt::Debug + 'static {
    /// Sends `what` to `to` and waits until its channel delivered it; what the platform gave
    /// back (its message id), or why not ([`ToolError::Denied`] for a chat that agent may
    /// not write to). What this turn (`by.turn`) already sent there is not sent again: the
    /// receipt kept then is returned.
    async fn send(&self, by: SentBy<'_>, to: SendTo<'_>, what: Outgoing)
    -> Result<Sent, ToolError>;

    /// What `channel`'s platform takes of files; an error when no such channel is
    /// configured.
    fn limits(&self, channel: &ChannelName) -> Result<MediaLimits, ToolError>;

    /// Where files wait for their channel.
    fn media(&self) -> &std::sync::Arc<dyn MediaStore>;
}
