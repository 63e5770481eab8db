//! The gateway's side of outbound: a channel's messages read off the outbound stream and
//! handed to its lanes, and the questions about its chats answered.
//!
//! A platform channel is read through a durable consumer: each message is acknowledged once
//! delivered (and kept in progress while it waits in its lane), so a gateway that dies
//! leaves the rest for the next one. A process channel (WebSocket) is read by every gateway
//! from the newest message on: each delivers to its own clients.

use std::sync::Arc;
use std::time::Duration;

use async_nats::HeaderMap;
use async_nats::jetstream::{self, AckKind, consumer};
use futures::StreamExt;
use switchboard_core::{ChannelName, ChannelScope, CoreError, Lanes, OutboundMessage, Sent, wire};
use tokio_util::sync::CancellationToken;

use crate::shared::{Inner, pull_config};

/// The header naming where a delivery receipt goes.
pub(crate) const RECEIPT: &str = "Switchboard-Receipt";

/// The header of a receipt that says what the platform gave back for a delivered message:
/// its id there (empty when it named none).
pub(crate) const SENT_AS: &str = "Switchboard-Sent-As";

/// Answers a delivery receipt: when delivered, an empty body (and the platform's id in
/// [`SENT_AS`] when it gave one); else why not.
pub(crate) async fn answer_receipt(
    client: &async_nats::Client,
    headers: Option<&HeaderMap>,
    delivered: &Result<Sent, CoreError>,
) {
    let Some(inbox) = headers.and_then(|headers| headers.get(RECEIPT)) else {
        return;
    };
    let published = match delivered {
        Ok(sent) => {
            let mut headers = HeaderMap::new();
            headers.insert(SENT_AS, sent.id.as_deref().unwrap_or_default());
            client
                .publish_with_headers(inbox.to_string(), headers, bytes::Bytes::new())
                .await
        }
        Err(err) => {
            client
                .publish(inbox.to_string(), err.to_string().into())
                .await
        }
    };
    if let Err(err) = published {
        tracing::warn!(error = %err, "could not send a delivery receipt");
    }
}

/// How long a platform channel's message may wait for delivery before the server offers it
/// again, unless the gateway says it is still in progress (every third of it).
const DELIVERY_WAIT: Duration = Duration::from_secs(30);

/// Waits before reading a channel's messages again after the reader failed.
const REOPEN_WAIT: Duration = Duration::from_secs(1);

/// Answers whether `channel`'s chats may be written to unasked, for as long as the bus runs.
pub(crate) fn answer(inner: &Arc<Inner>, channel: ChannelName, lanes: Lanes) {
    let responder = inner.clone();
    inner
        .tasks
        .spawn(async move { answer_notify(responder, channel, lanes).await });
}

/// Starts delivering `channel`'s messages from the stream into `lanes` until `stop` (or the
/// bus) stops.
pub(crate) fn start(
    inner: Arc<Inner>,
    channel: ChannelName,
    scope: ChannelScope,
    lanes: Lanes,
    stop: CancellationToken,
) {
    let reader = inner.clone();
    inner.tasks.spawn(async move {
        // A process channel's reader, opened again, goes on after the last message it read.
        let mut after = None;
        // A platform channel's first read of a holding takes over from the last holder.
        let mut taking_over = true;
        loop {
            let read = match scope {
                ChannelScope::Process => {
                    read_every_new(&reader, &channel, &lanes, &mut after, &stop).await
                }
                _ => {
                    let read = read_durably(&reader, &channel, &lanes, &stop, taking_over).await;
                    taking_over = false;
                    read
                }
            };
            if let Err(err) = read {
                tracing::warn!(%channel, error = %err, "reading the channel's messages from NATS failed; again in 1 s");
            }
            tokio::select! {
                () = stop.cancelled() => return,
                () = reader.stop.cancelled() => return,
                () = tokio::time::sleep(REOPEN_WAIT) => {}
            }
        }
    });
}

type Failure = Box<dyn std::error::Error + Send + Sync>;

