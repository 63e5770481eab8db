//! Writing one agent's index: reading transcript files on and memory files again.
//!
//! What the index holds of a transcript file is keyed by the file's inode, not its name —
//! compaction links a file into `history/` and `/new` moves it to `archive/`, and neither
//! changes what was said in it — with how far it was read (`offset`) and its first bytes
//! (`head`, so an inode reused by another file is told apart). Each file is brought up to date
//! in one transaction: its new rows and its new offset land together or not at all, so an
//! index killed at any moment holds every message it holds once, and the next pass reads on
//! from where the last commit left off.
//!
//! On a cluster there are no files here: the shared sessions come as [`Piece`]s of the
//! cluster's streams, taken by `pieces` ([`Index::take`]).

use std::io::{Read, Seek, SeekFrom};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use rusqlite::{Connection, OptionalExtension, params};
use switchboard_sessions::transcript::{
    Part, Piece, TranscriptFile, file_of, read_said, transcript_files,
};

use crate::db::{
    BUSY, Counts, IndexError, Pass, SCHEMA, Sources, VERSION, counts, create_private_dir, io_error,
    remove_database, sql_error,
};
use crate::notes;
use crate::pieces;
use crate::rows::{Row, drop_rows, insert, signed, spoken};

/// Bytes of a file compared to tell a reused inode from the file it was.
const HEAD: usize = 64;

/// The most read of a file at once; a longer file is read in steps, each committed.
const STEP: u64 = 16 * 1024 * 1024;

/// A database of one agent's index, open for writing.
pub struct Index {
    conn: Connection,
    path: PathBuf,
    sources: Sources,
}

impl std::fmt::Debug for Index {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Index").field("path", &self.path).finish()
    }
}

impl Index {
    /// Opens (creating, or rebuilding when it is of another version or unreadable) the
    /// database at `path`.
    pub fn open(path: &Path, sources: Sources) -> Result<Self, IndexError> {
        if let Some(dir) = path.parent() {
            create_private_dir(dir)?;
        }
        match Self::open_as_is(path, &sources) {
            Ok(index) => Ok(index),
            Err(err) => {
                tracing::warn!(path = %path.display(), error = %err,
                    "the memory index is unreadable or of another version: building it again");
                remove_database(path)?;
                Self::open_as_is(path, &sources)
            }
        }
    }

    fn open_as_is(path: &Path, sources: &Sources) -> Result<Self, IndexError> {
        let sql = sql_error(path);
        let conn = Connection::open(path).map_err(sql)?;
        conn.busy_timeout(BUSY).map_err(sql)?;
        conn.pragma_update(None, "journal_mode", "WAL")
            .map_err(sql)?;
        conn.pragma_update(None, "synchronous", "NORMAL")
            .map_err(sql)?;
        // The write-ahead log is cut back to this after a checkpoint (a long pass grows it).
        conn.pragma_update(None, "journal_size_limit", 8 * 1024 * 1024)
            .map_err(sql)?;
        let version: i64 = conn
            .pragma_query_value(None, "user_version", |row| row.get(0))
            .map_err(sql)?;
        let empty: bool = conn
            .query_row(
                "SELECT count(*) = 0 FROM sqlite_master WHERE type = 'table'",
                [],
                |row| row.get(0),
            )
            .map_err(sql)?;
        if !empty && version != VERSION {
            return Err(IndexError::Sql {
                path: path.to_owned(),
                source: rusqlite::Error::InvalidParameterName(format!(
                    "index version {version}, this build reads {VERSION}"
                )),
            });
        }
        conn.execute_batch(SCHEMA).map_err(sql)?;
        conn.pragma_update(None, "user_version", VERSION)
            .map_err(sql)?;
        Ok(Self {
            conn,
            path: path.to_owned(),
            sources: sources.clone(),
        })
    }

    /// Forgets everything, to build the index again from its sources.
    pub fn clear(&mut self) -> Result<(), IndexError> {
        self.conn
            .execute_batch(
                "BEGIN IMMEDIATE; DELETE FROM said; DELETE FROM files; DELETE FROM said_fts; \
                 DELETE FROM generations; DELETE FROM feed; COMMIT;",
            )
            .map_err(sql_error(&self.path))
    }

