//! A session's worker: the task that answers one chat's messages in order, one turn at a
//! time, and exits after `idle_timeout` without messages (its session leaves memory).
//!
//! # Exactly once
//! A message with a platform id is journaled in its session as it is handled: *received*
//! with its user message, *answered* with the turn's final message, *delivered* once its
//! channel confirms the closing `done` went out — and only then is the channel told the
//! message is handled, so it may confirm it to its platform. A platform that delivers a
//! message again after a crash finds it taken up where it was left: received → the turn
//! runs on from the saved history; answered → the saved answer is sent; delivered →
//! ignored. The one window left is between the platform accepting the answer and the
//! *delivered* record that follows it (microseconds: a crash there sends the answer twice).
//!
//! # On a cluster: fenced
//! A message read from a partition carries the worker's [`Tenure`] of it. Nothing is started
//! for a message unless its tenure is confirmed (a worker that was paused past its lease
//! learns from its next renewal whether it still holds the partition; one that lost it hands
//! the message back untouched). A session read under another holding of the partition is
//! read again before use — the partition's other holders may have written it meanwhile. A
//! turn under way is abandoned — nothing more saved or sent — once its tenure is lost. And
//! a write the store refuses as stale (another worker wrote the session since it was read)
//! makes the worker read the session again and handle the message anew, which the journal
//! makes safe: a message already answered elsewhere is not answered twice.
//!
//! [`Tenure`]: switchboard_core::Tenure

use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use dashmap::DashMap;
use futures::FutureExt;
use switchboard_core::{
    AgentName, Bus, ChatMessage, Fate, InboundMessage, Origin, OutboundKind, OutboundMessage,
    SessionKey, Shutdown, Tenure, TurnEnd,
};
use switchboard_sessions::{InboundState, Session};
use switchboard_tools::User;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::agent::Agent;
use crate::ask::ChatUser;
use crate::command::{Command, command_of};
use crate::dispatcher::{Queued, Route, SharedControl, WorkerHandle, control};
use crate::end::STOPPED_REPLY;
use crate::events::forward;
use crate::input::TurnInput;
use crate::replies::{dropped_text, refuse_shutting_down, reply, report_dropped};
use crate::slots::{HeldSlot, Taker};
use crate::speaking;

/// One chat's worker.
pub(crate) struct Worker {
    pub(crate) id: u64,
    pub(crate) key: SessionKey,
    /// The agent's name: with `key`, the worker's entry in the dispatcher's map.
    pub(crate) route: AgentName,
    pub(crate) agent: Arc<Agent>,
    pub(crate) hub: Arc<dyn Bus>,
    pub(crate) shutdown: Shutdown,
    /// The dispatcher's map; the worker removes its own entry when it exits.
    pub(crate) workers: Arc<DashMap<Route, WorkerHandle>>,
    /// The running turn and the stop count, shared with the dispatcher.
    pub(crate) control: SharedControl,
}

/// How often a message is handled anew after a write found its session stale, before it
/// is handed back to be delivered again (a session another writer keeps moving).
const DECIDE_ANEW: usize = 3;

/// The chat's session as the worker holds it between messages.
#[derive(Default)]
struct Cached {
    session: Option<Session>,
    /// The epoch of the tenure it was read under (`None`: a session that is this process's
    /// for good).
    epoch: Option<u64>,
}

impl Cached {
    /// Whether the cached session's journal has `message` (by its platform id): a repeat.
    fn took(&self, message: &InboundMessage) -> bool {
        let Some((session, id)) = self.session.as_ref().zip(message.id.as_ref()) else {
            return false;
        };
        session.inbound(id).is_some()
    }

    /// Forgets a session that must not be used for `message`: found stale, or read under
    /// another holding of its partition than the one `message` comes with.
    fn refresh_for(&mut self, message: &InboundMessage) {
        let epoch = message.tenure.as_ref().map(Tenure::epoch);
        let stale = self.session.as_ref().is_some_and(Session::is_stale);
        if stale || (self.session.is_some() && self.epoch != epoch) {
            self.session = None;
        }
        if self.session.is_none() {
            self.epoch = epoch;
        }
    }
}

