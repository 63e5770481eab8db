//! [`Dispatcher`]: routes inbound messages to one worker per session.
//!
//! The dispatcher is one task reading the hub's inbound queue, and it never waits on one
//! session: a message goes into its worker's bounded queue with `try_send`; a chat whose
//! queue is full gets "too many messages waiting" for that message instead of holding up
//! every other chat. The dispatcher's own replies go through a queue of their own, drained
//! beside the routing loop, so they keep their order and a busy channel delays only them.
//!
//! A worker is a task owning a session: it answers that session's messages in order, one
//! turn at a time, and exits after `idle_timeout` without messages (its session leaves
//! memory). `/stop` bypasses the queue: the dispatcher cancels the worker's running turn
//! and drops the messages queued behind it.
//!
//! # Why `/stop` neither misses a turn nor drops a message sent after it
//! Each queued message carries the chat's stop count at the time it was queued. Under the
//! worker's control lock, the dispatcher bumps the count and reads the running turn's
//! token; under the same lock the worker, taking a message off its queue, either finds it
//! stamped before the latest stop (and drops it) or registers its turn's token. So every
//! message is either dropped by a `/stop` sent after it, or its turn is registered before
//! the `/stop` looks, and is cancelled by it. Messages queued after the `/stop` carry the
//! new count and run.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use std::panic::AssertUnwindSafe;

use dashmap::DashMap;
use futures::FutureExt;
use switchboard_core::{
    ChatHub, InboundMessage, OutboundKind, OutboundMessage, SessionKey, Shutdown, ToolStatus,
    TurnEnd,
};
use switchboard_sessions::Session;
use tokio::sync::mpsc::error::TrySendError;
use tokio::sync::{Semaphore, mpsc};
use tokio_util::sync::CancellationToken;

use crate::agent::Agent;
use crate::command::{Command, HELP};
use crate::events::AgentEvent;

/// Replies of the dispatcher's own waiting to be published; past this many, more are
/// dropped (and logged) rather than making the dispatcher wait.
const REPLY_QUEUE: usize = 1024;

/// A reply of the dispatcher's own: where it goes and what it says.
type Reply = (InboundMessage, Vec<OutboundKind>);

/// A message in a worker's queue, stamped with the chat's stop count when it was queued.
/// Boxed: a queue allocates its slots 32 at a time, and a thousand idle workers should not
/// each hold 32 whole messages' worth of memory.
type Queued = Box<(u64, InboundMessage)>;

/// What the dispatcher and one worker share.
#[derive(Default)]
struct Control {
    /// The token of the turn that runs (or waits for a turn slot) now: set and cleared by
    /// the worker, cancelled by `/stop`.
    running: Option<CancellationToken>,
    /// `/stop`s so far; messages stamped with less are dropped.
    stops: u64,
}

/// Held only for a moment, never across an await.
type SharedControl = Arc<Mutex<Control>>;

fn control(shared: &SharedControl) -> MutexGuard<'_, Control> {
    shared.lock().unwrap_or_else(PoisonError::into_inner)
}

/// What the dispatcher keeps of a running worker.
struct WorkerHandle {
    /// Tells this worker apart from a successor under the same key.
    id: u64,
    /// The worker's queue; the worker owns the receiver and closes it when it exits.
    tx: mpsc::Sender<Queued>,
    /// The running turn and the stop count.
    control: SharedControl,
}

/// Routes inbound messages to per-session workers.
pub struct Dispatcher {
    agent: Arc<Agent>,
    hub: ChatHub,
    shutdown: Shutdown,
    /// Live workers by session. Senders are used only while the entry's guard is held,
    /// so a worker that removes itself (after checking its queue is empty) cannot miss a
    /// message.
    workers: Arc<DashMap<SessionKey, WorkerHandle>>,
    /// Permits for concurrent turns across all sessions; a worker holds one per turn.
    turn_slots: Arc<Semaphore>,
    next_id: AtomicU64,
}

impl Dispatcher {
    /// A dispatcher for the agent, reading from `hub` until intake stops.
    pub fn new(agent: Arc<Agent>, hub: ChatHub, shutdown: Shutdown) -> Self {
        let slots = agent.config.max_concurrent_turns.max(1);
        Self {
            agent,
            hub,
            shutdown,
            workers: Arc::new(DashMap::new()),
            turn_slots: Arc::new(Semaphore::new(slots)),
            next_id: AtomicU64::new(0),
        }
    }

