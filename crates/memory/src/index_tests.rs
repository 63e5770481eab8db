//! One agent's index over a real session store in a temporary directory: what it finds,
//! after compaction, `/new`, a kill part-way and a rebuild from scratch.

use std::sync::Arc;

use switchboard_core::{ChatMessage, MemoryQuery, MemoryScope, SessionKey, Usage};
use switchboard_sessions::{Batch, JsonlStore, Revision, SessionStore, Snapshot};

use super::*;
use crate::db::{Pass, Sources, VERSION};
use crate::search::{RANKED, Reader};
use rusqlite::Connection;
use switchboard_core::MemoryError;

struct Fixture {
    dir: tempfile::TempDir,
    store: Arc<JsonlStore>,
}

impl Fixture {
    fn new() -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = Arc::new(JsonlStore::open(dir.path()).expect("store"));
        std::fs::create_dir_all(dir.path().join("workspace")).expect("workspace");
        Self { dir, store }
    }

    fn sources(&self) -> Sources {
        Sources {
            sessions: Some(self.dir.path().join("sessions")),
            workspace: self.dir.path().join("workspace"),
        }
    }

    fn index(&self, name: &str) -> Index {
        Index::open(&self.dir.path().join(name), self.sources()).expect("index")
    }

    fn reader(&self, name: &str) -> Reader {
        Reader::open(&self.dir.path().join(name)).expect("reader")
    }

    async fn say(&self, key: &SessionKey, texts: &[&str]) {
        for text in texts {
            let messages = [
                ChatMessage::user(*text),
                ChatMessage::assistant(format!("noted: {text}")),
            ];
            self.store
                .append(key, Revision::default(), &Batch::messages(&messages))
                .await
                .expect("append");
        }
    }

    /// Compacts `key` to its last `keep` messages, as the agent does.
    async fn compact(&self, key: &SessionKey, keep: usize) {
        let messages = self.store.transcript(key).await.expect("transcript");
        let window = &messages[messages.len().saturating_sub(keep)..];
        let snapshot = Snapshot {
            messages: window,
            usage: Usage::default(),
            inbound: &[],
            summary: None,
        };
        self.store
            .compact(key, Revision::default(), &snapshot)
            .await
            .expect("compact");
    }
}

fn find(reader: &Reader, text: &str, scope: MemoryScope) -> Vec<(String, String, bool)> {
    let mut query = MemoryQuery::new(text, scope);
    query.limit = 50;
    let mut hits: Vec<(String, String, bool)> = reader
        .search(&query)
        .expect("search")
        .into_iter()
        .map(|hit| (hit.place, hit.text, hit.archived))
        .collect();
    hits.sort();
    hits
}

#[tokio::test]
async fn a_fact_said_long_ago_is_found_once_after_compactions() {
    let fx = Fixture::new();
    let key = SessionKey::from("telegram_1");
    fx.say(&key, &["my locker code is 4711"]).await;
    for round in 0..5 {
        let filler: Vec<String> = (0..40).map(|i| format!("filler {round} {i}")).collect();
        let filler: Vec<&str> = filler.iter().map(String::as_str).collect();
        fx.say(&key, &filler).await;
        fx.compact(&key, 20).await;
    }
    let mut index = fx.index("a.sqlite3");
    let pass = index.sync_all(|_| {}).expect("sync");
    assert_eq!(pass.added, 2 * (1 + 5 * 40), "every message once: {pass:?}");
    let reader = fx.reader("a.sqlite3");
    let hits = reader
        .search(&MemoryQuery::new("locker code 4711", MemoryScope::Chats))
        .expect("search");
    // The fact and the answer that noted it; nothing twice.
    assert_eq!(hits.len(), 2, "{hits:?}");
    let hits: Vec<_> = hits.into_iter().filter(|hit| hit.who == "user").collect();
    assert_eq!(hits[0].place, "telegram_1");
    assert_eq!(hits[0].who, "user");
    assert!(
        hits[0].snippet.contains("**locker**"),
        "{}",
        hits[0].snippet
    );
    let at = hits[0].at.expect("a time");
    let now = switchboard_sessions_now();
    assert!((now - 60_000..=now).contains(&at), "{at} vs {now}");
    // A second pass finds nothing new.
    assert_eq!(index.sync_all(|_| {}).expect("sync").added, 0);
}

fn switchboard_sessions_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