impl Worker {
    pub(crate) async fn run(self, mut rx: mpsc::Receiver<Queued>) {
        let mut cached = Cached::default();
        // Messages dropped by a `/stop` and not yet reported to the chat.
        let mut dropped = 0usize;
        while let Some(queued) = self.next(&mut rx).await {
            let (stamp, message) = *queued;
            if !self.hub.is_accepting() {
                refuse_shutting_down(&self.hub, &message).await;
                continue;
            }
            if !self.may_start(&message).await {
                continue;
            }
            // A `/stop` is queued behind what it stopped: answered after the turn's `done`
            // and what it dropped, whatever its stamp (a later `/stop` may have bumped it).
            if command_of(&message) == Some(Command::Stop) {
                let dropped = std::mem::take(&mut dropped);
                cached.refresh_for(&message);
                if let Some(session) = self.session(&mut cached.session, &message).await {
                    self.answer_stop(session, message, dropped).await;
                }
                continue;
            }
            // A sub-agent's task is stopped with its parent's family (and shutdown, which
            // that token descends from); anything else with the daemon's turns.
            let token = match &message.cancel {
                Some(sender) => sender.child_token(),
                None => self.shutdown.turns().child_token(),
            };
            if !self.register(stamp, &message, &token) {
                message.settle(Fate::Dropped);
                // A repeat of a message this chat already took (a page sends the message it
                // was waiting on again after a reload) was not waiting: it is not counted.
                if !cached.took(&message) {
                    dropped += 1;
                }
                if rx.is_empty() && dropped > 0 {
                    report_dropped(&self.hub, &message, std::mem::take(&mut dropped)).await;
                }
                continue;
            }
            if dropped > 0 {
                report_dropped(&self.hub, &message, std::mem::take(&mut dropped)).await;
            }
            self.decide(&mut cached, message, token).await;
            control(&self.control).running = None;
        }
    }

    /// Whether anything may be started for `message`: its tenure, if it has one, is
    /// confirmed. One whose tenure was lost is handed back untouched (its partition's new
    /// holder answers it).
    async fn may_start(&self, message: &InboundMessage) -> bool {
        let Some(tenure) = &message.tenure else {
            return true;
        };
        let confirmed = tokio::select! {
            confirmed = tenure.confirmed() => confirmed,
            () = self.shutdown.intake().cancelled() => false,
        };
        if !confirmed {
            tracing::info!(session = %self.key, id = ?message.id,
                "its partition is no longer this worker's; the message is handed back");
            message.settle(Fate::Unprocessed);
        }
        confirmed
    }

