//! The worker's side of inbound: leases on partitions, and each held partition's messages
//! read in order into the dispatcher's queue.
//!
//! Every member renews its presence in the members bucket; a worker holds about its share of
//! the partitions (their number over the workers present), each through a lease in the
//! leases bucket that lapses unrenewed (the bucket's TTL) and is renewed by compare-and-set,
//! so two workers never both believe they hold one. A worker with more than its share (one
//! joined) stops reading the extra ones, lets their running turns end, and then gives them
//! up. A worker that takes a partition starts its consumer afresh: everything not yet
//! acknowledged comes again, in order, and the shared journal answers each message once.
//!
//! Each holding of a partition is a [`Tenure`] whose epoch is the lease's revision when it
//! was taken, sure until the lease could first have lapsed on the server (see core's
//! `tenure`): every message read from the partition carries it, so the worker starts nothing
//! for a message whose partition it may have lost, reads a session again when it was read
//! under another holding, and abandons a turn once the holding is lost. A holding dropped
//! here — lost, given up, or the worker stopping — is lost for good.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use async_nats::jetstream::{AckKind, consumer};
use futures::StreamExt;
use switchboard_core::{Ack, Fate, InboundMessage, Tenure, wire};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::lease::sure_until;
use crate::names::partition_key;
use crate::shared::{Inner, pull_config};

/// A partition this worker holds.
struct Held {
    /// The lease's revision (what the next renewal must match).
    revision: u64,
    /// This holding, as the messages read from it carry it.
    tenure: Tenure,
    /// Stops reading it.
    reading: CancellationToken,
    /// Its messages handed to the dispatcher and not yet settled.
    in_flight: Arc<AtomicUsize>,
    /// Being given up: not read, renewed until its running turns end.
    leaving: bool,
}

impl Drop for Held {
    /// However the holding ends, what still runs under it learns so at once.
    fn drop(&mut self) {
        self.reading.cancel();
        self.tenure.lose();
    }
}

/// Takes partitions and reads their messages into the inbound queue, until the bus stops.
pub(crate) async fn hold_partitions(inner: Arc<Inner>) {
    let lease = inner.cluster.config.lease;
    let mut held: BTreeMap<u32, Held> = BTreeMap::new();
    let mut tick = tokio::time::interval(lease / 3);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            () = inner.intake.cancelled() => break,
            () = inner.stop.cancelled() => break,
            _ = tick.tick() => {}
        }
        if let Err(err) = round(&inner, &mut held).await {
            tracing::warn!(error = %err, "could not renew the partitions' leases");
        }
        publish_held(&inner, &held);
    }
    // Leaving: read nothing more, keep the leases while running turns end, then give them up
    // so another worker takes them at once rather than after the TTL.
    for partition in held.values_mut() {
        partition.reading.cancel();
        partition.leaving = true;
    }
    loop {
        let settled = held
            .values()
            .all(|partition| partition.in_flight.load(Ordering::Acquire) == 0);
        if settled || inner.stop.is_cancelled() {
            break;
        }
        tokio::select! {
            () = inner.stop.cancelled() => {}
            _ = tick.tick() => { let _ = renew(&inner, &mut held).await; }
        }
    }
    for (number, partition) in held {
        let _ = inner
            .cluster
            .leases
            .delete_expect_revision(partition_key(number), Some(partition.revision))
            .await;
        drop(partition);
    }
    publish_held(&inner, &BTreeMap::new());
}

type Failure = Box<dyn std::error::Error + Send + Sync>;

/// A member that runs no agents (a gateway) says it is here as a worker does in its rounds,
/// until it stops: `switchboard status` and `doctor` list every member, not only workers.
pub(crate) async fn keep_presence(inner: Arc<Inner>) {
    let mut tick = tokio::time::interval(inner.cluster.config.lease / 3);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            () = inner.stop.cancelled() => break,
            _ = tick.tick() => {}
        }
        if let Err(err) = present(&inner).await {
            tracing::warn!(error = %err, "could not renew this member's presence");
        }
    }
    let _ = inner
        .cluster
        .members
        .delete(inner.cluster.config.member.as_str())
        .await;
}

