//! [`NatsState`]: the [`StateStore`] of a cluster — the documents every member shares
//! (pairing, a platform's cursor, the scheduler's jobs, what was spent) as entries of the
//! key-value bucket `{name}_state`, kept until removed.
//!
//! A key's segments become the entry's tokens (`scheduler/job/j3` is `scheduler.job.j3`,
//! with `.` and `=` inside a segment written `=2E` and `=3D`), so [`StateStore::scan`] reads
//! one prefix with a subject filter rather than every key. An update is compare-and-set on
//! the entry's revision, tried again when another member wrote in between.

use std::collections::HashMap;
use std::time::{Duration, SystemTime};

use async_nats::jetstream::{consumer, kv};
use async_trait::async_trait;
use futures::StreamExt;
use switchboard_core::state::{Changer, MAX_SCAN, check_key, check_size};
use switchboard_core::{Change, StateError, StateStore, Stored};

use crate::cluster::Cluster;
use crate::config::ClusterConfig;
use crate::error::ClusterError;

/// How long one call may take, tries included (NATS restarting), before it fails.
const CALL_TIME: Duration = Duration::from_secs(30);

/// How many times an update is tried when others keep writing the same document.
const CONFLICTS: usize = 1_000;

/// The cluster's shared documents.
#[derive(Clone)]
pub struct NatsState {
    cluster: Cluster,
    bucket: kv::Store,
    /// Updates of one key from this process queue here (a lock per stripe of keys) rather
    /// than race each other's compare-and-set over the network.
    stripes: std::sync::Arc<[tokio::sync::Mutex<()>]>,
    /// The entries this process last wrote, by key: an update tries them first (a document
    /// one member writes — its day's total, a chat its worker answers — needs no read), and
    /// reads the server's when another wrote since.
    known: std::sync::Arc<std::sync::Mutex<HashMap<String, Seen>>>,
}

/// An entry as last seen: its revision (`None`: never written) and its value (`None`:
/// removed, or never written).
#[derive(Clone)]
struct Seen {
    revision: Option<u64>,
    value: Option<bytes::Bytes>,
}

/// Entries kept in [`NatsState::known`]; all are forgotten when it is full.
const KNOWN: usize = 10_000;

/// Stripes of [`NatsState::stripes`].
const STRIPES: usize = 64;

impl std::fmt::Debug for NatsState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NatsState")
            .field("bucket", &self.cluster.names.state_bucket())
            .finish_non_exhaustive()
    }
}

impl NatsState {
    /// The state bucket of `cluster` (made when it connected).
    pub fn new(cluster: &Cluster) -> Self {
        Self {
            cluster: cluster.clone(),
            bucket: cluster.state.clone(),
            stripes: (0..STRIPES).map(|_| tokio::sync::Mutex::new(())).collect(),
            known: std::sync::Arc::default(),
        }
    }

    /// Joins the cluster `config` names, for its state bucket alone.
    pub async fn connect(config: ClusterConfig) -> Result<Self, ClusterError> {
        Ok(Self::new(&Cluster::connect(config).await?))
    }

