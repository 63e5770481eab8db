//! Properties of the recovery paths, over random shapes: whatever history is read back —
//! orphaned results, unanswered calls, repeated or empty ids, a file cut at any byte or
//! full of garbage — `repair` makes it one a strict provider accepts, trimming keeps it so,
//! and loading never panics.
//!
//! Case counts: proptest's default (256), or `PROPTEST_CASES`.

use std::collections::VecDeque;
use std::io::Write;

use proptest::prelude::*;
use switchboard_core::{ChatMessage, ImagePart, SessionKey, ToolCall, Usage};
use switchboard_sessions::{Batch, JsonlStore, Revision, SessionStore, repair, trim};
use switchboard_testkit::strict::{WireMessage, check_conversation};

/// Ids from a small pool, so repeats, clashes and orphans are common; "" is a missing id.
fn id() -> impl Strategy<Value = String> {
    prop_oneof![Just(""), Just("a"), Just("b"), Just("c"), Just("a_2")].prop_map(str::to_owned)
}

fn message() -> impl Strategy<Value = ChatMessage> {
    prop_oneof![
        "[a-z ]{0,8}".prop_map(ChatMessage::user),
        ("[a-z ]{0,8}", prop::collection::vec(id(), 0..4)).prop_map(|(content, ids)| {
            ChatMessage::Assistant {
                content,
                tool_calls: ids
                    .into_iter()
                    .map(|id| ToolCall {
                        id,
                        name: "t".into(),
                        arguments: "{}".into(),
                        signature: None,
                    })
                    .collect(),
            }
        }),
        (id(), any::<bool>(), any::<bool>()).prop_map(|(id, is_error, image)| {
            ChatMessage::Tool {
                tool_call_id: id,
                name: "t".into(),
                content: "r".into(),
                is_error,
                images: if image {
                    vec![ImagePart {
                        path: "media/tools/t.png".into(),
                        mime: "image/png".into(),
                    }]
                } else {
                    Vec::new()
                },
            }
        }),
    ]
}

fn history() -> impl Strategy<Value = Vec<ChatMessage>> {
    prop::collection::vec(message(), 0..24)
}

/// What a strict provider says of a history.
fn strict(messages: &[ChatMessage]) -> Result<(), String> {
    check_conversation(messages.iter().map(|m| WireMessage {
        role: match m {
            ChatMessage::User { .. } => "user",
            ChatMessage::Assistant { .. } => "assistant",
            ChatMessage::Tool { .. } => "tool",
        },
        tool_call_ids: m.tool_calls().iter().map(|c| c.id.as_str()).collect(),
        tool_call_id: m.tool_call_id(),
    }))
}

proptest! {
    #[test]
    fn repair_always_yields_a_history_a_strict_provider_accepts(history in history()) {
        let repaired = repair(history.clone());
        prop_assert!(strict(&repaired).is_ok(), "{:?}\n-> {:?}\n: {:?}", history, repaired, strict(&repaired));
        // Nothing the person wrote is lost (only what comes before their first message).
        let users = |m: &[ChatMessage]| m.iter().filter(|m| m.is_user()).cloned().collect::<Vec<_>>();
        prop_assert_eq!(users(&history), users(&repaired));
        // A repaired history needs no further repair.
        prop_assert_eq!(repair(repaired.clone()), repaired);
    }

    #[test]
    fn trimming_a_repaired_history_keeps_it_acceptable(history in history(), limit in 2usize..12) {
        let mut window: VecDeque<ChatMessage> = repair(history).into();
        trim(&mut window, limit);
        let window: Vec<ChatMessage> = window.into();
        prop_assert!(window.len() <= limit);
        prop_assert!(strict(&window).is_ok(), "{:?}: {:?}", window, strict(&window));
    }

    #[test]
    fn any_bytes_in_a_session_file_load_without_panic(bytes in prop::collection::vec(any::<u8>(), 0..2048)) {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = JsonlStore::open(dir.path()).expect("open");
        let key = SessionKey::from("s");
        std::fs::write(store.path_of(&key), &bytes).expect("write");
        let loaded = block(store.load(&key)).expect("load");
        let repaired = repair(loaded.messages);
        prop_assert!(strict(&repaired).is_ok());
        // And the file takes the next record whole.
        block(store.append(&key, Revision::default(), &Batch::messages(&[ChatMessage::user("next")]))).expect("append");
        let again = block(store.load(&key)).expect("load");
        prop_assert_eq!(again.messages.last(), Some(&ChatMessage::user("next")));
    }

    #[test]
    fn a_file_cut_at_any_byte_loads_a_prefix_and_takes_the_next_append(
        history in history(),
        cut in any::<prop::sample::Index>(),
    ) {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = JsonlStore::open(dir.path()).expect("open");
        let key = SessionKey::from("s");
        for message in &history {
            block(store.append(&key, Revision::default(), &Batch::messages(std::slice::from_ref(message)))).expect("append");
        }
        let usage = Batch { usage: Some(Usage::new(1, 1)), ..Batch::default() };
        block(store.append(&key, Revision::default(), &usage)).expect("usage");
        let path = store.path_of(&key);
        let bytes = std::fs::read(&path).expect("read");
        let at = cut.index(bytes.len() + 1);
        // A crash (or power loss) that kept only the first `at` bytes.
        let mut file = std::fs::File::create(&path).expect("create");
        file.write_all(&bytes[..at]).expect("write");
        drop(file);
        drop(store);

        let store = JsonlStore::open(dir.path()).expect("open");
        let loaded = block(store.load(&key)).expect("load");
        prop_assert!(loaded.messages.len() <= history.len());
        prop_assert_eq!(&loaded.messages[..], &history[..loaded.messages.len()]);
        // Kept: every whole line, and a last line cut just before its newline (its record
        // is whole); lost: a last line cut inside its record.
        let whole_lines = bytes[..at].iter().filter(|&&b| b == b'\n').count();
        let record_without_newline =
            at > 0 && bytes[at - 1] != b'\n' && bytes.get(at) == Some(&b'\n');
        let kept = whole_lines + usize::from(record_without_newline);
        prop_assert_eq!(loaded.messages.len(), kept.min(history.len()));

        block(store.append(&key, Revision::default(), &Batch::messages(&[ChatMessage::user("after")]))).expect("append");
        let again = block(store.load(&key)).expect("load");
        prop_assert_eq!(again.messages.len(), loaded.messages.len() + 1);
        prop_assert_eq!(again.messages.last(), Some(&ChatMessage::user("after")));
    }
}

/// Runs a store call to its end (proptest's cases are not async).
fn block<F: std::future::Future>(call: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("runtime")
        .block_on(call)
}
