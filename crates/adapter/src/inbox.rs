//! [`Inbox`]: what a push platform delivered, kept on disk until its fate is known.
//!
//! Some platforms must be told "received" at once and deliver nothing again once told:
//! Slack's Socket Mode wants every envelope acknowledged within 3 s (a turn takes longer),
//! and an acknowledged envelope is gone. For them the channel takes a message into its inbox
//! — written and fsynced — *before* acknowledging it, publishes it, and settles it once its
//! fate is known. A message the daemon did not get to (it stopped, it was killed) is still in
//! the inbox at the next start and is published again; the session's journal then answers it
//! exactly once, whatever point the first attempt reached.
//!
//! The file is JSON lines: `{"take":N,"body":…}` (with `"starts"`, the daemon starts it has
//! been found unsettled at) and `{"settle":N}`. Opening it keeps what is not settled — but a
//! message found unsettled at [`MAX_STARTS`] starts is given up on (logged), so one that
//! takes the daemon down cannot do it forever — and writes it anew (atomically); later settles only append, unsynced — a lost
//! one means a repeat, which the journal absorbs — and the file is compacted again once
//! settled lines outnumber the pending. A damaged line (a crash mid-append) is skipped: it was
//! never acknowledged, so the platform still holds it.

use std::collections::BTreeMap;
use std::fs::{self, File, OpenOptions};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

use serde::{Deserialize, Serialize};
use serde_json::Value;
use switchboard_core::{Ack, Fate};

/// Messages waiting at most; beyond, [`Inbox::take`] refuses (the platform keeps the message
/// and delivers it again).
pub const MAX_PENDING: usize = 1024;
/// The largest message body kept.
pub const MAX_BODY_BYTES: usize = 256 * 1024;
/// Starts a message may be found unsettled at before it is given up on.
pub const MAX_STARTS: u32 = 3;
/// Settled lines appended before the file is compacted (at least).
const COMPACT_AFTER: usize = 256;

/// Why a message was not taken in: the platform should not be acknowledged.
#[derive(Debug, thiserror::Error)]
pub enum InboxError {
    /// [`MAX_PENDING`] messages wait already.
    #[error("{MAX_PENDING} messages are waiting to be handled already")]
    Full,
    /// The body is larger than [`MAX_BODY_BYTES`].
    #[error("a message of {0} bytes is larger than the inbox keeps ({MAX_BODY_BYTES})")]
    TooLarge(usize),
    /// The file could not be written.
    #[error("cannot write the inbox {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// A message found in the inbox at a start.
#[derive(Clone)]
pub struct Taken {
    /// Its place (settle it by this).
    pub entry: InboxEntry,
    /// What the platform delivered.
    pub body: Value,
}

/// A message's place in an inbox.
#[derive(Clone)]
pub struct InboxEntry {
    inbox: Inbox,
    number: u64,
}

impl InboxEntry {
    /// Its number in the inbox.
    pub fn number(&self) -> u64 {
        self.number
    }

    /// Its fate is known: it leaves the inbox.
    pub fn settle(&self) {
        self.inbox.settle(self.number);
    }

