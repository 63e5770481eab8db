//! [`NatsBus`]: the [`Bus`] of a cluster, on NATS JetStream.
//!
//! - **Inbound** goes on the inbound stream, on the subject of its session's partition, with
//!   its id as the server's dedupe id. Once the server has stored it, its channel's `Ack` is
//!   told `Handled`: the stream is the durable inbox from there on. The worker that holds
//!   the partition answers it ([`crate::partitions`]), and its fate is the JetStream ack.
//! - **Outbound** goes on the outbound stream, on its channel's subject. A platform channel's
//!   messages are delivered by the gateway that runs it, through a durable consumer, in order
//!   and acknowledged once delivered; a process channel's (WebSocket) by every gateway, each to
//!   its own clients. [`Bus::deliver_outbound`] waits for the deliverer's receipt.
//! - **Internal** channels (sub-agents, scheduled runs in sessions of their own) never leave
//!   the process: their messages go through local lanes and the local inbound queue.

use std::sync::{Arc, PoisonError};
use std::time::Duration;

use async_nats::HeaderMap;
use async_nats::jetstream::{self};
use async_trait::async_trait;
use futures::StreamExt;
use switchboard_core::{
    Bus, Channel, ChannelName, ChannelScope, ChatId, CoreError, Fate, InboundMessage, LaneOptions,
    Lanes, MessageId, OutboundKind, OutboundMessage, Sent, Tenure, wire,
};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::cluster::Cluster;
use crate::deliver::{RECEIPT, SENT_AS};
use crate::names::partition_of;
use crate::shared::Inner;

/// How long [`Bus::deliver_outbound`] waits for its receipt. A receipt can be lost in a
/// break of the connection; the message itself is stored, and goes out with the gateway's
/// next read, so a missing receipt after this long counts as delivered (and is logged).
const RECEIPT_WAIT: Duration = Duration::from_secs(10);

/// Waits between tries of a publish the server did not take (it is down, or restarting).
const RETRY_WAITS: [Duration; 5] = [
    Duration::from_millis(100),
    Duration::from_millis(250),
    Duration::from_millis(500),
    Duration::from_secs(1),
    Duration::from_secs(2),
];

/// The bus of a cluster member. Cloning is cheap.
#[derive(Clone)]
pub struct NatsBus {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for NatsBus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NatsBus").finish_non_exhaustive()
    }
}

impl NatsBus {
    /// A bus on `cluster`, whose local inbound queue holds `capacity` messages; `intake`
    /// stops it taking messages.
    pub fn new(cluster: Cluster, capacity: usize, intake: CancellationToken) -> Self {
        Self {
            inner: Arc::new(Inner::new(cluster, capacity, intake)),
        }
    }

    pub(crate) fn inner(&self) -> &Arc<Inner> {
        &self.inner
    }

    /// The partitions this process reads now (none unless it runs agents).
    pub fn held_partitions(&self) -> Vec<u32> {
        self.inner
            .held
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// The cluster it is on.
    pub fn cluster(&self) -> &Cluster {
        &self.inner.cluster
    }

    /// Ends the bus's tasks (the deliverers, the partitions) and waits for them.
    pub async fn close(&self) {
        self.inner.stop.cancel();
        self.inner.tasks.close();
        self.inner.tasks.wait().await;
    }

    fn local(&self, channel: &ChannelName) -> Option<Lanes> {
        self.inner
            .lanes
            .get(channel)
            .filter(|lanes| lanes.channel().scope() == ChannelScope::Internal)
    }

    /// Publishes `payload` on `subject` and waits until the server stored it, trying again
    /// while it is unreachable (until the daemon stops taking messages).
    async fn publish_durably(
        &self,
        subject: String,
        headers: HeaderMap,
        payload: bytes::Bytes,
    ) -> Result<jetstream::publish::PublishAck, CoreError> {
        let js = &self.inner.cluster.js;
        let mut tries = 0usize;
        loop {
            let attempt = async {
                js.publish_with_headers(subject.clone(), headers.clone(), payload.clone())
                    .await?
                    .await
            };
            match attempt.await {
                Ok(ack) => return Ok(ack),
                Err(err) => {
                    let wait = RETRY_WAITS[tries.min(RETRY_WAITS.len() - 1)];
                    tries += 1;
                    if tries == 3 {
                        tracing::warn!(%subject, error = %err,
                            "NATS does not take a message; trying again until it does");
                    }
                    tokio::select! {
                        () = tokio::time::sleep(wait) => {}
                        () = self.inner.intake.cancelled() => {
                            return Err(CoreError::Bus(format!("NATS did not take a message: {err}")));
                        }
                    }
                }
            }
        }
    }
}

impl NatsBus {
    /// Starts taking partitions and reading their messages into the inbound queue (a
    /// process that runs agents calls it once, before its dispatcher takes the queue).
    pub fn start_worker(&self) {
        let inner = self.inner().clone();
        self.inner()
            .tasks
            .spawn(async move { crate::partitions::hold_partitions(inner).await });
    }

