//! [`AgentEvent`]: what a turn reports while it runs, what a chat is shown of each, and
//! [`forward`]ing them to the chat as they come.

use std::sync::Arc;

use switchboard_core::{
    Bus, InboundMessage, OutboundKind, ToolActivity, ToolStatus, TurnEnd, Usage,
};
use tokio::sync::mpsc;

use crate::replies::reply;

/// Something that happened in a turn, in order. Channels use these for streaming text,
/// tool status and typing; the CLI prints them.
#[derive(Clone, Debug, PartialEq)]
pub enum AgentEvent {
    /// The turn began.
    Started,
    /// A piece of the reply arrived from the model.
    TextDelta(String),
    /// The text streamed so far is void: the model's stream broke off and the call is
    /// tried again, so the reply streams anew.
    TextReset,
    /// What the turn is waiting on (a slow model, a retry), for the person.
    Status(String),
    /// Something the person should know that is not the reply (the conversation could
    /// not be saved).
    Notice(String),
    /// What the person's voice note said, as transcribed (shown to them when
    /// `transcription.echo` is on).
    Heard(String),
    /// A tool call started: it was allowed (approved, not skipped by a hook) and runs now.
    ToolStarted {
        /// The call's id.
        id: String,
        /// The tool's name.
        name: String,
        /// Its arguments as the model wrote them (the start, see `switchboard_core::preview`).
        arguments: String,
    },
    /// A tool call ended (or was refused before it ran: then no `ToolStarted` came).
    ToolFinished {
        /// The call's id.
        id: String,
        /// The tool's name.
        name: String,
        /// Whether it returned a result (rather than an error).
        ok: bool,
        /// The start of its result or error.
        result: String,
        /// How long it ran (zero when it never started).
        elapsed: std::time::Duration,
    },
    /// A final reply was checked (see `verify`): rejected ones go back to the model.
    Verified {
        /// The attempt, from 1.
        attempt: usize,
        /// `None` when it passed, else why it did not.
        rejected: Option<String>,
    },
    /// The turn ended with a reply.
    Finished {
        /// The whole reply.
        reply: String,
        /// How the turn ended.
        end: TurnEnd,
        /// Tokens spent by the turn.
        usage: Usage,
    },
    /// The turn ended without a reply; the text says why and what to change.
    Failed {
        /// The error for the person.
        message: String,
    },
}

/// Where a turn sends its events. Unbounded so a turn never waits on a slow channel; the
/// worker's forwarder drains it into the hub.
pub type EventSink = mpsc::UnboundedSender<AgentEvent>;

impl AgentEvent {
    /// The outbound messages the event becomes in its chat.
    pub(crate) fn into_outbound(self) -> Vec<OutboundKind> {
        match self {
            AgentEvent::Started => vec![OutboundKind::TurnStarted],
            AgentEvent::TextDelta(text) => vec![OutboundKind::Delta(text)],
            AgentEvent::TextReset => vec![OutboundKind::DraftReset],
            AgentEvent::Status(text) => vec![OutboundKind::Status(text)],
            AgentEvent::Notice(text) => vec![OutboundKind::Notice(text)],
            AgentEvent::Heard(text) => vec![OutboundKind::Transcript(text)],
            AgentEvent::ToolStarted {
                id,
                name,
                arguments,
            } => vec![OutboundKind::Tool(ToolActivity {
                id,
                name,
                status: ToolStatus::Started,
                detail: arguments,
                elapsed: None,
            })],
            AgentEvent::ToolFinished {
                id,
                name,
                ok,
                result,
                elapsed,
            } => vec![OutboundKind::Tool(ToolActivity {
                id,
                name,
                status: if ok {
                    ToolStatus::Finished
                } else {
                    ToolStatus::Failed
                },
                detail: result,
                elapsed: Some(elapsed),
            })],
            AgentEvent::Verified {
                attempt,
                rejected: Some(reason),
            } => vec![OutboundKind::Status(format!(
                "The answer did not pass a check ({reason}); writing it again (attempt {}).",
                attempt + 1
            ))],
            AgentEvent::Verified { rejected: None, .. } => Vec::new(),
            AgentEvent::Finished { reply, end, .. } => {
                vec![OutboundKind::Message(reply), OutboundKind::Done(end)]
            }
            AgentEvent::Failed { message } => vec![
                OutboundKind::Error(message),
                OutboundKind::Done(TurnEnd::Failed),
            ],
        }
    }
}

/// Sends a turn's events to `message`'s chat as outbound messages, until the turn drops
/// its sender; returns how the turn ended (the worker sends its `done`) and its reply, if it
/// ended with one.
pub(crate) async fn forward(
    hub: &Arc<dyn Bus>,
    message: &InboundMessage,
    mut rx: mpsc::UnboundedReceiver<AgentEvent>,
) -> (TurnEnd, Option<String>) {
    let mut end = TurnEnd::Failed;
    let mut answer = None;
    let mut next = rx.recv().await;
    while let Some(event) = next.take() {
        let event = match event {
            // Text that arrived while the last frame was being delivered goes out as one
            // delta: fewer frames when the model is faster than the socket.
            AgentEvent::TextDelta(mut text) => {
                while let Ok(more) = rx.try_recv() {
                    match more {
                        AgentEvent::TextDelta(piece) => text.push_str(&piece),
                        other => {
                            next = Some(other);
                            break;
                        }
                    }
                }
                AgentEvent::TextDelta(text)
            }
            other => other,
        };
        if let AgentEvent::Finished { reply, .. } = &event {
            answer = Some(reply.clone());
        }
        for kind in event.into_outbound() {
            match kind {
                OutboundKind::Done(ended) => end = ended,
                kind => reply(hub, message, kind).await,
            }
        }
        if next.is_none() {
            next = rx.recv().await;
        }
    }
    (end, answer)
}
