//! The rules that keep history valid: whole-turn trimming and repair of what was read back.
//!
//! A turn starts with a user message and holds every assistant message and tool result
//! until the next user message. A *step* is an assistant message with tool calls followed
//! by its results.

use std::borrow::Borrow;
use std::collections::{HashSet, VecDeque};

use switchboard_core::{ChatMessage, make_call_ids_unique};

/// The text of a synthetic result for a call whose real result was never recorded.
pub const MISSING_RESULT: &str =
    "error: the tool call was interrupted before it returned (no result was recorded)";

/// Trims `messages` to at most `limit` (which is at least 2).
///
/// Whole turns are dropped from the front. When one turn alone is longer than the limit,
/// its user message and final reply stay and its middle is dropped a step (a call with its
/// results) at a time, oldest first.
pub fn trim<M: Borrow<ChatMessage>>(messages: &mut VecDeque<M>, limit: usize) {
    let limit = limit.max(2);
    while messages.len() > limit {
        match messages.iter().skip(1).position(|m| m.borrow().is_user()) {
            Some(next_turn) => {
                messages.drain(..=next_turn);
            }
            None => break,
        }
    }
    while messages.len() > limit {
        // One turn remains: [user, step.., final?]. Drop the oldest step of the middle.
        let has_final = matches!(
            messages.back().map(Borrow::borrow),
            Some(ChatMessage::Assistant { tool_calls, .. }) if tool_calls.is_empty()
        ) && messages.len() > 1;
        let middle_end = messages.len() - usize::from(has_final);
        let start = usize::from(messages.front().is_some_and(|m| m.borrow().is_user()));
        if start >= middle_end {
            // Nothing but the ends is left (a history with no user message at all): keep
            // the newest messages.
            let excess = messages.len() - limit;
            messages.drain(..excess);
            break;
        }
        let mut end = start + 1;
        while end < middle_end && messages[end].borrow().tool_call_id().is_some() {
            end += 1;
        }
        messages.drain(start..end);
    }
}

/// Repairs history read back from disk or left by an interrupted turn, so every provider
/// accepts it: it starts with a user message, every tool call is directly followed by a
/// result for it (a synthetic error result where none was recorded), no tool result stands
/// without its call, and no two calls share an id.
///
/// A repeated call id (some models emit them) is renamed as [`make_call_ids_unique`] does
/// when a response arrives; the results that follow are matched to the calls in order, so
/// the second result written with a repeated id answers the second call.
pub fn repair(messages: impl IntoIterator<Item = ChatMessage>) -> Vec<ChatMessage> {
    let mut out: Vec<ChatMessage> = Vec::new();
    // Every call id kept so far.
    let mut taken: HashSet<String> = HashSet::new();
    // Calls of the last assistant message still waiting for their results.
    let mut open: Vec<OpenCall> = Vec::new();

    for message in messages {
        if out.is_empty() && !message.is_user() {
            continue;
        }
        match message {
            ChatMessage::Tool {
                tool_call_id,
                name,
                content,
                is_error,
                images,
            } => {
                // A result answers the first open call written with its id; one that
                // answers nothing (no call, or answered already) is dropped.
                if let Some(at) = open.iter().position(|call| call.written == tool_call_id) {
                    let call = open.remove(at);
                    out.push(ChatMessage::Tool {
                        tool_call_id: call.kept,
                        name,
                        content,
                        is_error,
                        images,
                    });
                }
            }
            mut message => {
                close_open(&mut out, &mut open);
                if let ChatMessage::Assistant { tool_calls, .. } = &mut message {
                    let written: Vec<String> = tool_calls.iter().map(|c| c.id.clone()).collect();
                    make_call_ids_unique(tool_calls, &mut taken);
                    open = written
                        .into_iter()
                        .zip(tool_calls.iter())
                        .map(|(written, call)| OpenCall {
                            written,
                            kept: call.id.clone(),
                            name: call.name.clone(),
                        })
                        .collect();
                }
                out.push(message);
            }
        }
    }
    close_open(&mut out, &mut open);
    out
}

/// A call waiting for its result: its id as written, and as kept after renaming.
struct OpenCall {
    written: String,
    kept: String,
    name: String,
}

/// Gives every call still open a synthetic error result.
fn close_open(out: &mut Vec<ChatMessage>, open: &mut Vec<OpenCall>) {
    for call in open.drain(..) {
        out.push(ChatMessage::Tool {
            tool_call_id: call.kept,
            name: call.name,
            content: MISSING_RESULT.to_owned(),
            is_error: true,
            images: Vec::new(),
        });
    }
}

#[cfg(test)]
mod tests {
    use switchboard_core::ToolCall;

