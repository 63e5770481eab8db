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
//! A message delivered again (its id was routed to the worker before: a web page resending
//! its outbox after a reconnect) is never an answer: it is queued, and the worker finds it
//! handled already — a repeat must not answer (deny) a question it was never meant for.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use serde_json::json;
use switchboard_core::{Awaiting, Bus, Fate, InboundMessage, OutboundKind, OutboundMessage};
use switchboard_tools::{AskUser, Tool, ToolContext, ToolError, ToolOutput};
use tokio::sync::{Mutex, oneshot};
use tokio_util::sync::CancellationToken;

use crate::command::Command;
use crate::dispatcher::{SharedControl, control};
use crate::input::message_text;

/// A turn waiting on the person: the chat's next fitting message goes here.
pub(crate) struct Waiting {
    /// Tells this wait apart from a later one.
    pub(crate) id: u64,
    pub(crate) awaiting: Awaiting,
    pub(crate) tx: oneshot::Sender<InboundMessage>,
}

impl Waiting {
    /// Whether `message` answers this wait: any text of the person's that is not a
    /// command (for an approval, see [`offer`]: it denies and is queued); for an approval
    /// also `/approve` and `/deny`. Other commands are handled as
    /// usual, and work that is not the person's (a scheduled run) waits its turn.
    pub(crate) fn accepts(&self, message: &InboundMessage) -> bool {
        if !message.origin.is_person() {
            return false;
        }
        match Command::parse(&message.content) {
            None => true,
            Some(Command::Approve | Command::Deny) => self.awaiting == Awaiting::Approval,
            Some(_) => false,
        }
    }
}

/// Offers `message` to a turn of the session waiting on the person: `None` when it became
/// the answer, else the message back, to be routed as usual (nothing waits, the message is
/// a command the wait does not take, or the waiting turn is gone). The dispatcher's side of
/// the module doc's argument: the slot is taken and the message sent under the lock.
pub(crate) fn offer(shared: &SharedControl, message: InboundMessage) -> Option<InboundMessage> {
    let mut control = control(shared);
    if control.routed_before(&message) {
        return Some(message);
    }
    // A new message while a command waits for approval denies it, and is not spent on
    // that: it is queued, saved and answered next like any message (the page says so while
    // an approval is pending).
    if control.waiting.as_ref().is_some_and(|waiting| {
        waiting.awaiting == Awaiting::Approval
            && message.origin.is_person()
            && Command::parse(&message.content).is_none()
    }) {
        if let Some(waiting) = control.waiting.take() {
            let mut deny = InboundMessage::text(
                message.channel.clone(),
                message.chat_id.clone(),
                message.sender.clone(),
                DENIED_BY_A_NEW_MESSAGE,
            );
            deny.agent.clone_from(&message.agent);
            let _ = waiting.tx.send(deny);
        }
        return Some(message);
    }
    match control.waiting.take_if(|waiting| waiting.accepts(&message)) {
        Some(waiting) => waiting.tx.send(message).err(),
        None => Some(message),
    }
}

/// What an approval is answered with when the person sends a new message instead: a
/// denial the model is told of as such ([`crate::approval`]).
pub(crate) const DENIED_BY_A_NEW_MESSAGE: &str = "/deny";

static NEXT_WAIT: AtomicU64 = AtomicU64::new(0);

/// The person behind one turn's chat.
pub(crate) struct ChatUser {
    pub(crate) hub: Arc<dyn Bus>,
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
            None => {
                // Holds the asker here in tests, where the dispatcher may take the slot now.
                #[cfg(test)]
                tokio::task::yield_now().await;
                if guard.clear() {
                    None
                } else {
                    // Taken by the dispatcher just now: the message is in the channel.
                    rx.try_recv().ok()
                }
            }
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

    async fn call(
        &self,
        args: serde_json::Value,
        ctx: &ToolContext,
    ) -> Result<ToolOutput, ToolError> {
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
            Some(answer) => Ok(answer.into()),
            None if ctx.cancel.is_cancelled() => Err(ToolError::Failed("cancelled".into())),
            None => Err(ToolError::Failed(format!(
                "the user did not answer within {} s; go on without it or say what you need",
                self.timeout.as_secs()
            ))),
        }
    }
}

#[cfg(test)]
mod tests {
    use switchboard_core::{ChannelName, ChatHub, ChatId, SenderId, Shutdown};

    use super::*;

    fn message(text: &str) -> InboundMessage {
        InboundMessage::text(
            ChannelName::new("websocket"),
            ChatId::new("c"),
            SenderId::new("u"),
            text,
        )
    }