    /// Brings the whole index up to date: every transcript file and memory file read on from
    /// where it was left, what is gone dropped. `progress` hears of each file done.
    pub fn sync_all(&mut self, mut progress: impl FnMut(&Pass)) -> Result<Pass, IndexError> {
        let mut pass = Pass::default();
        let Some(sessions) = self.sources.sessions.clone() else {
            // A cluster's sessions come as pieces.
            self.sync_notes(&mut pass)?;
            return Ok(pass);
        };
        let files = transcript_files(&sessions).map_err(io_error(&sessions))?;
        let mut present = std::collections::HashSet::with_capacity(files.len());
        for file in &files {
            present.insert(transcript_key(file.inode));
            self.sync_file(file, &mut pass)?;
            progress(&pass);
        }
        pass.dropped += self.drop_missing(&present)?;
        self.sync_notes(&mut pass)?;
        Ok(pass)
    }

    /// Brings one chat's current file up to date (after its worker wrote it).
    pub fn sync_session(&mut self, key: &switchboard_core::SessionKey) -> Result<Pass, IndexError> {
        let mut pass = Pass::default();
        let Some(sessions) = &self.sources.sessions else {
            return Ok(pass);
        };
        let path = file_of(sessions, key);
        let meta = match std::fs::metadata(&path) {
            Ok(meta) => meta,
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(pass),
            Err(err) => return Err(io_error(&path)(err)),
        };
        let file = TranscriptFile {
            stem: String::new(),
            key: Some(key.clone()),
            part: Part::Current,
            millis: 0,
            archived: false,
            inode: (meta.dev(), meta.ino()),
            len: meta.len(),
            path,
        };
        self.sync_file(&file, &mut pass)?;
        Ok(pass)
    }

    /// Marks everything of a chat said so far as archived (`/new` closed its conversation).
    pub fn archive_session(
        &mut self,
        key: &switchboard_core::SessionKey,
    ) -> Result<(), IndexError> {
        let sql = sql_error(&self.path);
        let tx = self.conn.transaction().map_err(sql)?;
        tx.execute(
            "UPDATE said SET archived = 1 WHERE session = ?1 AND archived = 0",
            [key.as_str()],
        )
        .map_err(sql)?;
        tx.execute(
            "UPDATE files SET archived = 1 WHERE id IN (SELECT DISTINCT file FROM said WHERE session = ?1)",
            [key.as_str()],
        )
        .map_err(sql)?;
        tx.commit().map_err(sql)
    }

    /// Where to follow a cluster's two streams (`streams`: their identities, the sessions
    /// stream's and the history stream's) from: after the positions last taken, or from their
    /// starts (forgetting what was taken of other streams, or of none).
    pub fn follow(&mut self, streams: [&str; 2]) -> Result<[u64; 2], IndexError> {
        let followed = pieces::follow(&self.conn, &self.path, streams)?;
        match followed {
            Some(positions) => Ok(positions),
            None => {
                self.clear()?;
                pieces::begin(&self.conn, &self.path, streams)?;
                Ok([0, 0])
            }
        }
    }

    /// Takes a piece of a cluster's streams: what it says that the index does not hold yet,
    /// and its position, in one transaction (see `pieces`).
    pub fn take(&mut self, piece: &Piece, taking: pieces::Taking) -> Result<Pass, IndexError> {
        pieces::take(&mut self.conn, &self.path, piece, taking)
    }

