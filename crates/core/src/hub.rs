//! [`ChatHub`]: the [`Bus`] of one process.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;

use dashmap::DashMap;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::bus::Bus;
use crate::channel::{Channel, Sent};
use crate::error::CoreError;
use crate::ids::ChannelName;
use crate::lanes::{LaneOptions, Lanes};
use crate::message::{InboundMessage, OutboundMessage};

/// The bus between channel adapters and the agent when both run in this process.
///
/// Inbound is one bounded queue: when it is full, adapters wait in
/// [`Bus::publish_inbound`] — nothing is dropped. Outbound goes into the [`Lanes`] of
/// the channel the message names, one lane per chat, so a publisher waits only for its own
/// chat. Cloning is cheap.
#[derive(Clone)]
pub struct ChatHub {
    inner: Arc<Inner>,
}

struct Inner {
    /// Adapters hold clones through the hub; the dispatcher owns the receiver.
    inbound_tx: mpsc::Sender<InboundMessage>,
    /// Taken once by the dispatcher; `None` afterwards.
    inbound_rx: Mutex<Option<mpsc::Receiver<InboundMessage>>>,
    /// The delivery lanes of each registered channel; an entry lives as long as the daemon.
    outbound: ChannelLanes,
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
                outbound: ChannelLanes::default(),
                intake,
            }),
        }
    }

    fn lanes(&self, channel: &ChannelName) -> Result<Lanes, CoreError> {
        self.inner
            .outbound
            .get(channel)
            .ok_or_else(|| CoreError::UnknownChannel(channel.to_string()))
    }
}

/// The delivery lanes of the channels a process delivers for, by name: what every bus keeps
/// on its channels' side. Cloning shares them.
#[derive(Clone, Default)]
pub struct ChannelLanes {
    by_name: Arc<DashMap<ChannelName, Lanes>>,
}

impl ChannelLanes {
    /// Lanes for `channel` (already wrapped for retries, if it should be), one per chat;
    /// registering a name again replaces the earlier lanes.
    pub fn register(&self, channel: Arc<dyn Channel>, options: LaneOptions) -> Lanes {
        let lanes = Lanes::new(channel.clone(), options);
        self.by_name.insert(channel.name(), lanes.clone());
        lanes
    }

    /// The lanes of `channel`, if it is registered.
    pub fn get(&self, channel: &ChannelName) -> Option<Lanes> {
        self.by_name.get(channel).map(|entry| entry.value().clone())
    }

    /// The registered channels, by name.
    pub fn names(&self) -> Vec<ChannelName> {
        let mut names: Vec<ChannelName> = self
            .by_name
            .iter()
            .map(|entry| entry.key().clone())
            .collect();
        names.sort_by(|a, b| a.as_str().cmp(b.as_str()));
        names
    }

    /// Closes every channel's lanes once they delivered what they hold, waiting up to
    /// `deadline` for each. Returns whether all finished.
    pub async fn close(&self, deadline: Duration) -> bool {
        let all: Vec<Lanes> = self
            .by_name
            .iter()
            .map(|entry| entry.value().clone())
            .collect();
        let mut clean = true;
        for lanes in all {
            clean &= lanes.close(deadline).await;
        }
        clean
    }
}

#[async_trait]
impl Bus for ChatHub {
    async fn publish_inbound(&self, message: InboundMessage) -> Result<(), CoreError> {
        if self.inner.intake.is_cancelled() {
            return Err(CoreError::ShuttingDown);
        }
        let channel = message.channel.clone();
        let sent = tokio::select! {
            sent = self.inner.inbound_tx.send(message) => sent.map_err(|_| CoreError::ShuttingDown),
            () = self.inner.intake.cancelled() => Err(CoreError::ShuttingDown),
        };
        if sent.is_ok() {
            metrics::counter!("switchboard_messages_in_total", "channel" => channel.to_string())
                .increment(1);
        }
        sent
    }

    fn is_accepting(&self) -> bool {
        !self.inner.intake.is_cancelled()
    }

