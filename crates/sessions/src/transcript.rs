//! A session's whole transcript on disk, and reading what was said in it, each message once.
//!
//! The file of a session (`sessions/<stem>.jsonl`) holds a window of it: compaction rewrites
//! the file with the last messages only. What it drops is not lost: before the rewrite, the
//! file being replaced is hard-linked into `sessions/history/<stem>.<millis>.jsonl` (no byte
//! copied), and the new file opens with `{"copies":N}` for the window it repeats. `/new`
//! moves the file to `sessions/archive/<stem>.<millis>.jsonl`. So the transcript of a chat
//! is its history segments, its archives and its file; reading all of them and skipping
//! each file's copies gives every message exactly once.
//!
//! A crash between the link and the rename leaves a segment that is the live file itself
//! (one inode, two names): readers take a file by its inode once ([`TranscriptFile::inode`]),
//! so nothing is read twice, and the next compaction links it again under a new name.
//!
//! A history segment belongs to the conversation that was current when it was cut: one an
//! archive of the same chat closed later is archived with it ([`TranscriptFile::archived`]).

use std::collections::HashMap;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use switchboard_core::{ChatMessage, SessionKey};

use crate::file_name::{file_stem, key_of};

/// The directory under `sessions/` that compaction keeps replaced files in.
pub const HISTORY_DIR: &str = "history";
/// The directory under `sessions/` that `/new` moves a session's file to.
pub const ARCHIVE_DIR: &str = "archive";

/// Which part of a transcript a file is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Part {
    /// The session's file: the conversation going on now.
    Current,
    /// A file compaction replaced, cut at `millis`.
    History,
    /// A conversation `/new` closed at `millis`.
    Archive,
}

/// One file of a transcript.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TranscriptFile {
    /// Where it is.
    pub path: PathBuf,
    /// The session's file stem (the key, percent-encoded).
    pub stem: String,
    /// The session's key; `None` for a long key's hashed stem.
    pub key: Option<SessionKey>,
    /// Which part it is.
    pub part: Part,
    /// When it was cut (history) or closed (archive), in Unix milliseconds; 0 for the file.
    pub millis: u64,
    /// Whether its conversation was closed by `/new`: an archive, or a history segment an
    /// archive of the same chat followed.
    pub archived: bool,
    /// The file's identity on its device (device and inode): names of one file share it.
    pub inode: (u64, u64),
    /// Its length when listed.
    pub len: u64,
}

/// The file of a session's current conversation under `sessions_dir`.
pub fn file_of(sessions_dir: &Path, key: &SessionKey) -> PathBuf {
    sessions_dir.join(format!("{}.jsonl", file_stem(key)))
}

/// Every transcript file under `sessions_dir` (a store's `<state_dir>/sessions`), each inode
/// once (the current file's name before a segment's, a segment's before an archive's).
/// A missing directory has none.
pub fn transcript_files(sessions_dir: &Path) -> std::io::Result<Vec<TranscriptFile>> {
    let mut files = Vec::new();
    list(sessions_dir, Part::Current, &mut files)?;
    list(&sessions_dir.join(HISTORY_DIR), Part::History, &mut files)?;
    list(&sessions_dir.join(ARCHIVE_DIR), Part::Archive, &mut files)?;
    let mut closed: HashMap<String, u64> = HashMap::new();
    for file in files.iter().filter(|f| f.part == Part::Archive) {
        let last = closed.entry(file.stem.clone()).or_default();
        *last = (*last).max(file.millis);
    }
    for file in &mut files {
        file.archived = match file.part {
            Part::Current => false,
            Part::Archive => true,
            Part::History => closed
                .get(&file.stem)
                .is_some_and(|&end| end >= file.millis),
        };
    }
    let mut seen = std::collections::HashSet::new();
    files.retain(|file| seen.insert(file.inode));
    Ok(files)
}

/// The files of one directory that are transcript files of `part`.
fn list(dir: &Path, part: Part, files: &mut Vec<TranscriptFile>) -> std::io::Result<()> {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(err) => return Err(err),
    };
    let mut found = Vec::new();
    for entry in entries.filter_map(Result::ok) {
        let Ok(name) = entry.file_name().into_string() else {
            continue;
        };
        let Some((stem, millis)) = parse_name(&name, part) else {
            continue;
        };
        let Ok(meta) = entry.metadata() else { continue };
        if !meta.is_file() {
            continue;
        }
        found.push(TranscriptFile {
            path: entry.path(),
            key: key_of(stem),
            stem: stem.to_owned(),
            part,
            millis,
            archived: false,
            inode: (meta.dev(), meta.ino()),
            len: meta.len(),
        });
    }
    found.sort_by(|a, b| (&a.stem, a.millis).cmp(&(&b.stem, b.millis)));
    files.extend(found);
    Ok(())
}

