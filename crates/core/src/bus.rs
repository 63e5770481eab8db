//! [`Bus`]: where channel adapters and the agent meet — in one process the [`ChatHub`], across
//! the hosts of a cluster a bus on NATS JetStream. Adapters and the agent only ever hold an
//! `Arc<dyn Bus>`, so neither knows which.
//!
//! [`ChatHub`]: crate::ChatHub

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use tokio::sync::mpsc;

use crate::channel::{Channel, Sent};
use crate::error::CoreError;
use crate::ids::{ChannelName, ChatId};
use crate::lanes::{LaneOptions, Lanes};
use crate::message::{InboundMessage, OutboundMessage};

/// The bus between channel adapters (a gateway's side) and the agents (a worker's side).
///
/// - **Inbound**: an adapter publishes what people wrote; the process that runs agents takes
///   the stream of messages it is to answer, each in order within its session. A message's
///   [`Ack`](crate::Ack) is how its fate comes back: in one process the worker's report is a
///   call; on a cluster bus, the gateway's adapter is told once the message is durably on the
///   bus, and the worker's report acknowledges it there (or asks for it again).
/// - **Outbound**: the agent publishes replies; the process that runs the channel named in a
///   message delivers it through that channel's [`Lanes`] (one per chat, in order), and
///   [`Bus::deliver_outbound`] waits for the delivery receipt.
#[async_trait]
pub trait Bus: Send + Sync + 'static {
    /// Queues a message for the agent, waiting while the bus has no room (nothing is
    /// dropped). Fails only when the daemon has stopped taking messages, or the bus cannot
    /// keep it (the error says why; the adapter's platform delivers it again).
    async fn publish_inbound(&self, message: InboundMessage) -> Result<(), CoreError>;

    /// Whether the daemon still takes new messages.
    fn is_accepting(&self) -> bool;

    /// The inbound messages this process answers, handed to its one consumer (the
    /// dispatcher); a second call fails.
    fn take_inbound(&self) -> Result<mpsc::Receiver<InboundMessage>, CoreError>;

    /// Makes this process the deliverer of `channel`'s outbound messages: they go through
    /// it (already wrapped for retries, if it should be), one lane per chat. Registering a
    /// name again replaces the earlier lanes.
    fn register_channel(&self, channel: Arc<dyn Channel>, options: LaneOptions) -> Lanes;

    /// The channels this process delivers for, by name.
    fn channels(&self) -> Vec<ChannelName>;

    /// Queues a message for its chat, waiting only while that chat's lane is full.
    async fn publish_outbound(&self, message: OutboundMessage) -> Result<(), CoreError>;

    /// Queues a message and waits until its channel delivered it (or gave up: the error);
    /// what the platform gave back for it.
    async fn deliver_outbound(&self, message: OutboundMessage) -> Result<Sent, CoreError>;

    /// Whether the agent may write to `chat` of `channel` unasked (see
    /// [`Channel::may_notify`]); an error when no such channel runs.
    async fn may_notify(&self, channel: &ChannelName, chat: &ChatId) -> Result<bool, CoreError>;

    /// Whether a person reads `channel`'s chats (see [`Channel::has_person`]); assumed so of
    /// a channel that is not known.
    fn has_person(&self, channel: &ChannelName) -> bool;

    /// Waits until this process may run `channel`'s connection to its platform, and returns
    /// what is cancelled when it may no longer. On a cluster a platform channel (one
    /// connection: Telegram polling, Discord's gateway, Slack's socket) runs on one gateway at a
    /// time, the one that holds its lease; the others wait here as standbys. In one process:
    /// at once, never cancelled.
    async fn connection(&self, _channel: &ChannelName) -> tokio_util::sync::CancellationToken {
        tokio_util::sync::CancellationToken::new()
    }

    /// Waits until this process is the one to do `duty` — work only one process may do at
    /// a time, such as firing the scheduler's jobs — and returns its [`Tenure`] of it: its
    /// epoch names this holding, and it says when the holding may have lapsed or is lost.
    /// On a cluster one member at a time holds each duty's lease (a standby takes over
    /// within the lease when it dies); in one process: at once, for good, with an epoch of
    /// this start's own.
    ///
    /// [`Tenure`]: crate::Tenure
    async fn lead(&self, _duty: &str) -> crate::Tenure {
        crate::Tenure::for_good()
    }

    /// Whether an inbound message's `Handled` fate means its turn has ended (in one
    /// process, the worker's report), rather than that the bus stored it for a worker (a
    /// cluster: how the turn ended is known only where it ran).
    fn fates_are_turns(&self) -> bool {
        true
    }

    /// Closes the lanes of the channels this process delivers for, once they delivered what
    /// they hold, waiting up to `deadline` for each. Returns whether all finished.
    async fn close_outbound(&self, deadline: Duration) -> bool;
}
