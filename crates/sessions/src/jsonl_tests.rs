//! The JSONL store on a real directory: appends, loads, torn and corrupt lines, compaction,
//! archive, failing writes, file names.

use switchboard_core::{MessageId, ToolCall, Usage};

use crate::store::{Batch, InboundState, Revision, Snapshot};

use super::*;
use crate::file_name::MAX_STEM;

fn store() -> (tempfile::TempDir, JsonlStore) {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = JsonlStore::open(dir.path()).expect("open");
    (dir, store)
}

#[tokio::test]
async fn appended_messages_load_back_in_order() {
    let (_dir, store) = store();
    let key = SessionKey::from("websocket_c1");
    let call = ToolCall {
        id: "1".into(),
        name: "t".into(),
        arguments: "{}".into(),
        signature: None,
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
        .append(&key, Revision::default(), &Batch::messages(&messages[..1]))
        .await
        .expect("append");
    let batch = Batch {
        messages: &messages[1..],
        usage: Some(Usage::new(5, 2)),
        inbound: None,
    };
    store
        .append(&key, Revision::default(), &batch)
        .await
        .expect("append");
    let loaded = store.load(&key).await.expect("load");
    assert_eq!(loaded.messages, messages);
    assert_eq!(loaded.usage.input_tokens, 5);
    assert_eq!(loaded.records, 5);
}

#[tokio::test]
async fn the_inbound_journal_is_read_back_and_kept_by_compaction() {
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
        store
            .append(&key, Revision::default(), &batch)
            .await
            .expect("append");
    }
    let loaded = store.load(&key).await.expect("load");
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
        summary: None,
    };
    store
        .compact(&key, Revision::default(), &snapshot)
        .await
        .expect("compact");
    let again = store.load(&key).await.expect("load");
    assert_eq!(again.inbound, expected);
    assert_eq!(again.messages, loaded.messages[2..]);
}

#[tokio::test]
async fn a_session_never_written_loads_empty() {
    let (_dir, store) = store();
    assert_eq!(
        store.load(&"x_y".into()).await.expect("load"),
        Loaded::default()
    );
}

