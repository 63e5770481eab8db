//! switchboard-memory: memory that is found again — a full-text index over everything an
//! agent was told and answered (every chat's transcript, archived conversations included) and
//! over its memory files (`MEMORY.md`, `memory/*.md`).
//!
//! The index is SQLite's FTS5 (compiled in, through `rusqlite`): one database per agent in
//! its state directory, so one agent's search can never reach another's chats. It is a
//! cache: built from the transcripts when missing or of another version, brought up to date
//! as messages are written, repaired by a pass at start after a kill.
//!
//! # Layout
//! - `db`: one agent's database — its layout, opening, totals, errors.
//! - `index`: writing it — transcript files read on by inode and offset, memory files by chunk.
//! - `pieces`: writing a cluster's chats — the pieces of its streams, by generation and offset.
//! - `rows`: the rows of what was said, as every writer adds them.
//! - `search`: searching it — ranked or newest-first hits with snippets.
//! - `notes`: the memory files, found and cut in chunks.
//! - `service`: [`MemoryIndex`], the daemon's writer and reader threads; the CLI's
//!   [`reindex`], [`search_now`], [`counts`].
//! - `store`: [`IndexedStore`], a session store that tells the index what it wrote.
//! - `section`: `[memory]` in the config.

mod db;
mod index;
mod notes;
mod pieces;
mod rows;
mod search;
mod section;
mod service;
mod store;

pub use db::{Counts, IndexError, Pass, Sources};
pub use pieces::Taking;
pub use search::Reader;
pub use section::MemorySection;
pub use service::{Home, MemoryIndex, Standing, Untaken, counts, reindex, search_now};
pub use store::IndexedStore;