    fn asker(control: &SharedControl) -> ChatUser {
        let shutdown = Shutdown::new();
        ChatUser {
            hub: Arc::new(ChatHub::new(8, shutdown.intake().clone())),
            to: OutboundMessage::reply_to(&message("q"), OutboundKind::TurnStarted),
            control: control.clone(),
            cancel: CancellationToken::new(),
            one_at_a_time: Mutex::new(()),
        }
    }

    /// The race of the module doc, run many times with random timing: a message offered
    /// while the asker times out is either its answer or routed as usual — never both,
    /// never neither.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_offered_message_is_the_answer_or_routed_never_lost() {
        let (mut answered, mut routed) = (0, 0);
        for round in 0..500 {
            let control = SharedControl::default();
            let user = asker(&control);
            // Mostly a time that ends about when the offer comes (the race); one round in
            // eight waits for the question to be asked before offering, so that both outcomes
            // are seen however busy the machine is.
            let patient = fastrand::u8(0..8) == 0;
            let timeout = if patient {
                Duration::from_secs(10)
            } else {
                Duration::from_micros(fastrand::u64(0..1500))
            };
            let asking =
                tokio::spawn(async move { user.ask("q?", Awaiting::Answer, timeout).await });
            if patient {
                while control.lock().expect("lock").waiting.is_none() {
                    tokio::task::yield_now().await;
                }
            }
            for _ in 0..fastrand::usize(0..200) {
                tokio::task::yield_now().await;
            }
            let offered = offer(&control, message("the answer"));
            let answer = asking.await.expect("asker");
            match (answer, offered) {
                (Some(text), None) => {
                    assert_eq!(text, "the answer");
                    answered += 1;
                }
                (None, Some(back)) => {
                    assert_eq!(back.content, "the answer");
                    routed += 1;
                }
                (answer, back) => {
                    panic!(
                        "round {round}: answer {answer:?}, routed {:?}",
                        back.is_some()
                    )
                }
            }
            assert!(
                control.lock().expect("lock").waiting.is_none(),
                "no slot left behind"
            );
        }
        assert!(
            answered > 0 && routed > 0,
            "both outcomes seen: {answered} / {routed}"
        );
    }

    /// The narrow case of that race, made deterministic: the asker's time is up, and before
    /// it clears the slot (a test-only yield holds it there) the dispatcher takes the slot and
    /// sends. The message must still be the answer.
    #[tokio::test(start_paused = true)]
    async fn a_message_taken_as_the_wait_times_out_is_still_the_answer() {
        let control = SharedControl::default();
        let user = asker(&control);
        let asking = tokio::spawn(async move {
            user.ask("q?", Awaiting::Answer, Duration::from_secs(1))
                .await
        });
        while control.lock().expect("lock").waiting.is_none() {
            tokio::task::yield_now().await;
        }
        tokio::time::advance(Duration::from_secs(1)).await;
        tokio::task::yield_now().await;
        assert!(
            offer(&control, message("just in time")).is_none(),
            "the slot was still there"
        );
        assert_eq!(
            asking.await.expect("asker").as_deref(),
            Some("just in time")
        );
    }

    #[tokio::test]
    async fn a_wait_takes_text_and_for_approvals_approve_or_deny_but_no_other_command() {
        let control = SharedControl::default();
        for (awaiting, text, taken) in [
            (Awaiting::Answer, "Paris", true),
            (Awaiting::Answer, "/approve", false),
            (Awaiting::Approval, "/approve", true),
            (Awaiting::Approval, "/deny", true),
            (Awaiting::Approval, "/status", false),
        ] {
            let (tx, _rx) = oneshot::channel();
            control.lock().expect("lock").waiting = Some(Waiting {
                id: 0,
                awaiting,
                tx,
            });
            assert_eq!(offer(&control, message(text)).is_none(), taken, "{text}");
            control.lock().expect("lock").waiting = None;
        }
        assert!(offer(&control, message("nobody waits")).is_some());
    }

    /// A new message while a command waits for approval denies it and is routed as usual
    /// (queued, then answered): never spent as the answer.
    #[tokio::test]
    async fn a_new_message_denies_an_approval_and_is_kept() {
        let control = SharedControl::default();
        let (tx, rx) = oneshot::channel();
        control.lock().expect("lock").waiting = Some(Waiting {
            id: 0,
            awaiting: Awaiting::Approval,
            tx,
        });
        let back = offer(&control, message("no, do this instead")).expect("routed as usual");
        assert_eq!(back.content, "no, do this instead");
        let answer = rx.await.expect("the approval was answered");
        assert_eq!(Command::parse(&answer.content), Some(Command::Deny));
        assert!(
            answer.id.is_none() && answer.ack.is_none(),
            "not the message's own"
        );
        assert!(control.lock().expect("lock").waiting.is_none());
    }
}
