//! [`NatsStore`]: sessions in a JetStream stream, so that every worker sees one truth.
//!
//! A session is one subject of the sessions stream (`NAME.sessions.AGENT.KEY`); its records
//! are the JSONL store's lines, one message per append. Compaction publishes the snapshot
//! with a subject rollup, which makes the server drop everything before it on that subject
//! in the same step; `/new` rolls it up empty. A load reads the subject's messages in order
//! with an ordered consumer.
//!
//! # Nothing said is dropped
//! What a rollup replaces — the subject's generation, from its first message on — is copied
//! first: by compaction (with `[memory]` on) to `NAME.history.AGENT.KEY.GENERATION` in the
//! history stream, by `/new` to `NAME.archive.AGENT.KEY.MILLIS` in the sessions stream, as
//! the file store links the file it replaces into `history/` and moves it to `archive/`. Each piece of a copy carries its generation (the
//! sequence of the generation's first message) and its byte offset in it
//! ([`GENERATION`], [`OFFSET`]); a history copy cut short (a kill, a stale writer refused at
//! its rollup) is carried on from its last piece by the next compaction, never begun again.
//! The memory index follows all of it ([`SaidFeed`](crate::SaidFeed)).
//!
//! # Fencing
//! A session's [`Revision`] is the stream sequence of the last message on its subject (0: none
//! yet). Every write — an append, a compaction's rollup, `/new`'s empty rollup — is published
//! with `Nats-Expected-Last-Subject-Sequence` set to the revision its writer last saw, so the
//! server refuses it if anyone wrote the subject since: a worker that lost its partition while
//! paused cannot add to a session another worker now answers, and a compaction can never drop
//! a record its writer has not read. The refusal is [`StoreError::Stale`], never retried here.
//! Each message also carries a `Nats-Msg-Id` of its own, so a try repeated after a lost
//! acknowledgement is recognised by the server as the same message (its first sequence comes
//! back) rather than refused as stale.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use async_nats::HeaderMap;
use async_nats::jetstream::stream;
use async_trait::async_trait;
use futures::StreamExt;
use switchboard_core::{AgentName, ChatMessage, SessionKey};
use switchboard_sessions::{
    Batch, Loaded, Revision, SessionInfo, SessionStore, Snapshot, StoreError, StoreHealth,
    batch_lines, read_lines, snapshot_lines,
};

use crate::cluster::Cluster;
use crate::names::untoken;
use copies::{Kept, copy_out};
use wire::{CHUNK_BYTES, failed, last_on, messages_of, next_of};

mod copies;
mod wire;

pub(crate) use copies::{GENERATION, OFFSET};

/// The most of a session read back (its newest records), like the file store's tail.
const MAX_READ_BYTES: usize = 8 * 1024 * 1024;

/// How long one store call may take, tries included, before it fails.
const CALL_TIME: Duration = Duration::from_secs(30);

/// How long one try may take (a read waits on the server for each of the session's
/// messages) before it counts as failed.
const TRY_TIME: Duration = Duration::from_secs(10);

/// The most sessions [`SessionStore::list`] reads the times of.
const LISTED: usize = 500;

/// One agent's sessions on the cluster.
pub struct NatsStore {
    cluster: Cluster,
    agent: String,
    /// Whether compaction keeps the generation it replaces (for the members' memory
    /// indexes; see [`NatsStore::keeping_history`]).
    history: bool,
    failed_writes: AtomicU64,
    last_error: Mutex<Option<String>>,
}

impl std::fmt::Debug for NatsStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NatsStore")
            .field("agent", &self.agent)
            .finish_non_exhaustive()
    }
}

impl NatsStore {
    /// The sessions of `agent` on `cluster`.
    pub fn new(cluster: &Cluster, agent: &AgentName) -> Self {
        Self {
            cluster: cluster.clone(),
            agent: agent.to_string(),
            history: false,
            failed_writes: AtomicU64::new(0),
            last_error: Mutex::new(None),
        }
    }

    /// The store with compaction keeping the generation it replaces (`[memory]` on: the
    /// members' indexes read it). Off, compaction drops it, as the file store did before
    /// history: nothing reads the copies then, and they would grow the history stream with
    /// everything said.
    #[must_use]
    pub fn keeping_history(mut self, keep: bool) -> Self {
        self.history = keep;
        self
    }

    fn subject(&self, key: &SessionKey) -> String {
        self.cluster.names.session_subject(&self.agent, key)
    }

    async fn stream(&self) -> Result<stream::Stream, StoreError> {
        self.cluster
            .js
            .get_stream(self.cluster.names.sessions_stream_name())
            .await
            .map_err(failed)
    }

