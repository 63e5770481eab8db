//! [`Dispatcher`]: routes inbound messages to one worker per session.
//!
//! The dispatcher is one task reading the hub's inbound queue. A worker is a task owning a
//! session: it answers that session's messages in order, one turn at a time, and exits
//! after `idle_timeout` without messages (its session leaves memory). `/stop` bypasses the
//! queue: the dispatcher cancels the worker's running turn directly.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use std::panic::AssertUnwindSafe;

use dashmap::DashMap;
use futures::FutureExt;
use switchboard_core::{
    ChatHub, InboundMessage, OutboundKind, OutboundMessage, SessionKey, Shutdown, ToolStatus,
};
use switchboard_sessions::Session;
use tokio::sync::mpsc::error::TrySendError;
use tokio::sync::{Semaphore, mpsc};
use tokio_util::sync::CancellationToken;

use crate::agent::Agent;
use crate::command::{Command, HELP};
use crate::events::AgentEvent;

/// Messages a worker may have queued before the dispatcher waits for it.
const WORKER_QUEUE: usize = 32;

/// A message in a worker's queue. Boxed: a queue allocates its slots 32 at a time, and a
/// thousand idle workers should not each hold 32 whole messages' worth of memory.
type Queued = Box<InboundMessage>;

/// What the dispatcher keeps of a running worker.
struct WorkerHandle {
    /// Tells this worker apart from a successor under the same key.
    id: u64,
    /// The worker's queue; the worker owns the receiver and closes it when it exits.
    tx: mpsc::Sender<Queued>,
    /// The token of the turn running now; set and cleared by the worker, cancelled by
    /// `/stop`. Held only for a moment, never across an await.
    running: Arc<Mutex<Option<CancellationToken>>>,
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
        loop {
            tokio::select! {
                () = intake.cancelled() => break,
                message = inbound.recv() => match message {
                    Some(message) => self.route(message).await,
                    None => break,
                },
            }
        }
        inbound.close();
        while let Ok(message) = inbound.try_recv() {
            refuse_shutting_down(&self.hub, &message).await;
        }
        Ok(())
    }

    async fn route(&self, message: InboundMessage) {
        let key = message.session_key();
        let message = Box::new(message);
        if Command::parse(&message.content) == Some(Command::Stop) {
            self.stop(&key, &message).await;
            return;
        }
        let message = match self.workers.get(&key) {
            None => message,
            Some(worker) => match worker.tx.try_send(message) {
                Ok(()) => return,
                // The worker exited after its last check; start a new one.
                Err(TrySendError::Closed(message)) => message,
                Err(TrySendError::Full(message)) => {
                    // The worker is busy: wait for room outside the map's guard. A worker
                    // with a full queue is not idle, so it cannot exit while we wait.
                    let tx = worker.tx.clone();
                    drop(worker);
                    match tx.send(message).await {
                        Ok(()) => return,
                        Err(mpsc::error::SendError(message)) => message,
                    }
                }
            },
        };
        self.spawn_for(key, message);
    }

    /// Starts a worker for `key` and queues its first message.
    fn spawn_for(&self, key: SessionKey, first: Queued) {
        let (tx, rx) = mpsc::channel(WORKER_QUEUE);
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let running = Arc::new(Mutex::new(None));
        // A fresh queue has room for one message.
        let _ = tx.try_send(first);
        self.workers.insert(
            key.clone(),
            WorkerHandle {
                id,
                tx,
                running: running.clone(),
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
            running,
        };
        self.shutdown.tracker().spawn(worker.run(rx));
    }

    async fn stop(&self, key: &SessionKey, message: &InboundMessage) {
        let token = self.workers.get(key).and_then(|worker| {
            worker
                .running
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .clone()
        });
        match token {
            // The worker replies for the stopped turn.
            Some(token) => token.cancel(),
            None => {
                reply(
                    &self.hub,
                    message,
                    OutboundKind::Message("Nothing to stop.".into()),
                )
                .await;
                reply(&self.hub, message, OutboundKind::Done).await;
            }
        }
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
    running: Arc<Mutex<Option<CancellationToken>>>,
}

impl Worker {
    async fn run(self, mut rx: mpsc::Receiver<Queued>) {
        let mut session: Option<Session> = None;
        loop {
            let message = tokio::select! {
                biased;
                message = rx.recv() => message,
                () = self.shutdown.intake().cancelled() => {
                    // Intake stopped and no turn runs: answer what is queued, then exit.
                    rx.close();
                    while let Ok(message) = rx.try_recv() {
                        refuse_shutting_down(&self.hub, &message).await;
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
            let Some(message) = message else {
                self.agent.release_session(&self.key);
                return;
            };
            if !self.hub.is_accepting() {
                refuse_shutting_down(&self.hub, &message).await;
                continue;
            }
            let session_slot = &mut session;
            let session = match session_slot {
                Some(session) => session,
                None => match self.agent.load_session(&self.key) {
                    Ok(loaded) => session_slot.insert(loaded),
                    Err(err) => {
                        tracing::error!(session = %self.key, error = %err, "could not load session");
                        let text = format!("Could not read this chat's history: {err}");
                        reply(&self.hub, &message, OutboundKind::Error(text)).await;
                        reply(&self.hub, &message, OutboundKind::Done).await;
                        continue;
                    }
                },
            };
            // Only where the reply goes is kept, for the rare panic below.
            let (channel, chat_id) = (message.channel.clone(), message.chat_id.clone());
            let handled = AssertUnwindSafe(self.handle(session, *message))
                .catch_unwind()
                .await;
            if handled.is_err() {
                // A bug, not an input: say so in the chat, forget the in-memory session
                // (it is read back from disk, repaired, on the next message) and go on.
                tracing::error!(session = %self.key, "a turn panicked");
                let text = "Something went wrong inside switchboard while answering; the \
                            conversation is kept. Please try again.";
                for kind in [OutboundKind::Error(text.into()), OutboundKind::Done] {
                    let outbound = OutboundMessage {
                        channel: channel.clone(),
                        chat_id: chat_id.clone(),
                        kind,
                    };
                    if let Err(err) = self.hub.publish_outbound(outbound).await {
                        tracing::warn!(session = %self.key, error = %err, "could not deliver a reply");
                    }
                }
                *self.running.lock().unwrap_or_else(PoisonError::into_inner) = None;
                self.agent.release_session(&self.key);
                *session_slot = None;
            }
        }
    }

    async fn handle(&self, session: &mut Session, message: InboundMessage) {
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
            None => return self.turn(session, message).await,
        }
        reply(&self.hub, &message, OutboundKind::Done).await;
    }

    async fn turn(&self, session: &mut Session, message: InboundMessage) {
        let Ok(_permit) = self.turn_slots.acquire().await else {
            return;
        };
        let cancel = self.shutdown.turns().child_token();
        *self.running.lock().unwrap_or_else(PoisonError::into_inner) = Some(cancel.clone());

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

        *self.running.lock().unwrap_or_else(PoisonError::into_inner) = None;
    }
}

/// The outbound messages an event becomes.
fn outbound_of(event: AgentEvent) -> Vec<OutboundKind> {
    match event {
        AgentEvent::Started => Vec::new(),
        AgentEvent::TextDelta(text) => vec![OutboundKind::Delta(text)],
        AgentEvent::ToolStarted { name, .. } => vec![OutboundKind::Tool {
            name,
            status: ToolStatus::Started,
        }],
        AgentEvent::ToolFinished { name, ok, .. } => vec![OutboundKind::Tool {
            name,
            status: if ok {
                ToolStatus::Finished
            } else {
                ToolStatus::Failed
            },
        }],
        AgentEvent::Finished { reply, .. } => {
            vec![OutboundKind::Message(reply), OutboundKind::Done]
        }
        AgentEvent::Failed { message } => vec![OutboundKind::Error(message), OutboundKind::Done],
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

async fn refuse_shutting_down(hub: &ChatHub, message: &InboundMessage) {
    let text = "switchboard is shutting down; this message was not processed — send it again \
                in a moment.";
    reply(hub, message, OutboundKind::Error(text.into())).await;
    reply(hub, message, OutboundKind::Done).await;
}
