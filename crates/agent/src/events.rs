//! [`AgentEvent`]: what a turn reports while it runs.

use switchboard_core::{TurnEnd, Usage};
use tokio::sync::mpsc;

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