    /// The records on `subject`, oldest first (at most the newest [`MAX_READ_BYTES`]), and
    /// the subject's revision when they were read.
    async fn read(&self, subject: &str) -> Result<(Vec<u8>, Revision), StoreError> {
        let stream = self.stream().await?;
        let Some(last) = last_on(&stream, subject).await?.map(|last| last.sequence) else {
            return Ok((Vec::new(), Revision(0)));
        };
        let mut messages = messages_of(&stream, subject).await?;
        let mut chunks: std::collections::VecDeque<bytes::Bytes> =
            std::collections::VecDeque::new();
        let mut total = 0usize;
        while let Some((sequence, message)) = next_of(&mut messages).await? {
            total += message.payload.len();
            chunks.push_back(message.payload.clone());
            while total > MAX_READ_BYTES && chunks.len() > 1 {
                total -= chunks.pop_front().map_or(0, |chunk| chunk.len());
            }
            if sequence >= last {
                break;
            }
        }
        let mut text = Vec::with_capacity(total);
        for chunk in chunks {
            text.extend_from_slice(&chunk);
        }
        Ok((text, Revision(last)))
    }

    /// Publishes `lines` on `subject` after `revision`, in messages of whole lines (each
    /// stored before the next is sent; the first a rollup when `rollup`), and returns the
    /// subject's revision after the last. Each try of the whole is one call of [`tried`].
    ///
    /// [`tried`]: NatsStore::tried
    async fn write(
        &self,
        subject: &str,
        revision: Revision,
        lines: &[u8],
        rollup: bool,
    ) -> Result<Revision, StoreError> {
        let pieces = chunks(lines);
        // Ids chosen once, so every try of a piece is the same message to the server.
        let ids: Vec<String> = pieces.iter().map(|_| crate::bus::nuid()).collect();
        self.tried(|| async {
            let mut after = revision;
            for (number, (piece, id)) in pieces.iter().zip(&ids).enumerate() {
                after = wire::publish(
                    &self.cluster.js,
                    subject,
                    (after, id),
                    rollup && number == 0,
                    piece,
                    HeaderMap::new(),
                )
                .await?;
            }
            Ok(after)
        })
        .await
    }

    /// Copies the generation of `key` that a writer at `revision` is about to replace to
    /// where `kept` goes (see [`copy_out`]); how many bytes it has. Stale
    /// when the subject moved past `revision`: what would be copied is not what the writer
    /// knows.
    async fn keep(
        &self,
        key: &SessionKey,
        revision: Revision,
        kept: Kept,
    ) -> Result<u64, StoreError> {
        let subject = self.subject(key);
        let subject = subject.as_str();
        let stream = self.stream().await?;
        let last = last_on(&stream, subject)
            .await?
            .map_or(0, |last| last.sequence);
        if last != revision.0 {
            return Err(StoreError::Stale);
        }
        if last == 0 {
            return Ok(0);
        }
        let copies = match kept {
            Kept::History => self
                .cluster
                .js
                .get_stream(self.cluster.names.history_stream_name())
                .await
                .map_err(failed)?,
            Kept::Archive { .. } => stream.clone(),
        };
        let copy = |generation| kept.subject(&self.cluster.names, &self.agent, key, generation);
        copy_out(&self.cluster.js, (&stream, &copies), (subject, last), &copy).await
    }

    /// Runs `call` until it succeeds or [`CALL_TIME`] is spent (NATS restarting), noting the
    /// outcome for `/healthz`.
    async fn tried<T, F, Fut>(&self, call: F) -> Result<T, StoreError>
    where
        F: Fn() -> Fut,
        Fut: std::future::Future<Output = Result<T, StoreError>>,
    {
        let deadline = tokio::time::Instant::now() + CALL_TIME;
        let mut wait = Duration::from_millis(100);
        let result = loop {
            let attempt = tokio::time::timeout(TRY_TIME, call())
                .await
                .unwrap_or_else(|_| {
                    Err(failed(format!("no answer within {} s", TRY_TIME.as_secs())))
                });
            match attempt {
                Ok(value) => break Ok(value),
                // Decided by the server: trying again would not change it.
                Err(StoreError::Stale) => break Err(StoreError::Stale),
                Err(err) if tokio::time::Instant::now() + wait >= deadline => break Err(err),
                Err(err) => {
                    tracing::debug!(error = %err, "a session call to NATS failed; trying again");
                    tokio::time::sleep(wait).await;
                    wait = (wait * 2).min(Duration::from_secs(2));
                }
            }
        };
        let mut last = self
            .last_error
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        match &result {
            Ok(_) | Err(StoreError::Stale) => *last = None,
            Err(err) => {
                self.failed_writes.fetch_add(1, Ordering::Relaxed);
                *last = Some(err.to_string());
            }
        }
        result
    }
}

#[async_trait]
impl SessionStore for NatsStore {
    async fn load(&self, key: &SessionKey) -> Result<Loaded, StoreError> {
        let subject = self.subject(key);
        let (text, revision) = self.tried(|| self.read(&subject)).await?;
        Ok(Loaded {
            revision,
            ..read_lines(&text, key)
        })
    }