    /// How many session workers are alive.
    pub fn active_sessions(&self) -> usize {
        self.workers.len()
    }

    /// Reads the hub until intake stops, then answers what is still queued with a
    /// "shutting down" error.
    pub async fn run(self: Arc<Self>) -> Result<(), switchboard_core::CoreError> {
        let mut inbound = self.hub.take_inbound()?;
        let intake = self.shutdown.intake().clone();
        let (replies, mut queued_replies) = mpsc::channel::<Reply>(REPLY_QUEUE);
        let route = async {
            loop {
                tokio::select! {
                    () = intake.cancelled() => break,
                    message = inbound.recv() => match message {
                        Some(message) => self.route(message, &replies),
                        None => break,
                    },
                }
            }
            inbound.close();
            while let Ok(message) = inbound.try_recv() {
                send_reply(&replies, message, shutting_down());
            }
            // The reply loop ends once it has sent what is queued.
            drop(replies);
        };
        let deliver = async {
            while let Some((to, kinds)) = queued_replies.recv().await {
                for kind in kinds {
                    reply(&self.hub, &to, kind).await;
                }
            }
        };
        tokio::join!(route, deliver);
        Ok(())
    }

    /// Hands a message to its session's worker without waiting.
    fn route(&self, message: InboundMessage, replies: &mpsc::Sender<Reply>) {
        let key = message.session_key();
        if Command::parse(&message.content) == Some(Command::Stop) {
            self.stop(&key, message, replies);
            return;
        }
        let queued = match self.workers.get(&key) {
            None => Box::new((0, message)),
            Some(worker) => {
                let stops = control(&worker.control).stops;
                match worker.tx.try_send(Box::new((stops, message))) {
                    Ok(()) => return,
                    // The worker exited after its last check; a new one starts afresh.
                    Err(TrySendError::Closed(mut queued)) => {
                        queued.0 = 0;
                        queued
                    }
                    Err(TrySendError::Full(queued)) => {
                        let limit = worker.tx.max_capacity();
                        drop(worker);
                        let text = format!(
                            "Too many messages are waiting in this chat ({limit}); this one \
                             was not processed. Wait for the answers, or send /stop."
                        );
                        tracing::warn!(session = %key, limit, "chat queue full; message refused");
                        send_reply(
                            replies,
                            queued.1,
                            vec![
                                OutboundKind::Error(text),
                                OutboundKind::Done(TurnEnd::NotATurn),
                            ],
                        );
                        return;
                    }
                }
            }
        };
        self.spawn_for(key, queued);
    }

    /// Starts a worker for `key` and queues its first message.
    fn spawn_for(&self, key: SessionKey, first: Queued) {
        let (tx, rx) = mpsc::channel(self.agent.config.max_queued_messages.max(1));
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let control = SharedControl::default();
        // A fresh queue has room for one message.
        let _ = tx.try_send(first);
        self.workers.insert(
            key.clone(),
            WorkerHandle {
                id,
                tx,
                control: control.clone(),
            },
        );
        let worker = Worker {
            id,
            key,
            agent: self.agent.clone(),
            hub: self.hub.clone(),
            shutdown: self.shutdown.clone(),
            workers: self.workers.clone(),
            turn_slots: self.turn_slots.clone(),
            control,
        };
        self.shutdown.tracker().spawn(worker.run(rx));
    }

    /// `/stop`: cancels the running turn (its worker replies "Stopped.") and drops what is
    /// queued behind it (the worker says how many).
    fn stop(&self, key: &SessionKey, message: InboundMessage, replies: &mpsc::Sender<Reply>) {
        let (running, queued) = match self.workers.get(key) {
            None => (None, 0),
            Some(worker) => {
                let mut control = control(&worker.control);
                control.stops += 1;
                let queued = worker.tx.max_capacity() - worker.tx.capacity();
                (control.running.clone(), queued)
            }
        };
        match running {
            Some(token) => token.cancel(),
            None if queued > 0 => {}
            None => send_reply(
                replies,
                message,
                vec![
                    OutboundKind::Message("Nothing to stop.".into()),
                    OutboundKind::Done(TurnEnd::NotATurn),
                ],
            ),
        }
    }
}

/// Queues a reply of the dispatcher's own without waiting; drops it if the queue is full.
fn send_reply(replies: &mpsc::Sender<Reply>, to: InboundMessage, kinds: Vec<OutboundKind>) {
    if let Err(TrySendError::Full((to, _)) | TrySendError::Closed((to, _))) =
        replies.try_send((to, kinds))
    {
        tracing::warn!(channel = %to.channel, chat = %to.chat_id,
            "too many replies waiting; one was dropped");
    }
}

