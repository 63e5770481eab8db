//! [`JsonlStore`]: one append-only JSONL file per session under the state directory.
//!
//! Each line is one record: a message (`{"role":...}`), a usage total (`{"usage":...}`), or
//! how far an inbound message got (`{"inbound":{"id":...,"state":...}}`).
//! Appends go straight to the file (one `write` each, no user-space buffer), so a record
//! is with the OS before the reply leaves; a process crash loses nothing, a power loss at
//! most the last records. An append that fails (a full disk) is cut back to the last whole
//! record, so the next record is never glued onto a partial one. Compaction writes a temp
//! file, fsyncs it and renames it over the old one, so a file is always either the old or
//! the new version.

use std::collections::{HashMap, HashSet};
use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use switchboard_core::{ChatMessage, SessionKey};

use crate::durable::{append_whole, cut_partial_tail};
use crate::error::StoreError;
use crate::file_name::{file_stem, key_of};
use crate::lanes::Lanes;
use crate::record::{self, batch_lines, now_millis, snapshot_lines};
use crate::store::{Batch, Loaded, Revision, SessionInfo, SessionStore, Snapshot, StoreHealth};
use crate::transcript::{ARCHIVE_DIR, HISTORY_DIR};

/// At most this many session files are kept open between appends (one per active session);
/// past it, appends open and close the file each time.
const OPEN_FILES: usize = 256;

/// The store's file work runs on at most this many threads of its own ([`Lanes`]).
const LANES: usize = 4;
/// A lane leaves after this long without work (tokio's blocking threads wait as long).
const LANE_IDLE: Duration = Duration::from_secs(10);

/// The on-disk session store. Its file work runs on [`LANES`] threads of its own.
#[derive(Clone, Debug)]
pub struct JsonlStore {
    files: Arc<Files>,
    lanes: Arc<Lanes>,
}

/// The store's files and what it remembers about them; its calls block.
#[derive(Debug)]
struct Files {
    dir: PathBuf,
    /// Files of active sessions, kept open so an append is one `write`. An entry is
    /// dropped when its session's worker exits (`release`) and before its file is replaced
    /// (compaction) or moved (archive). Held only to look up, insert or remove.
    open: Mutex<HashMap<SessionKey, Arc<File>>>,
    /// Sessions whose file may end in a partial record: a failed append could not be cut
    /// back. The next append cuts the file to its last whole record first.
    damaged: Mutex<HashSet<SessionKey>>,
    /// Whether the last write failed; checked without a lock on every successful write.
    degraded: AtomicBool,
    /// Writes that failed since the store was opened.
    failed_writes: AtomicU64,
    /// The last write error, for `/healthz`. Held only to read or replace it.
    last_error: Mutex<Option<String>>,
}

impl JsonlStore {
    /// A store keeping its files in `<state_dir>/sessions`, created (mode 0700) if missing.
    /// Fails when the directory cannot be created or does not take a test write, so a daemon
    /// whose state directory is read-only or full refuses to start instead of losing
    /// messages later.
    pub fn open(state_dir: &Path) -> Result<Self, StoreError> {
        let dir = state_dir.join("sessions");
        create_private_dir(&dir).map_err(|err| match err {
            StoreError::Io { source, .. } => StoreError::Unwritable {
                dir: dir.clone(),
                source,
            },
            other => other,
        })?;
        check_writable(&dir)?;
        Ok(Self {
            files: Arc::new(Files {
                dir,
                open: Mutex::new(HashMap::new()),
                damaged: Mutex::new(HashSet::new()),
                degraded: AtomicBool::new(false),
                failed_writes: AtomicU64::new(0),
                last_error: Mutex::new(None),
            }),
            lanes: Arc::new(Lanes::new(LANES, LANE_IDLE)),
        })
    }

    /// The file of a session.
    pub fn path_of(&self, key: &SessionKey) -> PathBuf {
        self.files.path_of(key)
    }

    /// Runs `work` on one of the store's lanes.
    async fn blocking<T: Send + 'static>(
        &self,
        work: impl FnOnce(&Files) -> Result<T, StoreError> + Send + 'static,
    ) -> Result<T, StoreError> {
        let files = self.files.clone();
        let dir = files.dir.clone();
        self.lanes
            .run(move || work(&files))
            .await
            .map_err(|err| StoreError::Io {
                path: dir,
                source: std::io::Error::other(format!("the store's work did not finish: {err}")),
            })?
    }

    /// The most threads the store's file work ran on at once.
    #[cfg(test)]
    fn most_threads(&self) -> usize {
        self.lanes.peak()
    }
}

impl Files {
    /// The file of a session.
    fn path_of(&self, key: &SessionKey) -> PathBuf {
        self.dir.join(format!("{}.jsonl", file_stem(key)))
    }

    /// The tail of a session's file, read without changing anything (see
    /// [`record::read_tail`]).
    fn read_tail(&self, key: &SessionKey) -> Result<Option<(Loaded, bool)>, StoreError> {
        record::read_tail(&self.path_of(key), key)
    }

