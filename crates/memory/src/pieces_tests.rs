//! An index following a cluster's two streams, simulated: the pieces a `NatsStore` stores
//! for appends, compactions (a history copy in the history stream, then a rollup) and `/new`
//! (an archive copy, then an empty rollup), with what the server drops at each rollup. A
//! follower there all along, one that starts once most was dropped, one that reads either
//! stream ahead of the other in any measure, one killed after any piece, and one that meets
//! a copy twice (a compaction cut short and carried on) all find each message once, and
//! archived where a `/new` closed it.

use switchboard_core::{MemoryQuery, MemoryScope};
use switchboard_sessions::transcript::{Piece, PiecePart, Source};

use crate::db::{IndexError, Sources};
use crate::index::Index;
use crate::pieces::Taking;
use crate::search::Reader;

/// A chat's generation: its first position, and its messages' positions and bytes.
type Generation = (u64, Vec<(u64, Vec<u8>)>);

/// The sessions and history streams of one agent, as the server keeps them.
#[derive(Default)]
struct Stream {
    /// Everything stored in the sessions stream, in order; `None` where the server dropped
    /// it (a rollup).
    stored: Vec<Option<Piece>>,
    /// The history stream (nothing is dropped there).
    history: Vec<Piece>,
    /// Each chat's current generation.
    chats: std::collections::BTreeMap<String, Generation>,
    /// The last position on each chat's subject.
    last: std::collections::BTreeMap<String, u64>,
}

impl Stream {
    fn store(&mut self, session: &str, part: PiecePart, text: Vec<u8>) -> u64 {
        let position = self.stored.len() as u64 + 1;
        // A chat's records say what came before them on its subject; archives do not.
        let previous = matches!(part, PiecePart::Session { .. })
            .then(|| self.last.insert(session.to_owned(), position).unwrap_or(0));
        self.stored.push(Some(Piece {
            source: Source::Sessions,
            position,
            previous,
            session: session.to_owned(),
            part,
            text,
            millis: 1_764_000_000_000 + position as i64,
        }));
        position
    }

