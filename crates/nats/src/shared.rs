//! What a member's bus shares with the tasks it starts — the connection, the inbound queue,
//! the local lanes, the partitions and leases it holds — and what they all read messages
//! with. The bus (`bus.rs`) and its tasks (`deliver.rs`, `lease.rs`, `partitions.rs`) each
//! hold an `Arc` of it; none of them reaches into another.

use std::sync::Mutex;
use std::time::Duration;

use async_nats::jetstream::consumer;
use dashmap::DashMap;
use switchboard_core::{ChannelLanes, ChannelName, InboundMessage, Tenure};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::cluster::Cluster;

/// The state of a member's bus.
pub(crate) struct Inner {
    pub(crate) cluster: Cluster,
    /// Cancelled when the daemon stops taking messages.
    pub(crate) intake: CancellationToken,
    /// Cancelled when the bus's own tasks must end (after the channels stopped).
    pub(crate) stop: CancellationToken,
    pub(crate) tasks: TaskTracker,
    /// Where the partitions' messages (and internal channels') go for the dispatcher.
    pub(crate) inbound_tx: mpsc::Sender<InboundMessage>,
    pub(crate) inbound_rx: Mutex<Option<mpsc::Receiver<InboundMessage>>>,
    /// The channels this process delivers for.
    pub(crate) lanes: ChannelLanes,
    /// The partitions this worker reads now.
    pub(crate) held: Mutex<Vec<u32>>,
    /// Whether this gateway holds each platform channel's connection (its tenure while it
    /// does).
    pub(crate) connections: DashMap<ChannelName, tokio::sync::watch::Receiver<Option<Tenure>>>,
    /// Whether this member does each duty asked for (see [`Bus::lead`]).
    pub(crate) duties: DashMap<String, tokio::sync::watch::Receiver<Option<Tenure>>>,
}

impl Inner {
    /// The state of a bus on `cluster`, whose local inbound queue holds `capacity`
    /// messages; `intake` stops it taking messages.
    pub(crate) fn new(cluster: Cluster, capacity: usize, intake: CancellationToken) -> Self {
        let (inbound_tx, inbound_rx) = mpsc::channel(capacity.max(1));
        Self {
            cluster,
            intake,
            stop: CancellationToken::new(),
            tasks: TaskTracker::new(),
            inbound_tx,
            inbound_rx: Mutex::new(Some(inbound_rx)),
            lanes: ChannelLanes::default(),
            held: Mutex::new(Vec::new()),
            connections: DashMap::new(),
            duties: DashMap::new(),
        }
    }
}

/// What the consumers of both directions are made with.
pub(crate) fn pull_config(name: String, filter: String) -> consumer::pull::Config {
    consumer::pull::Config {
        durable_name: Some(name.clone()),
        name: Some(name),
        filter_subject: filter,
        ack_policy: consumer::AckPolicy::Explicit,
        deliver_policy: consumer::DeliverPolicy::All,
        // Never waited out while the owner lives: a new owner starts the consumer afresh.
        ack_wait: Duration::from_secs(12 * 60 * 60),
        max_ack_pending: 512,
        ..Default::default()
    }
}
