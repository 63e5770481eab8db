//! [`FileState`]: the [`StateStore`] of one process — each document a file under the state
//! directory, named by its key (`pairing.json` is `<state_dir>/pairing.json`, as it always
//! was). A change is made under an exclusive lock on a file beside it (`pairing.lock`), so
//! the daemon and the operator's commands never interleave, and the file is replaced
//! atomically ([`durable::replace`]).
//!
//! A document changed with [`StateStore::update_often`] (what a chat spent, at every model
//! call) is kept as the versions it was written as, each appended (`versions`): a change
//! costs an append, not a file renamed over another, and is not fsynced.
//!
//! Where the work runs: a document is read in place, on the thread that asks (a small file
//! in the page cache reads faster than a hop to a blocking thread takes, and no thread of
//! the blocking pool is kept awake by a loop that looks every few seconds); a change made
//! with [`StateStore::update_often`] is made in place too; changes that
//! are fsynced, and scans of more than a few files, run on the blocking threads.

use std::collections::HashMap;
use std::fs::OpenOptions;
use std::io::{Read as _, Write as _};
use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

use async_trait::async_trait;
use switchboard_core::state::{Changer, MAX_SCAN, check_key, check_size};
use switchboard_core::{Change, StateError, StateStore, Stored};

use crate::durable;
use crate::versions;

/// Documents as files under a directory.
#[derive(Clone, Debug)]
pub struct FileState {
    dir: PathBuf,
    /// Documents changed with `update_often`, kept open between changes.
    often: Arc<Mutex<Often>>,
}

/// The most documents kept open, two descriptors each (a day's spending: one per chat that
/// spends, and the day's total): beside the session store's 256 files.
const KEPT_OPEN: usize = 128;

/// The documents kept open, each with when it was last changed (a count), so the one
/// changed longest ago is closed first.
#[derive(Debug, Default)]
struct Often {
    changes: u64,
    open: HashMap<PathBuf, (u64, KeptOpen)>,
}

impl Often {
    fn take(&mut self, path: &Path) -> Option<KeptOpen> {
        self.open.remove(path).map(|(_, kept)| kept)
    }

    fn keep(&mut self, path: PathBuf, kept: KeptOpen) {
        if self.open.len() >= KEPT_OPEN
            && let Some(oldest) = self
                .open
                .iter()
                .min_by_key(|(_, (changed, _))| *changed)
                .map(|(path, _)| path.clone())
        {
            self.open.remove(&oldest);
        }
        self.changes += 1;
        self.open.insert(path, (self.changes, kept));
    }
}

/// A document changed often, kept open between changes as the session store keeps its
/// files: its lock, its file (appended to), and what this process last wrote — trusted only
/// while the file at its path is still that file at that length, so a change made by
/// another process, or by `update`, is read again.
#[derive(Debug)]
struct KeptOpen {
    lock: std::fs::File,
    file: std::fs::File,
    /// The file's inode and length after the last change.
    seen: (u64, u64),
    /// Its last version then.
    content: Vec<u8>,
}

impl FileState {
    /// The documents of the state directory `dir`.
    pub fn new(dir: &Path) -> Self {
        Self {
            dir: dir.to_path_buf(),
            often: Arc::default(),
        }
    }

    /// The file of a key.
    pub fn path(&self, key: &str) -> PathBuf {
        key.split('/')
            .fold(self.dir.clone(), |path, part| path.join(part))
    }

    fn failed(&self, what: String) -> impl FnOnce(std::io::Error) -> StateError + '_ {
        move |err| StateError::Failed {
            place: self.dir.display().to_string(),
            what,
            why: err.to_string(),
        }
    }

    /// Runs file work on the blocking threads.
    async fn blocking<T: Send + 'static>(
        &self,
        key: &str,
        what: &str,
        work: impl FnOnce(&Self, &Path) -> std::io::Result<T> + Send + 'static,
    ) -> Result<T, StateError> {
        check_key(key)?;
        let store = self.clone();
        let path = self.path(key);
        let what = format!("{what} {key}");
        tokio::task::spawn_blocking(move || work(&store, &path))
            .await
            .map_err(std::io::Error::other)
            .and_then(|done| done)
            .map_err(self.failed(what))
    }
}

