//! The messages that travel on the [`Bus`](crate::Bus): inbound from adapters to the agent,
//! outbound from the agent to the adapter of the chat they answer. Both serialize (see
//! [`wire`](crate::wire)) so they can cross between the hosts of a cluster; what only means
//! something in one process (an [`Ack`], a cancellation token) stays behind.

use std::time::SystemTime;

use serde::{Deserialize, Serialize};

use crate::ack::{Ack, Fate};
use crate::ids::{AgentName, ChannelName, ChatId, MessageId, SenderId, SessionKey};
use crate::origin::Origin;

/// A file or media item attached to an inbound message, saved where the agent can read it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Attachment {
    /// A name for the item (file name, or the platform's kind).
    pub name: String,
    /// Its MIME type, when the platform says.
    pub mime: Option<String>,
    /// Where it was saved, relative to the workspace (e.g. `media/telegram/123-photo.jpg`).
    pub path: String,
    /// Its size in bytes.
    pub bytes: u64,
    /// A recording's length in milliseconds, when the platform says.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duration_ms: Option<u64>,
    /// Whether it is a voice note (recorded to be heard, not an audio file sent along): an
    /// answer to one may be spoken back (`[speech] reply = "when_spoken_to"`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub voice: bool,
}

impl Attachment {
    /// A file saved at `path` (relative to the workspace), neither a recording nor a voice
    /// note as far as its platform said.
    pub fn file(name: String, mime: Option<String>, path: String, bytes: u64) -> Self {
        Self {
            name,
            mime,
            path,
            bytes,
            duration_ms: None,
            voice: false,
        }
    }

    /// Whether it is sound to be heard: a voice note, or a file of an audio type.
    pub fn is_audio(&self) -> bool {
        self.voice
            || self
                .mime
                .as_deref()
                .is_some_and(|mime| mime.starts_with("audio/"))
    }
}

/// A scheduled job's run, as its message names it: which job, which due time, which try. The
/// turn that answers the message ends it by this, never by reading its id.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScheduledRun {
    /// The job's id.
    pub job: String,
    /// The due time it runs for, in milliseconds since the Unix epoch.
    pub due_ms: i64,
    /// Which try (from 1).
    pub attempt: u32,
    /// Whether it runs in a session of its own (then an answer that says nothing is quiet).
    pub isolated: bool,
}

/// A message for the agent: one a person sent on some channel (already checked against its
/// allow list), or work that comes from elsewhere — a scheduled job, the heartbeat — which
/// enters the same way and says so in its [`Origin`].
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct InboundMessage {
    /// The adapter it came through.
    pub channel: ChannelName,
    /// The chat it was written in; the reply goes there.
    pub chat_id: ChatId,
    /// Who wrote it.
    pub sender: SenderId,
    /// Its id on the platform, when it has one: a message whose id its chat already handled
    /// is not answered again, and replies thread under it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<MessageId>,
    /// The text.
    pub content: String,
    /// Files or media that came with it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub attachments: Vec<Attachment>,
    /// The platform id of the message this one replies to, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reply_to: Option<MessageId>,
    /// When the adapter received it.
    pub received_at: SystemTime,
    /// Told what became of it, for channels that confirm messages to their platform. Stays
    /// in the process: a bus that carries the message elsewhere carries its fate back.
    #[serde(skip)]
    pub ack: Option<Ack>,
    /// Where it comes from: a person (the default), a schedule, the heartbeat. Only a
    /// person's text is read as a command or as the answer to a question.
    #[serde(default)]
    pub origin: Origin,
    /// The agent it is for, when whoever made it knows (a run of a job an agent scheduled, a
    /// sub-agent's task or result); `None`: the daemon's bindings choose by channel, chat and
    /// sender.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent: Option<AgentName>,
    /// The chat this message is work for, when it is not its own session's: a sub-agent's
    /// task, a scheduled run in a session of its own. What its turn spends counts against
    /// that chat's caps, and the sub-agents it starts against that chat's; `None`: its own
    /// session's chat (see [`counted_against`](Self::counted_against)).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_behalf_of: Option<SessionKey>,
    /// The scheduled run it is, when it is one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run: Option<ScheduledRun>,
    /// Cancelled when whoever sent it no longer wants it answered (a sub-agent's task whose
    /// parent was stopped): its turn stops, or never starts. Stays in the process.
    #[serde(skip)]
    pub cancel: Option<tokio_util::sync::CancellationToken>,
    /// The holding under which this process answers it (a worker's lease on the message's
    /// partition, on a cluster): nothing is started for it unless the holding is confirmed,
    /// and what is under way is abandoned once it is lost. `None`: the session is this
    /// process's for good. Stays in the process.
    #[serde(skip)]
    pub tenure: Option<crate::Tenure>,
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
            id: None,
            content: content.into(),
            attachments: Vec::new(),
            reply_to: None,
            received_at: SystemTime::now(),
            ack: None,
            origin: Origin::Person,
            agent: None,
            on_behalf_of: None,
            run: None,
            cancel: None,
            tenure: None,
        }
    }

    /// The session this message belongs to.
    pub fn session_key(&self) -> SessionKey {
        SessionKey::of(&self.channel, &self.chat_id)
    }

    /// The chat whose caps and sub-agent limits this message's turn counts against.
    pub fn counted_against(&self) -> SessionKey {
        self.on_behalf_of
            .clone()
            .unwrap_or_else(|| self.session_key())
    }

    /// Reports what became of the message to its channel (once; later reports are ignored).
    pub fn settle(&self, fate: Fate) {
        if let Some(ack) = &self.ack {
            ack.report(fate);
        }
    }
}