#[tokio::test]
async fn new_messages_are_read_on_and_new_conversations_archive_the_old() {
    let fx = Fixture::new();
    let key = SessionKey::from("websocket_a");
    let mut index = fx.index("a.sqlite3");
    fx.say(&key, &["the boat is blue"]).await;
    assert_eq!(index.sync_session(&key).expect("sync").added, 2);
    fx.say(&key, &["the car is red"]).await;
    assert_eq!(index.sync_session(&key).expect("sync").added, 2);
    let reader = fx.reader("a.sqlite3");
    assert_eq!(
        find(&reader, "boat", MemoryScope::Chat(key.clone())),
        [
            (
                "websocket_a".into(),
                "noted: the boat is blue".into(),
                false
            ),
            ("websocket_a".into(), "the boat is blue".into(), false)
        ]
    );
    fx.store
        .archive(&key, Revision::default())
        .await
        .expect("archive");
    index.archive_session(&key).expect("archive");
    fx.say(&key, &["a new boat"]).await;
    index.sync_session(&key).expect("sync");
    let hits = find(&reader, "boat", MemoryScope::Chats);
    assert_eq!(hits.iter().filter(|h| h.2).count(), 2, "{hits:?}");
    assert_eq!(hits.iter().filter(|h| !h.2).count(), 2, "{hits:?}");
    // A pass from scratch agrees, archived flags and all.
    let mut fresh = fx.index("b.sqlite3");
    fresh.sync_all(|_| {}).expect("sync");
    assert_eq!(
        find(&fx.reader("b.sqlite3"), "boat", MemoryScope::Chats),
        hits
    );
    // And so does the live index after its own pass.
    index.sync_all(|_| {}).expect("sync");
    assert_eq!(find(&reader, "boat", MemoryScope::Chats), hits);
}

#[tokio::test]
async fn a_pass_cut_short_is_finished_by_the_next_without_doubles() {
    let fx = Fixture::new();
    for chat in 0..6 {
        let key = SessionKey::from(format!("telegram_{chat}"));
        let texts: Vec<String> = (0..30).map(|i| format!("apple {chat} {i}")).collect();
        let texts: Vec<&str> = texts.iter().map(String::as_str).collect();
        fx.say(&key, &texts).await;
    }
    let expected = {
        let mut index = fx.index("whole.sqlite3");
        index.sync_all(|_| {}).expect("sync");
        find(&fx.reader("whole.sqlite3"), "apple", MemoryScope::Chats)
    };
    assert_eq!(expected.len(), 50, "the limit");
    // Cut short after three files: what is committed stays, the rest is read next time.
    {
        let mut index = fx.index("cut.sqlite3");
        let mut seen = 0;
        let cut = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            index
                .sync_all(|_| {
                    seen += 1;
                    assert!(seen < 3, "killed");
                })
                .ok();
        }));
        assert!(cut.is_err());
    }
    let mut index = fx.index("cut.sqlite3");
    index.sync_all(|_| {}).expect("sync");
    let counts = index.counts().expect("counts");
    assert_eq!(counts.entries, 6 * 60);
    assert_eq!(
        find(&fx.reader("cut.sqlite3"), "apple", MemoryScope::Chats),
        expected
    );
}

#[tokio::test]
async fn memory_files_are_found_by_chunk_and_follow_their_edits() {
    let fx = Fixture::new();
    let memory = fx.dir.path().join("workspace/MEMORY.md");
    std::fs::write(
        &memory,
        "# People\n\nAnna drinks tea.\n\n# Places\n\nAnna lives in Graz.",
    )
    .expect("write");
    let mut index = fx.index("a.sqlite3");
    index.sync_all(|_| {}).expect("sync");
    let reader = fx.reader("a.sqlite3");
    let hits = reader
        .search(&MemoryQuery::new("Graz", MemoryScope::All))
        .expect("search");
    assert_eq!(hits.len(), 1);
    assert!(hits[0].file);
    assert_eq!(hits[0].place, "MEMORY.md");
    assert_eq!(hits[0].text, "# Places\n\nAnna lives in Graz.");
    assert!(
        reader
            .search(&MemoryQuery::new("Graz", MemoryScope::Chats))
            .expect("search")
            .is_empty()
    );
    std::fs::write(&memory, "# Places\n\nAnna moved to Linz.").expect("write");
    index.sync_notes(&mut Pass::default()).expect("sync");
    assert!(
        reader
            .search(&MemoryQuery::new("Graz", MemoryScope::All))
            .expect("search")
            .is_empty()
    );
    assert_eq!(
        reader
            .search(&MemoryQuery::new("Linz", MemoryScope::All))
            .expect("search")
            .len(),
        1
    );
}

