//! The [`SessionStore`] trait: where sessions are kept between turns and restarts.

use switchboard_core::{ChatMessage, SessionKey, Usage};

use crate::error::StoreError;

/// What [`SessionStore::load`] read back.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Loaded {
    /// The messages, oldest first (not yet trimmed or repaired).
    pub messages: Vec<ChatMessage>,
    /// Tokens spent over the session's life.
    pub usage: Usage,
    /// How many records the file holds; the caller compacts when it grows.
    pub records: usize,
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

/// Durable storage of sessions. Calls are short blocking writes (an append is one
/// `write` to the page cache), made from the session's own worker.
pub trait SessionStore: Send + Sync + 'static {
    /// Reads a session back; a session never written loads empty.
    fn load(&self, key: &SessionKey) -> Result<Loaded, StoreError>;

    /// Appends messages and, when given, the tokens a turn spent, in one write; they are
    /// with the OS before this returns. When it fails, the file holds no part of them.
    fn append(
        &self,
        key: &SessionKey,
        messages: &[ChatMessage],
        usage: Option<Usage>,
    ) -> Result<(), StoreError>;

    /// Replaces the session's records with `messages` and the usage total, atomically.
    fn compact(
        &self,
        key: &SessionKey,
        messages: &[ChatMessage],
        usage: Usage,
    ) -> Result<(), StoreError>;

    /// The session left memory (its worker exited): drop what is kept open for it.
    fn release(&self, _key: &SessionKey) {}

    /// Moves the session aside (for `/new`); the next load starts empty.
    fn archive(&self, key: &SessionKey) -> Result<(), StoreError>;

    /// Whether writes are succeeding.
    fn health(&self) -> StoreHealth {
        StoreHealth::Ok
    }
}