/// Says this member is here (the members bucket forgets it a lease after the last time).
async fn present(inner: &Arc<Inner>) -> Result<(), Failure> {
    let cluster = &inner.cluster;
    let presence = serde_json::to_vec(&crate::cluster::Presence {
        role: cluster.config.role.as_str().to_owned(),
    })?;
    cluster
        .members
        .put(cluster.config.member.as_str(), presence.into())
        .await?;
    Ok(())
}

/// One round: say we are here, renew what we hold, give up or take partitions to our share.
async fn round(inner: &Arc<Inner>, held: &mut BTreeMap<u32, Held>) -> Result<(), Failure> {
    // The leases first: the rest of the round may wait on the server.
    renew(inner, held).await;
    present(inner).await?;
    let cluster = &inner.cluster;
    let workers = workers(inner).await?.max(1);
    let partitions = cluster.config.partitions;
    let share = partitions.div_ceil(workers);
    give_up_beyond(inner, held, share).await;
    take_up_to(inner, held, share).await;
    measure_lag(inner, held).await;
    Ok(())
}

/// More than our `share`: gives up the last ones, once their running turns end.
async fn give_up_beyond(inner: &Arc<Inner>, held: &mut BTreeMap<u32, Held>, share: u32) {
    let cluster = &inner.cluster;
    let active: Vec<u32> = held
        .iter()
        .filter(|(_, partition)| !partition.leaving)
        .map(|(number, _)| *number)
        .collect();
    for number in active.iter().skip(share as usize) {
        if let Some(partition) = held.get_mut(number) {
            tracing::info!(
                partition = number,
                "giving up a partition to a worker that joined"
            );
            partition.reading.cancel();
            partition.leaving = true;
        }
    }
    let leaving: Vec<u32> = held
        .iter()
        .filter(|(_, partition)| {
            partition.leaving && partition.in_flight.load(Ordering::Acquire) == 0
        })
        .map(|(number, _)| *number)
        .collect();
    for number in leaving {
        if let Some(partition) = held.remove(&number) {
            let _ = cluster
                .leases
                .delete_expect_revision(partition_key(number), Some(partition.revision))
                .await;
        }
    }
}

/// Fewer than our `share`: takes free ones, starting at a place of our own so workers do
/// not all race for the same.
async fn take_up_to(inner: &Arc<Inner>, held: &mut BTreeMap<u32, Held>, share: u32) {
    let cluster = &inner.cluster;
    let partitions = cluster.config.partitions;
    let mut count = held.values().filter(|partition| !partition.leaving).count() as u32;
    let start = crate::names::partition_of(
        &switchboard_core::SessionKey::from(cluster.config.member.as_str()),
        partitions,
    );
    for offset in 0..partitions {
        if count >= share {
            break;
        }
        let number = (start + offset) % partitions;
        if held.contains_key(&number) {
            continue;
        }
        let sent = Instant::now();
        let Ok(revision) = cluster
            .leases
            .create(partition_key(number), cluster.config.member.clone().into())
            .await
        else {
            continue;
        };
        match take(inner, number, revision, sent).await {
            Ok(partition) => {
                tracing::info!(partition = number, "took a partition");
                held.insert(number, partition);
                count += 1;
            }
            Err(err) => {
                tracing::warn!(partition = number, error = %err, "could not read a partition it took; giving it up");
                let _ = cluster
                    .leases
                    .delete_expect_revision(partition_key(number), Some(revision))
                    .await;
            }
        }
    }
}

/// Renews every lease held; one that cannot be renewed (it lapsed and another took it) is
/// let go at once.
async fn renew(inner: &Arc<Inner>, held: &mut BTreeMap<u32, Held>) {
    let member = inner.cluster.config.member.clone();
    // All at once: a round trip each, and a lease must not wait behind the others.
    let renewals = held.iter().map(|(number, partition)| {
        let leases = inner.cluster.leases.clone();
        let member = member.clone();
        let (number, revision) = (*number, partition.revision);
        async move {
            let sent = Instant::now();
            let renewed = leases
                .update(partition_key(number), member.into(), revision)
                .await;
            (number, sent, renewed)
        }
    });
    let mut lost = Vec::new();
    for (number, sent, renewed) in futures::future::join_all(renewals).await {
        match renewed {
            Ok(revision) => {
                if let Some(partition) = held.get_mut(&number) {
                    partition.revision = revision;
                    partition.tenure.renew(sure_until(inner, sent));
                }
            }
            Err(err)
                if err.kind() == async_nats::jetstream::kv::UpdateErrorKind::WrongLastRevision =>
            {
                lost.push(number);
            }
            // The server is unreachable: the lease may yet hold; try again next round.
            Err(err) => tracing::debug!(partition = number, error = %err, "lease not renewed"),
        }
    }
    for number in lost {
        if held.remove(&number).is_some() {
            tracing::warn!(
                partition = number,
                "lost the lease of a partition (it lapsed); stopped reading it and abandoned its turns"
            );
        }
    }
}