    /// Appends whole records (`buf`, lines) to the session's file.
    fn append_lines(&self, key: &SessionKey, buf: &[u8]) -> Result<(), StoreError> {
        let path = self.path_of(key);
        let written = self.repair_if_damaged(key, &path).and_then(|()| {
            let file = self.file(key, &path)?;
            append_whole(&*file, buf).map_err(|failure| {
                self.forget(key);
                if !failure.cut_back {
                    lock(&self.damaged).insert(key.clone());
                }
                StoreError::io(&path)(failure.error)
            })
        });
        self.note(written)
    }

    /// Cuts the session's file back to its last whole record if an earlier append left a
    /// partial one that could not be removed then.
    fn repair_if_damaged(&self, key: &SessionKey, path: &Path) -> Result<(), StoreError> {
        if !lock(&self.damaged).contains(key) {
            return Ok(());
        }
        cut_partial_tail(path).map_err(StoreError::io(path))?;
        lock(&self.damaged).remove(key);
        tracing::warn!(session = %key, path = %path.display(),
            "cut a partial record off the end of a session file");
        Ok(())
    }

    /// Records the outcome of a write for [`SessionStore::health`].
    fn note<T>(&self, result: Result<T, StoreError>) -> Result<T, StoreError> {
        match &result {
            Ok(_) => {
                if self.degraded.load(Ordering::Relaxed) {
                    self.degraded.store(false, Ordering::Relaxed);
                    *lock(&self.last_error) = None;
                    tracing::info!("the session store writes again");
                }
            }
            Err(err) => {
                self.failed_writes.fetch_add(1, Ordering::Relaxed);
                *lock(&self.last_error) = Some(err.to_string());
                self.degraded.store(true, Ordering::Relaxed);
            }
        }
        result
    }

    /// The session's file, opened for appending (kept open while there is room).
    fn file(&self, key: &SessionKey, path: &Path) -> Result<Arc<File>, StoreError> {
        let mut open = self.open.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(file) = open.get(key) {
            return Ok(file.clone());
        }
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .map(Arc::new)
            .map_err(StoreError::io(path))?;
        if open.len() < OPEN_FILES {
            open.insert(key.clone(), file.clone());
        }
        Ok(file)
    }

    fn forget(&self, key: &SessionKey) {
        lock(&self.open).remove(key);
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Makes sure the directory takes a write, so a read-only or full state directory stops the
/// daemon at start with a clear error rather than losing messages later.
fn check_writable(dir: &Path) -> Result<(), StoreError> {
    let probe = dir.join(".write-check");
    let result = (|| {
        let mut file = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .open(&probe)?;
        file.write_all(b"switchboard checks that it can write here\n")?;
        file.sync_all()?;
        fs::remove_file(&probe)
    })();
    result.map_err(|source| StoreError::Unwritable {
        dir: dir.to_path_buf(),
        source,
    })
}

impl Files {
    fn load(&self, key: &SessionKey) -> Result<Loaded, StoreError> {
        let Some((mut loaded, needs_repair)) = self.read_tail(key)? else {
            return Ok(Loaded::default());
        };
        // A torn last line, or a whole record whose newline was lost: rewrite now, or the
        // next append would be glued onto it.
        if needs_repair {
            let snapshot = Snapshot {
                messages: &loaded.messages,
                usage: loaded.usage,
                inbound: &loaded.inbound,
                summary: loaded.summary.as_deref(),
            };
            self.compact(key, &snapshot_lines(&snapshot)?)?;
            loaded.records = snapshot_records(&snapshot);
        }
        lock(&self.damaged).remove(key);
        Ok(loaded)
    }

    fn list(&self) -> Result<Vec<SessionInfo>, StoreError> {
        let entries = match std::fs::read_dir(&self.dir) {
            Ok(entries) => entries,
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(source) => {
                return Err(StoreError::Io {
                    path: self.dir.clone(),
                    source,
                });
            }
        };
        let mut sessions: Vec<SessionInfo> = entries
            .filter_map(Result::ok)
            .filter_map(|entry| {
                let name = entry.file_name().into_string().ok()?;
                // Archives (`.jsonl.<millis>`) and temporary files are not sessions.
                let stem = name.strip_suffix(".jsonl")?.to_owned();
                let meta = entry.metadata().ok().filter(std::fs::Metadata::is_file)?;
                Some(SessionInfo {
                    key: key_of(&stem),
                    name: stem,
                    modified: meta.modified().unwrap_or(UNIX_EPOCH),
                    bytes: meta.len(),
                })
            })
            .collect();
        sessions.sort_by(|a, b| b.modified.cmp(&a.modified).then(a.name.cmp(&b.name)));
        Ok(sessions)
    }

    /// Replaces the session's file with `lines` (a snapshot's records).
    fn compact(&self, key: &SessionKey, lines: &[u8]) -> Result<(), StoreError> {
        let result = self.rewrite(key, lines);
        if result.is_ok() {
            lock(&self.damaged).remove(key);
        }
        self.note(result)
    }

    fn archive(&self, key: &SessionKey) -> Result<(), StoreError> {
        let result = self.move_aside(key);
        if result.is_ok() {
            lock(&self.damaged).remove(key);
        }
        self.note(result)
    }

    fn health(&self) -> StoreHealth {
        match lock(&self.last_error).clone() {
            None => StoreHealth::Ok,
            Some(error) => StoreHealth::Degraded {
                error,
                failed_writes: self.failed_writes.load(Ordering::Relaxed),
            },
        }
    }

    /// Replaces the session's file with `lines`; the file replaced is kept as a history
    /// segment first (see [`crate::transcript`]), so what leaves the window stays on record.
    fn rewrite(&self, key: &SessionKey, lines: &[u8]) -> Result<(), StoreError> {
        self.forget(key);
        let path = self.path_of(key);
        let tmp = path.with_extension("jsonl.tmp");
        let mut file = File::create(&tmp).map_err(StoreError::io(&tmp))?;
        file.write_all(lines).map_err(StoreError::io(&tmp))?;
        file.sync_all().map_err(StoreError::io(&tmp))?;
        drop(file);
        self.keep_history(key, &path)?;
        fs::rename(&tmp, &path).map_err(StoreError::io(&path))?;
        sync_dir(&self.dir)
    }

    /// Links the session's file into `history/` under a name of its own (no byte copied).
    fn keep_history(&self, key: &SessionKey, path: &Path) -> Result<(), StoreError> {
        if !path.exists() {
            return Ok(());
        }
        let history = self.dir.join(HISTORY_DIR);
        create_private_dir(&history)?;
        let stem = file_stem(key);
        let mut millis = now_millis().max(0).unsigned_abs();
        loop {
            let segment = history.join(format!("{stem}.{millis}.jsonl"));
            match fs::hard_link(path, &segment) {
                Ok(()) => break,
                // Two compactions of one chat within a millisecond.
                Err(err) if err.kind() == std::io::ErrorKind::AlreadyExists => millis += 1,
                Err(err) => return Err(StoreError::io(&segment)(err)),
            }
        }
        sync_dir(&history)
    }

    fn move_aside(&self, key: &SessionKey) -> Result<(), StoreError> {
        self.forget(key);
        let path = self.path_of(key);
        if !path.exists() {
            return Ok(());
        }
        let archive = self.dir.join(ARCHIVE_DIR);
        create_private_dir(&archive)?;
        let millis = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_millis())
            .unwrap_or_default();
        let target = archive.join(format!("{}.{millis}.jsonl", file_stem(key)));
        fs::rename(&path, &target).map_err(StoreError::io(&path))?;
        sync_dir(&self.dir)
    }
}

#[async_trait::async_trait]
impl SessionStore for JsonlStore {
    async fn load(&self, key: &SessionKey) -> Result<Loaded, StoreError> {
        let key = key.clone();
        self.blocking(move |files| files.load(&key)).await
    }