    fn failed(&self, what: &str, key: &str) -> impl Fn(String) -> StateError + '_ {
        let what = format!("{what} {key}");
        move |why| StateError::Failed {
            place: format!("NATS bucket {}", self.cluster.names.state_bucket()),
            what: what.clone(),
            why,
        }
    }

    /// Runs `call` until it succeeds, fails for good, or [`CALL_TIME`] is spent.
    async fn tried<T, F, Fut>(&self, what: &str, key: &str, call: F) -> Result<T, StateError>
    where
        F: Fn() -> Fut,
        Fut: std::future::Future<Output = Result<T, String>>,
    {
        let fail = self.failed(what, key);
        let deadline = tokio::time::Instant::now() + CALL_TIME;
        let mut wait = Duration::from_millis(100);
        loop {
            let attempt = tokio::time::timeout(CALL_TIME / 3, call())
                .await
                .unwrap_or_else(|_| {
                    Err(format!("no answer within {} s", (CALL_TIME / 3).as_secs()))
                });
            match attempt {
                Ok(value) => return Ok(value),
                Err(why) if tokio::time::Instant::now() + wait >= deadline => {
                    return Err(fail(why));
                }
                Err(why) => {
                    tracing::debug!(key, error = %why, "a state call to NATS failed; trying again");
                    tokio::time::sleep(wait).await;
                    wait = (wait * 2).min(Duration::from_secs(2));
                }
            }
        }
    }

    /// The entry of `key` as the server has it (a removal is an entry too).
    async fn entry(&self, key: &str) -> Result<Option<kv::Entry>, StateError> {
        let entry_key = entry_key(key);
        self.tried("read", key, || async {
            self.bucket
                .entry(&entry_key)
                .await
                .map_err(|e| e.to_string())
        })
        .await
    }

    /// The entry as this process last wrote it (`true`: from memory, maybe out of date), or
    /// as the server has it now.
    async fn seen(&self, key: &str) -> Result<(Seen, bool), StateError> {
        if let Some(seen) = self.known().get(key).cloned() {
            return Ok((seen, true));
        }
        let entry = self.entry(key).await?;
        let seen = Seen {
            revision: entry.as_ref().map(|entry| entry.revision),
            value: entry
                .filter(|entry| entry.operation == kv::Operation::Put)
                .map(|entry| entry.value),
        };
        Ok((seen, false))
    }

    fn known(&self) -> std::sync::MutexGuard<'_, HashMap<String, Seen>> {
        self.known
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Notes what this process wrote (`None`: forget the key).
    fn note(&self, key: &str, seen: Option<Seen>) {
        let mut known = self.known();
        match seen {
            Some(seen) => {
                if known.len() >= KNOWN {
                    known.clear();
                }
                known.insert(key.to_owned(), seen);
            }
            None => {
                known.remove(key);
            }
        }
    }

    /// One compare-and-set try, against the entry as this process last wrote it (most often
    /// still the server's: one round trip) or as read: `Ok(true)` once written (or nothing to
    /// write), `Ok(false)` when another member wrote first.
    async fn try_update(&self, key: &str, change: Changer<'_>) -> Result<bool, StateError> {
        let entry_key = entry_key(key);
        let (Seen { revision, value }, from_memory) = self.seen(key).await?;
        let decided = change(value.as_deref());
        let fail = self.failed("change", key);
        let lost = |err: String, lost: bool| {
            self.note(key, None);
            if lost { Ok(false) } else { Err(fail(err)) }
        };
        let writes = match &decided {
            Change::Keep => false,
            Change::Delete => value.is_some(),
            Change::Put(_) => true,
        };
        if !writes && from_memory {
            // A decision to write nothing holds only for the entry as the server has it: what
            // this process wrote last may have been changed by another member since (a write
            // would have been refused then; nothing is, so read it and decide again).
            self.note(key, None);
            return Ok(false);
        }
        match (decided, revision) {
            (Change::Keep, _) => Ok(true),
            (Change::Delete, None) => Ok(true),
            (Change::Delete, Some(_)) if value.is_none() => Ok(true),
            (Change::Delete, Some(revision)) => {
                match self
                    .bucket
                    .delete_expect_revision(&entry_key, Some(revision))
                    .await
                {
                    Ok(()) => {
                        self.note(key, None);
                        Ok(true)
                    }
                    Err(err) => lost(err.to_string(), is_wrong_revision(&err.to_string())),
                }
            }
            (Change::Put(bytes), revision) => {
                check_size(key, &bytes)?;
                let bytes = bytes::Bytes::from(bytes);
                let written = match revision {
                    None => self
                        .bucket
                        .create(&entry_key, bytes.clone())
                        .await
                        .map_err(|err| {
                            let lost = err.kind() == kv::CreateErrorKind::AlreadyExists;
                            (err.to_string(), lost)
                        }),
                    Some(revision) => self
                        .bucket
                        .update(&entry_key, bytes.clone(), revision)
                        .await
                        .map_err(|err| {
                            let lost = err.kind() == kv::UpdateErrorKind::WrongLastRevision;
                            (err.to_string(), lost)
                        }),
                };
                match written {
                    Ok(revision) => {
                        self.note(
                            key,
                            Some(Seen {
                                revision: Some(revision),
                                value: Some(bytes),
                            }),
                        );
                        Ok(true)
                    }
                    Err((err, conflict)) => lost(err, conflict),
                }
            }
        }
    }
}

fn is_wrong_revision(text: &str) -> bool {
    text.contains("wrong last sequence") || text.contains("10071")
}