/// A file name's stem and time, when it names a transcript file of `part`: `<stem>.jsonl`
/// for the file, `<stem>.<millis>.jsonl` for a segment or an archive (temporary files and
/// anything else are not).
pub(crate) fn parse_name(name: &str, part: Part) -> Option<(&str, u64)> {
    let base = name.strip_suffix(".jsonl")?;
    let (stem, millis) = match part {
        Part::Current => (base, 0),
        Part::History | Part::Archive => {
            let (stem, millis) = base.rsplit_once('.')?;
            (stem, millis.parse().ok()?)
        }
    };
    let valid = !stem.is_empty()
        && stem
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'%' | b'~'));
    valid.then_some((stem, millis))
}

/// A message of a transcript and when it was written (`None` in files written before
/// messages carried their time).
#[derive(Clone, Debug, PartialEq)]
pub struct Said {
    /// When it was written, in Unix milliseconds.
    pub at: Option<i64>,
    /// The message.
    pub message: ChatMessage,
    /// Where its line ends in the file: reading on from here gives what follows it.
    pub end: u64,
}

/// What [`read_said`] read.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Reading {
    /// The messages, in order, copies left out.
    pub said: Vec<Said>,
    /// Where the last whole line read ends (the offset to read on from); a last line without
    /// its newline (being written, or torn) is not read.
    pub end: u64,
    /// Copies still to skip after `end` (a window repeated across more than one piece).
    pub copies: usize,
}

/// What one line holds besides a message.
#[derive(Deserialize)]
struct Marks {
    #[serde(default)]
    at: Option<i64>,
    #[serde(default)]
    copies: Option<usize>,
    #[serde(default)]
    role: Option<serde::de::IgnoredAny>,
}

/// The messages in `text`, which is a transcript file's bytes from `offset` on: each whole
/// line that is a message, except the copies a compacted file opens with (counted from its
/// `{"copies":N}` record when `offset` is 0, the only place it is written). Other records
/// and unreadable lines are passed over.
pub fn read_said(text: &[u8], offset: u64) -> Reading {
    read_said_after(text, offset, 0)
}

/// [`read_said`] of bytes that follow a reading which left `copies` still to skip (its
/// [`Reading::copies`]): how a transcript kept in pieces is read piece by piece.
pub fn read_said_after(text: &[u8], offset: u64, copies: usize) -> Reading {
    let mut reading = Reading {
        said: Vec::new(),
        end: offset,
        copies: 0,
    };
    let mut copies = copies;
    let mut pos = 0usize;
    while let Some(len) = text[pos..].iter().position(|&b| b == b'\n') {
        let line = &text[pos..pos + len];
        pos += len + 1;
        let end = offset + pos as u64;
        reading.end = end;
        let Ok(marks) = serde_json::from_slice::<Marks>(line) else {
            continue;
        };
        if let Some(n) = marks.copies {
            copies = n;
            continue;
        }
        if marks.role.is_none() {
            continue;
        }
        if copies > 0 {
            copies -= 1;
            continue;
        }
        if let Ok(message) = serde_json::from_slice::<ChatMessage>(line) {
            reading.said.push(Said {
                at: marks.at,
                message,
                end,
            });
        }
    }
    reading.copies = copies;
    reading
}

/// A piece of a transcript kept as a sequence of stored messages rather than as files (a
/// cluster's sessions stream), as a follower of that sequence reads it.
///
/// A chat's messages come in generations: a generation starts where the chat's records were
/// replaced (compaction's snapshot, `/new`'s empty start) or first written, and runs on with
/// each append. What a generation said outlives its replacement as copies kept elsewhere —
/// compaction keeps the generation it replaces, `/new` the conversation it closes — each piece
/// of a copy saying which generation it is and at which byte of it it starts. So a follower
/// that missed a generation's appends (they were replaced before it read them) finds them in
/// the copy, and one that read them skips the copy's bytes it already has: each message once.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Piece {
    /// Which of the two sequences it is of.
    pub source: Source,
    /// Where it is in its sequence (a stream sequence): a sequence's pieces come in this
    /// order, and a follower resumes after the last it took of each.
    pub position: u64,
    /// The chat (its key's text).
    pub session: String,
    /// The position of what was stored before it for the chat, as its writer knew it (the
    /// fence it was written under), when it says: a follower that took something else last
    /// missed what came between.
    pub previous: Option<u64>,
    /// What it is.
    pub part: PiecePart,
    /// Its records: whole JSONL lines.
    pub text: Vec<u8>,
    /// When it was stored, in Unix milliseconds (the time of messages that carry none).
    pub millis: i64,
}