/// The file of a document, as it is; `None` when there is none.
fn read_file(path: &Path) -> std::io::Result<Option<Vec<u8>>> {
    match std::fs::read(path) {
        Ok(bytes) => Ok(Some(bytes)),
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(err) => Err(err),
    }
}

/// A document: its content (the last version, for one kept as versions) and when it was
/// written.
fn read(path: &Path) -> std::io::Result<Option<Stored>> {
    let mut open = match std::fs::File::open(path) {
        Ok(open) => open,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(err) => return Err(err),
    };
    let written = open.metadata()?.modified()?;
    let mut file = Vec::new();
    open.read_to_end(&mut file)?;
    let Some(content) = versions::read(&file).content() else {
        return Ok(None);
    };
    Ok(Some(Stored {
        bytes: content.to_vec(),
        written,
    }))
}

/// Changes the document at `path` by `change` under its lock: appended to when its file
/// holds whole versions and is not long yet, written anew as its last version otherwise. What
/// is kept open for the next change comes back (none when the document was removed). The
/// outer error is the file system's; the inner, the change's (a document past the size).
fn change_often(
    path: &Path,
    key: &str,
    kept: Option<KeptOpen>,
    change: Changer<'_>,
) -> std::io::Result<Result<Option<KeptOpen>, StateError>> {
    let (lock, known) = match kept {
        Some(KeptOpen {
            lock,
            file,
            seen,
            content,
        }) => (lock, Some((file, seen, content))),
        None => (open_lock(path)?, None),
    };
    lock.lock()?;
    let now = match std::fs::metadata(path) {
        Ok(meta) => Some((meta.ino(), meta.len())),
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => None,
        Err(err) => return Err(err),
    };
    // The file as this process left it, or as it is read now.
    let Found {
        file,
        content,
        append_at,
    } = match (known, now) {
        (Some((file, seen, content)), Some(now)) if seen == now => Found {
            file: Some(file),
            content: Some(content),
            append_at: Some(now.1),
        },
        (_, None) => Found::default(),
        (_, Some(_)) => read_often(path)?,
    };
    let decided = change(content.as_deref());
    let kept = match decided {
        Change::Keep => file
            .zip(content)
            .zip(now)
            .map(|((file, content), seen)| KeptOpen {
                lock,
                file,
                seen,
                content,
            }),
        Change::Delete => {
            match std::fs::remove_file(path) {
                Err(err) if err.kind() != std::io::ErrorKind::NotFound => return Err(err),
                _ => {}
            }
            return Ok(Ok(None));
        }
        Change::Put(bytes) => {
            if let Err(err) = check_size(key, &bytes) {
                return Ok(Err(err));
            }
            let (file, seen) = write_often(path, &bytes, file, append_at, now)?;
            Some(KeptOpen {
                lock,
                file,
                seen,
                content: bytes,
            })
        }
    };
    if let Some(kept) = &kept {
        kept.lock.unlock()?;
    }
    Ok(Ok(kept))
}

/// Writes `version` as the document's last: appended to `file` (at `append_at`, the file
/// at the path being `now`) while it stays short, else written anew. The file then open,
/// and its inode and length.
fn write_often(
    path: &Path,
    version: &[u8],
    file: Option<std::fs::File>,
    append_at: Option<u64>,
    now: Option<(u64, u64)>,
) -> std::io::Result<(std::fs::File, (u64, u64))> {
    let frame = versions::framed(version);
    match (file, append_at, now) {
        (Some(mut file), Some(at), Some((ino, _)))
            if at as usize + frame.len() <= versions::COMPACT_AT =>
        {
            file.write_all(&frame)?;
            Ok((file, (ino, at + frame.len() as u64)))
        }
        _ => {
            durable::replace_unsynced(path, &versions::alone(version))?;
            let file = OpenOptions::new().read(true).append(true).open(path)?;
            let meta = file.metadata()?;
            Ok((file, (meta.ino(), meta.len())))
        }
    }
}

