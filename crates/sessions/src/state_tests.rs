//! The state directory's documents: files named by their keys, changes that lose nothing,
//! the size limit, and documents changed often kept as their versions.

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

/// A change that counts: the number stored, plus one.
fn count(bytes: Option<&[u8]>) -> Change {
    let n: u64 = bytes
        .and_then(|b| std::str::from_utf8(b).ok()?.parse().ok())
        .unwrap_or(0);
    Change::Put((n + 1).to_string().into_bytes())
}

/// What `state` holds under `key`.
async fn content(state: &FileState, key: &str) -> Vec<u8> {
    state.get(key).await.expect("get").expect("there").bytes
}

/// Counts `times` with `update_often`.
async fn count_often(state: &FileState, key: &str, times: usize) {
    for _ in 0..times {
        state.update_often(key, &mut count).await.expect("change");
    }
}

/// Spending's documents: each change appended, read as the last; a change cut by a kill
/// read as the one before and written over; the file kept short; a durable change
/// making it a plain file again; another process's changes read again.
#[tokio::test]
async fn a_document_changed_often_is_appended_and_reads_as_its_last_version() {
    let dir = tempfile::tempdir().expect("dir");
    let state = FileState::new(dir.path());
    let key = "usage/chat/2026-11-27/telegram_1";
    let file = dir.path().join(key);
    count_often(&state, key, 3).await;
    assert_eq!(content(&state, key).await, b"3");
    let three = std::fs::read(&file).expect("file");
    assert!(three.starts_with(versions::MAGIC), "kept as versions");

    // Killed mid-append: half a frame at the end reads as the version before it, and
    // the next change is not lost behind it.
    let mut torn = three.clone();
    torn.extend_from_slice(&versions::framed(b"4")[..5]);
    std::fs::write(&file, &torn).expect("torn");
    assert_eq!(content(&state, key).await, b"3");
    count_often(&state, key, 1).await;
    assert_eq!(content(&state, key).await, b"4");
    assert_eq!(
        state.scan("usage/chat").await.expect("scan"),
        vec![(key.to_owned(), b"4".to_vec())]
    );

    // Long, it is written anew as its last version.
    count_often(&state, key, 5_000).await;
    assert!(std::fs::read(&file).expect("file").len() <= versions::COMPACT_AT);
    assert_eq!(content(&state, key).await, b"5004");

    // A durable change leaves a plain file.
    state.update(key, &mut count).await.expect("change");
    assert_eq!(std::fs::read(&file).expect("file"), b"5005");

    // Kept open between changes, a document another process changed (appended to, or
    // replaced) is read again, never trusted from memory.
    let other = FileState::new(dir.path());
    for n in 0..20 {
        let writer = if n % 3 == 0 { &other } else { &state };
        if n % 7 == 0 {
            writer.update(key, &mut count).await.expect("change");
        } else {
            count_often(writer, key, 1).await;
        }
    }
    assert_eq!(content(&state, key).await, b"5025");
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