/// How far a tool call has got, as shown to the person.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
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

/// The most bytes of a tool call's arguments or result shown to the person
/// ([`ToolActivity::detail`]); the model gets the whole.
pub const TOOL_DETAIL_BYTES: usize = 512;

/// A tool call starting or ending, as the person is shown it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolActivity {
    /// The call's id (the same for its start and its end).
    pub id: String,
    /// The tool's name.
    pub name: String,
    /// What happened.
    pub status: ToolStatus,
    /// At the start, the call's arguments; at the end, the start of its result (or error);
    /// at most [`TOOL_DETAIL_BYTES`] (see [`preview`]).
    pub detail: String,
    /// At the end, how long the call ran.
    pub elapsed: Option<std::time::Duration>,
}

/// The first [`TOOL_DETAIL_BYTES`] of `text` (cut at a character boundary, `…` marking a
/// cut).
pub fn preview(text: &str) -> String {
    if text.len() <= TOOL_DETAIL_BYTES {
        return text.to_owned();
    }
    format!("{}…", cut_at(text, TOOL_DETAIL_BYTES))
}

/// `text` cut to at most `max` bytes, at a character boundary.
pub fn cut_at(text: &str, max: usize) -> &str {
    if text.len() <= max {
        return text;
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

/// What a paused turn waits for from the person.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Awaiting {
    /// Consent to run a tool: `/approve` or `/deny`.
    Approval,
    /// An answer to the model's question (the `ask_user` tool).
    Answer,
}

impl Awaiting {
    /// The lowercase name used on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Approval => "approval",
            Self::Answer => "answer",
        }
    }
}

/// How the exchange that a [`OutboundKind::Done`] closes ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TurnEnd {
    /// The model answered without tool calls.
    Answered,
    /// `max_iterations` rounds were used up.
    IterationLimit,
    /// The turn's token budget (`agent.max_turn_tokens`) was used up.
    TokenLimit,
    /// The turn's time budget (`agent.turn_timeout_secs`) ran out.
    TimeLimit,
    /// No answer passed verification within its attempts; a graceful failure was sent.
    Unverified,
    /// The turn was cancelled (`/stop`, shutdown).
    Cancelled,
    /// The turn failed; an error came before.
    Failed,
    /// The turn was refused before the model was called: a daily cost cap is reached
    /// (`limits.daily_usd`, `limits.daily_usd_per_chat`); the message said so.
    CostLimit,
    /// Not a turn: a command's answer, or a message that was not processed.
    NotATurn,
}