    async fn append(
        &self,
        key: &SessionKey,
        revision: Revision,
        batch: &Batch<'_>,
    ) -> Result<Revision, StoreError> {
        let lines = batch_lines(batch)?;
        self.write(&self.subject(key), revision, &lines, false)
            .await
    }

    async fn compact(
        &self,
        key: &SessionKey,
        revision: Revision,
        snapshot: &Snapshot<'_>,
    ) -> Result<Revision, StoreError> {
        let lines = snapshot_lines(snapshot)?;
        if self.history {
            self.tried(|| self.keep(key, revision, Kept::History))
                .await?;
        }
        self.write(&self.subject(key), revision, &lines, true).await
    }

    async fn transcript(&self, key: &SessionKey) -> Result<Vec<ChatMessage>, StoreError> {
        let subject = self.subject(key);
        let (text, _) = self.tried(|| self.read(&subject)).await?;
        Ok(read_lines(&text, key).messages)
    }

    async fn archive(&self, key: &SessionKey, revision: Revision) -> Result<Revision, StoreError> {
        let millis = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_millis())
            .unwrap_or_default();
        let kept = self
            .tried(|| self.keep(key, revision, Kept::Archive { millis }))
            .await?;
        if kept == 0 {
            return Ok(revision);
        }
        // An empty rollup: the session starts afresh.
        self.write(&self.subject(key), revision, &[], true).await
    }

    async fn list(&self) -> Result<Vec<SessionInfo>, StoreError> {
        let prefix = format!("{}.", self.cluster.names.sessions_of(&self.agent));
        let stream = self.stream().await?;
        let mut subjects = stream
            .info_with_subjects(format!("{prefix}>"))
            .await
            .map_err(failed)?;
        let mut found = Vec::new();
        while let Some(entry) = subjects.next().await {
            let (subject, _count) = entry.map_err(failed)?;
            found.push(subject);
            if found.len() >= LISTED {
                break;
            }
        }
        let mut sessions = Vec::with_capacity(found.len());
        for subject in found {
            let Some(name) = subject.strip_prefix(&prefix).map(str::to_owned) else {
                continue;
            };
            let (modified, bytes) = match stream.get_last_raw_message_by_subject(&subject).await {
                Ok(message) => (
                    UNIX_EPOCH
                        + Duration::from_secs(
                            u64::try_from(message.time.unix_timestamp()).unwrap_or(0),
                        ),
                    message.payload.len() as u64,
                ),
                Err(_) => (UNIX_EPOCH, 0),
            };
            // An archived session's empty rollup: nothing on record.
            if bytes == 0 {
                continue;
            }
            sessions.push(SessionInfo {
                key: untoken(&name).map(|key| SessionKey::from(key.as_str())),
                name,
                modified,
                bytes,
            });
        }
        sessions.sort_by(|a, b| b.modified.cmp(&a.modified).then(a.name.cmp(&b.name)));
        Ok(sessions)
    }

    fn health(&self) -> StoreHealth {
        match self
            .last_error
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
        {
            None => StoreHealth::Ok,
            Some(error) => StoreHealth::Degraded {
                error,
                failed_writes: self.failed_writes.load(Ordering::Relaxed),
            },
        }
    }
}

/// `lines` cut into pieces of whole lines of at most [`CHUNK_BYTES`] (a longer line is a
/// piece of its own).
fn chunks(lines: &[u8]) -> Vec<&[u8]> {
    let mut out = Vec::new();
    let mut start = 0;
    while start < lines.len() {
        let mut end = (start + CHUNK_BYTES).min(lines.len());
        if end < lines.len() {
            match lines[start..end].iter().rposition(|&b| b == b'\n') {
                Some(at) => end = start + at + 1,
                None => {
                    end = lines[start..]
                        .iter()
                        .position(|&b| b == b'\n')
                        .map_or(lines.len(), |at| start + at + 1);
                }
            }
        }
        out.push(&lines[start..end]);
        start = end;
    }
    if out.is_empty() {
        out.push(lines);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_are_cut_at_line_ends_and_nothing_is_lost() {
        let line = format!("{}\n", "x".repeat(1000));
        let text = line.repeat(1200);
        let pieces = chunks(text.as_bytes());
        assert!(pieces.len() > 1);
        assert!(
            pieces
                .iter()
                .all(|piece| piece.ends_with(b"\n") && piece.len() <= CHUNK_BYTES)
        );
        assert_eq!(pieces.concat(), text.as_bytes());
        let long = format!("{}\n", "y".repeat(CHUNK_BYTES + 10));
        assert_eq!(chunks(long.as_bytes()), vec![long.as_bytes()]);
    }
}
