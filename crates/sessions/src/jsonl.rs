//! [`JsonlStore`]: one append-only JSONL file per session under the state directory.
//!
//! Each line is one record: a message (`{"role":...}`) or a usage total (`{"usage":...}`).
//! Appends go straight to the file (one `write` each, no user-space buffer), so a record
//! is with the OS before the reply leaves; a process crash loses nothing, a power loss at
//! most the last records. Compaction writes a temp file, fsyncs it and renames it over the
//! old one, so a file is always either the old or the new version.

use std::collections::HashMap;
use std::fs::{self, File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};
use switchboard_core::{ChatMessage, SessionKey, Usage};

use crate::error::StoreError;
use crate::store::{Loaded, SessionStore};

/// At most this much of a file's end is read on load; compaction keeps files far smaller.
const TAIL_BYTES: u64 = 8 * 1024 * 1024;

/// One line of a session file.
#[derive(Serialize, Deserialize)]
#[serde(untagged)]
enum Record<'a> {
    Usage { usage: Usage },
    Message(std::borrow::Cow<'a, ChatMessage>),
}

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
}

impl JsonlStore {
    /// A store keeping its files in `<state_dir>/sessions`, created (mode 0700) if missing.
    pub fn open(state_dir: &Path) -> Result<Self, StoreError> {
        let dir = state_dir.join("sessions");
        create_private_dir(&dir)?;
        Ok(Self {
            dir,
            open: Mutex::new(HashMap::new()),
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
        let file = self.file(key, &path)?;
        (&*file).write_all(&buf).map_err(|err| {
            self.forget(key);
            StoreError::io(&path)(err)
        })
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
        self.open
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(key);
    }
}

impl SessionStore for JsonlStore {
    fn load(&self, key: &SessionKey) -> Result<Loaded, StoreError> {
        let path = self.path_of(key);
        let mut file = match File::open(&path) {
            Ok(file) => file,
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(Loaded::default()),
            Err(err) => return Err(StoreError::io(&path)(err)),
        };
        let len = file.metadata().map_err(StoreError::io(&path))?.len();
        let skip_partial_first = len > TAIL_BYTES;
        if skip_partial_first {
            file.seek(SeekFrom::Start(len - TAIL_BYTES))
                .map_err(StoreError::io(&path))?;
        }
        let mut text = Vec::new();
        file.read_to_end(&mut text).map_err(StoreError::io(&path))?;

        let mut loaded = Loaded::default();
        let mut lines = text.split(|&b| b == b'\n').peekable();
        if skip_partial_first {
            lines.next();
        }
        let mut torn = false;
        let mut line_no = 0usize;
        while let Some(line) = lines.next() {
            line_no += 1;
            let is_last = lines.peek().is_none();
            if line.is_empty() {
                continue;
            }
            match serde_json::from_slice::<Record<'_>>(line) {
                Ok(Record::Message(message)) => loaded.messages.push(message.into_owned()),
                Ok(Record::Usage { usage }) => loaded.usage += usage,
                Err(err) if is_last => {
                    tracing::warn!(session = %key, path = %path.display(), error = %err,
                        "skipping torn last record of session file");
                    torn = true;
                    continue;
                }
                Err(err) => {
                    tracing::warn!(session = %key, path = %path.display(), line = line_no,
                        error = %err, "skipping unreadable record of session file");
                    continue;
                }
            }
            loaded.records += 1;
        }
        if torn {
            // Rewrite now, or the next append would be glued onto the torn line.
            self.compact(key, &loaded.messages, loaded.usage)?;
            loaded.records = loaded.messages.len() + 1;
        }
        Ok(loaded)
    }

    fn append(
        &self,
        key: &SessionKey,
        messages: &[ChatMessage],
        usage: Option<Usage>,
    ) -> Result<(), StoreError> {
        let records: Vec<Record<'_>> = messages
            .iter()
            .map(|m| Record::Message(std::borrow::Cow::Borrowed(m)))
            .chain(usage.map(|usage| Record::Usage { usage }))
            .collect();
        self.append_records(key, &records)
    }

    fn release(&self, key: &SessionKey) {
        self.forget(key);
    }

    fn compact(
        &self,
        key: &SessionKey,
        messages: &[ChatMessage],
        usage: Usage,
    ) -> Result<(), StoreError> {
        self.forget(key);
        let path = self.path_of(key);
        let tmp = path.with_extension("jsonl.tmp");
        let mut buf = Vec::new();
        serde_json::to_writer(&mut buf, &Record::Usage { usage })?;
        buf.push(b'\n');
        for message in messages {
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

    fn archive(&self, key: &SessionKey) -> Result<(), StoreError> {
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

/// A file name for a key: ASCII letters, digits, `-` and `_` stay; every other byte
/// becomes `%XX`, so no chat id can name a path outside the directory.
fn file_stem(key: &SessionKey) -> String {
    let mut stem = String::with_capacity(key.as_str().len());
    for byte in key.as_str().bytes() {
        if byte.is_ascii_alphanumeric() || byte == b'-' || byte == b'_' {
            stem.push(char::from(byte));
        } else {
            stem.push_str(&format!("%{byte:02X}"));
        }
    }
    stem
}

fn create_private_dir(dir: &Path) -> Result<(), StoreError> {
    let mut builder = fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::DirBuilderExt;
        builder.mode(0o700);
    }
    builder.create(dir).map_err(StoreError::io(dir))
}

fn sync_dir(dir: &Path) -> Result<(), StoreError> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(StoreError::io(dir))
}

#[cfg(test)]
mod tests {
    use switchboard_core::ToolCall;

    use super::*;

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
        store.append(&key, &messages[..1], None).expect("append");
        store
            .append(
                &key,
                &messages[1..],
                Some(Usage {
                    input_tokens: 5,
                    output_tokens: 2,
                }),
            )
            .expect("append");
        let loaded = store.load(&key).expect("load");
        assert_eq!(loaded.messages, messages);
        assert_eq!(loaded.usage.input_tokens, 5);
        assert_eq!(loaded.records, 5);
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
                &[ChatMessage::user("q"), ChatMessage::assistant("a")],
                None,
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
            .append(&key, &[ChatMessage::user("next")], None)
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
            .append(&key, &[ChatMessage::user("q")], None)
            .expect("append");
        let path = store.path_of(&key);
        let mut file = OpenOptions::new().append(true).open(&path).expect("open");
        file.write_all(b"not json\n").expect("write");
        drop(file);
        store
            .append(&key, &[ChatMessage::assistant("a")], None)
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
                .append(&key, &[ChatMessage::user(format!("q{i}"))], None)
                .expect("append");
        }
        let keep = vec![ChatMessage::user("q9")];
        store
            .compact(
                &key,
                &keep,
                Usage {
                    input_tokens: 1,
                    output_tokens: 1,
                },
            )
            .expect("compact");
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
            .append(&key, &[ChatMessage::user("1")], None)
            .expect("append");
        store
            .compact(&key, &[ChatMessage::user("1")], Usage::default())
            .expect("compact");
        store
            .append(&key, &[ChatMessage::user("2")], None)
            .expect("append");
        let loaded = store.load(&key).expect("load");
        assert_eq!(
            loaded.messages,
            vec![ChatMessage::user("1"), ChatMessage::user("2")]
        );

        store.archive(&key).expect("archive");
        store
            .append(&key, &[ChatMessage::user("3")], None)
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
            .append(&key, &[ChatMessage::user("q")], None)
            .expect("append");
        store.archive(&key).expect("archive");
        assert!(store.load(&key).expect("load").messages.is_empty());
        let archived = fs::read_dir(dir.path().join("sessions/archive"))
            .expect("dir")
            .count();
        assert_eq!(archived, 1);
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