impl TurnEnd {
    /// Every way a turn ends.
    pub const ALL: [Self; 9] = [
        Self::Answered,
        Self::IterationLimit,
        Self::TokenLimit,
        Self::TimeLimit,
        Self::Unverified,
        Self::Cancelled,
        Self::Failed,
        Self::CostLimit,
        Self::NotATurn,
    ];

    /// The lowercase name used on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Answered => "answered",
            Self::IterationLimit => "iteration_limit",
            Self::TokenLimit => "token_limit",
            Self::TimeLimit => "time_limit",
            Self::Unverified => "unverified",
            Self::Cancelled => "cancelled",
            Self::Failed => "failed",
            Self::CostLimit => "cost_limit",
            Self::NotATurn => "not_a_turn",
        }
    }
}

/// What the agent tells a chat.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", content = "body", rename_all = "snake_case")]
pub enum OutboundKind {
    /// A turn began (channels show "typing…" until its `Done`).
    TurnStarted,
    /// A piece of the reply as it streams in.
    Delta(String),
    /// The text streamed so far is void (the model's stream broke off and the call is being
    /// tried again): drop the partial draft; the reply streams anew.
    DraftReset,
    /// The whole reply of a turn (the concatenation of its deltas since the last reset, when
    /// it streamed).
    Message(String),
    /// A tool started or ended.
    Tool(ToolActivity),
    /// What the turn is waiting on (a slow model, a retry after an error). Transient: the
    /// next piece of the turn replaces it.
    Status(String),
    /// Something the person should know that is not the reply, e.g. that the conversation
    /// could not be saved. It may arrive outside a turn.
    Notice(String),
    /// What the person's voice note said, as it was transcribed: shown to them, quoted,
    /// under their message (`[transcription] echo`).
    Transcript(String),
    /// The turn paused to ask the person something; their next message in the chat is
    /// the answer. Shown as a message of its own (not the reply, not the draft).
    Question {
        /// The question, with how to answer it.
        text: String,
        /// What kind of answer it waits for.
        awaiting: Awaiting,
    },
    /// A message the agent sends unasked (the `message` tool, scheduled work): shaped like a
    /// reply (split, rendered), but part of no turn — it never touches a turn's draft, and
    /// no `Done` follows it.
    Post(String),
    /// A file: a picture, a voice message, a document — in its place among the chat's
    /// messages, in a turn (a spoken reply, a tool's `send_file` to its own chat) or outside
    /// one (like a `Post`: no `Done` follows).
    File(crate::media::OutboundFile),
    /// Something went wrong; the text says what and, where it can, what to change.
    Error(String),
    /// The exchange is over; no more messages for it.
    Done(TurnEnd),
}

/// A message for one chat of one channel.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct OutboundMessage {
    /// The adapter that delivers it.
    pub channel: ChannelName,
    /// The chat it is for.
    pub chat_id: ChatId,
    /// The platform id of the inbound message it answers; replies thread under it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reply_to: Option<MessageId>,
    /// What it says.
    pub kind: OutboundKind,
    /// The inbound message whose handling it is part of (its turn, or its command's answer),
    /// whether or not it threads under it: a scheduled run's answer threads under nothing
    /// (`reply_to` is none) but is still its run's. What repeats of one answer are known by.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub turn: Option<MessageId>,
    /// Where it stands among its channel's outbound messages, when a bus numbers them the
    /// same for every process that delivers them (a cluster's outbound stream: its sequence
    /// there): a client that moves from one gateway to another says the last it had, and
    /// gets only what came after. `None` in one process. Set by the bus, not sent on.
    #[serde(skip)]
    pub cursor: Option<u64>,
}

impl OutboundMessage {
    /// A message for the chat an inbound message came from, answering it (threaded under
    /// it when a person wrote it: scheduled work has no platform message to thread under).
    pub fn reply_to(inbound: &InboundMessage, kind: OutboundKind) -> Self {
        Self {
            channel: inbound.channel.clone(),
            chat_id: inbound.chat_id.clone(),
            reply_to: inbound
                .origin
                .is_person()
                .then(|| inbound.id.clone())
                .flatten(),
            kind,
            turn: inbound.id.clone(),
            cursor: None,
        }
    }
}