    /// Reads one transcript file on from where the index left it.
    fn sync_file(&mut self, file: &TranscriptFile, pass: &mut Pass) -> Result<(), IndexError> {
        let key = transcript_key(file.inode);
        let head = read_head(&file.path).map_err(io_error(&file.path))?;
        let path = self.path.clone();
        let sql = sql_error(&path);
        let known: Option<(i64, Vec<u8>, i64, bool)> = self
            .conn
            .query_row(
                "SELECT id, head, offset, archived FROM files WHERE key = ?1",
                [&key],
                |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?, row.get(3)?)),
            )
            .optional()
            .map_err(sql)?;
        let session = file
            .key
            .as_ref()
            .map_or_else(|| file.stem.clone(), |key| key.as_str().to_owned());
        let (id, mut offset) = match known {
            Some((id, known_head, offset, archived))
                if same_start(&known_head, &head) && offset.unsigned_abs() <= file.len =>
            {
                let offset = offset.unsigned_abs();
                // Archived by a pass, or by `/new` while the file is still listed as current.
                if file.archived && !archived {
                    let tx = self.conn.transaction().map_err(sql)?;
                    tx.execute("UPDATE said SET archived = 1 WHERE file = ?1", [id])
                        .map_err(sql)?;
                    tx.execute("UPDATE files SET archived = 1 WHERE id = ?1", [id])
                        .map_err(sql)?;
                    tx.commit().map_err(sql)?;
                }
                if offset == file.len {
                    return Ok(());
                }
                (id, offset)
            }
            Some((id, ..)) => {
                // Another file now, or this one cut short: read it afresh.
                pass.dropped += self.drop_file(id)?;
                (self.add_file(&key, file, &head)?, 0)
            }
            None => (self.add_file(&key, file, &head)?, 0),
        };
        pass.files += 1;
        let fallback = file_time(file);
        while offset < file.len {
            let text = read_from(&file.path, offset, (file.len - offset).min(STEP))
                .map_err(io_error(&file.path))?;
            let reading = read_said(&text, offset);
            if reading.end == offset {
                // Only a line still being written: read once it is whole.
                break;
            }
            let tx = self.conn.transaction().map_err(sql)?;
            {
                for said in &reading.said {
                    let Some((who, text)) = spoken(said) else {
                        continue;
                    };
                    let row = Row {
                        file: id,
                        session: Some(&session),
                        at: said.at.or(fallback),
                        who: &who,
                        text,
                        archived: file.archived,
                    };
                    insert(&tx, &row).map_err(sql)?;
                    pass.added += 1;
                }
                tx.execute(
                    "UPDATE files SET offset = ?2, head = ?3, path = ?4 WHERE id = ?1",
                    params![id, signed(reading.end), head, file.path.to_string_lossy()],
                )
                .map_err(sql)?;
            }
            tx.commit().map_err(sql)?;
            offset = reading.end;
        }
        Ok(())
    }

    fn add_file(&self, key: &str, file: &TranscriptFile, head: &[u8]) -> Result<i64, IndexError> {
        self.conn
            .execute(
                "INSERT INTO files (key, path, head, offset, archived) VALUES (?1, ?2, ?3, 0, ?4)",
                params![key, file.path.to_string_lossy(), head, file.archived],
            )
            .map_err(sql_error(&self.path))?;
        Ok(self.conn.last_insert_rowid())
    }

    /// Drops a file and what it said; how many rows went.
    fn drop_file(&mut self, id: i64) -> Result<usize, IndexError> {
        let sql = sql_error(&self.path);
        let tx = self.conn.transaction().map_err(sql)?;
        let dropped = drop_rows(&tx, id).map_err(sql)?;
        tx.execute("DELETE FROM files WHERE id = ?1", [id])
            .map_err(sql)?;
        tx.commit().map_err(sql)?;
        Ok(dropped)
    }

    /// Drops the transcript files no longer on disk.
    fn drop_missing(
        &mut self,
        present: &std::collections::HashSet<String>,
    ) -> Result<usize, IndexError> {
        let gone: Vec<i64> = {
            let mut select = self
                .conn
                .prepare("SELECT id, key FROM files WHERE key LIKE 'inode:%'")
                .map_err(sql_error(&self.path))?;
            let rows = select
                .query_map([], |row| {
                    Ok((row.get::<_, i64>(0)?, row.get::<_, String>(1)?))
                })
                .map_err(sql_error(&self.path))?;
            rows.filter_map(Result::ok)
                .filter(|(_, key)| !present.contains(key))
                .map(|(id, _)| id)
                .collect()
        };
        let mut dropped = 0;
        for id in gone {
            dropped += self.drop_file(id)?;
        }
        Ok(dropped)
    }

    /// Reads the memory files again where they changed (length or modification time).
    pub fn sync_notes(&mut self, pass: &mut Pass) -> Result<(), IndexError> {
        let found = notes::files(&self.sources.workspace);
        let path = self.path.clone();
        let sql = sql_error(&path);
        let known: Vec<(i64, String, i64)> = {
            let mut select = self
                .conn
                .prepare_cached("SELECT id, key, stamp FROM files WHERE key LIKE 'note:%'")
                .map_err(sql)?;
            select
                .query_map([], |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?)))
                .map_err(sql)?
                .filter_map(Result::ok)
                .collect()
        };
        for (id, key, _) in &known {
            if !found.iter().any(|note| note_key(&note.relative) == *key) {
                pass.dropped += self.drop_file(*id)?;
            }
        }
        for note in found {
            let key = note_key(&note.relative);
            let was = known.iter().find(|(_, known, _)| *known == key);
            if was.is_some_and(|(_, _, stamp)| *stamp == note.stamp) {
                continue;
            }
            let text = match notes::read(&note.path) {
                Ok(text) => text,
                Err(err) => {
                    tracing::warn!(path = %note.path.display(), error = %err,
                        "could not read a memory file for the index");
                    continue;
                }
            };
            let tx = self.conn.transaction().map_err(sql)?;
            if let Some((id, ..)) = was {
                pass.dropped += drop_rows(&tx, *id).map_err(sql)?;
                tx.execute("DELETE FROM files WHERE id = ?1", [id])
                    .map_err(sql)?;
            }
            tx.execute(
                "INSERT INTO files (key, path, head, offset, stamp) VALUES (?1, ?2, x'', 0, ?3)",
                params![key, note.relative, note.stamp],
            )
            .map_err(sql)?;
            let id = tx.last_insert_rowid();
            for chunk in notes::chunks(&text) {
                let row = Row {
                    file: id,
                    session: None,
                    at: None,
                    who: &note.relative,
                    text: &chunk,
                    archived: false,
                };
                insert(&tx, &row).map_err(sql)?;
                pass.added += 1;
            }
            tx.commit().map_err(sql)?;
            pass.files += 1;
        }
        Ok(())
    }

    /// What the index holds.
    pub fn counts(&self) -> Result<Counts, IndexError> {
        counts(&self.conn, &self.path)
    }

    /// After a build from scratch: the full-text index merged into one segment (smaller,
    /// faster to search) and the write-ahead log emptied into the database.
    pub fn settle(&self) -> Result<(), IndexError> {
        self.conn
            .execute_batch(
                "INSERT INTO said_fts(said_fts) VALUES ('optimize'); \
                 PRAGMA wal_checkpoint(TRUNCATE);",
            )
            .map_err(sql_error(&self.path))
    }
}