/// A document's file as a change finds it.
#[derive(Default)]
struct Found {
    /// Open for reading and appending.
    file: Option<std::fs::File>,
    /// Its last version.
    content: Option<Vec<u8>>,
    /// The length it may be appended at (none: not whole versions to its end).
    append_at: Option<u64>,
}

/// The document at `path` opened for reading and appending, and read.
fn read_often(path: &Path) -> std::io::Result<Found> {
    let mut file = match OpenOptions::new().read(true).append(true).open(path) {
        Ok(file) => file,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(Found::default()),
        Err(err) => return Err(err),
    };
    let mut bytes = Vec::new();
    file.read_to_end(&mut bytes)?;
    let read = versions::read(&bytes);
    let append_at = match read {
        versions::Read::Versions { whole, .. } if whole == bytes.len() => Some(whole as u64),
        _ => None,
    };
    let content = read.content().map(<[u8]>::to_vec);
    Ok(Found {
        file: Some(file),
        content,
        append_at,
    })
}

fn write(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    if let Some(dir) = path.parent() {
        durable::create_private_dir(dir)?;
    }
    durable::replace(path, bytes)
}

fn remove(path: &Path) -> std::io::Result<()> {
    match std::fs::remove_file(path) {
        Err(err) if err.kind() != std::io::ErrorKind::NotFound => Err(err),
        _ => path.parent().map_or(Ok(()), durable::sync_dir),
    }
}

/// The lock file beside a document: its name with `.lock` for its extension.
fn lock_of(path: &Path) -> PathBuf {
    path.with_extension("lock")
}

/// Opens the lock file of the document at `path` (its directory made when missing).
fn open_lock(path: &Path) -> std::io::Result<std::fs::File> {
    let open = || {
        OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(lock_of(path))
    };
    match open() {
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => {
            if let Some(dir) = path.parent() {
                durable::create_private_dir(dir)?;
            }
            open()
        }
        opened => opened,
    }
}

/// Takes the lock of the document at `path`; held until the file returned is dropped.
fn lock(path: &Path) -> std::io::Result<std::fs::File> {
    let lock = open_lock(path)?;
    lock.lock()?;
    Ok(lock)
}

/// Every file under `dir` that is a document (not a lock or a temporary), as keys under
/// `prefix`.
fn walk(dir: &Path, prefix: &str, out: &mut Documents) -> std::io::Result<()> {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(err) => return Err(err),
    };
    for entry in entries {
        let entry = entry?;
        let Some(key) = key_of(prefix, &entry.file_name()) else {
            continue;
        };
        if entry.file_type()?.is_dir() {
            walk(&entry.path(), &key, out)?;
        } else if out.len() < MAX_SCAN
            && let Some(content) = content_of(&entry.path())?
        {
            out.push((key, content));
        }
    }
    Ok(())
}

/// The key of the file `name` under `prefix`; `None` for a lock, a temporary, or a name no
/// key has.
fn key_of(prefix: &str, name: &std::ffi::OsStr) -> Option<String> {
    let name = name.to_str()?;
    let key = format!("{prefix}/{name}");
    let document = !name.starts_with('.') && !name.ends_with(".lock") && check_key(&key).is_ok();
    document.then_some(key)
}

/// The content of the document in the file at `path` (none: no such file, or no whole
/// version in it).
fn content_of(path: &Path) -> std::io::Result<Option<Vec<u8>>> {
    Ok(read_file(path)?.and_then(|file| versions::read(&file).content().map(<[u8]>::to_vec)))
}

#[async_trait]
impl StateStore for FileState {
    fn place(&self) -> String {
        self.dir.display().to_string()
    }