    /// An ack that settles it once its fate is known — and keeps it, for the next start,
    /// when it is left unprocessed (the daemon stopped first).
    pub fn ack(self) -> Ack {
        Ack::new(move |fate| {
            if fate != Fate::Unprocessed {
                self.settle();
            }
        })
    }
}

#[derive(Serialize, Deserialize)]
#[serde(untagged)]
enum Line {
    Take {
        take: u64,
        body: Value,
        #[serde(default, skip_serializing_if = "is_zero")]
        starts: u32,
    },
    Settle {
        settle: u64,
    },
}

fn is_zero(starts: &u32) -> bool {
    *starts == 0
}

/// A message waiting, and at how many starts it was found so.
struct Waiting {
    body: Value,
    starts: u32,
}

struct State {
    file: File,
    pending: BTreeMap<u64, Waiting>,
    next: u64,
    /// Settle lines appended since the file was last written whole.
    settled: usize,
}

/// A channel's inbox. Cloning shares it. Its calls write files: call them off the runtime's
/// threads (`spawn_blocking`) where that matters.
#[derive(Clone)]
pub struct Inbox {
    path: Arc<PathBuf>,
    state: Arc<Mutex<State>>,
}

impl Inbox {
    /// Opens (or creates) the inbox at `path`; returns it and what is in it unsettled,
    /// oldest first, to publish again.
    pub fn open(path: &Path) -> Result<(Self, Vec<Taken>), InboxError> {
        let io = |source| InboxError::Io {
            path: path.to_owned(),
            source,
        };
        let mut pending = BTreeMap::new();
        let mut next = 0;
        match File::open(path) {
            Ok(file) => {
                for line in BufReader::new(file).lines() {
                    let line = line.map_err(io)?;
                    match serde_json::from_str::<Line>(&line) {
                        Ok(Line::Take { take, body, starts }) => {
                            next = next.max(take + 1);
                            pending.insert(take, Waiting { body, starts });
                        }
                        Ok(Line::Settle { settle }) => {
                            pending.remove(&settle);
                        }
                        Err(err) => tracing::warn!(path = %path.display(), error = %err,
                            "a damaged inbox line was skipped (it was never acknowledged)"),
                    }
                }
            }
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => {}
            Err(err) => return Err(io(err)),
        }
        pending.retain(|number, waiting| {
            waiting.starts += 1;
            let keep = waiting.starts <= MAX_STARTS;
            if !keep {
                tracing::error!(path = %path.display(), message = number, starts = MAX_STARTS,
                    "an inbox message was found unhandled at every start; given up on");
            }
            keep
        });
        if let Some(parent) = path.parent() {
            fs::create_dir_all(parent).map_err(io)?;
        }
        let file = rewrite(path, &pending).map_err(io)?;
        let bodies: Vec<(u64, Value)> = pending
            .iter()
            .map(|(number, waiting)| (*number, waiting.body.clone()))
            .collect();
        let inbox = Self {
            path: Arc::new(path.to_owned()),
            state: Arc::new(Mutex::new(State {
                file,
                pending,
                next,
                settled: 0,
            })),
        };
        let taken = bodies
            .into_iter()
            .map(|(number, body)| Taken {
                entry: inbox.entry(number),
                body,
            })
            .collect();
        Ok((inbox, taken))
    }

    /// [`Inbox::open`], off the runtime's threads.
    pub async fn opened(path: &Path) -> Result<(Self, Vec<Taken>), InboxError> {
        let owned = path.to_owned();
        tokio::task::spawn_blocking(move || Self::open(&owned))
            .await
            .unwrap_or_else(|err| {
                Err(InboxError::Io {
                    path: path.to_owned(),
                    source: std::io::Error::other(err.to_string()),
                })
            })
    }

    /// [`Inbox::take`], off the runtime's threads (it fsyncs).
    pub async fn keep(&self, body: Value) -> Result<InboxEntry, InboxError> {
        let inbox = self.clone();
        tokio::task::spawn_blocking(move || inbox.take(body))
            .await
            .unwrap_or_else(|err| Err(self.io(std::io::Error::other(err.to_string()))))
    }

    fn entry(&self, number: u64) -> InboxEntry {
        InboxEntry {
            inbox: self.clone(),
            number,
        }
    }

    /// Takes `body` in, durably: once this returns, the platform may be acknowledged.
    pub fn take(&self, body: Value) -> Result<InboxEntry, InboxError> {
        let mut state = self.lock();
        if state.pending.len() >= MAX_PENDING {
            return Err(InboxError::Full);
        }
        let number = state.next;
        // `Value`'s `Display` is its compact JSON.
        let text = format!("{{\"take\":{number},\"body\":{body}}}");
        if text.len() > MAX_BODY_BYTES {
            return Err(InboxError::TooLarge(text.len()));
        }
        let written = writeln!(state.file, "{text}").and_then(|()| state.file.sync_data());
        written.map_err(|source| self.io(source))?;
        state.pending.insert(number, Waiting { body, starts: 0 });
        state.next += 1;
        Ok(self.entry(number))
    }

    /// Message `number`'s fate is known: it leaves the inbox. (Best effort: a settle that
    /// is not written means the message is published again after a restart.)
    fn settle(&self, number: u64) {
        let mut state = self.lock();
        if state.pending.remove(&number).is_none() {
            return;
        }
        let text = serde_json::to_string(&Line::Settle { settle: number }).unwrap_or_default();
        if let Err(err) = writeln!(state.file, "{text}") {
            tracing::warn!(path = %self.path.display(), error = %err, "could not settle an inbox message");
        }
        state.settled += 1;
        if state.settled >= COMPACT_AFTER.max(state.pending.len()) {
            match rewrite(&self.path, &state.pending) {
                Ok(file) => {
                    state.file = file;
                    state.settled = 0;
                }
                Err(err) => tracing::warn!(path = %self.path.display(), error = %err,
                    "could not compact the inbox"),
            }
        }
    }