    /// Stores a piece of history: a generation compaction replaced.
    fn keep(&mut self, session: &str, part: PiecePart, text: Vec<u8>) {
        let position = self.history.len() as u64 + 1;
        self.history.push(Piece {
            source: Source::History,
            position,
            previous: None,
            session: session.to_owned(),
            part,
            text,
            millis: 1_764_000_000_000 + position as i64,
        });
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
            if archived {
                self.store(chat, part, text);
            } else {
                self.keep(chat, part, text);
            }
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

    /// What a follower starting after `after` (of the sessions stream, of the history
    /// stream) is given of each stream.
    fn after(&self, after: [u64; 2]) -> [Vec<Piece>; 2] {
        [
            self.stored
                .iter()
                .flatten()
                .filter(|piece| piece.position > after[0])
                .cloned()
                .collect(),
            self.history
                .iter()
                .filter(|piece| piece.position > after[1])
                .cloned()
                .collect(),
        ]
    }

    /// How many pieces were stored in each stream.
    fn stored(&self) -> [u64; 2] {
        [self.stored.len() as u64, self.history.len() as u64]
    }
}

/// The pieces of two streams as a follower may meet them: each stream's in order, taken
/// `a` of the sessions stream's for every `b` of the history stream's.
fn interleave([sessions, history]: [Vec<Piece>; 2], a: usize, b: usize) -> Vec<Piece> {
    let (mut sessions, mut history) = (sessions.into_iter(), history.into_iter());
    let mut out = Vec::new();
    loop {
        let before = out.len();
        out.extend(sessions.by_ref().take(a));
        out.extend(history.by_ref().take(b));
        if out.len() == before {
            return out;
        }
    }
}

/// The positions of the last piece of each stream among `pieces`.
fn last_of(pieces: &[Piece]) -> [u64; 2] {
    let mut last = [0, 0];
    for piece in pieces {
        let at = usize::from(piece.source == Source::History);
        last[at] = last[at].max(piece.position);
    }
    last
}

const STREAMS: [&str; 2] = ["s@1", "h@1"];

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
    let mut seen = [0, 0];
    let mut step = |stream: &mut Stream, live: &mut Vec<Piece>| {
        live.extend(interleave(stream.after(seen), 1, 1));
        seen = stream.stored();
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
        .map(|piece| index.take(piece, Taking::Followed).expect("take").added)
        .sum()
}

/// Checks what `name` found of [`conversation`].
fn found_once(dir: &std::path::Path, name: &str) {
    let found = hits(dir, name, "locker");
    assert_eq!(found.len(), 2, "{name}: {found:?}");
    assert!(
        found
            .iter()
            .all(|(chat, _, archived)| chat == "web_a" && !archived)
    );
    let boat = hits(dir, name, "Mira");
    assert_eq!(boat.len(), 2, "{name}: {boat:?}");
    assert!(boat.iter().all(|(_, _, archived)| *archived), "{boat:?}");
    let fresh = hits(dir, name, "start");
    assert!(fresh.iter().all(|(_, _, archived)| !archived), "{fresh:?}");
    assert_eq!(fresh.len(), 2);
    assert_eq!(hits(dir, name, "filler").len(), 2 * 4 * 6);
}

#[test]
fn a_follower_there_all_along_and_one_from_what_is_left_find_each_message_once() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (stream, live) = conversation();
    let mut along = open(dir.path(), "along.sqlite3");
    assert_eq!(along.follow(STREAMS).expect("follow"), [0, 0]);
    assert_eq!(take_all(&mut along, &live), SAID);
    found_once(dir.path(), "along.sqlite3");
    let mut late = open(dir.path(), "late.sqlite3");
    assert_eq!(late.follow(STREAMS).expect("follow"), [0, 0]);
    let left = interleave(stream.after([0, 0]), 1, 1);
    assert!(left.len() < live.len(), "rollups dropped pieces");
    assert_eq!(take_all(&mut late, &left), SAID);
    found_once(dir.path(), "late.sqlite3");
}

#[test]
fn either_stream_read_ahead_of_the_other_finds_each_message_once() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (stream, live) = conversation();
    // What a follower there all along and one that came late are given of each stream;
    // `/new` closes a conversation in the sessions stream whose copies may come after it,
    // and copies of the conversation after it may come before.
    let along = {
        let (sessions, history): (Vec<Piece>, Vec<Piece>) = live
            .into_iter()
            .partition(|piece| piece.source == Source::Sessions);
        [sessions, history]
    };
    let late = stream.after([0, 0]);
    for (view, streams) in [("along", along), ("late", late)] {
        // History first, history last, and measures between.
        for (a, b) in [(0, 1), (1, 0), (1, 3), (3, 1), (7, 2), (2, 7)] {
            let name = format!("{view}-{a}-{b}.sqlite3");
            let mut index = open(dir.path(), &name);
            index.follow(STREAMS).expect("follow");
            let [sessions, history] = streams.clone();
            let pieces: Vec<Piece> = match (a, b) {
                (0, _) => history.into_iter().chain(sessions).collect(),
                (_, 0) => sessions.into_iter().chain(history).collect(),
                _ => interleave([sessions, history], a, b),
            };
            assert_eq!(take_all(&mut index, &pieces), SAID, "{name}");
            found_once(dir.path(), &name);
        }
    }
}

#[test]
fn a_follower_killed_after_any_piece_resumes_where_its_last_commit_left_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (_, live) = conversation();
    for kill_after in [1, 5, live.len() / 2, live.len() - 1] {
        let name = format!("k{kill_after}.sqlite3");
        let mut index = open(dir.path(), &name);
        index.follow(STREAMS).expect("follow");
        let mut added = take_all(&mut index, &live[..kill_after]);
        drop(index);
        let mut index = open(dir.path(), &name);
        let after = index.follow(STREAMS).expect("follow");
        assert_eq!(after, last_of(&live[..kill_after]));
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
    let live = interleave(stream.after([0, 0]), 1, 1);
    stream.roll_up("web_a", b"{\"copies\":0}\n".to_vec());
    let late = interleave(stream.after([0, 0]), 1, 1);
    for (name, pieces) in [("live", live), ("late", late)] {
        let mut index = open(dir.path(), name);
        index.follow(STREAMS).expect("follow");
        assert_eq!(take_all(&mut index, &pieces), 2 * 7, "{name}");
        assert_eq!(hits(dir.path(), name, "said").len(), 2 * 7, "{name}");
    }
}