    async fn get(&self, key: &str) -> Result<Option<Stored>, StateError> {
        check_key(key)?;
        read(&self.path(key)).map_err(|err| self.failed(format!("read {key}"))(err))
    }

    async fn put(&self, key: &str, bytes: Vec<u8>) -> Result<(), StateError> {
        check_size(key, &bytes)?;
        self.blocking(key, "write", move |_, path| write(path, &bytes))
            .await
    }

    async fn update(&self, key: &str, change: Changer<'_>) -> Result<(), StateError> {
        check_key(key)?;
        let path = self.path(key);
        let what = format!("change {key}");
        // The lock is taken and the file read on a blocking thread; the change runs here
        // (it borrows), then the write goes back to a blocking thread, still under the lock.
        let (lock, before) = {
            let path = path.clone();
            tokio::task::spawn_blocking(move || -> std::io::Result<_> {
                let lock = lock(&path)?;
                Ok((lock, read(&path)?))
            })
            .await
            .map_err(std::io::Error::other)
            .and_then(|done| done)
            .map_err(self.failed(what.clone()))?
        };
        let decided = change(before.as_ref().map(|stored| stored.bytes.as_slice()));
        if let Change::Put(bytes) = &decided {
            check_size(key, bytes)?;
        }
        tokio::task::spawn_blocking(move || {
            let done = match decided {
                Change::Keep => Ok(()),
                Change::Put(bytes) => write(&path, &bytes),
                Change::Delete => remove(&path),
            };
            drop(lock);
            done
        })
        .await
        .map_err(std::io::Error::other)
        .and_then(|done| done)
        .map_err(self.failed(what))
    }

    async fn update_often(&self, key: &str, change: Changer<'_>) -> Result<(), StateError> {
        check_key(key)?;
        let path = self.path(key);
        let kept = self
            .often
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take(&path);
        let kept = change_often(&path, key, kept, change)
            .map_err(|err| self.failed(format!("change {key}"))(err))??;
        if let Some(kept) = kept {
            self.often
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .keep(path, kept);
        }
        Ok(())
    }

    async fn scan(&self, prefix: &str) -> Result<Vec<(String, Vec<u8>)>, StateError> {
        check_key(prefix)?;
        let mut found = match few(&self.path(prefix), prefix) {
            Ok(Some(found)) => found,
            Ok(None) => {
                let prefix = prefix.to_owned();
                let key = prefix.clone();
                self.blocking(&key, "list", move |_, path| {
                    let mut out = Vec::new();
                    walk(path, &prefix, &mut out)?;
                    Ok(out)
                })
                .await?
            }
            Err(err) => return Err(self.failed(format!("list {prefix}"))(err)),
        };
        found.sort_by(|a, b| a.0.cmp(&b.0));
        Ok(found)
    }
}

/// Documents with their keys, as a scan returns them.
type Documents = Vec<(String, Vec<u8>)>;

/// The most files (locks counted) a scan reads in place.
const FEW: usize = 16;

/// The documents right under `dir` read in place when they are few and none is a directory
/// (a day's spending totals, one per writer; nothing, when there is no `dir`): a scan at
/// every model call then needs no blocking thread. `None`: more, for a blocking thread.
fn few(dir: &Path, prefix: &str) -> std::io::Result<Option<Documents>> {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(Some(Vec::new())),
        Err(err) => return Err(err),
    };
    let mut names = Vec::new();
    for entry in entries {
        let entry = entry?;
        if names.len() == FEW || entry.file_type()?.is_dir() {
            return Ok(None);
        }
        names.push(entry.file_name());
    }
    let mut out = Vec::new();
    for name in names {
        if let Some(key) = key_of(prefix, &name)
            && let Some(content) = content_of(&dir.join(&name))?
        {
            out.push((key, content));
        }
    }
    Ok(Some(out))
}

#[cfg(test)]
#[path = "state_tests.rs"]
mod tests;
