//! [`Spawner`]: the children running for each parent session, and the internal channel
//! `spawn` their turns answer through.
//!
//! # Why a family's answers enter the parent once, and never after a `/stop`
//! Children are grouped by parent (agent and session) into a family. Every change — a child
//! started, a child's answer or end, a `/stop` — happens under one lock over all families.
//! A child's end removes it from the running ones and, unless someone waits for it, adds its
//! answer to the family's results; the end that leaves no un-waited child running takes all
//! the results at once, in the same step, and hands them over as one message. A `/stop`
//! cancels the family's token (every child's turn carries a child of it), forgets the
//! results and the running children — so their ends, when they come, find nothing and hand
//! over nothing — and gives the family a fresh token for children started after it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use switchboard_core::{
    AgentName, Bus, ChannelName, ChatId, CoreError, InboundMessage, Internal, InternalChannel,
    LaneOptions, Origin, OutboundKind, OutboundMessage, SenderId, SessionKey, TurnEnd,
};
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;

use super::tree::{TreeLimits, Trees};

/// The internal channel children's turns run on.
pub const CHANNEL: &str = "spawn";

/// The most of one child's answer that goes back to its parent.
pub const MAX_ANSWER_BYTES: usize = 32 * 1024;

/// The children of every session, and the `spawn` channel. Cloning shares it.
#[derive(Clone)]
pub struct Spawner {
    inner: Arc<Inner>,
}

struct Inner {
    hub: Arc<dyn Bus>,
    /// The daemon's turns' token: every family's token is a child of it, so shutdown stops
    /// children like any turn.
    turns: CancellationToken,
    /// Set once the `spawn` channel is registered on the hub (at the first child: a daemon
    /// whose agents never spawn has none).
    registered: OnceLock<()>,
    state: Mutex<State>,
    /// Numbers the turns that begin a chat's count of sub-agents (see `tree.rs`).
    turns_begun: std::sync::atomic::AtomicU64,
}

/// A session that started children: its agent and its key.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Parent {
    agent: AgentName,
    session: SessionKey,
}

#[derive(Default)]
struct State {
    families: HashMap<Parent, Family>,
    /// Running children by their chat id.
    children: HashMap<ChatId, Child>,
    /// Each chat's sub-agents, at every depth, counted against its limits.
    trees: Trees,
}

struct Family {
    /// Cancelled by the parent's `/stop`; every child's turn carries a child of it.
    token: CancellationToken,
    /// The number the next child is given (from 1).
    next: u64,
    /// Answers of children nobody waits for, not yet handed to the parent.
    results: Vec<Found>,
}

struct Child {
    parent: Parent,
    /// The chat it works for.
    chat: SessionKey,
    label: String,
    started: Instant,
    /// The waiting tool call, when the parent waits for this child.
    waiter: Option<oneshot::Sender<String>>,
    /// Its answer (or error) once its turn gave one.
    answer: Option<String>,
}

/// A child's answer, for its parent.
struct Found {
    child: ChatId,
    label: String,
    text: String,
}

/// What a parent asks for.
pub(crate) struct Request {
    pub agent: AgentName,
    pub parent: SessionKey,
    /// The chat the parent works for: its own session's, or the chat its parent works for.
    pub chat: SessionKey,
    /// The parent's turn, when it begins the chat's count (see `tree.rs`).
    pub turn: Option<u64>,
    pub task: String,
    pub label: String,
    pub wait: bool,
    pub limits: TreeLimits,
}

/// A child that was started.
pub(crate) struct Started {
    /// Its chat id (`<parent session>~<n>`).
    pub child: ChatId,
    /// Its answer, when the parent waits for it.
    pub answer: Option<oneshot::Receiver<String>>,
    /// Cancels its turn.
    pub token: CancellationToken,
}

impl Spawner {
    /// The children of the daemon whose hub is `hub` and whose turns `turns` cancels.
    pub fn new(hub: Arc<dyn Bus>, turns: CancellationToken) -> Self {
        Self {
            inner: Arc::new(Inner {
                hub,
                turns,
                registered: OnceLock::new(),
                state: Mutex::new(State::default()),
                turns_begun: std::sync::atomic::AtomicU64::new(1),
            }),
        }
    }