#[tokio::test]
async fn a_torn_last_line_is_skipped_and_the_file_repaired() {
    let (_dir, store) = store();
    let key = SessionKey::from("s");
    store
        .append(
            &key,
            Revision::default(),
            &Batch::messages(&[ChatMessage::user("q"), ChatMessage::assistant("a")]),
        )
        .await
        .expect("append");
    let path = store.path_of(&key);
    let mut file = OpenOptions::new().append(true).open(&path).expect("open");
    file.write_all(br#"{"role":"user","cont"#).expect("tear");
    drop(file);

    let loaded = store.load(&key).await.expect("load");
    assert_eq!(
        loaded.messages,
        vec![ChatMessage::user("q"), ChatMessage::assistant("a")]
    );

    // The next append must not be glued onto the torn line.
    store
        .append(
            &key,
            Revision::default(),
            &Batch::messages(&[ChatMessage::user("next")]),
        )
        .await
        .expect("append");
    let again = store.load(&key).await.expect("load");
    assert_eq!(again.messages.len(), 3);
    assert_eq!(again.messages[2], ChatMessage::user("next"));
}

#[tokio::test]
async fn a_corrupt_middle_line_is_skipped() {
    let (_dir, store) = store();
    let key = SessionKey::from("s");
    store
        .append(
            &key,
            Revision::default(),
            &Batch::messages(&[ChatMessage::user("q")]),
        )
        .await
        .expect("append");
    let path = store.path_of(&key);
    let mut file = OpenOptions::new().append(true).open(&path).expect("open");
    file.write_all(b"not json\n").expect("write");
    drop(file);
    store
        .append(
            &key,
            Revision::default(),
            &Batch::messages(&[ChatMessage::assistant("a")]),
        )
        .await
        .expect("append");
    let loaded = store.load(&key).await.expect("load");
    assert_eq!(
        loaded.messages,
        vec![ChatMessage::user("q"), ChatMessage::assistant("a")]
    );
}

#[tokio::test]
async fn compaction_replaces_the_file_atomically() {
    let (_dir, store) = store();
    let key = SessionKey::from("s");
    for i in 0..10 {
        store
            .append(
                &key,
                Revision::default(),
                &Batch::messages(&[ChatMessage::user(format!("q{i}"))]),
            )
            .await
            .expect("append");
    }
    let keep = vec![ChatMessage::user("q9")];
    let snapshot = Snapshot {
        messages: &keep,
        usage: Usage::new(1, 1),
        inbound: &[],
        summary: None,
    };
    store
        .compact(&key, Revision::default(), &snapshot)
        .await
        .expect("compact");
    let loaded = store.load(&key).await.expect("load");
    assert_eq!(loaded.messages, keep);
    assert_eq!(loaded.usage.input_tokens, 1);
    assert!(!store.path_of(&key).with_extension("jsonl.tmp").exists());
}

#[tokio::test]
async fn appends_after_compaction_and_archive_reach_the_new_file() {
    let (_dir, store) = store();
    let key = SessionKey::from("s");
    // The first append keeps the file open; compaction and archive replace the file,
    // so a later append must not go to the old, unlinked one.
    store
        .append(
            &key,
            Revision::default(),
            &Batch::messages(&[ChatMessage::user("1")]),
        )
        .await
        .expect("append");
    let snapshot = Snapshot {
        messages: &[ChatMessage::user("1")],
        usage: Usage::default(),
        inbound: &[],
        summary: None,
    };
    store
        .compact(&key, Revision::default(), &snapshot)
        .await
        .expect("compact");
    store
        .append(
            &key,
            Revision::default(),
            &Batch::messages(&[ChatMessage::user("2")]),
        )
        .await
        .expect("append");
    let loaded = store.load(&key).await.expect("load");
    assert_eq!(
        loaded.messages,
        vec![ChatMessage::user("1"), ChatMessage::user("2")]
    );

    store
        .archive(&key, Revision::default())
        .await
        .expect("archive");
    store
        .append(
            &key,
            Revision::default(),
            &Batch::messages(&[ChatMessage::user("3")]),
        )
        .await
        .expect("append");
    assert_eq!(
        store.load(&key).await.expect("load").messages,
        vec![ChatMessage::user("3")]
    );
}

#[tokio::test]
async fn archive_starts_the_session_afresh() {
    let (dir, store) = store();
    let key = SessionKey::from("s");
    store
        .append(
            &key,
            Revision::default(),
            &Batch::messages(&[ChatMessage::user("q")]),
        )
        .await
        .expect("append");
    store
        .archive(&key, Revision::default())
        .await
        .expect("archive");
    assert!(store.load(&key).await.expect("load").messages.is_empty());
    let archived = fs::read_dir(dir.path().join("sessions/archive"))
        .expect("dir")
        .count();
    assert_eq!(archived, 1);
}

#[tokio::test]
async fn a_damaged_file_is_cut_to_its_last_whole_record_before_the_next_append() {
    let (_dir, store) = store();
    let key = SessionKey::from("s");
    store
        .append(
            &key,
            Revision::default(),
            &Batch::messages(&[ChatMessage::user("q")]),
        )
        .await
        .expect("append");
    // A partial record that a failed append could not remove.
    let mut file = OpenOptions::new()
        .append(true)
        .open(store.path_of(&key))
        .expect("open");
    file.write_all(br#"{"role":"assistant","conte"#)
        .expect("tear");
    drop(file);
    store.files.forget(&key);
    lock(&store.files.damaged).insert(key.clone());

    store
        .append(
            &key,
            Revision::default(),
            &Batch::messages(&[ChatMessage::user("next")]),
        )
        .await
        .expect("append");
    let loaded = store.load(&key).await.expect("load");
    assert_eq!(
        loaded.messages,
        vec![ChatMessage::user("q"), ChatMessage::user("next")]
    );
    assert_eq!(loaded.records, 2, "no line was lost or skipped");
}

#[tokio::test]
async fn a_write_that_fails_degrades_health_until_one_succeeds() {
    let (_dir, store) = store();
    let key = SessionKey::from("full");
    // /dev/full fails every write with ENOSPC, as a full disk does.
    std::os::unix::fs::symlink("/dev/full", store.path_of(&key)).expect("symlink");
    let err = store
        .append(
            &key,
            Revision::default(),
            &Batch::messages(&[ChatMessage::user("q")]),
        )
        .await
        .expect_err("the disk is full");
    assert!(err.to_string().contains("No space left"), "{err}");
    assert!(
        !err.to_string()
            .contains(&*store.files.dir.to_string_lossy()),
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
        .append(
            &key,
            Revision::default(),
            &Batch::messages(&[ChatMessage::user("q")]),
        )
        .await
        .expect("the disk has room again");
    assert_eq!(store.health(), StoreHealth::Ok);
    assert_eq!(
        store.load(&key).await.expect("load").messages,
        vec![ChatMessage::user("q")]
    );
}

#[tokio::test]
async fn a_state_dir_that_refuses_writes_is_refused_at_open() {
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

#[tokio::test]
async fn long_keys_get_fixed_length_names_that_do_not_collide() {
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
            .append(
                key,
                Revision::default(),
                &Batch::messages(&[ChatMessage::user(key.as_str())]),
            )
            .await
            .expect("a long key works");
        store
            .archive(key, Revision::default())
            .await
            .expect("and archives");
    }
}

#[tokio::test]
async fn keys_cannot_escape_the_directory() {
    let (_dir, store) = store();
    let path = store.path_of(&SessionKey::from("websocket_../../etc/passwd"));
    assert_eq!(path.parent(), Some(store.files.dir.as_path()));
    assert!(
        path.file_name()
            .is_some_and(|n| n.to_string_lossy().contains("%2F"))
    );
}

#[tokio::test]
async fn sessions_are_listed_by_key_newest_first_without_archives() {
    let (_dir, store) = store();
    assert!(store.list().await.expect("empty").is_empty());
    let odd = SessionKey::from("telegram_-100 42/é");
    let long = SessionKey::from(format!("websocket_{}", "x".repeat(300)));
    for key in [&SessionKey::from("websocket_a"), &odd, &long] {
        store
            .append(
                key,
                Revision::default(),
                &Batch::messages(&[ChatMessage::user("hi")]),
            )
            .await
            .expect("append");
    }
    store
        .archive(&SessionKey::from("websocket_a"), Revision::default())
        .await
        .expect("archive");
    store
        .append(
            &SessionKey::from("websocket_a"),
            Revision::default(),
            &Batch::messages(&[ChatMessage::user("again")]),
        )
        .await
        .expect("append");
    let listed = store.list().await.expect("list");
    assert_eq!(listed.len(), 3, "{listed:?}");
    assert!(listed.windows(2).all(|w| w[0].modified >= w[1].modified));
    assert!(
        listed
            .iter()
            .any(|s| s.key == Some(SessionKey::from("websocket_a")))
    );
    assert!(listed.iter().any(|s| s.key.as_ref() == Some(&odd)));
    let hashed = listed
        .iter()
        .find(|s| s.key.is_none())
        .expect("the long one");
    assert!(hashed.name.contains('~'));
    assert!(listed.iter().all(|s| s.bytes > 0));
}

/// Every message of a transcript, each once, in file order: what a reader of the whole
/// transcript (the memory index) sees.
fn said(store: &JsonlStore) -> Vec<(String, bool)> {
    let files = crate::transcript::transcript_files(&store.files.dir).expect("list");
    let mut said = Vec::new();
    for file in files {
        let text = std::fs::read(&file.path).expect("read");
        for s in crate::transcript::read_said(&text, 0).said {
            let ChatMessage::User { content, .. } = s.message else {
                continue;
            };
            assert!(s.at.is_some(), "{content} has its time");
            said.push((content, file.archived));
        }
    }
    said.sort();
    said
}

#[tokio::test]
async fn what_compaction_drops_is_kept_in_history_and_read_once() {
    let (_dir, store) = store();
    let key = SessionKey::from("websocket_h");
    let mut window = Vec::new();
    for i in 0..12 {
        let message = ChatMessage::user(format!("m{i:02}"));
        store
            .append(
                &key,
                Revision::default(),
                &Batch::messages(std::slice::from_ref(&message)),
            )
            .await
            .expect("append");
        window.push(message);
        if i % 4 == 3 {
            // Keep the last two as the window.
            let kept = &window[window.len() - 2..];
            let snapshot = Snapshot {
                messages: kept,
                usage: Usage::default(),
                inbound: &[],
                summary: None,
            };
            store
                .compact(&key, Revision::default(), &snapshot)
                .await
                .expect("compact");
        }
    }
    let expected: Vec<(String, bool)> = (0..12).map(|i| (format!("m{i:02}"), false)).collect();
    assert_eq!(said(&store), expected);
    // The window still loads as before.
    let loaded = store.load(&key).await.expect("load");
    assert_eq!(loaded.messages, window[10..]);

    // A crash between the link and the rename: the live file also under a history name.
    let path = store.path_of(&key);
    std::fs::hard_link(&path, store.files.dir.join("history/websocket_h.1.jsonl")).expect("link");
    assert_eq!(said(&store), expected, "one inode is read once");

    // `/new` closes the conversation: its segments are archived with it.
    store
        .archive(&key, Revision::default())
        .await
        .expect("archive");
    store
        .append(
            &key,
            Revision::default(),
            &Batch::messages(&[ChatMessage::user("after")]),
        )
        .await
        .expect("append");
    let mut expected: Vec<(String, bool)> = (0..12).map(|i| (format!("m{i:02}"), true)).collect();
    expected.push(("after".into(), false));
    expected.sort();
    assert_eq!(said(&store), expected);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_sessions_loading_at_once_take_a_few_threads_not_a_thousand() {
    let (_dir, store) = store();
    let keys: Vec<SessionKey> = (0..1000)
        .map(|i| SessionKey::from(format!("websocket_c{i}").as_str()))
        .collect();
    for key in &keys {
        let history = [ChatMessage::user("q"), ChatMessage::assistant("a")];
        store
            .append(key, Revision::default(), &Batch::messages(&history))
            .await
            .expect("append");
    }
    let loads: Vec<_> = keys
        .iter()
        .map(|key| {
            let store = store.clone();
            let key = key.clone();
            tokio::spawn(async move { store.load(&key).await })
        })
        .collect();
    for load in loads {
        let loaded = load.await.expect("joined").expect("loaded");
        assert_eq!(loaded.messages.len(), 2);
    }
    assert!(
        store.most_threads() <= LANES,
        "{} threads for 1,000 loads",
        store.most_threads()
    );
}
