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

/// The keys of a function declaration's schema Gemini takes; any other is refused
/// (`Invalid JSON payload received. Unknown name …`).
const GEMINI_SCHEMA_KEYS: [&str; 17] = [
    "pattern",
    "type",
    "format",
    "title",
    "description",
    "nullable",
    "enum",
    "properties",
    "required",
    "items",
    "anyOf",
    "minItems",
    "maxItems",
    "minimum",
    "maximum",
    "minLength",
    "maxLength",
];

/// Checks a Gemini `generateContent` request body: `contents` of `user` and `model` roles,
/// none empty; the conversation rules above for `functionCall` / `functionResponse` parts
/// (by id); every result an object; declarations in the schema subset Gemini takes, and no
/// object schema without properties; and, as Gemini 3 enforces, the first call of each
/// model content in the current turn (after the last user content that is not only
/// results) carries a `thoughtSignature`. (An object schema without properties is refused
/// at the top of a declaration, an array without `items` anywhere, as Gemini does.)
pub fn check_gemini_request(request: &Value) -> Result<(), String> {
    let Some(contents) = request["contents"].as_array() else {
        return Err("`contents` must be an array".into());
    };
    for (index, tools) in request["tools"]
        .as_array()
        .into_iter()
        .flatten()
        .enumerate()
    {
        for (at, declaration) in tools["functionDeclarations"]
            .as_array()
            .into_iter()
            .flatten()
            .enumerate()
        {
            if let Some(parameters) = declaration.get("parameters") {
                let at = format!("tools[{index}].function_declarations[{at}].parameters");
                if parameters.get("type").and_then(Value::as_str) == Some("object")
                    && parameters
                        .get("properties")
                        .and_then(Value::as_object)
                        .is_none_or(|properties| properties.is_empty())
                {
                    return Err(format!(
                        "{at}.properties: should be non-empty for OBJECT type"
                    ));
                }
                check_gemini_schema(parameters, &at)?;
            }
        }
    }
    let is_person = |content: &Value| {
        content["role"] == "user"
            && content["parts"]
                .as_array()
                .is_some_and(|parts| parts.iter().any(|p| p.get("functionResponse").is_none()))
    };
    let turn_start = contents.iter().rposition(is_person).unwrap_or(0);
    let mut wire = Vec::new();
    for (index, content) in contents.iter().enumerate() {
        let role = content["role"].as_str().unwrap_or("");
        if role != "user" && role != "model" {
            return Err(format!("contents[{index}].role: unexpected role `{role}`"));
        }
        let Some(parts) = content["parts"]
            .as_array()
            .filter(|parts| !parts.is_empty())
        else {
            return Err(format!("contents[{index}].parts: must not be empty"));
        };
        if role == "model" {
            let calls: Vec<&Value> = parts
                .iter()
                .filter(|part| part.get("functionCall").is_some())
                .collect();
            if index > turn_start
                && let Some(first) = calls.first()
                && first["thoughtSignature"].as_str().is_none_or(str::is_empty)
            {
                return Err(format!(
                    "Function call `{}` in the {}. content block is missing a `thought_signature`.",
                    first["functionCall"]["name"].as_str().unwrap_or_default(),
                    index + 1
                ));
            }
            wire.push(WireMessage {
                role: "assistant",
                tool_call_ids: calls
                    .iter()
                    .map(|part| part["functionCall"]["id"].as_str().unwrap_or(""))
                    .collect(),
                tool_call_id: None,
            });
            continue;
        }
        let mut other = false;
        for part in parts {
            if let Some(answer) = part.get("functionResponse") {
                if !answer["response"].is_object() {
                    return Err(format!(
                        "contents[{index}]: functionResponse.response must be an object"
                    ));
                }
                wire.push(WireMessage {
                    role: "tool",
                    tool_call_ids: Vec::new(),
                    tool_call_id: answer["id"].as_str(),
                });
            } else {
                other = true;
            }
        }
        if other {
            wire.push(WireMessage {
                role: "user",
                ..WireMessage::default()
            });
        }
    }
    check_conversation(wire)
}

fn check_gemini_schema(schema: &Value, at: &str) -> Result<(), String> {
    let Some(fields) = schema.as_object() else {
        return Err(format!("{at}: a schema must be an object"));
    };
    if let Some(unknown) = fields
        .keys()
        .find(|key| !GEMINI_SCHEMA_KEYS.contains(&key.as_str()))
    {
        return Err(format!(
            "Invalid JSON payload received. Unknown name \"{unknown}\" at '{at}'"
        ));
    }
    let kind = fields.get("type").and_then(Value::as_str);
    if kind == Some("array") && fields.get("items").is_none() {
        return Err(format!("{at}.items: missing field."));
    }
    if fields.contains_key("properties") && kind != Some("object") {
        return Err(format!("{at}.properties: only allowed for OBJECT type"));
    }
    for (name, property) in fields
        .get("properties")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
    {
        check_gemini_schema(property, &format!("{at}.properties[{name}]"))?;
    }
    if let Some(items) = fields.get("items") {
        check_gemini_schema(items, &format!("{at}.items"))?;
    }
    for (position, option) in fields
        .get("anyOf")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .enumerate()
    {
        check_gemini_schema(option, &format!("{at}.any_of[{position}]"))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn check(messages: Value) -> Result<(), String> {
        check_openai_request(&json!({ "messages": messages }))
    }

    #[test]
    fn gemini_rules_are_checked() {
        let call = |signature: Option<&str>| {
            let mut part = json!({"functionCall": {"id": "a", "name": "f", "args": {}}});
            if let Some(signature) = signature {
                part["thoughtSignature"] = json!(signature);
            }
            part
        };
        let request = |signature: Option<&str>, parameters: Value| {
            json!({
                "contents": [
                    {"role": "user", "parts": [{"text": "q"}]},
                    {"role": "model", "parts": [call(signature)]},
                    {"role": "user", "parts": [
                        {"functionResponse": {"id": "a", "name": "f", "response": {"output": "x"}}}]}
                ],
                "tools": [{"functionDeclarations": [{"name": "f", "description": "",
                    "parameters": parameters}]}]
            })
        };
        let schema = json!({"type": "object", "properties": {"p": {"type": "string"}}});
        check_gemini_request(&request(Some("sig"), schema.clone())).expect("valid");
        let unsigned = check_gemini_request(&request(None, schema.clone())).expect_err("unsigned");
        assert!(unsigned.contains("thought_signature"), "{unsigned}");
        for (parameters, reason) in [
            (json!({"type": "object"}), "non-empty"),
            (
                json!({"type": "object", "additionalProperties": false,
                    "properties": {"p": {"type": "string"}}}),
                "Unknown name",
            ),
            (
                json!({"type": "object", "properties": {"p": {"type": "array"}}}),
                "items",
            ),
        ] {
            let err = check_gemini_request(&request(Some("sig"), parameters)).expect_err(reason);
            assert!(err.contains(reason), "{err}");
        }
        // An earlier turn's call needs no signature.
        let mut earlier = request(None, schema);
        earlier["contents"]
            .as_array_mut()
            .expect("contents")
            .extend([
                json!({"role": "model", "parts": [{"text": "done"}]}),
                json!({"role": "user", "parts": [{"text": "next"}]}),
            ]);
        check_gemini_request(&earlier).expect("valid");
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