    async fn transcript(&self, key: &SessionKey) -> Result<Vec<ChatMessage>, StoreError> {
        let key = key.clone();
        self.blocking(move |files| {
            Ok(files
                .read_tail(&key)?
                .map(|(loaded, _)| loaded.messages)
                .unwrap_or_default())
        })
        .await
    }

    async fn append(
        &self,
        key: &SessionKey,
        _: Revision,
        batch: &Batch<'_>,
    ) -> Result<Revision, StoreError> {
        let lines = batch_lines(batch)?;
        let key = key.clone();
        self.blocking(move |files| files.append_lines(&key, &lines))
            .await?;
        Ok(Revision::default())
    }

    fn release(&self, key: &SessionKey) {
        self.files.forget(key);
    }

    async fn list(&self) -> Result<Vec<SessionInfo>, StoreError> {
        self.blocking(Files::list).await
    }

    async fn compact(
        &self,
        key: &SessionKey,
        _: Revision,
        snapshot: &Snapshot<'_>,
    ) -> Result<Revision, StoreError> {
        let lines = snapshot_lines(snapshot)?;
        let key = key.clone();
        self.blocking(move |files| files.compact(&key, &lines))
            .await?;
        Ok(Revision::default())
    }

    async fn archive(&self, key: &SessionKey, _: Revision) -> Result<Revision, StoreError> {
        let key = key.clone();
        self.blocking(move |files| files.archive(&key)).await?;
        Ok(Revision::default())
    }

    fn health(&self) -> StoreHealth {
        self.files.health()
    }
}

/// How many records a rewrite with `snapshot` holds.
pub(crate) fn snapshot_records(snapshot: &Snapshot<'_>) -> usize {
    let copies = usize::from(!snapshot.messages.is_empty());
    snapshot.inbound.len() + 1 + copies + snapshot.messages.len()
}

pub(crate) fn create_private_dir(dir: &Path) -> Result<(), StoreError> {
    crate::durable::create_private_dir(dir).map_err(StoreError::io(dir))
}

fn sync_dir(dir: &Path) -> Result<(), StoreError> {
    crate::durable::sync_dir(dir).map_err(StoreError::io(dir))
}

#[cfg(test)]
#[path = "jsonl_tests.rs"]
mod tests;
