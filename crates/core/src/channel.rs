//! The [`Channel`] trait: what every platform adapter implements.

use async_trait::async_trait;
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

use crate::bus::Bus;
use crate::conversation::ChatMessage;
use crate::error::CoreError;
use crate::ids::{ChannelName, ChatId};
use crate::message::OutboundMessage;

/// What a channel's `run` gets: the hub to publish inbound messages on, and the tokens that
/// say the daemon is stopping.
#[derive(Clone)]
pub struct ChannelContext {
    /// Where inbound messages go.
    pub hub: Arc<dyn Bus>,
    /// Cancelled when the daemon stops taking messages (first thing on shutdown): stop
    /// fetching them; what is fetched after is refused.
    pub intake: CancellationToken,
    /// Cancelled when the channel must stop (after its last messages were delivered);
    /// `run` returns soon after.
    pub shutdown: CancellationToken,
    /// Where `run` says that its connection to the platform is failing while it keeps
    /// trying, and that it recovered.
    pub trouble: Trouble,
}

/// How a running channel tells the daemon that its connection to the platform fails (a
/// poll or a reconnect refused) while `run` keeps trying, and that it recovered: `/healthz`
/// and `switchboard status` show the channel degraded, with the error, from the first
/// failure — not minutes later, when a watchdog ends `run`. The default tells no one.
#[derive(Clone, Default)]
pub struct Trouble(Option<Arc<dyn Fn(Option<String>) + Send + Sync>>);

impl Trouble {
    /// A `Trouble` calling `report` with the error (`Some`) or with `None` on recovery.
    pub fn new(report: impl Fn(Option<String>) + Send + Sync + 'static) -> Self {
        Self(Some(Arc::new(report)))
    }

    /// The connection failed; `run` keeps trying.
    pub fn failing(&self, error: impl std::fmt::Display) {
        if let Some(report) = &self.0 {
            report(Some(error.to_string()));
        }
    }

    /// The connection works again.
    pub fn recovered(&self) {
        if let Some(report) = &self.0 {
            report(None);
        }
    }
}

impl std::fmt::Debug for Trouble {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Trouble")
    }
}

/// Where a channel's chats are reached from, which decides who delivers its messages when the
/// agents run on other hosts (a cluster's bus); in one process every scope is delivered
/// alike.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ChannelScope {
    /// Through one connection to a platform (Telegram, Discord, Slack): the one process that
    /// holds it delivers, in order per chat.
    #[default]
    Platform,
    /// Through the process's own connections (WebSocket clients): every process that runs the
    /// channel delivers to the clients it has.
    Process,
    /// Inside the daemon (sub-agents, scheduled runs in sessions of their own): its messages
    /// never leave the process that made them.
    Internal,
}

/// What a platform gave back for a message it accepted: the id of the (last) message it made
/// of it, when it names one (Telegram's message id, Discord's snowflake, Slack's file id). A
/// tool that sends something says it was sent only on this, and names the id.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Sent {
    /// The platform's id, if it gave one.
    pub id: Option<String>,
    /// Stored for its channel but not confirmed: a cluster's bus keeps the message for the
    /// channel's gateway, whose receipt did not come in time. It may not have reached the
    /// platform (yet): not to be told as sent.
    pub unconfirmed: bool,
}

impl Sent {
    /// Stored by the bus, no receipt (see [`Sent::unconfirmed`]).
    pub fn stored() -> Self {
        Self {
            id: None,
            unconfirmed: true,
        }
    }

    /// Accepted, with no id to name (a frame queued for a socket, a draft's edit).
    pub fn accepted() -> Self {
        Self::default()
    }

    /// Accepted as the platform's message `id`.
    pub fn as_id(id: impl Into<String>) -> Self {
        Self {
            id: Some(id.into()),
            unconfirmed: false,
        }
    }
}

