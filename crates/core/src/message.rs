//! The messages that travel on the [`ChatHub`](crate::ChatHub): inbound from adapters to
//! the agent, outbound from the agent to the adapter of the chat they answer.

use std::time::SystemTime;

use crate::ids::{ChannelName, ChatId, SenderId, SessionKey};

/// A file or media item attached to an inbound message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Attachment {
    /// A name for the item (file name, or the platform's kind).
    pub name: String,
    /// Its MIME type, when the platform says.
    pub mime: Option<String>,
    /// Where the item can be fetched from.
    pub url: String,
}

/// A message a person sent on some channel, already checked against its allow list.
#[derive(Clone, Debug)]
pub struct InboundMessage {
    /// The adapter it came through.
    pub channel: ChannelName,
    /// The chat it was written in; the reply goes there.
    pub chat_id: ChatId,
    /// Who wrote it.
    pub sender: SenderId,
    /// The text.
    pub content: String,
    /// Files or media that came with it.
    pub attachments: Vec<Attachment>,
    /// The platform id of the message this one replies to, if any.
    pub reply_to: Option<String>,
    /// When the adapter received it.
    pub received_at: SystemTime,
}

impl InboundMessage {
    /// A plain text message received now.
    pub fn text(
        channel: ChannelName,
        chat_id: ChatId,
        sender: SenderId,
        content: impl Into<String>,
    ) -> Self {
        Self {
            channel,
            chat_id,
            sender,
            content: content.into(),
            attachments: Vec::new(),
            reply_to: None,
            received_at: SystemTime::now(),
        }
    }

    /// The session this message belongs to.
    pub fn session_key(&self) -> SessionKey {
        SessionKey::of(&self.channel, &self.chat_id)
    }
}

/// How far a tool call has got, as shown to the person.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ToolStatus {
    /// The call started.
    Started,
    /// The call returned a result.
    Finished,
    /// The call failed (its error went back to the model).
    Failed,
}

impl ToolStatus {
    /// The lowercase name used on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Started => "started",
            Self::Finished => "finished",
            Self::Failed => "failed",
        }
    }
}

/// What the agent tells a chat.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum OutboundKind {
    /// A piece of the reply as it streams in.
    Delta(String),
    /// The whole reply of a turn (the concatenation of its deltas, when it streamed).
    Message(String),
    /// A tool started or ended.
    Tool {
        /// The tool's name.
        name: String,
        /// What happened.
        status: ToolStatus,
    },
    /// The text streamed so far is void (the model's stream broke off and the call is being
    /// tried again): drop the partial draft; the reply streams anew.
    DraftReset,
    /// What the turn is waiting on (a slow model, a retry after an error). Transient: the
    /// next piece of the turn replaces it.
    Status(String),
    /// Something the person should know that is not the reply, e.g. that the conversation
    /// could not be saved. It may arrive outside a turn.
    Notice(String),
    /// The turn is over; no more frames for it.
    Done,
    /// Something went wrong; the text says what and, where it can, what to change.
    Error(String),
}

/// A message for one chat of one channel.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OutboundMessage {
    /// The adapter that delivers it.
    pub channel: ChannelName,
    /// The chat it is for.
    pub chat_id: ChatId,
    /// What it says.
    pub kind: OutboundKind,
}

impl OutboundMessage {
    /// A message for the chat an inbound message came from.
    pub fn reply_to(inbound: &InboundMessage, kind: OutboundKind) -> Self {
        Self {
            channel: inbound.channel.clone(),
            chat_id: inbound.chat_id.clone(),
            kind,
        }
    }
}