    /// A number for a turn that begins its chat's count of sub-agents.
    pub fn begin_turn(&self) -> u64 {
        self.inner
            .turns_begun
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.inner
            .state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Starts a child on `request.task`: its message goes on the hub; `taken` says whether a
    /// session already holds history (a child number used before a restart is skipped).
    pub(crate) async fn start<F>(
        &self,
        request: Request,
        taken: impl Fn(SessionKey) -> F,
    ) -> Result<Started, String>
    where
        F: std::future::Future<Output = bool>,
    {
        self.register();
        let parent = Parent {
            agent: request.agent.clone(),
            session: request.parent.clone(),
        };
        // The child's chat: the parent's key, or for a child's child its parent's chat id.
        let base = match request.parent.split() {
            Some((channel, chat)) if channel.as_str() == CHANNEL => chat.to_string(),
            _ => request.parent.to_string(),
        };
        // Admitted before it is numbered: a refused start uses up no number.
        self.state()
            .trees
            .admit(&request.chat, request.turn, request.limits)?;
        let (waiter, answer) = if request.wait {
            let (tx, rx) = oneshot::channel();
            (Some(tx), Some(rx))
        } else {
            (None, None)
        };
        let child = self.free_child(&parent, &base, taken).await;
        let token = {
            let mut state = self.state();
            let token = family_of(&mut state, &self.inner.turns, &parent)
                .token
                .child_token();
            state.children.insert(
                child.clone(),
                Child {
                    parent: parent.clone(),
                    chat: request.chat.clone(),
                    label: request.label,
                    started: Instant::now(),
                    waiter,
                    answer: None,
                },
            );
            token
        };
        let mut message = InboundMessage::text(
            ChannelName::from(CHANNEL),
            child.clone(),
            SenderId::from(format!("agent:{}", request.parent).as_str()),
            request.task,
        );
        message.origin = Origin::Delegated {
            parent: request.parent.to_string(),
        };
        message.agent = Some(request.agent);
        message.on_behalf_of = Some(request.chat.clone());
        message.cancel = Some(token.clone());
        if let Err(err) = self.inner.hub.publish_inbound(message).await {
            let mut state = self.state();
            state.children.remove(&child);
            state.trees.ended(&request.chat);
            return Err(format!("the sub-agent could not be started: {err}"));
        }
        tracing::info!(parent = %parent.session, agent = %parent.agent, child = %child,
            wait = answer.is_some(), "a sub-agent started");
        Ok(Started {
            child,
            answer,
            token,
        })
    }

    /// The next child number of `parent` whose session holds no history: a number used
    /// before a restart has its history still. Each number is handed out once, so two calls
    /// at once never get the same one.
    async fn free_child<F>(
        &self,
        parent: &Parent,
        base: &str,
        taken: impl Fn(SessionKey) -> F,
    ) -> ChatId
    where
        F: std::future::Future<Output = bool>,
    {
        let mut child = self.next_child(parent, base);
        for _ in 0..10_000 {
            if !taken(SessionKey::of(&ChannelName::from(CHANNEL), &child)).await {
                break;
            }
            child = self.next_child(parent, base);
        }
        child
    }

    /// `/stop` in `session` of `agent`: cancels its children and forgets their answers;
    /// returns how many were running.
    pub fn stop(&self, agent: &AgentName, session: &SessionKey) -> usize {
        let parent = Parent {
            agent: agent.clone(),
            session: session.clone(),
        };
        let mut state = self.state();
        let Some(family) = state.families.get_mut(&parent) else {
            return 0;
        };
        family.token.cancel();
        family.token = self.inner.turns.child_token();
        family.results.clear();
        let stopped: Vec<SessionKey> = state
            .children
            .extract_if(|_, child| child.parent == parent)
            .map(|(_, child)| child.chat)
            .collect();
        for chat in &stopped {
            state.trees.ended(chat);
        }
        state.forget_if_idle(&parent);
        stopped.len()
    }

    /// The children of `session` of `agent` running now: chat id, label, how long.
    pub fn running(
        &self,
        agent: &AgentName,
        session: &SessionKey,
    ) -> Vec<(ChatId, String, Duration)> {
        let state = self.state();
        let mut running: Vec<_> = state
            .children
            .iter()
            .filter(|(_, child)| child.parent.agent == *agent && child.parent.session == *session)
            .map(|(id, child)| (id.clone(), child.label.clone(), child.started.elapsed()))
            .collect();
        running.sort_by_key(|child| std::cmp::Reverse(child.2));
        running
    }

    /// Registers the `spawn` channel on the hub, once.
    /// The next chat id for a child of `parent` (its family made on first use).
    fn next_child(&self, parent: &Parent, base: &str) -> ChatId {
        let mut state = self.state();
        let family = family_of(&mut state, &self.inner.turns, parent);
        let child = ChatId::from(format!("{base}~{}", family.next));
        family.next += 1;
        child
    }

    fn register(&self) {
        self.inner.registered.get_or_init(|| {
            let channel = Internal(Children(Arc::downgrade(&self.inner)));
            self.inner
                .hub
                .register_channel(Arc::new(channel), LaneOptions::default());
        });
    }

    /// A child's turn said `kind`: its answer is kept, and its end hands it over.
    async fn take(&self, child: &ChatId, kind: OutboundKind) {
        let handed = {
            let mut state = self.state();
            let Some(running) = state.children.get_mut(child) else {
                return;
            };
            match kind {
                OutboundKind::Message(text) => {
                    running.answer = Some(text);
                    return;
                }
                OutboundKind::Error(text) => {
                    running.answer = Some(format!("(the sub-agent failed) {text}"));
                    return;
                }
                OutboundKind::Done(end) => end,
                _ => return,
            }
        };
        let Some(delivery) = self.end(child, handed) else {
            return;
        };
        if let Err(err) = self.inner.hub.publish_inbound(delivery).await {
            tracing::warn!(error = %err, "sub-agents' results could not be handed to their parent");
        }
    }

    /// Ends a child; returns the message that hands its family's results to the parent when
    /// it was the last of them running.
    fn end(&self, child: &ChatId, end: TurnEnd) -> Option<InboundMessage> {
        let mut state = self.state();
        let ended = state.children.remove(child)?;
        state.trees.ended(&ended.chat);
        let text = match (ended.answer, end) {
            (_, TurnEnd::Cancelled) => "(the sub-agent was stopped)".to_owned(),
            (Some(answer), _) => answer,
            (None, end) => format!("(the sub-agent ended without an answer: {})", end.as_str()),
        };
        let text = cut(text);
        tracing::info!(child = %child, parent = %ended.parent.session, end = end.as_str(),
            took_ms = ended.started.elapsed().as_millis() as u64, "a sub-agent ended");
        let parent = ended.parent;
        if let Some(waiter) = ended.waiter {
            let _ = waiter.send(text);
            state.forget_if_idle(&parent);
            return None;
        }
        let others = state
            .children
            .values()
            .any(|other| other.parent == parent && other.waiter.is_none());
        let family = state.families.get_mut(&parent)?;
        family.results.push(Found {
            child: child.clone(),
            label: ended.label,
            text,
        });
        if others {
            return None;
        }
        let results = std::mem::take(&mut family.results);
        state.forget_if_idle(&parent);
        drop(state);
        hand_over(&parent, &ended.chat, results)
    }
}

impl State {
    /// Forgets a family with nothing running and nothing to hand over, so the families kept
    /// are those of chats whose sub-agents run (a later child numbers on past the sessions
    /// that hold history).
    fn forget_if_idle(&mut self, parent: &Parent) {
        let idle = !self.children.values().any(|child| child.parent == *parent)
            && self
                .families
                .get(parent)
                .is_some_and(|family| family.results.is_empty());
        if idle {
            self.families.remove(parent);
        }
    }
}

/// A child's answer cut to what goes back to its parent.
fn cut(mut text: String) -> String {
    if text.len() > MAX_ANSWER_BYTES {
        let mut at = MAX_ANSWER_BYTES;
        while !text.is_char_boundary(at) {
            at -= 1;
        }
        text.truncate(at);
        text.push_str("\n[… cut: the sub-agent's answer was longer]");
    }
    text
}

/// The message that gives `results` to the parent session, which works for `works_for`.
fn hand_over(
    parent: &Parent,
    works_for: &SessionKey,
    results: Vec<Found>,
) -> Option<InboundMessage> {
    let (channel, chat) = parent.session.split()?;
    let children: Vec<String> = results
        .iter()
        .map(|found| found.child.to_string())
        .collect();
    let text = results
        .iter()
        .map(|found| {
            format!(
                "Sub-agent {} (\"{}\"):\n{}",
                found.child, found.label, found.text
            )
        })
        .collect::<Vec<_>>()
        .join("\n\n");
    let mut message = InboundMessage::text(channel, chat, SenderId::from("agent:spawn"), text);
    message.origin = Origin::SubAgents { children };
    message.agent = Some(parent.agent.clone());
    message.on_behalf_of = (*works_for != parent.session).then(|| works_for.clone());
    Some(message)
}

/// The `spawn` channel: children's turns answer through it, and it hands their answers to
/// their parents.
struct Children(std::sync::Weak<Inner>);

#[async_trait]
impl InternalChannel for Children {
    fn name(&self) -> ChannelName {
        ChannelName::from(CHANNEL)
    }

    async fn send(&self, message: OutboundMessage) -> Result<(), CoreError> {
        if let Some(inner) = self.0.upgrade() {
            Spawner { inner }.take(&message.chat_id, message.kind).await;
        }
        Ok(())
    }
}

/// The family of `parent`'s children, made on first use.
fn family_of<'s>(
    state: &'s mut State,
    turns: &CancellationToken,
    parent: &Parent,
) -> &'s mut Family {
    state
        .families
        .entry(parent.clone())
        .or_insert_with(|| Family {
            token: turns.child_token(),
            next: 1,
            results: Vec::new(),
        })
}

#[cfg(test)]
#[path = "spawner_tests.rs"]
mod tests;