/// Publishes how many messages wait in each partition held (`/metrics`).
async fn measure_lag(inner: &Arc<Inner>, held: &BTreeMap<u32, Held>) {
    let names = &inner.cluster.names;
    let Ok(stream) = inner
        .cluster
        .js
        .get_stream(names.inbound_stream_name())
        .await
    else {
        return;
    };
    for number in held.keys() {
        if let Ok(info) = stream
            .consumer_info(names.partition_consumer(*number))
            .await
        {
            let waiting = info.num_pending + info.num_ack_pending as u64;
            metrics::gauge!("switchboard_cluster_partition_lag", "partition" => number.to_string())
                .set(waiting as f64);
        }
    }
}

/// How many members run agents.
async fn workers(inner: &Arc<Inner>) -> Result<u32, Failure> {
    let members = &inner.cluster.members;
    let mut keys = members.keys().await?;
    let mut count = 0;
    while let Some(key) = keys.next().await {
        let key = key?;
        let Some(value) = members.get(&key).await? else {
            continue;
        };
        let runs_agents = serde_json::from_slice::<crate::cluster::Presence>(&value)
            .ok()
            .and_then(|presence| presence.role.parse::<crate::Role>().ok())
            .is_some_and(crate::Role::runs_agents);
        count += u32::from(runs_agents);
    }
    Ok(count)
}

/// Starts reading a partition just taken with the lease revision `revision`, by a request
/// sent at `sent`.
async fn take(
    inner: &Arc<Inner>,
    number: u32,
    revision: u64,
    sent: Instant,
) -> Result<Held, Failure> {
    let tenure = Tenure::new(revision, sure_until(inner, sent));
    let messages = open(inner, number).await?;
    let reading = CancellationToken::new();
    let in_flight = Arc::new(AtomicUsize::new(0));
    let task_inner = inner.clone();
    let task_tenure = tenure.clone();
    let task_reading = reading.clone();
    let task_in_flight = in_flight.clone();
    inner.tasks.spawn(async move {
        read(
            task_inner,
            number,
            messages,
            task_reading,
            task_tenure,
            task_in_flight,
        )
        .await;
    });
    Ok(Held {
        revision,
        tenure,
        reading,
        in_flight,
        leaving: false,
    })
}

/// The partition's consumer made afresh, so that everything not yet acknowledged comes
/// again, in order — what a new owner needs, and what a reader needs after its connection
/// broke (a message the server sent into the break would otherwise wait out the ack wait).
/// What this worker already holds of it comes again too; the journal answers it once.
async fn open(inner: &Arc<Inner>, number: u32) -> Result<consumer::pull::Stream, Failure> {
    let names = &inner.cluster.names;
    let stream = inner
        .cluster
        .js
        .get_stream(names.inbound_stream_name())
        .await?;
    let name = names.partition_consumer(number);
    let _ = stream.delete_consumer(&name).await;
    let consumer: consumer::PullConsumer = stream
        .create_consumer(pull_config(name, names.inbound_subject(number)))
        .await?;
    Ok(consumer.messages().await?)
}

/// How long a reader waits before opening its partition again after the server went away.
const REOPEN_WAIT: Duration = Duration::from_millis(500);

