//! The web page's list of conversations, kept by the server (one JSON file in the state
//! directory) so every device with the token sees the same list. Nothing is read or held
//! until a client asks for it: programs that speak the protocol never pay for it.
//!
//! The list is a title and a time per chat id; the conversations themselves are the chats'
//! sessions. Every change is written at once (a temporary file, synced, renamed over the
//! old one) and sent to every socket that asked for the list.

use std::path::PathBuf;
use std::sync::{Mutex, PoisonError};
use std::time::{SystemTime, UNIX_EPOCH};

use tokio::sync::mpsc::error::TrySendError;

use crate::protocol::{Conversation, ServerFrame};
use crate::subscribers::Subscriber;

/// The most conversations kept; the least recent go first.
pub const MAX_CONVERSATIONS: usize = 500;
/// The title of a conversation nobody named.
pub const UNTITLED: &str = "New chat";
/// The largest list file read (a bigger one is set aside as corrupt).
const MAX_FILE_BYTES: u64 = 1024 * 1024;

/// The list, loaded on first use, and the sockets watching it.
pub(crate) struct Conversations {
    /// Where the list is kept; `None`: in memory only (tests, a daemon without a state dir).
    path: Option<PathBuf>,
    /// `None` until first used. Held across a change's write, so changes are written in order.
    list: tokio::sync::Mutex<Option<Vec<Conversation>>>,
    /// Sockets that asked for the list; each change is sent to them.
    watchers: Mutex<Vec<Subscriber>>,
}

impl Conversations {
    pub(crate) fn new(path: Option<PathBuf>) -> Self {
        Self {
            path,
            list: tokio::sync::Mutex::new(None),
            watchers: Mutex::new(Vec::new()),
        }
    }

    /// The list, most recent first; `subscriber` is sent every later change.
    pub(crate) async fn watch(&self, subscriber: &Subscriber) -> Vec<Conversation> {
        let mut guard = self.list.lock().await;
        let list = self.loaded(&mut guard).await;
        let mut watchers = self.watchers.lock().unwrap_or_else(PoisonError::into_inner);
        if !watchers.iter().any(|w| w.conn == subscriber.conn) {
            watchers.push(subscriber.clone());
        }
        list.clone()
    }

    /// Stops sending changes to a socket (it closed).
    pub(crate) fn unwatch(&self, conn: u64) {
        self.watchers
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .retain(|w| w.conn != conn);
    }

    /// Adds `chat_id` (or renames it, with `title`) and makes it the most recent.
    pub(crate) async fn touch(&self, chat_id: &str, title: Option<&str>) -> Result<(), String> {
        let title = title.map(str::trim).filter(|t| !t.is_empty());
        self.change(|list| {
            let mut entry = match list.iter().position(|c| c.chat_id == chat_id) {
                Some(index) => list.remove(index),
                None => Conversation {
                    chat_id: chat_id.to_owned(),
                    title: UNTITLED.to_owned(),
                    updated_ms: 0,
                },
            };
            if let Some(title) = title {
                title.clone_into(&mut entry.title);
            }
            entry.updated_ms = now_ms();
            list.insert(0, entry);
            list.truncate(MAX_CONVERSATIONS);
        })
        .await
    }

    /// Removes `chat_id` from the list.
    pub(crate) async fn remove(&self, chat_id: &str) -> Result<(), String> {
        self.change(|list| list.retain(|c| c.chat_id != chat_id))
            .await
    }

    async fn change(&self, edit: impl FnOnce(&mut Vec<Conversation>)) -> Result<(), String> {
        let mut guard = self.list.lock().await;
        let list = self.loaded(&mut guard).await;
        let before = list.clone();
        edit(list);
        if *list == before {
            return Ok(());
        }
        if let Some(path) = self.path.clone() {
            let text = serde_json::to_vec_pretty(&*list).map_err(|err| err.to_string())?;
            let written = tokio::task::spawn_blocking(move || write_atomically(&path, &text))
                .await
                .map_err(|err| err.to_string())
                .and_then(|written| written);
            if let Err(err) = written {
                *list = before;
                tracing::warn!(error = %err, "could not save the list of conversations");
                return Err(format!(
                    "the list of conversations could not be saved: {err}"
                ));
            }
        }
        self.broadcast(list);
        Ok(())
    }

    /// Sends the list to every watching socket (dropping those that are gone or full).
    fn broadcast(&self, list: &[Conversation]) {
        let frame = ServerFrame::Conversations {
            conversations: list.to_vec(),
        }
        .to_json();
        self.watchers
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .retain(
                |watcher| match watcher.tx.try_send(Box::new(frame.clone().into())) {
                    Ok(()) => true,
                    Err(TrySendError::Closed(_)) => false,
                    Err(TrySendError::Full(_)) => {
                        watcher.kill.cancel();
                        false
                    }
                },
            );
    }

    /// The list, read from its file the first time.
    async fn loaded<'a>(
        &self,
        guard: &'a mut Option<Vec<Conversation>>,
    ) -> &'a mut Vec<Conversation> {
        if guard.is_none() {
            let list = match self.path.clone() {
                Some(path) => tokio::task::spawn_blocking(move || read(&path))
                    .await
                    .unwrap_or_default(),
                None => Vec::new(),
            };
            *guard = Some(list);
        }
        guard.get_or_insert_with(Vec::new)
    }
}