/// A platform channel: one durable consumer, each message acknowledged once delivered; at
/// the start of a holding (`taking_over`) made afresh from where the last holder left it.
async fn read_durably(
    inner: &Arc<Inner>,
    channel: &ChannelName,
    lanes: &Lanes,
    stop: &CancellationToken,
    taking_over: bool,
) -> Result<(), Failure> {
    let names = &inner.cluster.names;
    let mut stream = inner
        .cluster
        .js
        .get_stream(names.outbound_stream_name())
        .await?;
    let name = names.outbound_consumer(channel.as_str());
    let mut config = pull_config(name.clone(), names.outbound_subject(channel.as_str()));
    config.ack_wait = DELIVERY_WAIT;
    let existing = if taking_over {
        None
    } else {
        stream
            .get_consumer::<consumer::pull::Config>(&name)
            .await
            .ok()
    };
    let consumer: consumer::PullConsumer = match existing {
        Some(consumer) => consumer,
        None => take_over_consumer(&mut stream, config).await?,
    };
    let mut messages = consumer.messages().await?;
    let mut until = Until::new(inner, stop);
    loop {
        let Some(message) = until.next(&mut messages).await else {
            return Ok(());
        };
        let message = message?;
        let Some(outbound) = decode(&message) else {
            let _ = message.ack_with(AckKind::Term).await;
            continue;
        };
        let receipt = match lanes.queue(outbound).await {
            Ok(receipt) => receipt,
            Err(err) => {
                tracing::warn!(%channel, error = %err, "a reply could not be queued");
                answer_receipt(&inner.cluster.client, message.headers.as_ref(), &Err(err)).await;
                let _ = message.ack().await;
                continue;
            }
        };
        let client = inner.cluster.client.clone();
        inner.tasks.spawn(async move {
            tokio::pin!(receipt);
            let mut progress = tokio::time::interval(DELIVERY_WAIT / 3);
            progress.tick().await;
            let delivered = loop {
                tokio::select! {
                    delivered = &mut receipt => break delivered,
                    _ = progress.tick() => { let _ = message.ack_with(AckKind::Progress).await; }
                }
            };
            answer_receipt(&client, message.headers.as_ref(), &delivered).await;
            if let Err(err) = message.ack().await {
                tracing::warn!(error = %err, "could not acknowledge a delivered reply");
            }
        });
    }
}

/// The durable consumer of a platform channel for a holding that just began. What the last
/// holder took and never delivered would otherwise come again only after the delivery wait,
/// behind frames of the same chats that came later (a turn's draft fragments after its
/// end); so the consumer is made afresh from the first message the last holder did not
/// acknowledge, and that comes at once, in order. (One it acknowledged out of order above
/// that comes again too: the channel skips what its kept state says went out.) The first
/// consumer starts at the stream's next message, and says so in its config.
async fn take_over_consumer(
    stream: &mut jetstream::stream::Stream,
    mut config: consumer::pull::Config,
) -> Result<consumer::PullConsumer, Failure> {
    let name = config.durable_name.clone().unwrap_or_default();
    let start_sequence = match stream.consumer_info(&name).await {
        Ok(info) if info.ack_floor.consumer_sequence > 0 => info.ack_floor.stream_sequence + 1,
        // Nothing acknowledged yet: from where it started.
        Ok(info) => match info.config.deliver_policy {
            consumer::DeliverPolicy::ByStartSequence { start_sequence } => start_sequence,
            _ => info.delivered.stream_sequence + 1,
        },
        Err(_) => stream.info().await?.state.last_sequence + 1,
    };
    let _ = stream.delete_consumer(&name).await;
    config.deliver_policy = consumer::DeliverPolicy::ByStartSequence { start_sequence };
    Ok(stream.create_consumer(config).await?)
}