    use super::*;

    fn call(id: &str) -> ToolCall {
        ToolCall {
            id: id.into(),
            name: "t".into(),
            arguments: "{}".into(),
            signature: None,
        }
    }

    fn calls(ids: &[&str]) -> ChatMessage {
        ChatMessage::Assistant {
            content: String::new(),
            tool_calls: ids.iter().map(|id| call(id)).collect(),
        }
    }

    fn result(id: &str) -> ChatMessage {
        ChatMessage::tool_result(&call(id), "ok", false)
    }

    fn user(text: &str) -> ChatMessage {
        ChatMessage::user(text)
    }

    fn reply(text: &str) -> ChatMessage {
        ChatMessage::assistant(text)
    }

    /// Checks the invariants every trimmed or repaired history must hold.
    fn assert_valid(messages: &[ChatMessage]) {
        if let Some(first) = messages.first() {
            assert!(first.is_user(), "history starts with {first:?}");
        }
        let mut seen = HashSet::new();
        for call in messages.iter().flat_map(ChatMessage::tool_calls) {
            assert!(seen.insert(call.id.clone()), "call id {} repeats", call.id);
        }
        let mut open: Vec<String> = Vec::new();
        for message in messages {
            match message.tool_call_id() {
                Some(id) => {
                    let at = open.iter().position(|o| o == id);
                    assert!(at.is_some(), "orphaned tool result {id}");
                    open.retain(|o| o != id);
                }
                None => {
                    assert!(open.is_empty(), "calls {open:?} have no results");
                    open = message.tool_calls().iter().map(|c| c.id.clone()).collect();
                }
            }
        }
        assert!(open.is_empty(), "calls {open:?} have no results at the end");
    }

    fn trimmed(messages: Vec<ChatMessage>, limit: usize) -> Vec<ChatMessage> {
        let mut deque: VecDeque<_> = messages.into();
        trim(&mut deque, limit);
        let out: Vec<_> = deque.into();
        assert!(out.len() <= limit.max(2), "{} > {limit}", out.len());
        out
    }

    #[test]
    fn under_the_limit_nothing_changes() {
        let history = vec![user("a"), reply("b")];
        assert_eq!(trimmed(history.clone(), 50), history);
    }

    #[test]
    fn whole_turns_are_dropped_from_the_front() {
        let history = vec![
            user("1"),
            reply("1"),
            user("2"),
            reply("2"),
            user("3"),
            reply("3"),
        ];
        let out = trimmed(history, 5);
        assert_eq!(out, vec![user("2"), reply("2"), user("3"), reply("3")]);
    }

    #[test]
    fn a_turn_with_tools_goes_whole_never_leaving_an_orphan_result() {
        let history = vec![
            user("1"),
            calls(&["a", "b"]),
            result("a"),
            result("b"),
            reply("1"),
            user("2"),
            reply("2"),
        ];
        // Limit 6 falls inside the first turn: the whole first turn must go.
        let out = trimmed(history, 6);
        assert_eq!(out, vec![user("2"), reply("2")]);
        assert_valid(&out);
    }

    #[test]
    fn exactly_at_the_limit_is_kept() {
        let history = vec![user("1"), calls(&["a"]), result("a"), reply("1")];
        assert_eq!(trimmed(history.clone(), 4), history);
    }

    #[test]
    fn one_long_turn_keeps_its_user_message_and_final_reply() {
        let history = vec![
            user("q"),
            calls(&["a"]),
            result("a"),
            calls(&["b", "c"]),
            result("b"),
            result("c"),
            calls(&["d"]),
            result("d"),
            reply("final"),
        ];
        let out = trimmed(history, 5);
        assert_eq!(
            out,
            vec![user("q"), calls(&["d"]), result("d"), reply("final")]
        );
        assert_valid(&out);
    }

    #[test]
    fn one_long_turn_can_shrink_to_question_and_answer() {
        let history = vec![
            user("q"),
            calls(&["a", "b", "c"]),
            result("a"),
            result("b"),
            result("c"),
            reply("final"),
        ];
        assert_eq!(trimmed(history, 3), vec![user("q"), reply("final")]);
    }

    #[test]
    fn one_long_unfinished_turn_drops_its_oldest_steps() {
        let history = vec![
            user("q"),
            calls(&["a"]),
            result("a"),
            calls(&["b"]),
            result("b"),
        ];
        let out = trimmed(history, 3);
        assert_eq!(out, vec![user("q"), calls(&["b"]), result("b")]);
        assert_valid(&out);
    }

