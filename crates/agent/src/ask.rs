//! Asking the person mid-turn: the chat's side ([`ChatUser`], given to each turn a worker
//! runs) and the `ask_user` tool built on it. Approvals ask the same way.
//!
//! # How an answer reaches a running turn
//! A question puts a [`Waiting`] slot in the session's shared control; the dispatcher,
//! routing the chat's next message, takes the slot (under the control lock) and sends the
//! message into it instead of queuing it behind the turn. Under the same lock the asker,
//! when it stops waiting (time out, `/stop`), clears the slot — or finds it taken, and then
//! the message is already in its channel and is read as the answer. So a message is
//! either the answer or routed as usual; never lost between the two. A slot whose asker
//! went away (its turn was dropped) refuses the message, which is then routed as usual.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use serde_json::json;
use switchboard_core::{Awaiting, ChatHub, Fate, InboundMessage, OutboundKind, OutboundMessage};
use switchboard_tools::{AskUser, Tool, ToolContext, ToolError};
use tokio::sync::{Mutex, oneshot};
use tokio_util::sync::CancellationToken;

use crate::command::Command;
use crate::dispatcher::{SharedControl, control};
use crate::turn::message_text;

/// A turn waiting on the person: the chat's next fitting message goes here.
pub(crate) struct Waiting {
    /// Tells this wait apart from a later one.
    pub(crate) id: u64,
    pub(crate) awaiting: Awaiting,
    pub(crate) tx: oneshot::Sender<InboundMessage>,
}

impl Waiting {
    /// Whether `message` answers this wait: any text that is not a command; for an
    /// approval also `/approve` and `/deny`. Other commands are handled as usual.
    pub(crate) fn accepts(&self, message: &InboundMessage) -> bool {
        match Command::parse(&message.content) {
            None => true,
            Some(Command::Approve | Command::Deny) => self.awaiting == Awaiting::Approval,
            Some(_) => false,
        }
    }
}

static NEXT_WAIT: AtomicU64 = AtomicU64::new(0);

/// The person behind one turn's chat.
pub(crate) struct ChatUser {
    pub(crate) hub: ChatHub,
    /// The message the turn answers: questions go to its chat, threaded under it.
    pub(crate) to: OutboundMessage,
    pub(crate) control: SharedControl,
    /// The turn's token: a stopped turn stops waiting.
    pub(crate) cancel: CancellationToken,
    /// Questions of one turn (parallel tool calls) are asked one at a time.
    pub(crate) one_at_a_time: Mutex<()>,
}

/// Clears the wait it guards when dropped (the asking future may be dropped mid-wait).
struct Clear<'a> {
    control: &'a SharedControl,
    id: u64,
}

impl Clear<'_> {
    /// Clears the wait; `false` when the dispatcher had taken it (a message is on its way).
    fn clear(&self) -> bool {
        let mut control = control(self.control);
        match &control.waiting {
            Some(waiting) if waiting.id == self.id => {
                control.waiting = None;
                true
            }
            _ => false,
        }
    }
}

impl Drop for Clear<'_> {
    fn drop(&mut self) {
        self.clear();
    }
}

#[async_trait]
impl AskUser for ChatUser {
    async fn ask(&self, question: &str, awaiting: Awaiting, timeout: Duration) -> Option<String> {
        let _one = self.one_at_a_time.lock().await;
        let (tx, mut rx) = oneshot::channel();
        let id = NEXT_WAIT.fetch_add(1, Ordering::Relaxed);
        control(&self.control).waiting = Some(Waiting { id, awaiting, tx });
        let guard = Clear {
            control: &self.control,
            id,
        };
        let outbound = OutboundMessage {
            kind: OutboundKind::Question {
                text: question.to_owned(),
                awaiting,
            },
            ..self.to.clone()
        };
        if let Err(err) = self.hub.publish_outbound(outbound).await {
            tracing::warn!(error = %err, "could not deliver a question");
        }
        tracing::info!(chat = %self.to.chat_id, awaiting = awaiting.as_str(), "turn waits on the user");
        let answer = tokio::select! {
            biased;
            answer = &mut rx => answer.ok(),
            () = self.cancel.cancelled() => None,
            () = tokio::time::sleep(timeout) => None,
        };
        let answer = match answer {
            Some(message) => Some(message),
            // Taken by the dispatcher just now: the message is in the channel.
            None if !guard.clear() => rx.try_recv().ok(),
            None => None,
        };
        let message = answer?;
        message.settle(Fate::Handled);
        Some(message_text(&message))
    }
}

/// The `ask_user` tool: the model asks the person a question; their next message in the
/// chat is the result, and the same turn goes on.
pub struct AskUserTool {
    timeout: Duration,
}

impl AskUserTool {
    /// Waits at most `timeout` for the answer.
    pub fn new(timeout: Duration) -> Self {
        Self { timeout }
    }
}

/// The longest question accepted, in characters.
const MAX_QUESTION_CHARS: usize = 2000;

#[async_trait]
impl Tool for AskUserTool {
    fn name(&self) -> &str {
        "ask_user"
    }

    fn description(&self) -> &str {
        "Ask the user a question and wait for their answer (their next message). Use it only \
         when you cannot go on without something only they know or decide."
    }

    fn parameters(&self) -> serde_json::Value {
        json!({
            "type": "object",
            "properties": {
                "question": {"type": "string", "description": "The question, complete and short."}
            },
            "required": ["question"]
        })
    }

    fn timeout(&self) -> Option<Duration> {
        // The tool's own wait ends first, with a clear result.
        Some(self.timeout + Duration::from_secs(5))
    }

    async fn call(&self, args: serde_json::Value, ctx: &ToolContext) -> Result<String, ToolError> {
        let question = args["question"].as_str().unwrap_or_default().trim();
        if question.is_empty() {
            return Err(ToolError::InvalidArguments(
                "`question` must be a non-empty string".into(),
            ));
        }
        if question.chars().count() > MAX_QUESTION_CHARS {
            return Err(ToolError::InvalidArguments(format!(
                "`question` is longer than {MAX_QUESTION_CHARS} characters"
            )));
        }
        let Some(user) = &ctx.user else {
            return Err(ToolError::Failed(
                "there is no chat to ask in; go on with what you have".into(),
            ));
        };
        match user.0.ask(question, Awaiting::Answer, self.timeout).await {
            Some(answer) => Ok(answer),
            None if ctx.cancel.is_cancelled() => Err(ToolError::Failed("cancelled".into())),
            None => Err(ToolError::Failed(format!(
                "the user did not answer within {} s; go on without it or say what you need",
                self.timeout.as_secs()
            ))),
        }
    }
}
