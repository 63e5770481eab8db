//! [`ChatHub`]: where adapters and the agent meet.

use std::sync::{Arc, Mutex};

use dashmap::DashMap;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::error::CoreError;
use crate::ids::ChannelName;
use crate::message::{InboundMessage, OutboundMessage};

/// The bus between channel adapters and the agent.
///
/// Inbound is one bounded queue: when it is full, adapters wait in
/// [`ChatHub::publish_inbound`] — nothing is dropped. Outbound is one bounded queue per
/// channel, routed by the channel name the message carries. Cloning is cheap.
#[derive(Clone)]
pub struct ChatHub {
    inner: Arc<Inner>,
}

struct Inner {
    /// Adapters hold clones through the hub; the dispatcher owns the receiver.
    inbound_tx: mpsc::Sender<InboundMessage>,
    /// Taken once by the dispatcher; `None` afterwards.
    inbound_rx: Mutex<Option<mpsc::Receiver<InboundMessage>>>,
    /// One sender per registered channel; the channel's delivery loop owns the receiver
    /// and the entry lives as long as the daemon.
    outbound: DashMap<ChannelName, mpsc::Sender<OutboundMessage>>,
    /// Cancelled when the daemon stops taking messages; waiting publishers give up.
    intake: CancellationToken,
}

impl ChatHub {
    /// A hub whose inbound queue holds `capacity` messages; `intake` stops it.
    pub fn new(capacity: usize, intake: CancellationToken) -> Self {
        let (inbound_tx, inbound_rx) = mpsc::channel(capacity.max(1));
        Self {
            inner: Arc::new(Inner {
                inbound_tx,
                inbound_rx: Mutex::new(Some(inbound_rx)),
                outbound: DashMap::new(),
                intake,
            }),
        }
    }

    /// Queues a message for the agent, waiting while the queue is full.
    ///
    /// Fails only when the daemon has stopped taking messages.
    pub async fn publish_inbound(&self, message: InboundMessage) -> Result<(), CoreError> {
        if self.inner.intake.is_cancelled() {
            return Err(CoreError::ShuttingDown);
        }
        tokio::select! {
            sent = self.inner.inbound_tx.send(message) => sent.map_err(|_| CoreError::ShuttingDown),
            () = self.inner.intake.cancelled() => Err(CoreError::ShuttingDown),
        }
    }

    /// Whether the daemon still takes new messages.
    pub fn is_accepting(&self) -> bool {
        !self.inner.intake.is_cancelled()
    }

    /// Hands the inbound receiver to its one consumer, the dispatcher.
    pub fn take_inbound(&self) -> Result<mpsc::Receiver<InboundMessage>, CoreError> {
        self.inner
            .inbound_rx
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take()
            .ok_or(CoreError::InboundTaken)
    }

    /// Registers a channel for outbound messages; the caller delivers what the receiver
    /// yields. Registering a name again replaces the earlier queue.
    pub fn register_channel(
        &self,
        name: ChannelName,
        capacity: usize,
    ) -> mpsc::Receiver<OutboundMessage> {
        let (tx, rx) = mpsc::channel(capacity.max(1));
        self.inner.outbound.insert(name, tx);
        rx
    }

    /// Routes a message to its channel, waiting while that channel's queue is full.
    pub async fn publish_outbound(&self, message: OutboundMessage) -> Result<(), CoreError> {
        let sender = self
            .inner
            .outbound
            .get(&message.channel)
            .map(|entry| entry.value().clone())
            .ok_or_else(|| CoreError::UnknownChannel(message.channel.to_string()))?;
        let channel = message.channel.clone();
        sender
            .send(message)
            .await
            .map_err(|_| CoreError::ChannelClosed(channel.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::ids::{ChatId, SenderId};
    use crate::message::OutboundKind;

    fn inbound(text: &str) -> InboundMessage {
        InboundMessage::text("ws".into(), ChatId::from("c"), SenderId::from("u"), text)
    }

    #[tokio::test]
    async fn full_inbound_queue_makes_publishers_wait_not_drop() {
        let hub = ChatHub::new(1, CancellationToken::new());
        let mut rx = hub.take_inbound().expect("receiver");
        hub.publish_inbound(inbound("1")).await.expect("first fits");
        let waiting = tokio::spawn({
            let hub = hub.clone();
            async move { hub.publish_inbound(inbound("2")).await }
        });
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(
            !waiting.is_finished(),
            "second publish must wait while full"
        );
        assert_eq!(rx.recv().await.expect("msg").content, "1");
        waiting.await.expect("join").expect("second publish");
        assert_eq!(rx.recv().await.expect("msg").content, "2");
    }

    #[tokio::test]
    async fn waiting_publisher_gives_up_when_intake_stops() {
        let intake = CancellationToken::new();
        let hub = ChatHub::new(1, intake.clone());
        let _rx = hub.take_inbound().expect("receiver");
        hub.publish_inbound(inbound("1")).await.expect("fits");
        let waiting = tokio::spawn({
            let hub = hub.clone();
            async move { hub.publish_inbound(inbound("2")).await }
        });
        intake.cancel();
        let result = waiting.await.expect("join");
        assert!(matches!(result, Err(CoreError::ShuttingDown)));
    }

    #[tokio::test]
    async fn outbound_is_routed_by_channel_name() {
        let hub = ChatHub::new(4, CancellationToken::new());
        let mut a = hub.register_channel("a".into(), 4);
        let mut b = hub.register_channel("b".into(), 4);
        let message = |channel: &str| OutboundMessage {
            channel: channel.into(),
            chat_id: "c".into(),
            kind: OutboundKind::Done,
        };
        hub.publish_outbound(message("b")).await.expect("route b");
        hub.publish_outbound(message("a")).await.expect("route a");
        assert_eq!(a.recv().await.expect("a").channel.as_str(), "a");
        assert_eq!(b.recv().await.expect("b").channel.as_str(), "b");
        let unknown = hub.publish_outbound(message("zzz")).await;
        assert!(matches!(unknown, Err(CoreError::UnknownChannel(name)) if name == "zzz"));
    }

    #[test]
    fn inbound_receiver_is_taken_once() {
        let hub = ChatHub::new(1, CancellationToken::new());
        assert!(hub.take_inbound().is_ok());
        assert!(matches!(hub.take_inbound(), Err(CoreError::InboundTaken)));
    }
}
