//! One agent's index on disk, the database itself: its layout ([`VERSION`], the schema),
//! what opening it and reading its totals need, and its errors. Writing it is `index`'s,
//! searching it `search`'s.
//!
//! The index is a cache of the transcripts and memory files, never the record: a database
//! missing, unreadable or of another [`VERSION`] is built again from them.

use std::path::{Path, PathBuf};

use rusqlite::Connection;

/// The layout of the database; another one is rebuilt.
pub(crate) const VERSION: i64 = 4;

/// How long a write waits for another writer (a `switchboard memory reindex` beside the
/// daemon) before it fails.
pub(crate) const BUSY: std::time::Duration = std::time::Duration::from_secs(10);

/// The layout. `said_fts` holds the text (once) and what searches filter on without a second
/// table (the chat, the time, who); `said` maps each row to its file and keeps what changes
/// (archived), indexed for deletes and `/new`. Rows of chats have positive ids, rows of memory
/// files negative ones, so a search of chats alone is a rowid range, free in FTS5.
///
/// On a cluster, `files` holds generations of the shared sessions (`said:GENERATION:CHAT`,
/// with the copies still to skip when a window spans pieces and how much of it came in the
/// chat's own records, `live`, -1 once one of those was missed), `generations` each chat's
/// current one, the last a `/new` closed and the position of its records last taken, and `feed` the two streams followed (1: sessions, 2: history) and the position
/// last taken of each (see `pieces`).
pub(crate) const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS files (
    id INTEGER PRIMARY KEY,
    key TEXT NOT NULL UNIQUE,
    path TEXT NOT NULL,
    head BLOB NOT NULL,
    offset INTEGER NOT NULL,
    stamp INTEGER NOT NULL DEFAULT 0,
    archived INTEGER NOT NULL DEFAULT 0,
    copies INTEGER NOT NULL DEFAULT 0,
    generation INTEGER NOT NULL DEFAULT 0,
    live INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS generations (
    session TEXT PRIMARY KEY,
    generation INTEGER NOT NULL,
    archived INTEGER NOT NULL DEFAULT 0,
    last INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS feed (
    id INTEGER PRIMARY KEY CHECK (id IN (1, 2)),
    stream TEXT NOT NULL,
    position INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS said (
    id INTEGER PRIMARY KEY,
    file INTEGER NOT NULL,
    session TEXT,
    archived INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS said_file ON said(file);
CREATE INDEX IF NOT EXISTS said_session ON said(session);
CREATE VIRTUAL TABLE IF NOT EXISTS said_fts USING fts5(
    text, session UNINDEXED, at UNINDEXED, who UNINDEXED,
    tokenize='unicode61 remove_diacritics 2'
);
";

/// Why the index could not do something.
#[derive(Debug, thiserror::Error)]
pub enum IndexError {
    /// SQLite refused.
    #[error("{path}: {source}")]
    Sql {
        /// The database.
        path: PathBuf,
        /// What SQLite said.
        source: rusqlite::Error,
    },
    /// A piece of a cluster's stream came to an index that follows none (it was cleared
    /// since): follow the stream again, from where the index says.
    #[error("the memory index was cleared: following the sessions stream again from its start")]
    Unfollowed,
    /// A chat's records came with a gap before them: what was stored for `session` after
    /// position `after` and before this piece was not taken (read it and take it first).
    #[error("the memory index missed records of {session} after position {after}")]
    Missed {
        /// The chat.
        session: String,
        /// The position of its records last taken.
        after: u64,
    },
    /// A transcript or memory file could not be read.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
}

/// What one agent's index covers.
#[derive(Clone, Debug)]
pub struct Sources {
    /// Its sessions directory (`<state_dir>/sessions`); `None` on a cluster, whose sessions
    /// come as pieces of its stream ([`Index::take`](crate::index::Index::take)).
    pub sessions: Option<PathBuf>,
    /// Its workspace (for `MEMORY.md` and `memory/*.md`).
    pub workspace: PathBuf,
}

/// What a pass over the sources did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Pass {
    /// Files read (at least in part).
    pub files: usize,
    /// Messages and note chunks added.
    pub added: usize,
    /// Rows dropped with files that are gone or changed.
    pub dropped: usize,
}

/// What an index holds.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct Counts {
    /// Messages and note chunks.
    pub entries: u64,
    /// Of them, from conversations `/new` closed.
    pub archived: u64,
    /// Chats.
    pub sessions: u64,
    /// Files read.
    pub files: u64,
    /// The database's size on disk, in bytes (with its write-ahead log).
    pub bytes: u64,
}

pub(crate) fn counts(conn: &Connection, path: &Path) -> Result<Counts, IndexError> {
    let sql = sql_error(path);
    let (entries, archived, sessions): (i64, i64, i64) = conn
        .query_row(
            "SELECT count(*), coalesce(sum(archived), 0), count(DISTINCT session) FROM said",
            [],
            |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?)),
        )
        .map_err(sql)?;
    let files: i64 = conn
        .query_row("SELECT count(*) FROM files", [], |row| row.get(0))
        .map_err(sql)?;
    let bytes = [path.to_owned(), wal_of(path)]
        .iter()
        .filter_map(|p| std::fs::metadata(p).ok())
        .map(|m| m.len())
        .sum();
    Ok(Counts {
        entries: entries.unsigned_abs(),
        archived: archived.unsigned_abs(),
        sessions: sessions.unsigned_abs(),
        files: files.unsigned_abs(),
        bytes,
    })
}

pub(crate) fn wal_of(path: &Path) -> PathBuf {
    let mut wal = path.as_os_str().to_owned();
    wal.push("-wal");
    PathBuf::from(wal)
}

/// Removes a database and its write-ahead files.
pub(crate) fn remove_database(path: &Path) -> Result<(), IndexError> {
    for suffix in ["", "-wal", "-shm"] {
        let mut name = path.as_os_str().to_owned();
        name.push(suffix);
        match std::fs::remove_file(&name) {
            Ok(()) => {}
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => {}
            Err(err) => return Err(io_error(path)(err)),
        }
    }
    Ok(())
}

pub(crate) fn create_private_dir(dir: &Path) -> Result<(), IndexError> {
    switchboard_sessions::durable::create_private_dir(dir).map_err(io_error(dir))
}

pub(crate) fn sql_error(path: &Path) -> impl Fn(rusqlite::Error) -> IndexError + Copy + '_ {
    move |source| IndexError::Sql {
        path: path.to_owned(),
        source,
    }
}

pub(crate) fn io_error(path: &Path) -> impl Fn(std::io::Error) -> IndexError + Copy + '_ {
    move |source| IndexError::Io {
        path: path.to_owned(),
        source,
    }
}