    /// Keeps this member listed among the members while it runs (a gateway: a worker's
    /// rounds do it for it), so `switchboard status` shows every member.
    pub fn start_presence(&self) {
        let inner = self.inner().clone();
        self.inner()
            .tasks
            .spawn(async move { crate::partitions::keep_presence(inner).await });
    }
}

#[async_trait]
impl Bus for NatsBus {
    async fn publish_inbound(&self, mut message: InboundMessage) -> Result<(), CoreError> {
        if self.inner.intake.is_cancelled() {
            return Err(CoreError::ShuttingDown);
        }
        if self.local(&message.channel).is_some() {
            let channel = message.channel.clone();
            let sent = tokio::select! {
                sent = self.inner.inbound_tx.send(message) => sent.map_err(|_| CoreError::ShuttingDown),
                () = self.inner.intake.cancelled() => Err(CoreError::ShuttingDown),
            };
            if sent.is_ok() {
                count_in(&channel);
            }
            return sent;
        }
        // Every message on the cluster has an id: the journal answers it exactly once
        // however often it is delivered.
        let id = message
            .id
            .get_or_insert_with(|| MessageId::from(format!("bus-{}", nuid())))
            .clone();
        let key = message.session_key();
        let names = &self.inner.cluster.names;
        let partition = partition_of(&key, self.inner.cluster.config.partitions);
        let payload = wire::encode(&message).map_err(|err| CoreError::Bus(err.to_string()))?;
        let mut headers = HeaderMap::new();
        headers.insert("Nats-Msg-Id", format!("{key}/{id}").as_str());
        self.publish_durably(names.inbound_subject(partition), headers, payload.into())
            .await?;
        count_in(&message.channel);
        message.settle(Fate::Handled);
        Ok(())
    }

    fn is_accepting(&self) -> bool {
        !self.inner.intake.is_cancelled()
    }

    fn take_inbound(&self) -> Result<mpsc::Receiver<InboundMessage>, CoreError> {
        self.inner
            .inbound_rx
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
            .ok_or(CoreError::InboundTaken)
    }

    fn register_channel(&self, channel: Arc<dyn Channel>, options: LaneOptions) -> Lanes {
        let name = channel.name();
        let scope = channel.scope();
        let lanes = self.inner.lanes.register(channel, options);
        match scope {
            ChannelScope::Internal => {}
            ChannelScope::Process => {
                crate::deliver::answer(&self.inner, name.clone(), lanes.clone());
                crate::deliver::start(
                    self.inner.clone(),
                    name,
                    ChannelScope::Process,
                    lanes.clone(),
                    self.inner.stop.clone(),
                );
            }
            ChannelScope::Platform => {
                crate::deliver::answer(&self.inner, name.clone(), lanes.clone());
                let (held, holding) = tokio::sync::watch::channel(None);
                self.inner.connections.insert(name.clone(), holding);
                let inner = self.inner.clone();
                let delivering = lanes.clone();
                self.inner.tasks.spawn(async move {
                    crate::deliver::hold_connection(inner, name, delivering, held).await;
                });
            }
        }
        lanes
    }

    fn channels(&self) -> Vec<ChannelName> {
        self.inner.lanes.names()
    }