    #[test]
    fn older_turns_go_before_the_newest_turn_is_cut() {
        let history = vec![
            user("1"),
            reply("1"),
            user("2"),
            calls(&["a"]),
            result("a"),
            calls(&["b"]),
            result("b"),
            reply("2"),
        ];
        let out = trimmed(history, 4);
        assert_eq!(out, vec![user("2"), calls(&["b"]), result("b"), reply("2")]);
    }

    #[test]
    fn intermediate_text_without_calls_counts_as_a_step() {
        let history = vec![
            user("q"),
            reply("thinking"),
            calls(&["a"]),
            result("a"),
            reply("final"),
        ];
        let out = trimmed(history, 4);
        assert_eq!(
            out,
            vec![user("q"), calls(&["a"]), result("a"), reply("final")]
        );
    }

    #[test]
    fn a_limit_below_two_is_treated_as_two() {
        let out = trimmed(vec![user("1"), reply("1"), user("2"), reply("2")], 1);
        assert_eq!(out, vec![user("2"), reply("2")]);
    }

    #[test]
    fn many_random_shapes_stay_valid() {
        let mut rng = fastrand_like(7);
        for _ in 0..500 {
            let mut history = Vec::new();
            let mut next_id = 0;
            for turn in 0..(rng() % 6 + 1) {
                history.push(user(&format!("u{turn}")));
                for _ in 0..(rng() % 4) {
                    let ids: Vec<String> = (0..(rng() % 3 + 1))
                        .map(|_| {
                            next_id += 1;
                            format!("id{next_id}")
                        })
                        .collect();
                    let refs: Vec<&str> = ids.iter().map(String::as_str).collect();
                    history.push(calls(&refs));
                    history.extend(refs.iter().map(|id| result(id)));
                }
                history.push(reply("r"));
            }
            let limit = (rng() % 12 + 2) as usize;
            let out = trimmed(history, limit);
            assert_valid(&out);
        }
    }

    /// A tiny deterministic generator so the property test needs no dependency.
    fn fastrand_like(seed: u64) -> impl FnMut() -> u64 {
        let mut state = seed;
        move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        }
    }

    #[test]
    fn repair_drops_leading_non_user_messages() {
        let out = repair(vec![result("x"), reply("orphan"), user("q"), reply("a")]);
        assert_eq!(out, vec![user("q"), reply("a")]);
    }

    #[test]
    fn repair_adds_synthetic_results_for_open_calls() {
        let out = repair(vec![user("q"), calls(&["a", "b"]), result("b")]);
        assert_valid(&out);
        assert_eq!(out.len(), 4);
        assert_eq!(out[3].tool_call_id(), Some("a"));
        assert_eq!(out[3].text(), MISSING_RESULT);
    }

    #[test]
    fn repair_drops_results_without_their_call_and_duplicates() {
        let out = repair(vec![
            user("q"),
            calls(&["a"]),
            result("a"),
            result("a"),
            result("zzz"),
            reply("done"),
            result("a"),
        ]);
        assert_eq!(
            out,
            vec![user("q"), calls(&["a"]), result("a"), reply("done")]
        );
    }

    #[test]
    fn repair_closes_calls_interrupted_by_a_new_user_message() {
        let out = repair(vec![user("1"), calls(&["a"]), user("2"), reply("2")]);
        assert_valid(&out);
        assert_eq!(out[2].tool_call_id(), Some("a"));
        assert_eq!(out[3], user("2"));
    }

    #[test]
    fn repair_renames_repeated_call_ids_and_matches_results_in_order() {
        let first = ChatMessage::tool_result(&call("a"), "first", false);
        let second = ChatMessage::tool_result(&call("a"), "second", false);
        let out = repair(vec![
            user("q"),
            calls(&["a", "a"]),
            first,
            second,
            reply("r"),
            user("again"),
            calls(&["a"]),
        ]);
        assert_valid(&out);
        let ids: Vec<&str> = out
            .iter()
            .flat_map(ChatMessage::tool_calls)
            .map(|c| c.id.as_str())
            .collect();
        assert_eq!(ids, ["a", "a_2", "a_3"]);
        assert_eq!(out[2].tool_call_id(), Some("a"));
        assert_eq!(out[2].text(), "first");
        assert_eq!(out[3].tool_call_id(), Some("a_2"));
        assert_eq!(out[3].text(), "second");
        assert_eq!(out[7].tool_call_id(), Some("a_3"));
        assert_eq!(out[7].text(), MISSING_RESULT);
    }

    #[test]
    fn repair_keeps_valid_history_unchanged() {
        let history = vec![user("1"), calls(&["a"]), result("a"), reply("1"), user("2")];
        assert_eq!(repair(history.clone()), history);
    }
}