/// Reads a held partition into the dispatcher's queue, each message carrying `tenure`
/// (counted in `in_flight` until it is settled), until `reading` is cancelled.
async fn read(
    inner: Arc<Inner>,
    number: u32,
    mut messages: consumer::pull::Stream,
    reading: CancellationToken,
    tenure: Tenure,
    in_flight: Arc<AtomicUsize>,
) {
    let mut reconnects = inner.cluster.reconnects.clone();
    reconnects.mark_unchanged();
    loop {
        let next = tokio::select! {
            () = reading.cancelled() => return,
            // After a break in the connection the consumer is made afresh at once: a message
            // the server sent into the break would otherwise wait out the ack wait.
            _ = reconnects.changed() => match reopen(&inner, number, &reading).await {
                Some(again) => {
                    messages = again;
                    continue;
                }
                None => return,
            },
            next = messages.next() => next,
        };
        let message = match next {
            Some(Ok(message)) => message,
            Some(Err(err)) => {
                tracing::debug!(partition = number, error = %err, "reading a partition");
                use consumer::pull::MessagesErrorKind as Kind;
                if !matches!(
                    err.kind(),
                    Kind::MissingHeartbeat | Kind::ConsumerDeleted | Kind::NoResponders
                ) {
                    continue;
                }
                match reopen(&inner, number, &reading).await {
                    Some(again) => {
                        messages = again;
                        continue;
                    }
                    None => return,
                }
            }
            None => match reopen(&inner, number, &reading).await {
                Some(again) => {
                    messages = again;
                    continue;
                }
                None => return,
            },
        };
        let mut inbound: InboundMessage = match wire::decode(&message.payload) {
            Ok(inbound) => inbound,
            Err(err) => {
                tracing::error!(partition = number, error = %err, "an inbound message could not be read; dropped");
                let _ = message.ack_with(AckKind::Term).await;
                continue;
            }
        };
        inbound.tenure = Some(tenure.clone());
        inbound.ack = Some(acked_on_the_server(message, &in_flight));
        tokio::select! {
            // Dropped unsent: its ack says unprocessed.
            () = reading.cancelled() => return,
            sent = inner.inbound_tx.send(inbound) => if sent.is_err() { return },
        }
    }
}

/// The ack of a message read off a partition: its fate told to the server (handled or
/// dropped: acknowledged; not processed, as this worker stops: offered again, to whoever
/// reads next), counted in flight until then.
fn acked_on_the_server(
    message: async_nats::jetstream::Message,
    in_flight: &Arc<AtomicUsize>,
) -> Ack {
    in_flight.fetch_add(1, Ordering::AcqRel);
    let settled = in_flight.clone();
    let runtime = tokio::runtime::Handle::current();
    Ack::new(move |fate| {
        runtime.spawn(async move {
            let kind = match fate {
                Fate::Handled | Fate::Dropped => AckKind::Ack,
                Fate::Unprocessed => AckKind::Nak(Some(Duration::from_secs(1))),
            };
            if let Err(err) = message.ack_with(kind).await {
                tracing::warn!(error = %err, "could not acknowledge an inbound message");
            }
            settled.fetch_sub(1, Ordering::AcqRel);
        });
    })
}

/// Opens the partition again once the server answers; `None` when reading stopped first.
async fn reopen(
    inner: &Arc<Inner>,
    number: u32,
    reading: &CancellationToken,
) -> Option<consumer::pull::Stream> {
    loop {
        tokio::select! {
            () = reading.cancelled() => return None,
            () = tokio::time::sleep(REOPEN_WAIT) => {}
        }
        // Only while the lease is still ours: a consumer deleted by the partition's new
        // owner is not ours to make again.
        match inner.cluster.leases.get(partition_key(number)).await {
            Ok(Some(holder)) if holder.as_ref() == inner.cluster.config.member.as_bytes() => {}
            Ok(_) => {
                tracing::warn!(
                    partition = number,
                    "the partition is no longer ours; stopped reading it"
                );
                return None;
            }
            Err(err) => {
                tracing::debug!(partition = number, error = %err, "cannot read the lease yet");
                continue;
            }
        }
        match open(inner, number).await {
            Ok(messages) => {
                tracing::info!(partition = number, "reading the partition again");
                return Some(messages);
            }
            Err(err) => {
                tracing::debug!(partition = number, error = %err, "cannot open the partition yet")
            }
        }
    }
}

/// Makes what this worker holds visible (`status`, `/metrics`).
fn publish_held(inner: &Arc<Inner>, held: &BTreeMap<u32, Held>) {
    let numbers: Vec<u32> = held
        .iter()
        .filter(|(_, partition)| !partition.leaving)
        .map(|(number, _)| *number)
        .collect();
    metrics::gauge!("switchboard_cluster_partitions_held").set(numbers.len() as f64);
    *inner
        .held
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner) = numbers;
}