    async fn publish_outbound(&self, message: OutboundMessage) -> Result<(), CoreError> {
        if let Some(lanes) = self.local(&message.channel) {
            return lanes.push(message).await;
        }
        count_out(&message);
        let subject = self
            .inner
            .cluster
            .names
            .outbound_subject(message.channel.as_str());
        let payload: bytes::Bytes = wire::encode(&message)
            .map_err(|err| CoreError::Bus(err.to_string()))?
            .into();
        if is_transient(&message.kind) {
            // A piece of a draft: sent, not waited for (the next piece replaces it); the
            // connection keeps it in order with what follows.
            return self
                .inner
                .cluster
                .js
                .publish(subject, payload)
                .await
                .map(drop)
                .map_err(|err| CoreError::Bus(err.to_string()));
        }
        self.publish_durably(subject, once(&message), payload)
            .await
            .map(drop)
    }

    async fn deliver_outbound(&self, message: OutboundMessage) -> Result<Sent, CoreError> {
        if let Some(lanes) = self.local(&message.channel) {
            return lanes.deliver(message).await;
        }
        count_out(&message);
        let client = &self.inner.cluster.client;
        let inbox = client.new_inbox();
        let mut receipts = client
            .subscribe(inbox.clone())
            .await
            .map_err(|err| CoreError::Bus(err.to_string()))?;
        let mut headers = once(&message);
        headers.insert(RECEIPT, inbox.as_str());
        let subject = self
            .inner
            .cluster
            .names
            .outbound_subject(message.channel.as_str());
        let channel = message.channel.to_string();
        let payload = wire::encode(&message).map_err(|err| CoreError::Bus(err.to_string()))?;
        let stored = self
            .publish_durably(subject, headers, payload.into())
            .await?;
        if stored.duplicate {
            // Sent before by a worker that died before it noted the delivery: that copy is
            // delivered, or queued for the gateway.
            return Ok(Sent::stored());
        }
        match tokio::time::timeout(RECEIPT_WAIT, receipts.next()).await {
            Ok(Some(receipt)) if receipt.payload.is_empty() => Ok(Sent {
                unconfirmed: false,
                id: receipt
                    .headers
                    .as_ref()
                    .and_then(|headers| headers.get(SENT_AS))
                    .map(|id| id.as_str().to_owned())
                    .filter(|id| !id.is_empty()),
            }),
            Ok(Some(receipt)) => Err(CoreError::Channel {
                channel,
                message: String::from_utf8_lossy(&receipt.payload).into_owned(),
            }),
            Ok(None) => Err(CoreError::Bus("the receipt's subscription ended".into())),
            Err(_) => {
                tracing::warn!(%channel, "no delivery receipt within {} s; the message is stored on the bus for the channel's gateway", RECEIPT_WAIT.as_secs());
                Ok(Sent::stored())
            }
        }
    }

    async fn connection(&self, channel: &ChannelName) -> CancellationToken {
        let Some(holding) = self
            .inner
            .connections
            .get(channel)
            .map(|entry| entry.value().clone())
        else {
            return CancellationToken::new();
        };
        crate::lease::held(holding).await.token()
    }

    async fn lead(&self, duty: &str) -> Tenure {
        let holding = self
            .inner
            .duties
            .entry(duty.to_owned())
            .or_insert_with(|| {
                let (held, holding) = tokio::sync::watch::channel(None);
                let inner = self.inner.clone();
                let key = crate::names::duty_key(duty);
                let what = format!("the duty {duty}");
                self.inner.tasks.spawn(async move {
                    crate::lease::hold(&inner, &key, &what, held, |_| {}).await;
                });
                holding
            })
            .clone();
        crate::lease::held(holding).await
    }

    fn fates_are_turns(&self) -> bool {
        false
    }

    async fn may_notify(&self, channel: &ChannelName, chat: &ChatId) -> Result<bool, CoreError> {
        if let Some(lanes) = self.local(channel) {
            return Ok(lanes.channel().may_notify(chat).await);
        }
        let subject = self.inner.cluster.names.notify_subject(channel.as_str());
        match self
            .inner
            .cluster
            .client
            .request(subject, chat.as_str().to_owned().into())
            .await
        {
            Ok(answer) => Ok(answer.payload.as_ref() == b"yes"),
            Err(err) if err.kind() == async_nats::client::RequestErrorKind::NoResponders => {
                Err(CoreError::UnknownChannel(channel.to_string()))
            }
            Err(err) => Err(CoreError::Bus(err.to_string())),
        }
    }