/// The web page's titles of its conversations, by chat id, read-only from the list in
/// `state_dir` (the control panel names sessions by them): empty when there is none or it
/// does not read.
pub fn titles(state_dir: &std::path::Path) -> std::collections::HashMap<String, String> {
    let path = state_dir
        .join(crate::config::CHANNEL_NAME)
        .join("conversations.json");
    let Ok(meta) = std::fs::metadata(&path) else {
        return Default::default();
    };
    if meta.len() > MAX_FILE_BYTES {
        return Default::default();
    }
    std::fs::read(&path)
        .ok()
        .and_then(|text| serde_json::from_slice::<Vec<Conversation>>(&text).ok())
        .unwrap_or_default()
        .into_iter()
        .map(|c| (c.chat_id, c.title))
        .collect()
}

/// The list in `path`: empty when there is none; a file that cannot be read as a list is
/// renamed `*.corrupt` (kept for its owner) and the list starts empty.
fn read(path: &std::path::Path) -> Vec<Conversation> {
    let text = match std::fs::metadata(path) {
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Vec::new(),
        Ok(meta) if meta.len() > MAX_FILE_BYTES => Err(format!(
            "larger than {MAX_FILE_BYTES} bytes ({})",
            meta.len()
        )),
        _ => std::fs::read(path).map_err(|err| err.to_string()),
    };
    let parsed = text.and_then(|text| {
        serde_json::from_slice::<Vec<Conversation>>(&text).map_err(|err| err.to_string())
    });
    match parsed {
        Ok(mut list) => {
            list.truncate(MAX_CONVERSATIONS);
            list
        }
        Err(err) => {
            let aside = path.with_extension("json.corrupt");
            tracing::warn!(path = %path.display(), error = %err, aside = %aside.display(),
                "the list of conversations is unreadable; starting a new one");
            let _ = std::fs::rename(path, aside);
            Vec::new()
        }
    }
}

fn write_atomically(path: &std::path::Path, bytes: &[u8]) -> Result<(), String> {
    use std::io::Write;
    let dir = path.parent().ok_or("the list's path has no folder")?;
    std::fs::create_dir_all(dir).map_err(|err| format!("{}: {err}", dir.display()))?;
    let temporary = path.with_extension("json.tmp");
    let mut file = std::fs::File::create(&temporary)
        .map_err(|err| format!("{}: {err}", temporary.display()))?;
    file.write_all(bytes)
        .and_then(|()| file.sync_all())
        .map_err(|err| format!("{}: {err}", temporary.display()))?;
    std::fs::rename(&temporary, path).map_err(|err| format!("{}: {err}", path.display()))?;
    if let Ok(dir) = std::fs::File::open(dir) {
        let _ = dir.sync_all();
    }
    Ok(())
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::sync::mpsc;
    use tokio_util::sync::CancellationToken;

    fn subscriber(conn: u64) -> (Subscriber, mpsc::Receiver<crate::subscribers::Frame>) {
        let (tx, rx) = mpsc::channel(8);
        (
            Subscriber {
                conn,
                tx,
                kill: CancellationToken::new(),
            },
            rx,
        )
    }

    #[tokio::test]
    async fn the_list_is_kept_in_its_file_most_recent_first_and_sent_to_watchers() {
        let dir = tempfile::tempdir().expect("dir");
        let path = dir.path().join("web").join("conversations.json");
        let list = Conversations::new(Some(path.clone()));
        let (watcher, mut frames) = subscriber(1);
        assert!(list.watch(&watcher).await.is_empty());

        list.touch("a", None).await.expect("a");
        list.touch("b", Some("Holiday plans")).await.expect("b");
        list.touch("a", Some("  Taxes  ")).await.expect("a renamed");
        let frame = frames.try_recv().expect("a change is sent");
        assert!(frame.contains(r#""type":"conversations""#), "{frame}");

        let again = Conversations::new(Some(path.clone()));
        let titles: Vec<(String, String)> = again
            .watch(&subscriber(2).0)
            .await
            .into_iter()
            .map(|c| (c.chat_id, c.title))
            .collect();
        assert_eq!(
            titles,
            [
                ("a".to_owned(), "Taxes".to_owned()),
                ("b".to_owned(), "Holiday plans".to_owned())
            ]
        );

        again.remove("a").await.expect("removed");
        let left = Conversations::new(Some(path)).watch(&watcher).await;
        assert_eq!(left.len(), 1);
        assert_eq!(left[0].chat_id, "b");
    }

    #[tokio::test]
    async fn a_corrupt_file_is_set_aside_and_the_list_starts_empty() {
        let dir = tempfile::tempdir().expect("dir");
        let path = dir.path().join("conversations.json");
        std::fs::write(&path, b"{not a list").expect("write");
        let list = Conversations::new(Some(path.clone()));
        assert!(list.watch(&subscriber(1).0).await.is_empty());
        assert!(dir.path().join("conversations.json.corrupt").exists());
        list.touch("c", None).await.expect("a new list is saved");
        assert!(path.exists());
    }

    #[tokio::test]
    async fn the_list_is_capped() {
        let list = Conversations::new(None);
        for n in 0..MAX_CONVERSATIONS + 3 {
            list.touch(&format!("c{n}"), None).await.expect("touch");
        }
        let all = list.watch(&subscriber(1).0).await;
        assert_eq!(all.len(), MAX_CONVERSATIONS);
        assert_eq!(all[0].chat_id, format!("c{}", MAX_CONVERSATIONS + 2));
    }
}