    /// Handles `message` on a picture of its session that is current: read again when it
    /// was read under another holding of the partition, and — at most [`DECIDE_ANEW`] times
    /// — whenever a write found it stale; abandoned once the tenure is lost.
    async fn decide(&self, cached: &mut Cached, message: InboundMessage, token: CancellationToken) {
        for _ in 0..DECIDE_ANEW {
            cached.refresh_for(&message);
            if self.session(&mut cached.session, &message).await.is_none() {
                return;
            }
            let lost = async {
                match &message.tenure {
                    Some(tenure) => tenure.lost().await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                biased;
                () = lost => {
                    tracing::warn!(session = %self.key, id = ?message.id,
                        "the partition was lost mid-turn; the turn is abandoned to its new holder");
                    cached.session = None;
                    return;
                }
                () = self.handle_guarded(&mut cached.session, message.clone(), token.clone()) => {}
            }
            if !cached.session.as_ref().is_some_and(Session::is_stale) {
                return;
            }
            if !self.may_start(&message).await {
                return;
            }
            tracing::info!(session = %self.key, id = ?message.id,
                "the session is read again and the message handled anew");
            if command_of(&message).is_none() {
                control(&self.control).running = Some(token.clone());
            }
        }
        tracing::warn!(session = %self.key, id = ?message.id,
            "the session kept changing elsewhere; the message is handed back to come again");
        cached.session = None;
        message.settle(Fate::Unprocessed);
    }

    /// The next queued message; `None` once the worker should exit (intake stopped and what
    /// was queued answered, or idle for `idle_timeout` with nothing queued).
    async fn next(&self, rx: &mut mpsc::Receiver<Queued>) -> Option<Queued> {
        loop {
            let message = tokio::select! {
                biased;
                message = rx.recv() => message,
                () = self.shutdown.intake().cancelled() => {
                    // Intake stopped and no turn runs: answer what is queued, then exit.
                    rx.close();
                    while let Ok(queued) = rx.try_recv() {
                        refuse_shutting_down(&self.hub, &queued.1).await;
                    }
                    self.workers.remove_if(&self.entry(), |_, worker| worker.id == self.id);
                    self.agent.release_session(&self.key);
                    return None;
                }
                () = tokio::time::sleep(self.agent.config.idle_timeout) => {
                    let removed = self
                        .workers
                        .remove_if(&self.entry(), |_, worker| worker.id == self.id && rx.is_empty());
                    if removed.is_some() {
                        tracing::debug!(session = %self.key, "idle session worker exits");
                        self.agent.release_session(&self.key);
                        return None;
                    }
                    continue;
                }
            };
            if message.is_none() {
                self.agent.release_session(&self.key);
            }
            return message;
        }
    }

    /// The worker's key in the dispatcher's map.
    fn entry(&self) -> Route {
        Route {
            agent: self.route.clone(),
            session: self.key.clone(),
        }
    }

    /// Whether a message stamped `stamp` is still wanted (no `/stop` came after it was
    /// queued); if so, and it starts a turn, registers the turn's token for `/stop` —
    /// under the control lock (see the dispatcher's doc).
    fn register(&self, stamp: u64, message: &InboundMessage, token: &CancellationToken) -> bool {
        let mut control = control(&self.control);
        let fresh = stamp >= control.stops;
        if fresh && command_of(message).is_none() {
            control.running = Some(token.clone());
        }
        fresh
    }

    /// The chat's session, read from its file the first time; `None` (the chat told why)
    /// when it cannot be read.
    async fn session<'s>(
        &self,
        slot: &'s mut Option<Session>,
        message: &InboundMessage,
    ) -> Option<&'s mut Session> {
        if slot.is_none() {
            match self.agent.load_session(&self.key).await {
                Ok(loaded) => *slot = Some(loaded),
                Err(err) => {
                    tracing::error!(session = %self.key, path = ?err.path(), error = %err,
                        "could not load session");
                    let text = format!("Could not read this chat's history: {err}");
                    reply(&self.hub, message, OutboundKind::Error(text)).await;
                    reply(&self.hub, message, OutboundKind::Done(TurnEnd::Failed)).await;
                    message.settle(Fate::Unprocessed);
                    return None;
                }
            }
        }
        slot.as_mut()
    }

    /// Answers a `/stop` once what it stopped is over: how many waiting messages it dropped
    /// (if any), then its own `done`. (The turn it cancelled said `Stopped.` itself.)
    async fn answer_stop(&self, session: &mut Session, message: InboundMessage, dropped: usize) {
        if dropped > 0 {
            reply(
                &self.hub,
                &message,
                OutboundKind::Message(dropped_text(dropped)),
            )
            .await;
        }
        self.close(session, &message, TurnEnd::NotATurn).await;
    }

    /// [`Worker::handle`], with a panic inside it answered in the chat: the session is
    /// forgotten in memory (read back from disk, repaired, on the next message) and the
    /// worker goes on.
    async fn handle_guarded(
        &self,
        slot: &mut Option<Session>,
        message: InboundMessage,
        token: CancellationToken,
    ) {
        let Some(session) = slot.as_mut() else {
            return;
        };
        // Only where the reply goes is kept, for the rare panic below.
        let (channel, chat_id, reply_to) = (
            message.channel.clone(),
            message.chat_id.clone(),
            message.id.clone(),
        );
        let handled = AssertUnwindSafe(self.handle(session, message, token))
            .catch_unwind()
            .await;
        if handled.is_ok() {
            return;
        }
        // A bug, not an input. The message's ack, dropped unreported, tells its channel
        // it is unprocessed.
        tracing::error!(session = %self.key, "a turn panicked");
        let text = "Something went wrong inside switchboard while answering; the \
                    conversation is kept. Please try again.";
        for kind in [
            OutboundKind::Error(text.into()),
            OutboundKind::Done(TurnEnd::Failed),
        ] {
            let outbound = OutboundMessage {
                channel: channel.clone(),
                chat_id: chat_id.clone(),
                reply_to: reply_to.clone(),
                kind,
                cursor: None,
                turn: None,
            };
            if let Err(err) = self.hub.publish_outbound(outbound).await {
                tracing::warn!(session = %self.key, error = %err, "could not deliver a reply");
            }
        }
        self.agent.release_session(&self.key);
        *slot = None;
    }

    /// Handles one message: a command, a turn, or the next step of a message delivered
    /// again (see the module doc).
    async fn handle(
        &self,
        session: &mut Session,
        message: InboundMessage,
        cancel: CancellationToken,
    ) {
        let seen = message
            .id
            .as_ref()
            .and_then(|id| session.inbound(id))
            .cloned();
        match seen {
            Some(InboundState::Delivered) => {
                tracing::info!(session = %self.key, id = ?message.id,
                    "a message delivered again was answered already; ignored");
                self.handled_again(&message, None).await;
                message.settle(Fate::Handled);
                return;
            }
            Some(InboundState::Answered { end, error }) => {
                tracing::info!(session = %self.key, id = ?message.id,
                    "a message delivered again has an answer that may not have gone out; sending it");
                let kind = resent_answer(session, end, error);
                let spoken = match (&kind, end) {
                    (OutboundKind::Message(text), TurnEnd::Answered) => Some(text.clone()),
                    _ => None,
                };
                reply(&self.hub, &message, kind).await;
                if let Some(answer) = spoken.filter(|_| self.agent.voice.speech.is_some()) {
                    Box::pin(speaking::speak(
                        &self.agent.voice,
                        &self.hub,
                        &message,
                        &answer,
                    ))
                    .await;
                }
                self.close(session, &message, end).await;
                if !session.is_stale() {
                    self.handled_again(&message, Some(end)).await;
                }
                return;
            }
            Some(InboundState::Received) => {
                tracing::info!(session = %self.key, id = ?message.id,
                    "a message delivered again was interrupted; its turn runs on");
                return self.turn(session, message, cancel, true).await;
            }
            None => {}
        }
        let Some(command) = command_of(&message) else {
            return self.turn(session, message, cancel, false).await;
        };
        // `run` answers `/stop` before it gets here (see `answer_stop`), and a waiting turn
        // gets `/approve` and `/deny` from the dispatcher.
        let typed = Some((&message.channel, &message.chat_id));
        let text = command.answer(&self.agent, session, typed).await;
        if session.is_stale() {
            return;
        }
        reply(&self.hub, &message, OutboundKind::Message(text)).await;
        self.close(session, &message, TurnEnd::NotATurn).await;
    }

    /// Tells the hooks that `message` was handled without a turn here (its answer was on
    /// record): what settles a scheduled run whose turn ended where its hook could not.
    async fn handled_again(&self, message: &InboundMessage, end: Option<TurnEnd>) {
        if message.id.is_some() && !self.agent.hooks.is_empty() {
            self.agent
                .hooks
                .on_handled_again(&self.key, message, end)
                .await;
        }
    }

    /// Closes an exchange: sends its `done` — for a message with a platform id, waiting
    /// until its channel delivered it, then journaling it delivered — and tells the channel
    /// the message is handled.
    async fn close(&self, session: &mut Session, message: &InboundMessage, end: TurnEnd) {
        let done = OutboundMessage::reply_to(message, OutboundKind::Done(end));
        match &message.id {
            Some(id) => {
                if let Err(err) = self.hub.deliver_outbound(done).await {
                    // Given up on after the channel's retries (logged and counted there):
                    // sending it again after a restart would not go better.
                    tracing::warn!(session = %self.key, error = %err, "the answer was not delivered");
                }
                self.agent
                    .journal(session, id, InboundState::Delivered)
                    .await;
                if session.is_stale() {
                    // Not settled: the message is handled anew on the session read again.
                    return;
                }
            }
            None => {
                if let Err(err) = self.hub.publish_outbound(done).await {
                    tracing::warn!(session = %self.key, error = %err, "could not deliver a reply");
                }
            }
        }
        message.settle(Fate::Handled);
    }

    /// Runs a turn answering `message`, once it may start (see [`Worker::admit`]), and
    /// forwards what it does to the chat.
    async fn turn(
        &self,
        session: &mut Session,
        message: InboundMessage,
        cancel: CancellationToken,
        resume: bool,
    ) {
        let Some(slot) = self.admit(session, &message, &cancel).await else {
            return;
        };
        let (events, rx) = mpsc::unbounded_channel();
        let user = ChatUser {
            hub: self.hub.clone(),
            to: OutboundMessage::reply_to(&message, OutboundKind::TurnStarted),
            control: self.control.clone(),
            cancel: cancel.clone(),
            one_at_a_time: tokio::sync::Mutex::new(()),
        };
        // A chat nobody reads (a scheduled run's own session) has nobody to ask.
        let asked = self.hub.has_person(&message.channel);
        let input = TurnInput {
            resume,
            user: asked.then(|| User(Arc::new(user))),
            slot: Some(slot),
            ..TurnInput::from_message(&message)
        };
        let run = async {
            self.agent.run_turn(session, input, &cancel, &events).await;
            drop(events);
        };
        let ((), (end, answer)) = tokio::join!(run, forward(&self.hub, &message, rx));
        if session.is_stale() {
            // Superseded: handled anew on the session read again.
            return;
        }
        if let (TurnEnd::Answered, Some(answer)) = (end, answer)
            && self.agent.voice.speech.is_some()
        {
            // Boxed: a spoken answer's state is held only while it is made, not in every
            // session worker's future.
            Box::pin(speaking::speak(
                &self.agent.voice,
                &self.hub,
                &message,
                &answer,
            ))
            .await;
        }
        self.close(session, &message, end).await;
    }

    /// Whether a turn for `message` may start, and its turn slot if so; else the message
    /// is answered here (closed with its `done`): stopped before it began (a sub-agent
    /// whose parent was stopped, or a `/stop` while it waited for a slot), or over a daily
    /// cost cap (refused before anything is saved or the model called).
    async fn admit(
        &self,
        session: &mut Session,
        message: &InboundMessage,
        cancel: &CancellationToken,
    ) -> Option<Arc<HeldSlot>> {
        let refused = if cancel.is_cancelled() {
            Some((STOPPED_REPLY.to_owned(), TurnEnd::Cancelled))
        } else if let Some(spending) = self.agent.spending()
            && let Some(refusal) = spending.refusal(&message.counted_against()).await
        {
            tracing::info!(session = %self.key, "a turn was refused: a daily cost cap is reached");
            if !message.origin.is_person() {
                // A scheduled run or a sub-agent's task: not run, and its sender told so.
                message.settle(Fate::Dropped);
            }
            Some((refusal, TurnEnd::CostLimit))
        } else {
            None
        };
        let slots = self.agent.slots();
        let taker = match message.origin {
            Origin::Delegated { .. } => Taker::SubAgent,
            _ => Taker::Chat,
        };
        let slot = match refused {
            Some(_) => None,
            None => match slots.try_take(taker) {
                Some(slot) => Some(slot),
                None => {
                    let text = match taker {
                        Taker::Chat => format!(
                            "Waiting for a free slot: {} answers are being written at once \
                             (agent.max_concurrent_turns).",
                            slots.max()
                        ),
                        Taker::SubAgent => format!(
                            "Waiting for a free slot: sub-agents may write {} answers at once \
                             (agent.max_subagent_turns).",
                            slots.max_subagents()
                        ),
                    };
                    reply(&self.hub, message, OutboundKind::Status(text)).await;
                    tokio::select! {
                        biased;
                        () = cancel.cancelled() => None,
                        slot = slots.take(taker) => Some(slot),
                    }
                }
            },
        };
        if slot.is_some() {
            return slot;
        }
        let (text, end) = refused.unwrap_or((STOPPED_REPLY.to_owned(), TurnEnd::Cancelled));
        reply(&self.hub, message, OutboundKind::Message(text)).await;
        self.close(session, message, end).await;
        None
    }
}

/// The answer a turn gave, from what its session saved, to send again.
fn resent_answer(session: &Session, end: TurnEnd, error: Option<String>) -> OutboundKind {
    match (end, error) {
        (TurnEnd::Failed, Some(error)) => OutboundKind::Error(error),
        (TurnEnd::Cancelled, _) => OutboundKind::Message(STOPPED_REPLY.into()),
        _ => {
            let last = session.messages().iter().rev().find_map(|m| match &**m {
                ChatMessage::Assistant {
                    content,
                    tool_calls,
                } if tool_calls.is_empty() => Some(content.clone()),
                _ => None,
            });
            OutboundKind::Message(last.unwrap_or_else(|| {
                "(the answer to this message was lost in a crash; please ask again)".into()
            }))
        }
    }
}
