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
use std::time::{SystemTime, UNIX_EPOCH};

use switchboard_core::{ChatMessage, SessionKey};

use crate::durable::{append_whole, cut_partial_tail};
use crate::error::StoreError;
use crate::file_name::file_stem;
use crate::record::{self, InboundRecord, Record};
use crate::store::{Batch, Loaded, SessionStore, Snapshot, StoreHealth};

/// At most this many session files are kept open between appends (one per active session);
/// past it, appends open and close the file each time.
const OPEN_FILES: usize = 256;

/// The on-disk session store.
#[derive(Debug)]
pub struct JsonlStore {
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
    /// The tail of a session's file, read without changing anything (see
    /// [`record::read_tail`]).
    fn read_tail(&self, key: &SessionKey) -> Result<Option<(Loaded, bool)>, StoreError> {
        record::read_tail(&self.path_of(key), key)
    }

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
            dir,
            open: Mutex::new(HashMap::new()),
            damaged: Mutex::new(HashSet::new()),
            degraded: AtomicBool::new(false),
            failed_writes: AtomicU64::new(0),
            last_error: Mutex::new(None),
        })
    }

    /// The file of a session.
    pub fn path_of(&self, key: &SessionKey) -> PathBuf {
        self.dir.join(format!("{}.jsonl", file_stem(key)))
    }

    fn append_records(&self, key: &SessionKey, records: &[Record<'_>]) -> Result<(), StoreError> {
        let mut buf = Vec::with_capacity(256 * records.len());
        for record in records {
            serde_json::to_writer(&mut buf, record)?;
            buf.push(b'\n');
        }
        let path = self.path_of(key);
        let written = self.repair_if_damaged(key, &path).and_then(|()| {
            let file = self.file(key, &path)?;
            append_whole(&*file, &buf).map_err(|failure| {
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

impl SessionStore for JsonlStore {
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
            };
            self.compact(key, &snapshot)?;
            loaded.records = snapshot_records(&snapshot);
        }
        lock(&self.damaged).remove(key);
        Ok(loaded)
    }

    fn transcript(&self, key: &SessionKey) -> Result<Vec<ChatMessage>, StoreError> {
        Ok(self
            .read_tail(key)?
            .map(|(loaded, _)| loaded.messages)
            .unwrap_or_default())
    }

    fn append(&self, key: &SessionKey, batch: &Batch<'_>) -> Result<(), StoreError> {
        let records: Vec<Record<'_>> = batch
            .messages
            .iter()
            .map(|m| Record::Message(std::borrow::Cow::Borrowed(m)))
            .chain(batch.usage.map(|usage| Record::Usage { usage }))
            .chain(batch.inbound.map(|(id, state)| Record::Inbound {
                inbound: InboundRecord {
                    id: std::borrow::Cow::Borrowed(id),
                    state: std::borrow::Cow::Borrowed(state),
                },
            }))
            .collect();
        self.append_records(key, &records)
    }

    fn release(&self, key: &SessionKey) {
        self.forget(key);
    }

    fn compact(&self, key: &SessionKey, snapshot: &Snapshot<'_>) -> Result<(), StoreError> {
        let result = self.rewrite(key, snapshot);
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
}

impl JsonlStore {
    fn rewrite(&self, key: &SessionKey, snapshot: &Snapshot<'_>) -> Result<(), StoreError> {
        self.forget(key);
        let path = self.path_of(key);
        let tmp = path.with_extension("jsonl.tmp");
        let mut buf = Vec::new();
        for (id, state) in snapshot.inbound {
            let record = Record::Inbound {
                inbound: InboundRecord {
                    id: std::borrow::Cow::Borrowed(id),
                    state: std::borrow::Cow::Borrowed(state),
                },
            };
            serde_json::to_writer(&mut buf, &record)?;
            buf.push(b'\n');
        }
        serde_json::to_writer(
            &mut buf,
            &Record::Usage {
                usage: snapshot.usage,
            },
        )?;
        buf.push(b'\n');
        for message in snapshot.messages {
            serde_json::to_writer(
                &mut buf,
                &Record::Message(std::borrow::Cow::Borrowed(message)),
            )?;
            buf.push(b'\n');
        }
        let mut file = File::create(&tmp).map_err(StoreError::io(&tmp))?;
        file.write_all(&buf).map_err(StoreError::io(&tmp))?;
        file.sync_all().map_err(StoreError::io(&tmp))?;
        drop(file);
        fs::rename(&tmp, &path).map_err(StoreError::io(&path))?;
        sync_dir(&self.dir)
    }

    fn move_aside(&self, key: &SessionKey) -> Result<(), StoreError> {
        self.forget(key);
        let path = self.path_of(key);
        if !path.exists() {
            return Ok(());
        }
        let archive = self.dir.join("archive");
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

/// How many records a rewrite with `snapshot` holds.
pub(crate) fn snapshot_records(snapshot: &Snapshot<'_>) -> usize {
    snapshot.inbound.len() + 1 + snapshot.messages.len()
}

pub(crate) fn create_private_dir(dir: &Path) -> Result<(), StoreError> {
    crate::durable::create_private_dir(dir).map_err(StoreError::io(dir))
}

fn sync_dir(dir: &Path) -> Result<(), StoreError> {
    crate::durable::sync_dir(dir).map_err(StoreError::io(dir))
}

#[cfg(test)]
mod tests {
    use switchboard_core::{MessageId, ToolCall, Usage};

    use crate::store::{Batch, InboundState, Snapshot};

    use super::*;
    use crate::file_name::MAX_STEM;

    fn store() -> (tempfile::TempDir, JsonlStore) {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = JsonlStore::open(dir.path()).expect("open");
        (dir, store)
    }

    #[test]
    fn appended_messages_load_back_in_order() {
        let (_dir, store) = store();
        let key = SessionKey::from("websocket_c1");
        let call = ToolCall {
            id: "1".into(),
            name: "t".into(),
            arguments: "{}".into(),
        };
        let messages = vec![
            ChatMessage::user("q"),
            ChatMessage::Assistant {
                content: String::new(),
                tool_calls: vec![call.clone()],
            },
            ChatMessage::tool_result(&call, "r", false),
            ChatMessage::assistant("a"),
        ];
        store
            .append(&key, &Batch::messages(&messages[..1]))
            .expect("append");
        let batch = Batch {
            messages: &messages[1..],
            usage: Some(Usage::new(5, 2)),
            inbound: None,
        };
        store.append(&key, &batch).expect("append");
        let loaded = store.load(&key).expect("load");
        assert_eq!(loaded.messages, messages);
        assert_eq!(loaded.usage.input_tokens, 5);
        assert_eq!(loaded.records, 5);
    }

    #[test]
    fn the_inbound_journal_is_read_back_and_kept_by_compaction() {
        let (_dir, store) = store();
        let key = SessionKey::from("telegram_1");
        let (first, second) = (MessageId::from("41"), MessageId::from("42"));
        let answered = InboundState::Answered {
            end: switchboard_core::TurnEnd::Failed,
            error: Some("the model is down".into()),
        };
        let writes = [
            (ChatMessage::user("q1"), &first, InboundState::Received),
            (
                ChatMessage::assistant("a1"),
                &first,
                InboundState::Delivered,
            ),
            (ChatMessage::user("q2"), &second, InboundState::Received),
            (ChatMessage::assistant("a2"), &second, answered.clone()),
        ];
        for (message, id, state) in &writes {
            let batch = Batch {
                messages: std::slice::from_ref(message),
                usage: None,
                inbound: Some((id, state)),
            };
            store.append(&key, &batch).expect("append");
        }
        let loaded = store.load(&key).expect("load");
        let expected = vec![
            (first.clone(), InboundState::Delivered),
            (second.clone(), answered.clone()),
        ];
        assert_eq!(loaded.inbound, expected);
        assert_eq!(loaded.messages.len(), 4);

        let snapshot = Snapshot {
            messages: &loaded.messages[2..],
            usage: loaded.usage,
            inbound: &loaded.inbound,
        };
        store.compact(&key, &snapshot).expect("compact");
        let again = store.load(&key).expect("load");
        assert_eq!(again.inbound, expected);
        assert_eq!(again.messages, loaded.messages[2..]);
    }

    #[test]
    fn a_session_never_written_loads_empty() {
        let (_dir, store) = store();
        assert_eq!(store.load(&"x_y".into()).expect("load"), Loaded::default());
    }

    #[test]
    fn a_torn_last_line_is_skipped_and_the_file_repaired() {
        let (_dir, store) = store();
        let key = SessionKey::from("s");
        store
            .append(
                &key,
                &Batch::messages(&[ChatMessage::user("q"), ChatMessage::assistant("a")]),
            )
            .expect("append");
        let path = store.path_of(&key);
        let mut file = OpenOptions::new().append(true).open(&path).expect("open");
        file.write_all(br#"{"role":"user","cont"#).expect("tear");
        drop(file);

        let loaded = store.load(&key).expect("load");
        assert_eq!(
            loaded.messages,
            vec![ChatMessage::user("q"), ChatMessage::assistant("a")]
        );

        // The next append must not be glued onto the torn line.
        store
            .append(&key, &Batch::messages(&[ChatMessage::user("next")]))
            .expect("append");
        let again = store.load(&key).expect("load");
        assert_eq!(again.messages.len(), 3);
        assert_eq!(again.messages[2], ChatMessage::user("next"));
    }

    #[test]
    fn a_corrupt_middle_line_is_skipped() {
        let (_dir, store) = store();
        let key = SessionKey::from("s");
        store
            .append(&key, &Batch::messages(&[ChatMessage::user("q")]))
            .expect("append");
        let path = store.path_of(&key);
        let mut file = OpenOptions::new().append(true).open(&path).expect("open");
        file.write_all(b"not json\n").expect("write");
        drop(file);
        store
            .append(&key, &Batch::messages(&[ChatMessage::assistant("a")]))
            .expect("append");
        let loaded = store.load(&key).expect("load");
        assert_eq!(
            loaded.messages,
            vec![ChatMessage::user("q"), ChatMessage::assistant("a")]
        );
    }

    #[test]
    fn compaction_replaces_the_file_atomically() {
        let (_dir, store) = store();
        let key = SessionKey::from("s");
        for i in 0..10 {
            store
                .append(
                    &key,
                    &Batch::messages(&[ChatMessage::user(format!("q{i}"))]),
                )
                .expect("append");
        }
        let keep = vec![ChatMessage::user("q9")];
        let snapshot = Snapshot {
            messages: &keep,
            usage: Usage::new(1, 1),
            inbound: &[],
        };
        store.compact(&key, &snapshot).expect("compact");
        let loaded = store.load(&key).expect("load");
        assert_eq!(loaded.messages, keep);
        assert_eq!(loaded.usage.input_tokens, 1);
        assert!(!store.path_of(&key).with_extension("jsonl.tmp").exists());
    }

    #[test]
    fn appends_after_compaction_and_archive_reach_the_new_file() {
        let (_dir, store) = store();
        let key = SessionKey::from("s");
        // The first append keeps the file open; compaction and archive replace the file,
        // so a later append must not go to the old, unlinked one.
        store
            .append(&key, &Batch::messages(&[ChatMessage::user("1")]))
            .expect("append");
        let snapshot = Snapshot {
            messages: &[ChatMessage::user("1")],
            usage: Usage::default(),
            inbound: &[],
        };
        store.compact(&key, &snapshot).expect("compact");
        store
            .append(&key, &Batch::messages(&[ChatMessage::user("2")]))
            .expect("append");
        let loaded = store.load(&key).expect("load");
        assert_eq!(
            loaded.messages,
            vec![ChatMessage::user("1"), ChatMessage::user("2")]
        );

        store.archive(&key).expect("archive");
        store
            .append(&key, &Batch::messages(&[ChatMessage::user("3")]))
            .expect("append");
        assert_eq!(
            store.load(&key).expect("load").messages,
            vec![ChatMessage::user("3")]
        );
    }

    #[test]
    fn archive_starts_the_session_afresh() {
        let (dir, store) = store();
        let key = SessionKey::from("s");
        store
            .append(&key, &Batch::messages(&[ChatMessage::user("q")]))
            .expect("append");
        store.archive(&key).expect("archive");
        assert!(store.load(&key).expect("load").messages.is_empty());
        let archived = fs::read_dir(dir.path().join("sessions/archive"))
            .expect("dir")
            .count();
        assert_eq!(archived, 1);
    }

    #[test]
    fn a_damaged_file_is_cut_to_its_last_whole_record_before_the_next_append() {
        let (_dir, store) = store();
        let key = SessionKey::from("s");
        store
            .append(&key, &Batch::messages(&[ChatMessage::user("q")]))
            .expect("append");
        // A partial record that a failed append could not remove.
        let mut file = OpenOptions::new()
            .append(true)
            .open(store.path_of(&key))
            .expect("open");
        file.write_all(br#"{"role":"assistant","conte"#)
            .expect("tear");
        drop(file);
        store.forget(&key);
        lock(&store.damaged).insert(key.clone());

        store
            .append(&key, &Batch::messages(&[ChatMessage::user("next")]))
            .expect("append");
        let loaded = store.load(&key).expect("load");
        assert_eq!(
            loaded.messages,
            vec![ChatMessage::user("q"), ChatMessage::user("next")]
        );
        assert_eq!(loaded.records, 2, "no line was lost or skipped");
    }

    #[test]
    fn a_write_that_fails_degrades_health_until_one_succeeds() {
        let (_dir, store) = store();
        let key = SessionKey::from("full");
        // /dev/full fails every write with ENOSPC, as a full disk does.
        std::os::unix::fs::symlink("/dev/full", store.path_of(&key)).expect("symlink");
        let err = store
            .append(&key, &Batch::messages(&[ChatMessage::user("q")]))
            .expect_err("the disk is full");
        assert!(err.to_string().contains("No space left"), "{err}");
        assert!(
            !err.to_string().contains(&*store.dir.to_string_lossy()),
            "errors reach chats and must not name server paths: {err}"
        );
        assert!(matches!(
            store.health(),
            StoreHealth::Degraded {
                failed_writes: 1,
                ..
            }
        ));

        fs::remove_file(store.path_of(&key)).expect("remove symlink");
        store
            .append(&key, &Batch::messages(&[ChatMessage::user("q")]))
            .expect("the disk has room again");
        assert_eq!(store.health(), StoreHealth::Ok);
        assert_eq!(
            store.load(&key).expect("load").messages,
            vec![ChatMessage::user("q")]
        );
    }

    #[test]
    fn a_state_dir_that_refuses_writes_is_refused_at_open() {
        let dir = tempfile::tempdir().expect("tempdir");
        // Where the test write would go there is a directory: the write fails, as it would
        // on a read-only or full file system (permissions do not stop root, this does).
        fs::create_dir_all(dir.path().join("sessions/.write-check")).expect("mkdir");
        let err = JsonlStore::open(dir.path()).expect_err("not writable");
        assert!(matches!(err, StoreError::Unwritable { .. }), "{err}");
        assert!(err.to_string().contains("is not writable"), "{err}");

        let file = dir.path().join("a-file");
        fs::write(&file, "").expect("write");
        let err = JsonlStore::open(&file).expect_err("a file is no directory");
        assert!(matches!(err, StoreError::Unwritable { .. }), "{err}");
    }

    #[test]
    fn long_keys_get_fixed_length_names_that_do_not_collide() {
        let (_dir, store) = store();
        let euro = SessionKey::from(format!("websocket_{}", "€".repeat(42)));
        let euro_too = SessionKey::from(format!("websocket_{}x", "€".repeat(42)));
        let short = SessionKey::from("websocket_c");
        let names: Vec<String> = [&euro, &euro_too, &short]
            .iter()
            .map(|key| {
                store
                    .path_of(key)
                    .file_name()
                    .expect("name")
                    .to_string_lossy()
                    .into_owned()
            })
            .collect();
        assert_eq!(names[0].len(), MAX_STEM + ".jsonl".len(), "{}", names[0]);
        assert_eq!(names[0].len(), names[1].len());
        assert_ne!(names[0], names[1]);
        assert_eq!(names[2], "websocket_c.jsonl");
        for key in [&euro, &euro_too] {
            store
                .append(key, &Batch::messages(&[ChatMessage::user(key.as_str())]))
                .expect("a long key works");
            store.archive(key).expect("and archives");
        }
    }

    #[test]
    fn keys_cannot_escape_the_directory() {
        let (_dir, store) = store();
        let path = store.path_of(&SessionKey::from("websocket_../../etc/passwd"));
        assert_eq!(path.parent(), Some(store.dir.as_path()));
        assert!(
            path.file_name()
                .is_some_and(|n| n.to_string_lossy().contains("%2F"))
        );
    }
}