/// The sequence a [`Piece`] is of. The chats' records and the copies compaction keeps are
/// two sequences, followed side by side in no order between them: a copy may be read before
/// or after the records it copies, and each message is still taken once, as a piece of a
/// generation says where in it its bytes are (a copy's by its offset, a session's by the
/// generation's pieces read before it, which come in order).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    /// The chats' records and the conversations `/new` closed, in the order written.
    Sessions,
    /// The generations compaction replaced.
    History,
}

/// What a [`Piece`] is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PiecePart {
    /// Records the chat's store wrote: the start of a generation (`starts`: a replacement),
    /// else the generation going on, at its end.
    Session {
        /// Whether it replaced the chat's records and so starts a generation.
        starts: bool,
    },
    /// Part of a copy of a generation, from byte `offset` of it.
    Kept {
        /// The generation: the position of the piece that started it.
        generation: u64,
        /// Where in the generation's bytes this piece starts.
        offset: u64,
        /// Whether it is a conversation `/new` closed (everything of the chat said until
        /// then is archived with it).
        archived: bool,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_read_by_part() {
        assert_eq!(
            parse_name("telegram_1.jsonl", Part::Current),
            Some(("telegram_1", 0))
        );
        assert_eq!(
            parse_name("telegram_1.17.jsonl", Part::History),
            Some(("telegram_1", 17))
        );
        assert_eq!(parse_name("telegram_1.jsonl.tmp", Part::Current), None);
        assert_eq!(parse_name("telegram_1.jsonl", Part::History), None);
        assert_eq!(parse_name(".write-check", Part::Current), None);
        assert_eq!(parse_name("a.b.jsonl", Part::Current), None);
    }

    #[test]
    fn copies_that_run_past_a_piece_are_skipped_in_the_next() {
        let first = "{\"copies\":2}\n{\"role\":\"user\",\"content\":\"a\"}\n";
        let reading = read_said(first.as_bytes(), 0);
        assert!(reading.said.is_empty());
        assert_eq!(reading.copies, 1);
        let second =
            "{\"role\":\"user\",\"content\":\"b\"}\n{\"role\":\"user\",\"content\":\"c\"}\n";
        let more = read_said_after(second.as_bytes(), reading.end, reading.copies);
        assert_eq!(more.said.len(), 1);
        assert_eq!(more.said[0].message, ChatMessage::user("c"));
        assert_eq!(more.copies, 0);
    }

    #[test]
    fn copies_are_skipped_and_a_partial_line_is_left_for_later() {
        let text = concat!(
            "{\"usage\":{\"input_tokens\":1,\"output_tokens\":1}}\n",
            "{\"copies\":1}\n",
            "{\"role\":\"user\",\"content\":\"copied\"}\n",
            "{\"role\":\"user\",\"content\":\"new\",\"at\":5}\n",
            "{\"inbound\":{\"id\":\"1\",\"state\":\"received\"}}\n",
            "{\"role\":\"assistant\",\"content\":\"half"
        );
        let reading = read_said(text.as_bytes(), 0);
        assert_eq!(reading.said.len(), 1);
        assert_eq!(reading.said[0].message, ChatMessage::user("new"));
        assert_eq!(reading.said[0].at, Some(5));
        let whole = text.rfind('\n').map(|i| i + 1).unwrap_or_default() as u64;
        assert_eq!(reading.end, whole);
        // Read on from there once the line is whole: only what is new.
        let rest = format!("{}\"}}\n", &text[whole as usize..]);
        let more = read_said(rest.as_bytes(), whole);
        assert_eq!(more.said.len(), 1);
        assert_eq!(more.said[0].message, ChatMessage::assistant("half"));
        assert_eq!(more.end, whole + rest.len() as u64);
    }
}
