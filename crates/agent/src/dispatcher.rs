//! [`Dispatcher`]: routes inbound messages to one worker per session.
//!
//! The dispatcher is one task reading the hub's inbound queue, and it never waits on one
//! session: a message goes into its worker's bounded queue with `try_send`; a chat whose
//! queue is full gets "too many messages waiting" for that message instead of holding up
//! every other chat. The dispatcher's own replies go through a queue of their own, drained
//! beside the routing loop, so they keep their order and a busy channel delays only them.
//!
//! A worker (`worker.rs`) is a task owning a session: it answers that session's messages
//! in order, one turn at a time, and exits after `idle_timeout` without messages (its
//! session leaves memory). `/stop` bypasses the queue: the dispatcher cancels the worker's
//! running turn and drops the messages queued behind it; the `/stop` itself is queued
//! behind them, so its answer (what it dropped, its `done`) follows the stopped turn's.
//!
//! A turn that waits on the person (an approval, a question) leaves a slot in the control
//! the dispatcher shares with its worker; the chat's next fitting message goes into the
//! slot instead of the queue — the turn holds the worker, so a queued answer would never
//! be read. `ask.rs` says why such a message is never lost between the two.
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

use dashmap::DashMap;
use switchboard_core::{
    AgentName, Bus, Fate, InboundMessage, MessageId, OutboundKind, SessionKey, Shutdown, TurnEnd,
};
use tokio::sync::mpsc;
use tokio::sync::mpsc::error::TrySendError;
use tokio_util::sync::CancellationToken;

use crate::agents::Agents;
use crate::ask::{self, Waiting};
use crate::command::{Command, command_of};
use crate::replies::{reply, shutting_down};
use crate::worker::Worker;

/// Replies of the dispatcher's own waiting to be published; past this many, more are
/// dropped (and logged) rather than making the dispatcher wait.
const REPLY_QUEUE: usize = 1024;

/// A reply of the dispatcher's own: where it goes and what it says.
type Reply = (InboundMessage, Vec<OutboundKind>);

/// A message in a worker's queue, stamped with the chat's stop count when it was queued.
/// Boxed: a queue allocates its slots 32 at a time, and a thousand idle workers should not
/// each hold 32 whole messages' worth of memory.
pub(crate) type Queued = Box<(u64, InboundMessage)>;

/// What the dispatcher and one worker share.
#[derive(Default)]
pub(crate) struct Control {
    /// The token of the turn that runs (or waits for a turn slot) now: set and cleared by
    /// the worker, cancelled by `/stop`.
    pub(crate) running: Option<CancellationToken>,
    /// `/stop`s so far; messages stamped with less are dropped.
    pub(crate) stops: u64,
    /// A turn waiting on the person: the chat's next fitting message is its answer
    /// (see `ask.rs`).
    pub(crate) waiting: Option<Waiting>,
    /// The ids of the last messages routed to this worker (at most [`ROUTED_IDS`]): one
    /// that comes again (a client resending what it was not sure went out) is never taken
    /// as an answer — it is queued, and its worker finds it handled already.
    pub(crate) routed: std::collections::VecDeque<MessageId>,
}

/// How many ids of routed messages a worker's control remembers: more than its queue holds.
pub(crate) const ROUTED_IDS: usize = 128;

impl Control {
    /// Notes the id of a message routed to the worker; whether it was routed before.
    pub(crate) fn routed_before(&mut self, message: &InboundMessage) -> bool {
        let Some(id) = &message.id else {
            return false;
        };
        if self.routed.contains(id) {
            return true;
        }
        if self.routed.len() == ROUTED_IDS {
            self.routed.pop_front();
        }
        self.routed.push_back(id.clone());
        false
    }
}

/// Held only for a moment, never across an await.
pub(crate) type SharedControl = Arc<Mutex<Control>>;

pub(crate) fn control(shared: &SharedControl) -> MutexGuard<'_, Control> {
    shared.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Whose worker a message goes to: a session of an agent. Two agents bound to one chat
/// (by sender) have a session each.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Route {
    pub(crate) agent: AgentName,
    pub(crate) session: SessionKey,
}

/// What the dispatcher keeps of a running worker.
pub(crate) struct WorkerHandle {
    /// Tells this worker apart from a successor under the same key.
    pub(crate) id: u64,
    /// The worker's queue; the worker owns the receiver and closes it when it exits.
    tx: mpsc::Sender<Queued>,
    /// The running turn and the stop count.
    control: SharedControl,
}

/// Routes inbound messages to per-session workers.
pub struct Dispatcher {
    /// Which agent answers a message (see [`Agents`]).
    agents: Agents,
    hub: Arc<dyn Bus>,
    shutdown: Shutdown,
    /// Live workers by agent and session. Senders are used only while the entry's guard is
    /// held, so a worker that removes itself (after checking its queue is empty) cannot
    /// miss a message.
    workers: Arc<DashMap<Route, WorkerHandle>>,
    next_id: AtomicU64,
}

