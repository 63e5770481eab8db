//! switchboard-sessions: what a chat remembers, in memory and on disk.
//!
//! A [`Session`] keeps the last N messages (50 by default) and trims whole turns from the
//! front, so history never starts with a tool result and never keeps a result without its
//! call. The [`JsonlStore`] appends every message to one JSONL file per session, reads the
//! tail back on start (skipping a torn last line) and compacts atomically.
//!
//! # Layout
//! - `session`: [`Session`], the in-memory window over a conversation.
//! - `trim`: the pure trimming and repair rules, unit-tested edge by edge.
//! - `store`: the [`SessionStore`] trait and what a load returns.
//! - `jsonl`: [`JsonlStore`], the on-disk store.
//! - `record`: the file format (one record per line) and reading a file's tail back.
//! - `durable`: files of whole records — appended whole or not at all, a torn tail cut,
//!   replaced atomically.
//! - `file_name`: a session's file name from its key (percent-encoded, long ones hashed).
//! - `transcript`: a session's whole transcript on disk (its file, the history segments
//!   compaction keeps, its archives) and reading what was said in it, each message once.
//! - `error`: [`StoreError`].
//! - `state`: [`FileState`], the daemon's small documents as files (one process's
//!   `StateStore`); `versions`: a document changed at every model call, as its versions.

pub mod durable;
mod error;
mod file_name;
mod jsonl;
mod lanes;
mod record;
mod session;
mod state;
mod store;
pub mod transcript;
mod trim;
mod versions;

pub use error::StoreError;
pub use jsonl::JsonlStore;
pub use record::{INBOUND_MEMORY, batch_lines, read_lines, snapshot_lines};
pub use session::Session;
pub use state::FileState;
pub use store::{
    Batch, InboundState, Loaded, Revision, SessionInfo, SessionStore, Snapshot, StoreHealth,
};
pub use trim::{MISSING_RESULT, repair, trim};