/// When the messages of a file that carry no time of their own were said, at the latest:
/// when it was cut or closed, else when it was last written.
fn file_time(file: &TranscriptFile) -> Option<i64> {
    if file.millis > 0 {
        return i64::try_from(file.millis).ok();
    }
    let modified = std::fs::metadata(&file.path).ok()?.modified().ok()?;
    let millis = modified
        .duration_since(std::time::UNIX_EPOCH)
        .ok()?
        .as_millis();
    i64::try_from(millis).ok()
}

fn transcript_key((dev, ino): (u64, u64)) -> String {
    format!("inode:{dev}:{ino}")
}

fn note_key(relative: &str) -> String {
    format!("note:{relative}")
}

/// Whether two heads are of one file: the shorter (read when the file was shorter) starts
/// the longer.
fn same_start(a: &[u8], b: &[u8]) -> bool {
    let n = a.len().min(b.len());
    a[..n] == b[..n]
}

fn read_head(path: &Path) -> std::io::Result<Vec<u8>> {
    let mut head = Vec::with_capacity(HEAD);
    std::fs::File::open(path)?
        .take(HEAD as u64)
        .read_to_end(&mut head)?;
    Ok(head)
}

fn read_from(path: &Path, offset: u64, len: u64) -> std::io::Result<Vec<u8>> {
    let mut file = std::fs::File::open(path)?;
    file.seek(SeekFrom::Start(offset))?;
    let mut text = Vec::with_capacity(usize::try_from(len).unwrap_or(0));
    file.take(len).read_to_end(&mut text)?;
    Ok(text)
}

#[cfg(test)]
#[path = "index_tests.rs"]
mod tests;
