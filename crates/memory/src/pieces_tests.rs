//! An index following a cluster's stream, simulated: the pieces a `NatsStore` stores for
//! appends, compactions (a history copy, then a rollup) and `/new` (an archive copy, then an
//! empty rollup), with what the server drops at each rollup. A follower there all along, one
//! that starts once most was dropped, one killed after any piece, and one that meets a copy
//! twice (a compaction cut short and carried on) all find each message once.

use switchboard_core::{MemoryQuery, MemoryScope};
use switchboard_sessions::transcript::{Piece, PiecePart};

use super::*;
use crate::db::Sources;
use crate::search::Reader;

/// A chat's generation: its first position, and its messages' positions and bytes.
type Generation = (u64, Vec<(u64, Vec<u8>)>);

/// A sessions stream of one agent, as the server keeps it.
#[derive(Default)]
struct Stream {
    /// Everything stored, in order; `None` where the server dropped it (a rollup).
    stored: Vec<Option<Piece>>,
    /// Each chat's current generation.
    chats: std::collections::BTreeMap<String, Generation>,
}

impl Stream {
    fn store(&mut self, session: &str, part: PiecePart, text: Vec<u8>) -> u64 {
        let position = self.stored.len() as u64 + 1;
        self.stored.push(Some(Piece {
            position,
            session: session.to_owned(),
            part,
            text,
            millis: 1_764_000_000_000 + position as i64,
        }));
        position
    }

    fn append(&mut self, chat: &str, texts: &[&str]) {
        let mut text = Vec::new();
        for said in texts {
            text.extend_from_slice(&line("user", said));
            text.extend_from_slice(&line("assistant", &format!("noted: {said}")));
        }
        let position = self.store(chat, PiecePart::Session { starts: false }, text.clone());
        let (_, messages) = self
            .chats
            .entry(chat.to_owned())
            .or_insert((position, Vec::new()));
        messages.push((position, text));
    }

    /// Copies the generation of `chat` in pieces of `per` messages, from its `from`-th.
    fn copy(&mut self, chat: &str, from: usize, per: usize, archived: bool) {
        let all = self.chats[chat].1.len();
        self.copy_part(chat, from..all, per, archived);
    }

    /// Copies messages `range` of the generation of `chat`, in pieces of `per` messages.
    fn copy_part(&mut self, chat: &str, range: std::ops::Range<usize>, per: usize, archived: bool) {
        let (generation, messages) = self.chats[chat].clone();
        let mut offset: u64 = messages[..range.start]
            .iter()
            .map(|(_, t)| t.len() as u64)
            .sum();
        for group in messages[range].chunks(per) {
            let text: Vec<u8> = group.iter().flat_map(|(_, t)| t.clone()).collect();
            let len = text.len() as u64;
            let part = PiecePart::Kept {
                generation,
                offset,
                archived,
            };
            self.store(chat, part, text);
            offset += len;
        }
    }

    /// Compaction to the last `keep` messages of `chat`: its generation kept, then the
    /// rollup (which drops what came before it on the chat's subject).
    fn compact(&mut self, chat: &str, keep: usize) {
        self.copy(chat, 0, 2, false);
        let lines: Vec<Vec<u8>> = self.chats[chat]
            .1
            .iter()
            .flat_map(|(_, t)| t.split_inclusive(|&b| b == b'\n').map(<[u8]>::to_vec))
            .filter(|l| l.starts_with(b"{\"role\""))
            .collect();
        let window = &lines[lines.len().saturating_sub(keep)..];
        let mut text = format!("{{\"copies\":{}}}\n", window.len()).into_bytes();
        for l in window {
            text.extend_from_slice(l);
        }
        self.roll_up(chat, text);
    }

    /// `/new`: the generation archived, then an empty rollup.
    fn archive(&mut self, chat: &str) {
        self.copy(chat, 0, 3, true);
        self.roll_up(chat, Vec::new());
    }

    fn roll_up(&mut self, chat: &str, text: Vec<u8>) {
        let (_, messages) = self.chats[chat].clone();
        for (position, _) in messages {
            self.stored[position as usize - 1] = None;
        }
        let position = self.store(chat, PiecePart::Session { starts: true }, text.clone());
        self.chats
            .insert(chat.to_owned(), (position, vec![(position, text)]));
    }

    /// What a follower starting after `after` is given.
    fn after(&self, after: u64) -> Vec<Piece> {
        self.stored
            .iter()
            .flatten()
            .filter(|piece| piece.position > after)
            .cloned()
            .collect()
    }
}

fn line(role: &str, content: &str) -> Vec<u8> {
    let mut line =
        serde_json::to_vec(&serde_json::json!({"role": role, "content": content})).expect("json");
    line.push(b'\n');
    line
}

fn open(dir: &std::path::Path, name: &str) -> Index {
    let sources = Sources {
        sessions: None,
        workspace: dir.join("workspace"),
    };
    Index::open(&dir.join(name), sources).expect("index")
}

/// Every hit for `text` in chats: (chat, text, archived), sorted.
fn hits(dir: &std::path::Path, name: &str, text: &str) -> Vec<(String, String, bool)> {
    let mut query = MemoryQuery::new(text, MemoryScope::Chats);
    query.limit = 500;
    let mut hits: Vec<_> = Reader::open(&dir.join(name))
        .expect("reader")
        .search(&query)
        .expect("search")
        .into_iter()
        .map(|hit| (hit.place, hit.text, hit.archived))
        .collect();
    hits.sort();
    hits
}

