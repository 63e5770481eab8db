//! [`FileState`]: the [`StateStore`] of one process — each document a file under the state
//! directory, named by its key (`pairing.json` is `<state_dir>/pairing.json`, as it always
//! was). A change is made under an exclusive lock on a file beside it (`pairing.lock`), so
//! the daemon and the operator's commands never interleave, and the file is replaced
//! atomically ([`durable::replace`]).
//!
//! Where the work runs: a document is read in place, on the thread that asks (a small file
//! in the page cache reads faster than a hop to a blocking thread takes, and no thread of
//! the blocking pool is kept awake by a loop that looks every few seconds); a change made
//! with [`StateStore::update_often`] is made in place too, and not fsynced; changes that
//! are fsynced, and scans (any number of files; of a directory that is not there, none),
//! run on the blocking threads.

use std::fs::OpenOptions;
use std::path::{Path, PathBuf};

use async_trait::async_trait;
use switchboard_core::state::{Changer, MAX_SCAN, check_key, check_size};
use switchboard_core::{Change, StateError, StateStore, Stored};

use crate::durable;

/// Documents as files under a directory.
#[derive(Clone, Debug)]
pub struct FileState {
    dir: PathBuf,
}

impl FileState {
    /// The documents of the state directory `dir`.
    pub fn new(dir: &Path) -> Self {
        Self {
            dir: dir.to_path_buf(),
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

fn read(path: &Path) -> std::io::Result<Option<Stored>> {
    match std::fs::read(path) {
        Ok(bytes) => {
            let written = std::fs::metadata(path)?.modified()?;
            Ok(Some(Stored { bytes, written }))
        }
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(err) => Err(err),
    }
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

/// Takes the lock of the document at `path` (its directory made first); held until the
/// file returned is dropped.
fn lock(path: &Path) -> std::io::Result<std::fs::File> {
    if let Some(dir) = path.parent() {
        durable::create_private_dir(dir)?;
    }
    let lock = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(lock_of(path))?;
    lock.lock()?;
    Ok(lock)
}

/// Every file under `dir` that is a document (not a lock or a temporary), as keys under
/// `prefix`.
fn walk(dir: &Path, prefix: &str, out: &mut Vec<(String, Vec<u8>)>) -> std::io::Result<()> {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(err) => return Err(err),
    };
    for entry in entries {
        let entry = entry?;
        let name = entry.file_name().to_string_lossy().into_owned();
        let key = format!("{prefix}/{name}");
        if name.starts_with('.') || name.ends_with(".lock") || check_key(&key).is_err() {
            continue;
        }
        if entry.file_type()?.is_dir() {
            walk(&entry.path(), &key, out)?;
        } else if out.len() < MAX_SCAN {
            out.push((key, std::fs::read(entry.path())?));
        }
    }
    Ok(())
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
        let lock = lock(&path).map_err(|err| self.failed(format!("change {key}"))(err))?;
        let before = read(&path).map_err(|err| self.failed(format!("read {key}"))(err))?;
        let done = match change(before.as_ref().map(|stored| stored.bytes.as_slice())) {
            Change::Keep => Ok(()),
            Change::Put(bytes) => {
                check_size(key, &bytes)?;
                durable::replace_unsynced(&path, &bytes)
            }
            Change::Delete => remove(&path),
        };
        drop(lock);
        done.map_err(|err| self.failed(format!("change {key}"))(err))
    }

    async fn scan(&self, prefix: &str) -> Result<Vec<(String, Vec<u8>)>, StateError> {
        // Nothing under it (a daemon that never had a job): one `stat`, no blocking thread.
        if check_key(prefix).is_ok() && !self.path(prefix).exists() {
            return Ok(Vec::new());
        }
        let prefix = prefix.to_owned();
        let key = prefix.clone();
        let mut found = self
            .blocking(&key, "list", move |_, path| {
                let mut out = Vec::new();
                walk(path, &prefix, &mut out)?;
                Ok(out)
            })
            .await?;
        found.sort_by(|a, b| a.0.cmp(&b.0));
        Ok(found)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    #[tokio::test]
    async fn documents_are_files_named_by_their_keys() {
        let dir = tempfile::tempdir().expect("dir");
        let state = FileState::new(dir.path());
        assert_eq!(state.get("pairing.json").await.expect("get"), None);
        state
            .put("pairing.json", b"{}".to_vec())
            .await
            .expect("put");
        assert_eq!(
            std::fs::read(dir.path().join("pairing.json")).expect("file"),
            b"{}"
        );
        state
            .put("usage/2026-11-26/telegram_1", b"1".to_vec())
            .await
            .expect("put");
        state
            .put("usage/2026-11-26/telegram_2", b"2".to_vec())
            .await
            .expect("put");
        state
            .put("usage/2026-11-27/telegram_1", b"3".to_vec())
            .await
            .expect("put");
        let day = state.scan("usage/2026-11-26").await.expect("scan");
        assert_eq!(
            day,
            vec![
                ("usage/2026-11-26/telegram_1".to_owned(), b"1".to_vec()),
                ("usage/2026-11-26/telegram_2".to_owned(), b"2".to_vec()),
            ]
        );
        assert_eq!(state.scan("usage").await.expect("scan").len(), 3);
        assert!(state.scan("nothing").await.expect("scan").is_empty());
        assert!(matches!(
            state.get("../etc/passwd").await,
            Err(StateError::BadKey(_))
        ));
    }

    #[tokio::test]
    async fn concurrent_updates_lose_nothing() {
        let dir = tempfile::tempdir().expect("dir");
        let state: Arc<dyn StateStore> = Arc::new(FileState::new(dir.path()));
        let mut tasks = Vec::new();
        for _ in 0..20 {
            let state = state.clone();
            tasks.push(tokio::spawn(async move {
                let mut count = |bytes: Option<&[u8]>| {
                    let n: u64 = bytes
                        .and_then(|b| std::str::from_utf8(b).ok()?.parse().ok())
                        .unwrap_or(0);
                    Change::Put((n + 1).to_string().into_bytes())
                };
                state.update("count", &mut count).await.expect("update");
            }));
        }
        for task in tasks {
            task.await.expect("task");
        }
        let stored = state.get("count").await.expect("get").expect("there");
        assert_eq!(stored.bytes, b"20");
        let mut delete = |_: Option<&[u8]>| Change::Delete;
        state.update("count", &mut delete).await.expect("delete");
        assert_eq!(state.get("count").await.expect("get"), None);
    }

    #[tokio::test]
    async fn a_document_past_the_limit_is_refused_and_the_old_one_kept() {
        let dir = tempfile::tempdir().expect("dir");
        let state = FileState::new(dir.path());
        state.put("doc", b"old".to_vec()).await.expect("put");
        let big = vec![b'x'; switchboard_core::state::MAX_DOCUMENT_BYTES + 1];
        let err = state.put("doc", big.clone()).await.expect_err("too large");
        assert!(matches!(err, StateError::TooLarge { .. }), "{err}");
        let mut grow = move |_: Option<&[u8]>| Change::Put(big.clone());
        assert!(state.update("doc", &mut grow).await.is_err());
        assert_eq!(
            state.get("doc").await.expect("get").expect("kept").bytes,
            b"old"
        );
    }
}
