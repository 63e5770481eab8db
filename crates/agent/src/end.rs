//! How a turn ends, and what each ending leaves behind: the reply the person sees, the last
//! message history keeps (a request is never left unanswered there, so the next one does not
//! follow it as a second user message in a row), the journal's state of the message it
//! answered, and the event the worker turns into the turn's last frames. A turn whose session
//! was written elsewhere meanwhile is *superseded* and leaves nothing.

use std::time::Duration;

use switchboard_core::{ChatMessage, TurnEnd, Usage};
use switchboard_sessions::InboundState;

use crate::events::AgentEvent;

/// What the person sees when a turn is stopped.
pub(crate) const STOPPED_REPLY: &str = "Stopped.";
/// What history keeps for a stopped turn, so the model knows the request went unanswered.
const STOPPED_NOTE: &str = "[This turn was stopped before it finished.]";
/// What ends the text of an answer that was stopped while it streamed: what was shown is
/// kept, on screen and in history, marked.
const STOPPED_MARK: &str = "\n\n(stopped)";

/// How a turn ended.
pub(crate) enum End {
    /// A reply, and why the turn ended with it.
    Reply(String, TurnEnd),
    /// A failure, saying what to fix.
    Failed(String),
    /// A save found the session stale: nothing more is saved or sent.
    Superseded,
}

impl End {
    /// Stopped (`/stop`, shutdown) before anything was shown.
    pub(crate) fn stopped() -> Self {
        Self::Reply(STOPPED_REPLY.to_owned(), TurnEnd::Cancelled)
    }

    /// Stopped while its answer streamed: the text shown so far stays the reply (and goes
    /// into history), marked as stopped.
    pub(crate) fn stopped_after(partial: &str) -> Self {
        let partial = partial.trim_end();
        if partial.is_empty() {
            return Self::stopped();
        }
        Self::Reply(format!("{partial}{STOPPED_MARK}"), TurnEnd::Cancelled)
    }

    /// Stopped by its time budget, `limit`: says which key sets it.
    pub(crate) fn out_of_time(limit: Duration) -> Self {
        Self::Reply(
            format!(
                "I stopped: this turn took longer than its limit of {} s \
                 (agent.turn_timeout_secs). Ask me to continue if you want more.",
                limit.as_secs()
            ),
            TurnEnd::TimeLimit,
        )
    }

    /// What the end-of-turn hooks are told: how it ended (`None`: it failed) and its text.
    pub(crate) fn told(&self) -> (Option<TurnEnd>, String) {
        match self {
            Self::Reply(reply, end) => (Some(*end), reply.clone()),
            Self::Failed(message) => (None, message.clone()),
            Self::Superseded => (None, String::new()),
        }
    }

    /// The last message history keeps, and the journal's state of the message it answered;
    /// `None` when superseded.
    pub(crate) fn kept(&self) -> Option<(ChatMessage, InboundState)> {
        Some(match self {
            Self::Superseded => return None,
            Self::Reply(reply, end) => {
                let last = if *end == TurnEnd::Cancelled && reply == STOPPED_REPLY {
                    ChatMessage::assistant(STOPPED_NOTE)
                } else {
                    ChatMessage::assistant(reply.clone())
                };
                let answered = InboundState::Answered {
                    end: *end,
                    error: None,
                };
                (last, answered)
            }
            Self::Failed(message) => (
                ChatMessage::assistant(failed_note(message)),
                InboundState::Answered {
                    end: TurnEnd::Failed,
                    error: Some(message.clone()),
                },
            ),
        })
    }

    /// The event the worker turns into the turn's last frames (logged), given what the turn
    /// spent; `None` when superseded.
    pub(crate) fn event(self, usage: Usage) -> Option<AgentEvent> {
        match self {
            Self::Reply(reply, end) => {
                tracing::info!(
                    input_tokens = usage.input_tokens,
                    output_tokens = usage.output_tokens,
                    ?end,
                    "turn finished"
                );
                Some(AgentEvent::Finished { reply, end, usage })
            }
            Self::Failed(message) => {
                tracing::warn!(%message, "turn failed");
                Some(AgentEvent::Failed { message })
            }
            Self::Superseded => None,
        }
    }
}

/// What history keeps for a turn that failed: that it did, and why, in a line.
fn failed_note(message: &str) -> String {
    let first: String = message
        .lines()
        .next()
        .unwrap_or_default()
        .chars()
        .take(300)
        .collect();
    format!("[This request was not answered. {first}]")
}
