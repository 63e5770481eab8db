//! switchboard-nats: switchboard past one machine. The [`Bus`](switchboard_core::Bus) and
//! the [`SessionStore`](switchboard_sessions::SessionStore) on NATS JetStream, used when the
//! config has a `[cluster]` section: gateways (channels) and workers (agents) on several
//! hosts, partitions of the sessions leased to workers, failover when one dies.
//!
//! # Layout
//! - `config`: `[cluster]` ([`ClusterSection`]) and the [`Role`] a process plays.
//! - `cluster`: [`Cluster`], the connection and the shared streams and buckets, and what a
//!   member says of itself there.
//! - `names`: what everything is called on the server; a session's partition.
//! - `bus`: [`NatsBus`], the bus; `shared`: what it shares with the tasks it starts (the
//!   three below), none of which reaches into another.
//! - `partitions`: a worker's leases on partitions, and reading them.
//! - `lease`: a lease held whenever it can be (a connection, a duty).
//! - `deliver`: a gateway's delivery of its channels' outbound messages, and its receipts.
//! - `store`: [`NatsStore`], the sessions, and the copies kept of what compaction and `/new`
//!   replace.
//! - `said`: [`SaidFeed`], everything an agent's chats said, in order, for a memory index.
//! - `state`: [`NatsState`], the small documents every member shares.
//! - `media`: [`NatsMedia`], files waiting for their channel, in the cluster's object store.
//! - `error`: [`ClusterError`].

mod bus;
mod cluster;
mod config;
mod deliver;
mod error;
mod lease;
mod media;
mod names;
mod partitions;
mod said;
mod shared;
mod state;
mod store;

pub use bus::NatsBus;
pub use cluster::{Cluster, Survey};
pub use config::{ClusterConfig, ClusterSection, MAX_PARTITIONS, Role};
pub use error::ClusterError;
pub use media::NatsMedia;
pub use names::partition_of;
pub use said::SaidFeed;
pub use state::NatsState;
pub use store::NatsStore;