struct Worker {
    id: u64,
    key: SessionKey,
    agent: Arc<Agent>,
    hub: ChatHub,
    shutdown: Shutdown,
    workers: Arc<DashMap<SessionKey, WorkerHandle>>,
    turn_slots: Arc<Semaphore>,
    control: SharedControl,
}

impl Worker {
    async fn run(self, mut rx: mpsc::Receiver<Queued>) {
        let mut session: Option<Session> = None;
        // Messages dropped by a `/stop` and not yet reported to the chat.
        let mut dropped = 0usize;
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
                    self.workers.remove_if(&self.key, |_, worker| worker.id == self.id);
                    self.agent.release_session(&self.key);
                    return;
                }
                () = tokio::time::sleep(self.agent.config.idle_timeout) => {
                    let removed = self
                        .workers
                        .remove_if(&self.key, |_, worker| worker.id == self.id && rx.is_empty());
                    if removed.is_some() {
                        tracing::debug!(session = %self.key, "idle session worker exits");
                        self.agent.release_session(&self.key);
                        return;
                    }
                    continue;
                }
            };
            let Some(queued) = message else {
                self.agent.release_session(&self.key);
                return;
            };
            let (stamp, message) = *queued;
            if !self.hub.is_accepting() {
                refuse_shutting_down(&self.hub, &message).await;
                continue;
            }
            let token = self.shutdown.turns().child_token();
            let fresh = {
                let mut control = control(&self.control);
                let fresh = stamp >= control.stops;
                if fresh && Command::parse(&message.content).is_none() {
                    control.running = Some(token.clone());
                }
                fresh
            };
            if !fresh {
                dropped += 1;
                if rx.is_empty() {
                    report_dropped(&self.hub, &message, std::mem::take(&mut dropped)).await;
                }
                continue;
            }
            if dropped > 0 {
                report_dropped(&self.hub, &message, std::mem::take(&mut dropped)).await;
            }
            let session_slot = &mut session;
            let session = match session_slot {
                Some(session) => session,
                None => match self.agent.load_session(&self.key) {
                    Ok(loaded) => session_slot.insert(loaded),
                    Err(err) => {
                        tracing::error!(session = %self.key, path = ?err.path(), error = %err,
                            "could not load session");
                        let text = format!("Could not read this chat's history: {err}");
                        reply(&self.hub, &message, OutboundKind::Error(text)).await;
                        reply(&self.hub, &message, OutboundKind::Done(TurnEnd::Failed)).await;
                        control(&self.control).running = None;
                        continue;
                    }
                },
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
            control(&self.control).running = None;
            if handled.is_err() {
                // A bug, not an input: say so in the chat, forget the in-memory session
                // (it is read back from disk, repaired, on the next message) and go on.
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
                    };
                    if let Err(err) = self.hub.publish_outbound(outbound).await {
                        tracing::warn!(session = %self.key, error = %err, "could not deliver a reply");
                    }
                }
                self.agent.release_session(&self.key);
                *session_slot = None;
            }
        }
    }

    async fn handle(
        &self,
        session: &mut Session,
        message: InboundMessage,
        cancel: CancellationToken,
    ) {
        match Command::parse(&message.content) {
            Some(Command::New) => {
                let text = match self.agent.reset_session(session) {
                    Ok(()) => "Started a new session.".to_owned(),
                    Err(err) => format!("Could not start a new session: {err}"),
                };
                reply(&self.hub, &message, OutboundKind::Message(text)).await;
            }
            Some(Command::Help) => {
                reply(&self.hub, &message, OutboundKind::Message(HELP.into())).await;
            }
            Some(Command::Status) => {
                let usage = session.usage();
                let text = format!(
                    "Session {}: {} messages in history (limit {}); {} tokens in, {} out; \
                     model {}.",
                    session.key(),
                    session.len(),
                    self.agent.config.history_limit,
                    usage.input_tokens,
                    usage.output_tokens,
                    self.agent.llm.model(),
                );
                reply(&self.hub, &message, OutboundKind::Message(text)).await;
            }
            // A `/stop` that was queued behind a turn arrives after that turn ended.
            Some(Command::Stop) => {
                reply(
                    &self.hub,
                    &message,
                    OutboundKind::Message("Nothing to stop.".into()),
                )
                .await;
            }
            None => return self.turn(session, message, cancel).await,
        }
        reply(&self.hub, &message, OutboundKind::Done(TurnEnd::NotATurn)).await;
    }

    async fn turn(
        &self,
        session: &mut Session,
        message: InboundMessage,
        cancel: CancellationToken,
    ) {
        // A turn waiting for a slot can be stopped too (it has not started: nothing to save).
        let permit = match self.turn_slots.try_acquire() {
            Ok(permit) => Some(permit),
            Err(_) => {
                let max = self.agent.config.max_concurrent_turns;
                let text = format!(
                    "Waiting for a free slot: {max} answers are being written at once \
                     (agent.max_concurrent_turns)."
                );
                reply(&self.hub, &message, OutboundKind::Status(text)).await;
                tokio::select! {
                    biased;
                    () = cancel.cancelled() => None,
                    permit = self.turn_slots.acquire() => permit.ok(),
                }
            }
        };
        let Some(_permit) = permit else {
            reply(
                &self.hub,
                &message,
                OutboundKind::Message(crate::turn::STOPPED_REPLY.into()),
            )
            .await;
            reply(&self.hub, &message, OutboundKind::Done(TurnEnd::Cancelled)).await;
            return;
        };

        let (events, mut rx) = mpsc::unbounded_channel();
        let forward = async {
            let mut next = rx.recv().await;
            while let Some(event) = next.take() {
                let event = match event {
                    // Text that arrived while the last frame was being delivered goes out
                    // as one delta: fewer frames when the model is faster than the socket.
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
                for kind in outbound_of(event) {
                    reply(&self.hub, &message, kind).await;
                }
                if next.is_none() {
                    next = rx.recv().await;
                }
            }
        };
        let run = async {
            self.agent
                .run_turn(session, message.content.clone(), &cancel, &events)
                .await;
            drop(events);
        };
        tokio::join!(run, forward);
    }
}