#[tokio::test]
async fn queries_take_phrases_and_punctuation_and_say_what_is_wrong() {
    let fx = Fixture::new();
    let key = SessionKey::from("websocket_q");
    fx.say(
        &key,
        &[
            "what's the e-mail of Zoë?",
            "the red car",
            "a car that is red",
        ],
    )
    .await;
    let mut index = fx.index("a.sqlite3");
    index.sync_all(|_| {}).expect("sync");
    let reader = fx.reader("a.sqlite3");
    let count = |q: &str| {
        reader
            .search(&MemoryQuery::new(q, MemoryScope::Chats))
            .map(|hits| hits.len())
    };
    assert_eq!(
        count("\"red car\""),
        Ok(2),
        "the phrase, in the question and its note"
    );
    assert_eq!(count("red car"), Ok(4));
    assert_eq!(count("e-mail"), Ok(2));
    assert_eq!(count("zoe"), Ok(2), "diacritics folded");
    assert_eq!(count("what's"), Ok(2));
    assert_eq!(count("red OR boat"), Ok(4));
    assert!(matches!(count("  "), Err(MemoryError::Query(_))));
    assert_eq!(count("\"\""), Ok(0));
}

#[test]
fn an_index_of_another_version_is_built_again() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("i.sqlite3");
    let sources = Sources {
        sessions: Some(dir.path().join("sessions")),
        workspace: dir.path().to_owned(),
    };
    drop(Index::open(&path, sources.clone()).expect("open"));
    let conn = Connection::open(&path).expect("conn");
    conn.pragma_update(None, "user_version", VERSION + 1)
        .expect("version");
    drop(conn);
    let index = Index::open(&path, sources.clone()).expect("open again");
    assert_eq!(index.counts().expect("counts").entries, 0);
    drop(index);
    std::fs::write(&path, b"not a database at all, not even close to one").expect("write");
    assert!(Index::open(&path, sources).is_ok());
}

#[tokio::test]
async fn a_search_keeps_to_its_chat_and_its_time() {
    let fx = Fixture::new();
    let (a, b) = (
        SessionKey::from("telegram_a"),
        SessionKey::from("telegram_b"),
    );
    fx.say(&a, &["lunch at noon"]).await;
    fx.say(&b, &["lunch at one"]).await;
    std::fs::write(fx.dir.path().join("workspace/MEMORY.md"), "lunch is sacred").expect("write");
    let mut index = fx.index("a.sqlite3");
    index.sync_all(|_| {}).expect("sync");
    let reader = fx.reader("a.sqlite3");
    let places = |query: MemoryQuery| -> Vec<String> {
        let mut places: Vec<String> = reader
            .search(&query)
            .expect("search")
            .into_iter()
            .map(|hit| hit.place)
            .collect();
        places.sort();
        places
    };
    assert_eq!(
        places(MemoryQuery::new("lunch", MemoryScope::All)),
        [
            "MEMORY.md",
            "telegram_a",
            "telegram_a",
            "telegram_b",
            "telegram_b"
        ]
    );
    assert_eq!(
        places(MemoryQuery::new("lunch", MemoryScope::Chats)).len(),
        4,
        "no memory file"
    );
    assert_eq!(
        places(MemoryQuery::new("lunch", MemoryScope::Chat(a.clone()))),
        ["telegram_a", "telegram_a"]
    );
    let now = switchboard_sessions_now();
    let mut later = MemoryQuery::new("lunch", MemoryScope::Chats);
    later.since = Some(now + 60_000);
    assert!(places(later).is_empty(), "nothing said after now");
    let mut earlier = MemoryQuery::new("lunch", MemoryScope::Chat(b));
    earlier.since = Some(now - 60_000);
    earlier.until = Some(now + 60_000);
    assert_eq!(places(earlier), ["telegram_b", "telegram_b"]);
}

#[test]
fn a_word_too_common_to_rank_answers_with_its_most_recent_matches() {
    let fx = Fixture::new();
    let sessions = fx.dir.path().join("sessions");
    let mut text = String::new();
    for i in 0..RANKED + 100 {
        let line = serde_json::json!({"role": "user", "content": format!("common word number {i}"), "at": i});
        text.push_str(&format!("{line}\n"));
    }
    std::fs::write(sessions.join("telegram_c.jsonl"), text).expect("write");
    let mut index = fx.index("a.sqlite3");
    index.sync_all(|_| {}).expect("sync");
    let reader = fx.reader("a.sqlite3");
    let hits = reader
        .search(&MemoryQuery::new("common", MemoryScope::Chats))
        .expect("search");
    let last = RANKED + 99;
    assert_eq!(
        hits[0].text,
        format!("common word number {last}"),
        "the newest first"
    );
    assert_eq!(hits[1].text, format!("common word number {}", last - 1));
    // A rarer one is ranked.
    let hits = reader
        .search(&MemoryQuery::new("\"number 7\"", MemoryScope::Chats))
        .expect("search");
    assert_eq!(hits.len(), 1);
}
