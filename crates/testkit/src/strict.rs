//! What a strict provider refuses with HTTP 400, as a pure check: the fake LLM's strict mode
//! applies it to every request, and property tests apply it to repaired histories.
//!
//! The rules are the union of OpenAI's and Anthropic's: the conversation starts with a user
//! message; every tool result directly follows the assistant message whose call it
//! answers; every call is answered exactly once before the next non-tool message; no two
//! calls share an id anywhere in the conversation.

use std::collections::HashSet;

use serde_json::Value;

/// One message as the check sees it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WireMessage<'a> {
    /// `user`, `assistant`, `tool` (system messages are left out).
    pub role: &'a str,
    /// The ids of an assistant message's tool calls.
    pub tool_call_ids: Vec<&'a str>,
    /// The call a tool result answers.
    pub tool_call_id: Option<&'a str>,
}

/// Checks a conversation; the error is the reason a provider would give.
pub fn check_conversation<'a>(
    messages: impl IntoIterator<Item = WireMessage<'a>>,
) -> Result<(), String> {
    let mut seen_ids: HashSet<&str> = HashSet::new();
    let mut open: Vec<&str> = Vec::new();
    for (index, message) in messages.into_iter().enumerate() {
        if index == 0 && message.role != "user" {
            return Err(format!(
                "messages[0]: the conversation must start with a user message, not `{}`",
                message.role
            ));
        }
        if message.role == "tool" {
            let Some(id) = message.tool_call_id else {
                return Err(format!(
                    "messages[{index}]: a tool message needs tool_call_id"
                ));
            };
            let Some(at) = open.iter().position(|open| *open == id) else {
                return Err(format!(
                    "messages[{index}]: tool_call_id `{id}` does not answer a call of the \
                     preceding assistant message (or answers it twice)"
                ));
            };
            open.remove(at);
            continue;
        }
        if !open.is_empty() {
            return Err(format!(
                "messages[{index}]: the tool calls {open:?} have no results before this message"
            ));
        }
        for id in &message.tool_call_ids {
            if !seen_ids.insert(id) {
                return Err(format!("messages[{index}]: duplicate tool call id `{id}`"));
            }
        }
        open = message.tool_call_ids.clone();
    }
    if !open.is_empty() {
        return Err(format!(
            "the tool calls {open:?} have no results at the end of the conversation"
        ));
    }
    Ok(())
}

/// Checks the `messages` of an OpenAI chat-completions request body.
pub fn check_openai_request(request: &Value) -> Result<(), String> {
    let Some(messages) = request["messages"].as_array() else {
        return Err("`messages` must be an array".into());
    };
    let wire = messages
        .iter()
        .filter(|m| m["role"] != "system")
        .map(|m| WireMessage {
            role: m["role"].as_str().unwrap_or(""),
            tool_call_ids: m["tool_calls"]
                .as_array()
                .map(|calls| calls.iter().filter_map(|c| c["id"].as_str()).collect())
                .unwrap_or_default(),
            tool_call_id: m["tool_call_id"].as_str(),
        });
    check_conversation(wire)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn check(messages: Value) -> Result<(), String> {
        check_openai_request(&json!({ "messages": messages }))
    }

    #[test]
    fn a_valid_conversation_passes() {
        check(json!([
            {"role": "system", "content": "s"},
            {"role": "user", "content": "q"},
            {"role": "assistant", "tool_calls": [{"id": "a"}, {"id": "b"}]},
            {"role": "tool", "tool_call_id": "b"},
            {"role": "tool", "tool_call_id": "a"},
            {"role": "assistant", "content": "r"},
            {"role": "user", "content": "q2"}
        ]))
        .expect("valid");
    }

    #[test]
    fn what_providers_refuse_is_refused() {
        let cases = [
            (
                json!([{"role": "assistant", "content": "r"}]),
                "start with a user",
            ),
            (
                json!([{"role": "user"}, {"role": "tool", "tool_call_id": "x"}]),
                "does not answer",
            ),
            (
                json!([{"role": "user"}, {"role": "assistant", "tool_calls": [{"id": "a"}]},
                    {"role": "user"}]),
                "have no results before",
            ),
            (
                json!([{"role": "user"}, {"role": "assistant", "tool_calls": [{"id": "a"}, {"id": "a"}]},
                    {"role": "tool", "tool_call_id": "a"}, {"role": "tool", "tool_call_id": "a"}]),
                "duplicate tool call id",
            ),
            (
                json!([{"role": "user"}, {"role": "assistant", "tool_calls": [{"id": "a"}]},
                    {"role": "tool", "tool_call_id": "a"}, {"role": "assistant", "tool_calls": [{"id": "a"}]},
                    {"role": "tool", "tool_call_id": "a"}]),
                "duplicate tool call id",
            ),
            (
                json!([{"role": "user"}, {"role": "assistant", "tool_calls": [{"id": "a"}]},
                    {"role": "tool", "tool_call_id": "a"}, {"role": "tool", "tool_call_id": "a"}]),
                "answers it twice",
            ),
            (
                json!([{"role": "user"}, {"role": "assistant", "tool_calls": [{"id": "a"}]}]),
                "at the end",
            ),
        ];
        for (messages, expected) in cases {
            let err = check(messages.clone()).expect_err(&messages.to_string());
            assert!(err.contains(expected), "{messages}: {err}");
        }
    }
}