    fn has_person(&self, channel: &ChannelName) -> bool {
        self.inner
            .lanes
            .get(channel)
            .is_none_or(|lanes| lanes.channel().has_person())
    }

    /// Also ends the bus's own tasks (deliverers, partitions: their leases given up), waiting
    /// up to `deadline` for them.
    async fn close_outbound(&self, deadline: Duration) -> bool {
        let clean = self.inner.lanes.close(deadline).await;
        clean & tokio::time::timeout(deadline, self.close()).await.is_ok()
    }
}

/// The server's dedupe id of the parts of an answer that must reach a chat once — its whole
/// reply, its error, its end — named after the message it answers. A worker that takes over
/// a turn whose answer was saved sends it again; the server drops the copy if the first
/// went out (within the dedupe window, longer than a lease).
fn once(message: &OutboundMessage) -> HeaderMap {
    let mut headers = HeaderMap::new();
    let part = match message.kind {
        OutboundKind::Message(_) => "message",
        OutboundKind::Error(_) => "error",
        OutboundKind::Done(_) => "done",
        _ => return headers,
    };
    // The turn, not the message it threads under: a scheduled run's answer threads under
    // nothing, and is still sent once.
    if let Some(answers) = message.turn.as_ref().or(message.reply_to.as_ref()) {
        let id = format!("{}/{}/{answers}/{part}", message.channel, message.chat_id);
        headers.insert("Nats-Msg-Id", id.as_str());
    }
    headers
}

/// A turn's transient pieces: not waited for on the server.
fn is_transient(kind: &OutboundKind) -> bool {
    matches!(
        kind,
        OutboundKind::Delta(_) | OutboundKind::Status(_) | OutboundKind::TurnStarted
    )
}

fn count_in(channel: &ChannelName) {
    metrics::counter!("switchboard_messages_in_total", "channel" => channel.to_string())
        .increment(1);
}

fn count_out(message: &OutboundMessage) {
    if matches!(
        message.kind,
        OutboundKind::Message(_) | OutboundKind::Post(_) | OutboundKind::Error(_)
    ) {
        metrics::counter!("switchboard_messages_out_total", "channel" => message.channel.to_string())
            .increment(1);
    }
}

/// A unique id (the client's inbox ids are unique per process and time).
pub(crate) fn nuid() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or_default();
    format!(
        "{now:x}-{:x}-{:x}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

#[cfg(test)]
mod tests {
    use switchboard_core::{ChatId, SenderId, TurnEnd};

    use super::*;

    /// The parts of an answer that must reach a chat once carry a dedupe id named after
    /// their turn — a scheduled run's too, though it threads under no message — and a
    /// draft's pieces none.
    #[test]
    fn an_answer_is_sent_once_whatever_it_answers() {
        let mut run = InboundMessage::text(
            "telegram".into(),
            ChatId::from("42"),
            SenderId::from("scheduler"),
            "tick",
        );
        run.id = Some(MessageId::from("sched:j1:1000"));
        run.origin = switchboard_core::Origin::Heartbeat;
        let answer = OutboundMessage::reply_to(&run, OutboundKind::Message("done".into()));
        assert_eq!(
            answer.reply_to, None,
            "a scheduled run threads under nothing"
        );
        let id = |message: &OutboundMessage| {
            once(message)
                .get("Nats-Msg-Id")
                .map(|value| value.as_str().to_owned())
        };
        assert_eq!(
            id(&answer).as_deref(),
            Some("telegram/42/sched:j1:1000/message")
        );
        let end = OutboundMessage::reply_to(&run, OutboundKind::Done(TurnEnd::Answered));
        assert_eq!(id(&end).as_deref(), Some("telegram/42/sched:j1:1000/done"));
        let piece = OutboundMessage::reply_to(&run, OutboundKind::Delta("do".into()));
        assert_eq!(id(&piece), None);
    }
}