    /// Messages waiting.
    pub fn pending(&self) -> usize {
        self.lock().pending.len()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn io(&self, source: std::io::Error) -> InboxError {
        InboxError::Io {
            path: self.path.as_ref().clone(),
            source,
        }
    }
}

/// Writes `pending` as the whole file (a temporary file, fsynced, renamed over it); returns
/// the file opened for appending.
fn rewrite(path: &Path, pending: &BTreeMap<u64, Waiting>) -> std::io::Result<File> {
    let tmp = path.with_extension("tmp");
    let mut out = File::create(&tmp)?;
    for (number, waiting) in pending {
        let line = Line::Take {
            take: *number,
            body: waiting.body.clone(),
            starts: waiting.starts,
        };
        writeln!(out, "{}", serde_json::to_string(&line).unwrap_or_default())?;
    }
    out.sync_all()?;
    fs::rename(&tmp, path)?;
    if let Some(parent) = path.parent()
        && let Ok(dir) = File::open(parent)
    {
        let _ = dir.sync_all();
    }
    OpenOptions::new().append(true).open(path)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn what_is_not_settled_comes_back_after_a_restart_in_order() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("slack").join("inbox.jsonl");
        let (inbox, taken) = Inbox::open(&path).expect("open");
        assert!(taken.is_empty());
        let first = inbox.take(json!({"text": "one"})).expect("take");
        let second = inbox.take(json!({"text": "two"})).expect("take");
        let third = inbox.take(json!({"text": "three"})).expect("take");
        second.settle();
        drop(inbox);
        let (inbox, taken) = Inbox::open(&path).expect("open again");
        let numbers: Vec<u64> = taken.iter().map(|t| t.entry.number()).collect();
        assert_eq!(numbers, [first.number(), third.number()]);
        assert_eq!(taken[1].body, json!({"text": "three"}));
        // Numbers go on past the ones kept.
        let fourth = inbox.take(json!({"text": "four"})).expect("take");
        assert!(fourth.number() > third.number());
    }

    #[test]
    fn a_message_never_handled_is_given_up_on_after_three_starts() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("inbox.jsonl");
        let (inbox, _) = Inbox::open(&path).expect("open");
        inbox.take(json!({"text": "poison"})).expect("take");
        drop(inbox);
        for start in 1..=MAX_STARTS {
            let (_, taken) = Inbox::open(&path).expect("open");
            assert_eq!(taken.len(), 1, "start {start}");
        }
        let (_, taken) = Inbox::open(&path).expect("open");
        assert!(taken.is_empty());
    }

    #[test]
    fn a_damaged_last_line_is_skipped_and_the_rest_kept() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("inbox.jsonl");
        let (inbox, _) = Inbox::open(&path).expect("open");
        inbox.take(json!({"text": "kept"})).expect("take");
        drop(inbox);
        let mut file = OpenOptions::new().append(true).open(&path).expect("append");
        file.write_all(b"{\"take\":1,\"body\":{\"te")
            .expect("write");
        drop(file);
        let (_, taken) = Inbox::open(&path).expect("open");
        assert_eq!(taken.len(), 1);
        assert_eq!(taken[0].body, json!({"text": "kept"}));
    }

    #[test]
    fn a_full_inbox_and_a_huge_message_are_refused_and_settling_compacts_the_file() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("inbox.jsonl");
        let (inbox, _) = Inbox::open(&path).expect("open");
        let huge = json!({"text": "x".repeat(MAX_BODY_BYTES)});
        assert!(matches!(inbox.take(huge), Err(InboxError::TooLarge(_))));
        let entries: Vec<InboxEntry> = (0..MAX_PENDING)
            .map(|i| inbox.take(json!({"n": i})).expect("take"))
            .collect();
        assert!(matches!(inbox.take(json!({})), Err(InboxError::Full)));
        for entry in &entries {
            entry.settle();
        }
        assert_eq!(inbox.pending(), 0);
        let size = fs::metadata(&path).expect("file").len();
        assert!(size < 64 * 1024, "the file was compacted: {size} bytes");
        let (_, taken) = Inbox::open(&path).expect("open");
        assert!(taken.is_empty());
    }
}
