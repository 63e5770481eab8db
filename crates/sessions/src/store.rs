//! The [`SessionStore`] trait: where sessions are kept between turns and restarts.

use switchboard_core::{ChatMessage, MessageId, SessionKey, TurnEnd, Usage};

use crate::error::StoreError;

/// How far the handling of an inbound message (one with a platform id) has got. Written to
/// the session's file as it advances, so a message delivered again after a crash is taken
/// up where it was left, and answered exactly once.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum InboundState {
    /// Its user message is saved and its turn runs (or ran until a crash).
    Received,
    /// Its turn ended; the answer is saved but may not have reached the chat.
    Answered {
        /// How the turn ended.
        end: TurnEnd,
        /// The error the chat was told, when the turn failed (its answer is not a message).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        error: Option<String>,
    },
    /// Its answer reached the chat (or the command was carried out): done for good.
    Delivered,
}

/// What one [`SessionStore::append`] writes, in one write and in this order: the messages,
/// the usage, the inbound state.
#[derive(Clone, Copy, Debug, Default)]
pub struct Batch<'a> {
    /// Messages for history.
    pub messages: &'a [ChatMessage],
    /// Tokens a turn spent.
    pub usage: Option<Usage>,
    /// How far an inbound message has got.
    pub inbound: Option<(&'a MessageId, &'a InboundState)>,
}

impl<'a> Batch<'a> {
    /// Messages only.
    pub fn messages(messages: &'a [ChatMessage]) -> Self {
        Self {
            messages,
            ..Self::default()
        }
    }
}

/// What a session file is rewritten with ([`SessionStore::compact`]).
#[derive(Clone, Copy, Debug)]
pub struct Snapshot<'a> {
    /// The window of history.
    pub messages: &'a [ChatMessage],
    /// Tokens spent over the session's life.
    pub usage: Usage,
    /// The recent inbound messages and how far each got.
    pub inbound: &'a [(MessageId, InboundState)],
    /// The running summary of what left the window (`[memory] summarize`).
    pub summary: Option<&'a str>,
}

/// Where a session's record stood when its writer last read or wrote it: every write is
/// made *after* a revision, and returns the next.
///
/// A store that several processes write (a cluster's) refuses a write whose revision is no
/// longer the record's last — another writer moved it on meanwhile — with
/// [`StoreError::Stale`]: the writer's picture of the session is out of date, and it must
/// read it again and decide anew, never write again blindly. So a worker that lost its
/// partition while paused cannot add a turn, or compact away records it never saw. A store
/// one process writes (the files of one host) keeps no revisions: it returns and ignores
/// [`Revision::default`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Revision(pub u64);

/// What [`SessionStore::load`] read back.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Loaded {
    /// The messages, oldest first (not yet trimmed or repaired).
    pub messages: Vec<ChatMessage>,
    /// Tokens spent over the session's life.
    pub usage: Usage,
    /// The recent inbound messages and their last state, oldest first.
    pub inbound: Vec<(MessageId, InboundState)>,
    /// How many records the file holds; the caller compacts when it grows.
    pub records: usize,
    /// Where the record stood when it was read: the next write is made after it.
    pub revision: Revision,
    /// The last running summary of what left the window, if one was written.
    pub summary: Option<String>,
}

/// Whether the store is saving what it is given, for `/healthz`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum StoreHealth {
    /// The last write succeeded.
    #[default]
    Ok,
    /// The last write failed; the next one that succeeds clears this.
    Degraded {
        /// The last error.
        error: String,
        /// Writes that failed since the store was opened.
        failed_writes: u64,
    },
}

/// A session on record, as [`SessionStore::list`] names it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SessionInfo {
    /// Its key; `None` when the store keeps it under a name the key cannot be read back
    /// from (a very long chat id, kept by a hash).
    pub key: Option<SessionKey>,
    /// The name it is kept under.
    pub name: String,
    /// When it was last written.
    pub modified: std::time::SystemTime,
    /// Its size on record, in bytes.
    pub bytes: u64,
}

/// Durable storage of sessions, shared by every worker that may run a session (one process,
/// or the hosts of a cluster).
///
/// Calls are async: a store on files does its reads, writes and fsyncs on the runtime's
/// blocking threads, a store on the network awaits its server, and neither holds up the
/// runtime's threads meanwhile. A session is written only by its own worker, one call at a
/// time — and on a cluster, where a worker may not know yet that its session moved to
/// another, every write is conditional on the [`Revision`] it was made after.
#[async_trait::async_trait]
pub trait SessionStore: Send + Sync + 'static {
    /// Reads a session back; a session never written loads empty.
    async fn load(&self, key: &SessionKey) -> Result<Loaded, StoreError>;

    /// Appends a batch in one write, after `revision`; it is with the OS (or the server)
    /// before this returns, and the session's new revision is returned. When it fails, the
    /// session holds no part of it; [`StoreError::Stale`] when the session moved past
    /// `revision`.
    async fn append(
        &self,
        key: &SessionKey,
        revision: Revision,
        batch: &Batch<'_>,
    ) -> Result<Revision, StoreError>;

    /// Replaces the session's records with a snapshot, atomically, after `revision`: it
    /// never drops a record the writer has not seen ([`StoreError::Stale`] instead).
    async fn compact(
        &self,
        key: &SessionKey,
        revision: Revision,
        snapshot: &Snapshot<'_>,
    ) -> Result<Revision, StoreError>;

    /// The session left memory (its worker exited): drop what is kept open for it.
    fn release(&self, _key: &SessionKey) {}

    /// The session's messages on record, read without changing anything — safe while the
    /// session's worker appends (`load` may repair the record, which only its owner may do).
    async fn transcript(&self, key: &SessionKey) -> Result<Vec<ChatMessage>, StoreError>;

    /// Whether the session has a conversation on record.
    async fn has_history(&self, key: &SessionKey) -> bool {
        self.transcript(key)
            .await
            .is_ok_and(|messages| !messages.is_empty())
    }

    /// Moves the session aside (for `/new`), after `revision`; the next load starts empty.
    async fn archive(&self, key: &SessionKey, revision: Revision) -> Result<Revision, StoreError>;

    /// The sessions on record, most recently written first (for the operator's panel). A
    /// store that cannot list says none.
    async fn list(&self) -> Result<Vec<SessionInfo>, StoreError> {
        Ok(Vec::new())
    }

    /// Whether writes are succeeding.
    fn health(&self) -> StoreHealth {
        StoreHealth::Ok
    }
}