#[test]
fn another_stream_or_a_cleared_index_is_followed_from_the_start() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (_, live) = conversation();
    let mut index = open(dir.path(), "i.sqlite3");
    index.follow(STREAMS).expect("follow");
    take_all(&mut index, &live);
    assert_eq!(index.follow(STREAMS).expect("follow"), last_of(&live));
    // A stream made again: its positions are not the old one's.
    assert_eq!(index.follow(["s@1", "h@2"]).expect("follow"), [0, 0]);
    assert!(hits(dir.path(), "i.sqlite3", "locker").is_empty());
    take_all(&mut index, &live);
    // `switchboard memory reindex` clears it under a running follower: told, not skipped.
    index.clear().expect("clear");
    assert!(matches!(
        index.take(&live[0], Taking::Followed),
        Err(IndexError::Unfollowed)
    ));
    assert_eq!(index.follow(["s@1", "h@2"]).expect("follow"), [0, 0]);
    assert_eq!(take_all(&mut index, &live), SAID);
}

/// Takes `pieces` as the daemon's feed does: a piece after a gap in its chat's records has
/// what came between read again from `stream` (what it still holds of the chat) and taken
/// first; what is gone, the piece is taken past.
fn take_filling(index: &mut Index, stream: &Stream, pieces: &[Piece]) -> usize {
    let mut added = 0;
    for piece in pieces {
        match index.take(piece, Taking::Followed) {
            Ok(pass) => added += pass.added,
            Err(IndexError::Missed { session, after }) => {
                let [sessions, _] = stream.after([0, 0]);
                for missed in sessions.iter().filter(|p| {
                    p.session == session && p.position > after && p.position < piece.position
                }) {
                    added += index.take(missed, Taking::Filled).expect("fill").added;
                }
                added += match index.take(piece, Taking::Followed) {
                    Ok(pass) => pass.added,
                    Err(IndexError::Missed { .. }) => {
                        index.take(piece, Taking::PastGap).expect("past").added
                    }
                    Err(err) => panic!("{err}"),
                };
            }
            Err(err) => panic!("{err}"),
        }
    }
    added
}

#[test]
fn a_follower_passed_over_some_records_reads_them_again_or_leaves_them_to_the_copy() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (stream, live) = conversation();
    // The server passes a follower over some of a chat's records as they are stored: each
    // third, fifth and seventh of them — but a chat's last (nothing after it tells of the
    // gap here; the feed itself reads again what its consumer jumps over).
    let mut lasts = std::collections::BTreeMap::new();
    for piece in live.iter().filter(|piece| piece.previous.is_some()) {
        lasts.insert(piece.session.clone(), piece.position);
    }
    for every in [3, 5, 7] {
        let mut n = 0;
        let passed: Vec<Piece> = live
            .iter()
            .filter(|piece| {
                if piece.source == Source::History
                    || piece.previous.is_none()
                    || lasts.get(&piece.session) == Some(&piece.position)
                {
                    return true;
                }
                n += 1;
                n % every != 0
            })
            .cloned()
            .collect();
        // Read again at the end, while the stream holds what it holds now: what was
        // replaced since is gone, and its copy has it.
        let name = format!("passed-{every}.sqlite3");
        let mut index = open(dir.path(), &name);
        index.follow(STREAMS).expect("follow");
        assert_eq!(take_filling(&mut index, &stream, &passed), SAID, "{name}");
        found_once(dir.path(), &name);
    }
}