#[async_trait]
impl StateStore for NatsState {
    fn place(&self) -> String {
        format!("NATS bucket {}", self.cluster.names.state_bucket())
    }

    async fn get(&self, key: &str) -> Result<Option<Stored>, StateError> {
        check_key(key)?;
        Ok(self
            .entry(key)
            .await?
            .filter(|entry| entry.operation == kv::Operation::Put)
            .map(|entry| Stored {
                bytes: entry.value.to_vec(),
                written: SystemTime::from(entry.created),
            }))
    }

    async fn put(&self, key: &str, bytes: Vec<u8>) -> Result<(), StateError> {
        check_key(key)?;
        check_size(key, &bytes)?;
        let entry_key = entry_key(key);
        let bytes = bytes::Bytes::from(bytes);
        self.note(key, None);
        self.tried("write", key, || async {
            self.bucket
                .put(&entry_key, bytes.clone())
                .await
                .map(|_| ())
                .map_err(|e| e.to_string())
        })
        .await
    }

    async fn update(&self, key: &str, change: Changer<'_>) -> Result<(), StateError> {
        check_key(key)?;
        let stripe = key.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |hash, byte| {
            (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3)
        });
        let _queued = self.stripes[(stripe % STRIPES as u64) as usize]
            .lock()
            .await;
        for _ in 0..CONFLICTS {
            if self.try_update(key, change).await? {
                return Ok(());
            }
        }
        Err(self.failed("change", key)(format!(
            "other members changed it {CONFLICTS} times in a row"
        )))
    }

    async fn scan(&self, prefix: &str) -> Result<Vec<(String, Vec<u8>)>, StateError> {
        check_key(prefix)?;
        let bucket = self.cluster.names.state_bucket();
        let filter = format!("$KV.{bucket}.{}.>", entry_key(prefix));
        let head = format!("$KV.{bucket}.");
        let mut found = self
            .tried("list", prefix, || async {
                let stream = self
                    .cluster
                    .js
                    .get_stream(format!("KV_{bucket}"))
                    .await
                    .map_err(|e| e.to_string())?;
                let mut reader = stream
                    .create_consumer(consumer::pull::OrderedConfig {
                        filter_subject: filter.clone(),
                        deliver_policy: consumer::DeliverPolicy::LastPerSubject,
                        ..Default::default()
                    })
                    .await
                    .map_err(|e| e.to_string())?;
                let pending = reader.info().await.map_err(|e| e.to_string())?.num_pending;
                let mut out = Vec::new();
                if pending == 0 {
                    return Ok(out);
                }
                let mut messages = reader.messages().await.map_err(|e| e.to_string())?;
                while let Some(message) = messages.next().await {
                    let message = message.map_err(|e| e.to_string())?;
                    let left = message.info().map_err(|e| e.to_string())?.pending;
                    let removed = message.headers.as_ref().is_some_and(|headers| {
                        headers
                            .get("KV-Operation")
                            .is_some_and(|op| op.as_str() != "PUT")
                    });
                    if !removed && out.len() < MAX_SCAN {
                        let key = message
                            .subject
                            .as_str()
                            .strip_prefix(&head)
                            .map(state_key)
                            .unwrap_or_default();
                        out.push((key, message.payload.to_vec()));
                    }
                    if left == 0 {
                        break;
                    }
                }
                Ok(out)
            })
            .await?;
        found.sort_by(|a, b| a.0.cmp(&b.0));
        Ok(found)
    }
}

/// A state key as an entry's key: segments as tokens.
fn entry_key(key: &str) -> String {
    key.split('/')
        .map(|segment| segment.replace('=', "=3D").replace('.', "=2E"))
        .collect::<Vec<_>>()
        .join(".")
}

/// An entry's key as the state key it was made of.
fn state_key(entry: &str) -> String {
    entry
        .split('.')
        .map(|token| token.replace("=2E", ".").replace("=3D", "="))
        .collect::<Vec<_>>()
        .join("/")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_map_to_tokens_and_back() {
        for key in [
            "pairing.json",
            "scheduler/job/j3",
            "usage/2026-11-26/claude-3=2E5",
            "a=3D.b",
        ] {
            let entry = entry_key(key);
            assert_eq!(state_key(&entry), key, "{entry}");
            assert_eq!(entry.split('.').count(), key.split('/').count(), "{entry}");
        }
    }
}