/// A platform adapter. The daemon calls `run` under a supervisor (restarted with backoff
/// when it fails) and calls `send` for every outbound message routed to this channel.
#[async_trait]
pub trait Channel: Send + Sync + 'static {
    /// The channel's name; outbound messages are routed by it.
    fn name(&self) -> ChannelName;

    /// Receives from the platform and publishes inbound messages on the hub until the
    /// shutdown token is cancelled. An `Err` makes the supervisor restart it.
    async fn run(&self, ctx: ChannelContext) -> Result<(), CoreError>;

    /// Delivers one outbound message to the platform; what it gave back for it.
    async fn send(&self, message: OutboundMessage) -> Result<Sent, CoreError>;

    /// Whether the agent may write to `chat` unasked (the `message` tool). A channel with
    /// an allow list says whether the people of that chat are (still) allowed; the daemon
    /// also requires that the chat has talked to the agent.
    async fn may_notify(&self, _chat: &ChatId) -> bool {
        true
    }

    /// Whether a person reads this channel's chats and can answer there (a question, an
    /// approval). Not so for the channel of scheduled runs in sessions of their own.
    fn has_person(&self) -> bool {
        true
    }

    /// Where its chats are reached from (see [`ChannelScope`]).
    fn scope(&self) -> ChannelScope {
        ChannelScope::Platform
    }

    /// Asks the platform whether the channel's credentials are accepted, without starting
    /// it (`switchboard doctor`): what the platform said about the bot (its name), or why
    /// not. `None`: nothing to check (no platform account).
    async fn check(&self) -> Result<Option<String>, CoreError> {
        Ok(None)
    }
}

/// A channel inside the daemon (sub-agents', scheduled runs' in sessions of their own): it
/// only takes what the agent sends — nothing comes in from outside, no person reads it (so a
/// turn there asks nothing and is granted no approval), and its messages never leave the
/// process. [`Internal`] makes it a [`Channel`].
#[async_trait]
pub trait InternalChannel: Send + Sync + 'static {
    /// Its name.
    fn name(&self) -> ChannelName;
    /// Takes one message an agent sent to it.
    async fn send(&self, message: OutboundMessage) -> Result<(), CoreError>;
}

/// An [`InternalChannel`] as a [`Channel`].
pub struct Internal<C>(pub C);

#[async_trait]
impl<C: InternalChannel> Channel for Internal<C> {
    fn name(&self) -> ChannelName {
        self.0.name()
    }

    async fn run(&self, ctx: ChannelContext) -> Result<(), CoreError> {
        ctx.shutdown.cancelled().await;
        Ok(())
    }

    async fn send(&self, message: OutboundMessage) -> Result<Sent, CoreError> {
        self.0.send(message).await.map(|()| Sent::accepted())
    }

    fn has_person(&self) -> bool {
        false
    }

    fn scope(&self) -> ChannelScope {
        ChannelScope::Internal
    }
}

/// Where a chat's conversation so far is read from (the agent's session store, wherever it
/// is kept), for a channel that shows it again (the web page's history after a reload).
#[async_trait]
pub trait Transcripts: Send + Sync + 'static {
    /// The messages on record of `chat` on `channel`, oldest first, read without touching
    /// its session (its worker may be appending).
    async fn transcript(
        &self,
        channel: &ChannelName,
        chat: &ChatId,
    ) -> Result<Vec<ChatMessage>, Box<dyn std::error::Error + Send + Sync>>;

    /// What was said in the chats of `channel` that matches `query` (the agents' memory
    /// search: `[memory]`), best first, at most `limit`, each with its chat. An error is a
    /// sentence for the person: search is off, the query is not one the index reads.
    async fn search(
        &self,
        _channel: &ChannelName,
        _query: &str,
        _limit: usize,
    ) -> Result<Vec<(ChatId, crate::MemoryHit)>, String> {
        Err("Search is off: the daemon's [memory] is not enabled.".into())
    }
}