impl Dispatcher {
    /// A dispatcher for the agents (or one agent), reading from `hub` until intake stops.
    pub fn new(agents: impl Into<Agents>, hub: Arc<dyn Bus>, shutdown: Shutdown) -> Self {
        Self {
            agents: agents.into(),
            hub,
            shutdown,
            workers: Arc::new(DashMap::new()),
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
                if let Some(kinds) = shutting_down(&message) {
                    send_reply(&replies, message, kinds);
                }
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

    /// Hands a message to its session's worker without waiting: into its waiting turn
    /// when the turn waits on the person and the message answers it, else into its queue.
    fn route(&self, mut message: InboundMessage, replies: &mpsc::Sender<Reply>) {
        let key = Route {
            agent: self.agents.for_message(&message).name().clone(),
            session: message.session_key(),
        };
        if command_of(&message) == Some(Command::Stop) {
            self.stop(&key, message, replies);
            return;
        }
        if let Some(worker) = self.workers.get(&key) {
            match ask::offer(&worker.control, message) {
                None => return,
                Some(back) => message = back,
            }
        }
        let queued = match self.workers.get(&key) {
            None => Box::new((0, message)),
            Some(worker) => {
                let stops = control(&worker.control).stops;
                // The queue's last place is kept for a `/stop`: it must queue behind what it
                // drops even in a flooded chat.
                let sent = if worker.tx.capacity() <= 1 {
                    Err(TrySendError::Full(Box::new((stops, message))))
                } else {
                    worker.tx.try_send(Box::new((stops, message)))
                };
                match sent {
                    Ok(()) => return,
                    // The worker exited after its last check; a new one starts afresh.
                    Err(TrySendError::Closed(mut queued)) => {
                        queued.0 = 0;
                        queued
                    }
                    Err(TrySendError::Full(queued)) => {
                        let limit = worker.tx.max_capacity() - 1;
                        drop(worker);
                        let text = format!(
                            "Too many messages are waiting in this chat ({limit}); this one \
                             was not processed. Wait for the answers, or send /stop."
                        );
                        tracing::warn!(session = %key.session, agent = %key.agent, limit,
                            "chat queue full; message refused");
                        queued.1.settle(Fate::Dropped);
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
    fn spawn_for(&self, key: Route, first: Queued) {
        let Some(agent) = self.agents.get(&key.agent).cloned() else {
            return;
        };
        // One place more than the messages that may wait: the last is a `/stop`'s.
        let (tx, rx) = mpsc::channel(agent.config.max_queued_messages.max(1) + 1);
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let control = SharedControl::default();
        self::control(&control).routed_before(&first.1);
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
            key: key.session,
            route: key.agent,
            agent,
            hub: self.hub.clone(),
            shutdown: self.shutdown.clone(),
            workers: self.workers.clone(),
            control,
        };
        self.shutdown.tracker().spawn(worker.run(rx));
    }

    /// `/stop`: cancels the running turn (it ends saying `Stopped.`), drops what is queued
    /// behind it, and queues the `/stop` itself behind them, so that its worker answers it
    /// — how many messages it dropped, and its `done` — after the turn's `done`. With
    /// nothing to stop: `Nothing to stop.` at once.
    fn stop(&self, key: &Route, message: InboundMessage, replies: &mpsc::Sender<Reply>) {
        // The sub-agents the chat started stop with it (their turns carry its family's token).
        let children = self
            .agents
            .get(&key.agent)
            .map_or(0, |agent| agent.stop_children(&key.session));
        let message = match self.workers.get(key) {
            None => message,
            Some(worker) => {
                let (running, queued, stamp) = {
                    let mut control = control(&worker.control);
                    control.stops += 1;
                    let queued = worker.tx.max_capacity() - worker.tx.capacity();
                    (control.running.clone(), queued, control.stops)
                };
                if let Some(token) = &running {
                    token.cancel();
                }
                if running.is_none() && queued == 0 {
                    message
                } else {
                    match worker.tx.try_send(Box::new((stamp, message))) {
                        Ok(()) => return,
                        // No room behind them (or the worker just left): the `/stop` is
                        // answered now; its worker reports what it drops.
                        Err(TrySendError::Full(queued) | TrySendError::Closed(queued)) => {
                            let (_, message) = *queued;
                            message.settle(Fate::Handled);
                            send_reply(
                                replies,
                                message,
                                vec![OutboundKind::Done(TurnEnd::NotATurn)],
                            );
                            return;
                        }
                    }
                }
            }
        };
        message.settle(Fate::Handled);
        let text = match children {
            0 => "Nothing to stop.".to_owned(),
            1 => "Stopped 1 sub-agent.".to_owned(),
            n => format!("Stopped {n} sub-agents."),
        };
        send_reply(
            replies,
            message,
            vec![
                OutboundKind::Message(text),
                OutboundKind::Done(TurnEnd::NotATurn),
            ],
        );
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