/// Two chats over several compactions and a `/new`, with the followers' view of it as it
/// went: the pieces each live follower took at the time (before later rollups dropped any).
fn conversation() -> (Stream, Vec<Piece>) {
    let mut stream = Stream::default();
    let mut live = Vec::new();
    let mut seen = 0;
    let mut step = |stream: &mut Stream, live: &mut Vec<Piece>| {
        live.extend(stream.after(seen));
        seen = stream.stored.len() as u64;
    };
    stream.append("web_a", &["my locker code is 4711"]);
    step(&mut stream, &mut live);
    for round in 0..4 {
        for i in 0..6 {
            stream.append("web_a", &[&format!("filler {round} {i}")]);
            stream.append("web_b", &[&format!("other {round} {i}")]);
            step(&mut stream, &mut live);
        }
        stream.compact("web_a", 4);
        step(&mut stream, &mut live);
    }
    stream.append("web_b", &["the boat is called Mira"]);
    stream.compact("web_b", 6);
    stream.append("web_b", &["after the cut"]);
    step(&mut stream, &mut live);
    stream.archive("web_b");
    stream.append("web_b", &["a new start"]);
    step(&mut stream, &mut live);
    (stream, live)
}

/// Every message of the conversation: 2 per text said.
const SAID: usize = 2 * (1 + 4 * 6 + 4 * 6 + 3);

fn take_all(index: &mut Index, pieces: &[Piece]) -> usize {
    pieces
        .iter()
        .map(|piece| index.take(piece).expect("take").added)
        .sum()
}

#[test]
fn a_follower_there_all_along_and_one_from_what_is_left_find_each_message_once() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (stream, live) = conversation();
    let mut along = open(dir.path(), "along.sqlite3");
    assert_eq!(along.follow("s@1").expect("follow"), 0);
    assert_eq!(take_all(&mut along, &live), SAID);
    let mut late = open(dir.path(), "late.sqlite3");
    assert_eq!(late.follow("s@1").expect("follow"), 0);
    let left = stream.after(0);
    assert!(left.len() < live.len(), "rollups dropped pieces");
    assert_eq!(take_all(&mut late, &left), SAID);
    for name in ["along.sqlite3", "late.sqlite3"] {
        let found = hits(dir.path(), name, "locker");
        assert_eq!(found.len(), 2, "{name}: {found:?}");
        assert!(
            found
                .iter()
                .all(|(chat, _, archived)| chat == "web_a" && !archived)
        );
        let boat = hits(dir.path(), name, "Mira");
        assert_eq!(boat.len(), 2, "{name}: {boat:?}");
        assert!(boat.iter().all(|(_, _, archived)| *archived), "{boat:?}");
        let fresh = hits(dir.path(), name, "start");
        assert!(fresh.iter().all(|(_, _, archived)| !archived), "{fresh:?}");
        assert_eq!(fresh.len(), 2);
        assert_eq!(hits(dir.path(), name, "filler").len(), 2 * 4 * 6);
    }
}

#[test]
fn a_follower_killed_after_any_piece_resumes_where_its_last_commit_left_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (_, live) = conversation();
    for kill_after in [1, 5, live.len() / 2, live.len() - 1] {
        let name = format!("k{kill_after}.sqlite3");
        let mut index = open(dir.path(), &name);
        index.follow("s@1").expect("follow");
        let mut added = take_all(&mut index, &live[..kill_after]);
        drop(index);
        let mut index = open(dir.path(), &name);
        let after = index.follow("s@1").expect("follow");
        assert_eq!(after, live[kill_after - 1].position);
        // What the feed gives again from before the kill changes nothing.
        added += take_all(&mut index, &live[kill_after.saturating_sub(3)..]);
        assert_eq!(added, SAID, "killed after {kill_after}");
    }
}

#[test]
fn a_copy_carried_on_after_a_cut_is_not_read_twice() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut stream = Stream::default();
    for i in 0..6 {
        stream.append("web_a", &[&format!("said {i}")]);
    }
    // A compaction killed after part of its copy; the next carries the copy on.
    stream.copy_part("web_a", 0..2, 2, false);
    stream.append("web_a", &["said 6"]);
    stream.copy("web_a", 2, 2, false);
    // And one of its pieces published twice (a try repeated after its answer was lost).
    stream.copy_part("web_a", 4..6, 2, false);
    let live: Vec<Piece> = stream.after(0);
    stream.roll_up("web_a", b"{\"copies\":0}\n".to_vec());
    for (name, pieces) in [("live", live), ("late", stream.after(0))] {
        let mut index = open(dir.path(), name);
        index.follow("s@1").expect("follow");
        assert_eq!(take_all(&mut index, &pieces), 2 * 7, "{name}");
        assert_eq!(hits(dir.path(), name, "said").len(), 2 * 7, "{name}");
    }
}

#[test]
fn another_stream_or_a_cleared_index_is_followed_from_the_start() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (_, live) = conversation();
    let mut index = open(dir.path(), "i.sqlite3");
    index.follow("s@1").expect("follow");
    take_all(&mut index, &live);
    assert_eq!(
        index.follow("s@1").expect("follow"),
        live.last().expect("last").position
    );
    // The stream made again: its positions are not the old one's.
    assert_eq!(index.follow("s@2").expect("follow"), 0);
    assert!(hits(dir.path(), "i.sqlite3", "locker").is_empty());
    take_all(&mut index, &live);
    // `switchboard memory reindex` clears it under a running follower: told, not skipped.
    index.clear().expect("clear");
    assert!(matches!(index.take(&live[0]), Err(IndexError::Unfollowed)));
    assert_eq!(index.follow("s@2").expect("follow"), 0);
    assert_eq!(take_all(&mut index, &live), SAID);
}
