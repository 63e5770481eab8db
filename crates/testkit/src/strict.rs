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

/// Checks the `messages` of an Anthropic Messages request body: roles alternate, start
/// with the user, no message is empty, tool results come first in their user message, and
/// the conversation rules above hold for `tool_use` / `tool_result` blocks.
pub fn check_anthropic_request(request: &Value) -> Result<(), String> {
    let Some(messages) = request["messages"].as_array() else {
        return Err("`messages` must be an array".into());
    };
    if request["max_tokens"].as_u64().is_none() {
        return Err("max_tokens: field required".into());
    }
    let mut wire = Vec::new();
    let mut last_role = "";
    for (index, message) in messages.iter().enumerate() {
        let role = message["role"].as_str().unwrap_or("");
        if role != "user" && role != "assistant" {
            return Err(format!("messages.{index}.role: unexpected role `{role}`"));
        }
        if role == last_role {
            return Err(format!(
                "messages.{index}: roles must alternate between user and assistant"
            ));
        }
        last_role = role;
        let blocks: Vec<&Value> = match &message["content"] {
            Value::String(text) if !text.is_empty() => Vec::new(),
            Value::Array(blocks) if !blocks.is_empty() => blocks.iter().collect(),
            _ => return Err(format!("messages.{index}: content must not be empty")),
        };
        if role == "assistant" {
            wire.push(WireMessage {
                role,
                tool_call_ids: blocks
                    .iter()
                    .filter(|b| b["type"] == "tool_use")
                    .filter_map(|b| b["id"].as_str())
                    .collect(),
                tool_call_id: None,
            });
            if blocks
                .iter()
                .any(|b| b["type"] == "tool_use" && !b["input"].is_object())
            {
                return Err(format!(
                    "messages.{index}: tool_use.input must be an object"
                ));
            }
            continue;
        }
        let mut other = false;
        for block in &blocks {
            if block["type"] == "tool_result" {
                if other {
                    return Err(format!(
                        "messages.{index}: tool_result blocks must come before other content"
                    ));
                }
                wire.push(WireMessage {
                    role: "tool",
                    tool_call_ids: Vec::new(),
                    tool_call_id: block["tool_use_id"].as_str(),
                });
            } else {
                other = true;
            }
        }
        if other || blocks.is_empty() {
            wire.push(WireMessage {
                role,
                ..WireMessage::default()
            });
        }
    }
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
    fn anthropic_rules_are_checked() {
        let check = |messages: Value| {
            check_anthropic_request(&json!({"max_tokens": 10, "messages": messages}))
        };
        check(json!([
            {"role": "user", "content": "q"},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "a", "input": {}}]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "a", "content": "x"},
                {"type": "text", "text": "q2"}]},
        ]))
        .expect("valid");
        for (messages, reason) in [
            (
                json!([{"role": "user", "content": "q"}, {"role": "user", "content": "q"}]),
                "alternate",
            ),
            (json!([{"role": "user", "content": []}]), "empty"),
            (
                json!([{"role": "user", "content": "q"},
                    {"role": "assistant", "content": [{"type": "tool_use", "id": "a", "input": {}}]},
                    {"role": "user", "content": [{"type": "text", "text": "no result"}]}]),
                "no results",
            ),
            (
                json!([{"role": "user", "content": "q"},
                    {"role": "assistant", "content": [{"type": "tool_use", "id": "a", "input": {}}]},
                    {"role": "user", "content": [{"type": "text", "text": "t"},
                        {"type": "tool_result", "tool_use_id": "a"}]}]),
                "must come before",
            ),
        ] {
            let err = check(messages).expect_err(reason);
            assert!(err.contains(reason), "{err}");
        }
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