/// A process channel: every gateway reads what is new (after `after`, the last stream
/// sequence it read, when it reads again), and delivers to its own clients.
async fn read_every_new(
    inner: &Arc<Inner>,
    channel: &ChannelName,
    lanes: &Lanes,
    after: &mut Option<u64>,
    stop: &CancellationToken,
) -> Result<(), Failure> {
    let names = &inner.cluster.names;
    let stream = inner
        .cluster
        .js
        .get_stream(names.outbound_stream_name())
        .await?;
    let deliver_policy = match *after {
        Some(last) => consumer::DeliverPolicy::ByStartSequence {
            start_sequence: last + 1,
        },
        None => consumer::DeliverPolicy::New,
    };
    let mut messages = stream
        .create_consumer(consumer::pull::OrderedConfig {
            filter_subject: names.outbound_subject(channel.as_str()),
            deliver_policy,
            ..Default::default()
        })
        .await?
        .messages()
        .await?;
    let mut until = Until::new(inner, stop);
    loop {
        let Some(message) = until.next(&mut messages).await else {
            return Ok(());
        };
        let message = message?;
        if let Ok(info) = message.info() {
            *after = Some(info.stream_sequence);
        }
        let Some(outbound) = decode(&message) else {
            continue;
        };
        match lanes.queue(outbound).await {
            Ok(receipt) => {
                let client = inner.cluster.client.clone();
                let headers = message.headers.clone();
                inner.tasks.spawn(async move {
                    let delivered = receipt.await;
                    answer_receipt(&client, headers.as_ref(), &delivered).await;
                });
            }
            Err(err) => {
                answer_receipt(&inner.cluster.client, message.headers.as_ref(), &Err(err)).await;
            }
        }
    }
}

/// What ends a reader: the bus or its holder stopping, or a break in the connection (the
/// reader is then opened again).
struct Until {
    bus: CancellationToken,
    stop: CancellationToken,
    reconnects: tokio::sync::watch::Receiver<u64>,
}

impl Until {
    fn new(inner: &Arc<Inner>, stop: &CancellationToken) -> Self {
        let mut reconnects = inner.cluster.reconnects.clone();
        reconnects.mark_unchanged();
        Self {
            bus: inner.stop.clone(),
            stop: stop.clone(),
            reconnects,
        }
    }

    /// The next item of `messages`, or `None` once the reader should end.
    async fn next<S: futures::Stream + Unpin>(&mut self, messages: &mut S) -> Option<S::Item> {
        tokio::select! {
            () = self.bus.cancelled() => None,
            () = self.stop.cancelled() => None,
            _ = self.reconnects.changed() => None,
            next = messages.next() => next,
        }
    }
}

/// The outbound message a stream message carries, numbered with its place in the stream
/// (the same on every gateway: see [`OutboundMessage::cursor`]).
fn decode(message: &jetstream::Message) -> Option<OutboundMessage> {
    match wire::decode::<OutboundMessage>(&message.payload) {
        Ok(mut outbound) => {
            outbound.cursor = message.info().ok().map(|info| info.stream_sequence);
            Some(outbound)
        }
        Err(err) => {
            tracing::error!(subject = %message.subject, error = %err, "an outbound message could not be read; dropped");
            None
        }
    }
}

/// Answers "may the agent write to this chat unasked?" for `channel`, from one gateway of
/// those that run it.
async fn answer_notify(inner: Arc<Inner>, channel: ChannelName, lanes: Lanes) {
    let subject = inner.cluster.names.notify_subject(channel.as_str());
    let mut questions = match inner
        .cluster
        .client
        .queue_subscribe(subject, "gateways".to_owned())
        .await
    {
        Ok(questions) => questions,
        Err(err) => {
            tracing::error!(%channel, error = %err, "cannot answer questions about the channel's chats");
            return;
        }
    };
    loop {
        let question = tokio::select! {
            () = inner.stop.cancelled() => return,
            question = questions.next() => question,
        };
        let Some(question) = question else { return };
        let Some(reply) = question.reply else {
            continue;
        };
        let chat =
            switchboard_core::ChatId::from(String::from_utf8_lossy(&question.payload).as_ref());
        let answer: &'static [u8] = if lanes.channel().may_notify(&chat).await {
            b"yes"
        } else {
            b"no"
        };
        let _ = inner.cluster.client.publish(reply, answer.into()).await;
    }
}

/// Holds `channel`'s connection lease whenever it can (see [`hold`]): while held, this
/// gateway delivers the channel's messages and runs its connection.
pub(crate) async fn hold_connection(
    inner: Arc<Inner>,
    channel: ChannelName,
    lanes: Lanes,
    held: tokio::sync::watch::Sender<Option<switchboard_core::Tenure>>,
) {
    let key = crate::names::connection_key(channel.as_str());
    let what = format!("the connection of {channel}");
    let deliverer = inner.clone();
    crate::lease::hold(&inner, &key, &what, held, move |holding| {
        start(
            deliverer.clone(),
            channel.clone(),
            ChannelScope::Platform,
            lanes.clone(),
            holding.token(),
        );
    })
    .await;
}