    fn take_inbound(&self) -> Result<mpsc::Receiver<InboundMessage>, CoreError> {
        self.inner
            .inbound_rx
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take()
            .ok_or(CoreError::InboundTaken)
    }

    fn register_channel(&self, channel: Arc<dyn Channel>, options: LaneOptions) -> Lanes {
        self.inner.outbound.register(channel, options)
    }

    fn channels(&self) -> Vec<ChannelName> {
        self.inner.outbound.names()
    }

    async fn may_notify(
        &self,
        channel: &ChannelName,
        chat: &crate::ids::ChatId,
    ) -> Result<bool, CoreError> {
        Ok(self.lanes(channel)?.channel().may_notify(chat).await)
    }

    fn has_person(&self, channel: &ChannelName) -> bool {
        self.lanes(channel)
            .map_or(true, |lanes| lanes.channel().has_person())
    }

    async fn publish_outbound(&self, message: OutboundMessage) -> Result<(), CoreError> {
        count_out(&message);
        self.lanes(&message.channel)?.push(message).await
    }

    async fn deliver_outbound(&self, message: OutboundMessage) -> Result<Sent, CoreError> {
        count_out(&message);
        self.lanes(&message.channel)?.deliver(message).await
    }

    async fn close_outbound(&self, deadline: Duration) -> bool {
        self.inner.outbound.close(deadline).await
    }
}

/// Counts what a person sees as a message (a reply, a post, an error), not the frames of
/// its making (deltas, statuses), in `switchboard_messages_out_total`.
fn count_out(message: &OutboundMessage) {
    use crate::message::OutboundKind;
    if matches!(
        message.kind,
        OutboundKind::Message(_) | OutboundKind::Post(_) | OutboundKind::Error(_)
    ) {
        metrics::counter!("switchboard_messages_out_total", "channel" => message.channel.to_string())
            .increment(1);
    }
}

#[cfg(test)]
mod tests {
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

    /// A channel that records what it is sent.
    struct Sink(&'static str, std::sync::Mutex<Vec<OutboundMessage>>);

    #[async_trait::async_trait]
    impl Channel for Sink {
        fn name(&self) -> ChannelName {
            self.0.into()
        }
        async fn run(&self, _: crate::ChannelContext) -> Result<(), CoreError> {
            Ok(())
        }
        async fn send(&self, message: OutboundMessage) -> Result<Sent, CoreError> {
            self.1.lock().expect("lock").push(message);
            Ok(Sent::accepted())
        }
    }

    #[tokio::test]
    async fn outbound_is_routed_by_channel_name() {
        let hub = ChatHub::new(4, CancellationToken::new());
        let a = Arc::new(Sink("a", Default::default()));
        let b = Arc::new(Sink("b", Default::default()));
        hub.register_channel(a.clone(), LaneOptions::default());
        hub.register_channel(b.clone(), LaneOptions::default());
        let message = |channel: &str| OutboundMessage {
            channel: channel.into(),
            chat_id: "c".into(),
            reply_to: None,
            kind: OutboundKind::Done(crate::TurnEnd::NotATurn),
            cursor: None,
            turn: None,
        };
        hub.deliver_outbound(message("b")).await.expect("route b");
        hub.deliver_outbound(message("a")).await.expect("route a");
        assert_eq!(a.1.lock().expect("lock")[0].channel.as_str(), "a");
        assert_eq!(b.1.lock().expect("lock")[0].channel.as_str(), "b");
        let unknown = hub.publish_outbound(message("zzz")).await;
        assert!(matches!(unknown, Err(CoreError::UnknownChannel(name)) if name == "zzz"));
        assert!(hub.close_outbound(Duration::from_secs(1)).await);
    }

    #[test]
    fn inbound_receiver_is_taken_once() {
        let hub = ChatHub::new(1, CancellationToken::new());
        assert!(hub.take_inbound().is_ok());
        assert!(matches!(hub.take_inbound(), Err(CoreError::InboundTaken)));
    }
}