/// The outbound messages an event becomes.
fn outbound_of(event: AgentEvent) -> Vec<OutboundKind> {
    match event {
        AgentEvent::Started => vec![OutboundKind::TurnStarted],
        AgentEvent::TextDelta(text) => vec![OutboundKind::Delta(text)],
        AgentEvent::TextReset => vec![OutboundKind::DraftReset],
        AgentEvent::Status(text) => vec![OutboundKind::Status(text)],
        AgentEvent::Notice(text) => vec![OutboundKind::Notice(text)],
        AgentEvent::ToolStarted { id, name } => vec![OutboundKind::Tool {
            id,
            name,
            status: ToolStatus::Started,
        }],
        AgentEvent::ToolFinished { id, name, ok } => vec![OutboundKind::Tool {
            id,
            name,
            status: if ok {
                ToolStatus::Finished
            } else {
                ToolStatus::Failed
            },
        }],
        AgentEvent::Finished { reply, end, .. } => {
            vec![OutboundKind::Message(reply), OutboundKind::Done(end)]
        }
        AgentEvent::Failed { message } => vec![
            OutboundKind::Error(message),
            OutboundKind::Done(TurnEnd::Failed),
        ],
    }
}

async fn reply(hub: &ChatHub, to: &InboundMessage, kind: OutboundKind) {
    if let Err(err) = hub
        .publish_outbound(OutboundMessage::reply_to(to, kind))
        .await
    {
        tracing::warn!(channel = %to.channel, chat = %to.chat_id, error = %err,
            "could not deliver a reply");
    }
}

/// The replies to a message that arrived while the daemon stops.
fn shutting_down() -> Vec<OutboundKind> {
    let text = "switchboard is shutting down; this message was not processed — send it again \
                in a moment.";
    vec![
        OutboundKind::Error(text.into()),
        OutboundKind::Done(TurnEnd::NotATurn),
    ]
}

async fn refuse_shutting_down(hub: &ChatHub, message: &InboundMessage) {
    for kind in shutting_down() {
        reply(hub, message, kind).await;
    }
}

/// Tells the chat how many of its messages a `/stop` dropped.
async fn report_dropped(hub: &ChatHub, message: &InboundMessage, dropped: usize) {
    let text = if dropped == 1 {
        "Dropped 1 message that was waiting when you sent /stop.".to_owned()
    } else {
        format!("Dropped {dropped} messages that were waiting when you sent /stop.")
    };
    reply(hub, message, OutboundKind::Message(text)).await;
    reply(hub, message, OutboundKind::Done(TurnEnd::NotATurn)).await;
}
