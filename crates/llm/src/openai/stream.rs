//! Reassembly of a streamed response: text deltas pass straight through, tool-call
//! fragments (id and name first, arguments in pieces) are joined by their index.

use switchboard_core::{ToolCall, Usage};

use super::wire::{Chunk, call_id};
use crate::error::LlmError;
use crate::limits::ResponseLimits;
use crate::provider::{ChatResponse, StopReason};

/// The most tool calls one response may hold.
pub(crate) const MAX_TOOL_CALLS: usize = 128;
/// Tool-call indexes from this on are refused (servers number calls from 0).
const MAX_INDEX: usize = 1 << 16;

#[derive(Default)]
struct PartialCall {
    index: usize,
    id: Option<String>,
    name: String,
    arguments: String,
}

/// Collects the chunks of one streamed response, within its limits.
#[derive(Default)]
pub(crate) struct Assembler {
    limits: ResponseLimits,
    content: String,
    calls: Vec<PartialCall>,
    /// Bytes of ids, names and arguments of all calls so far.
    call_bytes: usize,
    usage: Usage,
    finish_reason: Option<String>,
}

impl Assembler {
    /// An assembler that ends the response when it passes `limits`.
    pub(crate) fn new(limits: ResponseLimits) -> Self {
        Self {
            limits,
            ..Self::default()
        }
    }

    /// Takes one chunk; returns the text it added, if any.
    pub(crate) fn push(&mut self, chunk: Chunk) -> Result<Option<String>, LlmError> {
        if let Some(error) = chunk.error {
            return Err(LlmError::Stream(error.to_string()));
        }
        if let Some(usage) = chunk.usage {
            self.usage = usage.into();
        }
        let mut text: Option<String> = None;
        for choice in chunk.choices {
            if let Some(reason) = choice.finish_reason {
                self.finish_reason = Some(reason);
            }
            let Some(delta) = choice.delta else { continue };
            if let Some(piece) = delta.content.filter(|piece| !piece.is_empty()) {
                check_reply(self.content.len() + piece.len(), &self.limits)?;
                self.content.push_str(&piece);
                match &mut text {
                    Some(text) => text.push_str(&piece),
                    None => text = Some(piece),
                }
            }
            for fragment in delta.tool_calls.unwrap_or_default() {
                self.push_call_fragment(fragment)?;
            }
        }
        Ok(text)
    }

    fn push_call_fragment(&mut self, fragment: super::wire::InCall) -> Result<(), LlmError> {
        let function = fragment.function.unwrap_or_default();
        let arguments = function.arguments_text();
        self.call_bytes += fragment.id.as_ref().map_or(0, String::len)
            + function.name.as_ref().map_or(0, String::len)
            + arguments.len();
        check_calls(self.call_bytes, &self.limits)?;
        // Servers that omit `index` send each call whole or start a new one with an id.
        let index = fragment.index.unwrap_or_else(|| {
            let last = self.calls.last();
            match (&fragment.id, last) {
                (Some(id), Some(last)) if last.id.as_ref() != Some(id) => {
                    last.index.saturating_add(1)
                }
                (_, Some(last)) => last.index,
                (_, None) => 0,
            }
        });
        // Indexes count the calls of one response; a larger one is not a real call.
        if index >= MAX_INDEX {
            return Err(LlmError::Decode(format!(
                "a tool call fragment has the index {index}, past any real response"
            )));
        }
        let position = match self.calls.iter().position(|call| call.index == index) {
            Some(position) => position,
            None => {
                if self.calls.len() >= MAX_TOOL_CALLS {
                    return Err(too_many_calls());
                }
                self.calls.push(PartialCall {
                    index,
                    ..PartialCall::default()
                });
                self.calls.len() - 1
            }
        };
        let call = &mut self.calls[position];
        if let Some(id) = fragment.id.filter(|id| !id.is_empty()) {
            call.id = Some(id);
        }
        if let Some(name) = &function.name {
            // Names arrive whole in practice; a few servers repeat them in every fragment.
            if !call.name.ends_with(name.as_str()) || call.name.is_empty() {
                call.name.push_str(name);
            }
        }
        call.arguments.push_str(&arguments);
        Ok(())
    }

    /// The whole response. A stream that ended inside a tool call (calls begun, no finish
    /// reason) is an error: its last call's arguments may be cut anywhere.
    pub(crate) fn finish(self) -> Result<ChatResponse, LlmError> {
        if !self.calls.is_empty() && self.finish_reason.is_none() {
            return Err(LlmError::Stream(
                "the stream ended inside a tool call, before the response was complete".into(),
            ));
        }
        let mut calls = self.calls;
        calls.sort_by_key(|call| call.index);
        Ok(ChatResponse {
            content: self.content,
            tool_calls: calls
                .into_iter()
                .enumerate()
                .map(|(position, call)| ToolCall {
                    id: call_id(call.id, position),
                    name: call.name,
                    arguments: call.arguments,
                    signature: None,
                })
                .collect(),
            usage: self.usage,
            stop: self.finish_reason.as_deref().map(StopReason::parse),
            ..ChatResponse::default()
        })
    }
}

/// Fails when a reply of `len` bytes passes its limit.
pub(crate) fn check_reply(len: usize, limits: &ResponseLimits) -> Result<(), LlmError> {
    if len > limits.max_reply_bytes {
        return Err(LlmError::TooLarge {
            what: "reply text",
            limit: limits.max_reply_bytes,
            key: "max_reply_bytes",
        });
    }
    Ok(())
}

/// Fails when tool calls of `len` bytes (ids, names, arguments) pass their limit.
pub(crate) fn check_calls(len: usize, limits: &ResponseLimits) -> Result<(), LlmError> {
    if len > limits.max_tool_arguments_bytes {
        return Err(LlmError::TooLarge {
            what: "tool calls",
            limit: limits.max_tool_arguments_bytes,
            key: "max_tool_arguments_bytes",
        });
    }
    Ok(())
}

/// The error for a response with more than [`MAX_TOOL_CALLS`] calls.
pub(crate) fn too_many_calls() -> LlmError {
    LlmError::Decode(format!(
        "the response asks for more than {MAX_TOOL_CALLS} tool calls at once"
    ))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn chunk(value: serde_json::Value) -> Chunk {
        serde_json::from_value(value).expect("chunk")
    }

    #[test]
    fn text_deltas_concatenate() {
        let mut assembler = Assembler::default();
        for piece in ["Hel", "lo", ""] {
            assembler
                .push(chunk(json!({"choices": [{"delta": {"content": piece}}]})))
                .expect("push");
        }
        assembler
            .push(chunk(
                json!({"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 2}}),
            ))
            .expect("usage");
        let response = assembler.finish().expect("complete");
        assert_eq!(response.content, "Hello");
        assert_eq!(response.usage.output_tokens, 2);
    }

    #[test]
    fn tool_call_fragments_are_joined_by_index() {
        let mut assembler = Assembler::default();
        let chunks = [
            json!({"choices": [{"delta": {"tool_calls": [
                {"index": 0, "id": "a", "type": "function", "function": {"name": "one", "arguments": ""}}]}}]}),
            json!({"choices": [{"delta": {"tool_calls": [
                {"index": 1, "id": "b", "type": "function", "function": {"name": "two", "arguments": "{\"x\""}}]}}]}),
            json!({"choices": [{"delta": {"tool_calls": [
                {"index": 0, "function": {"arguments": "{\"y\":"}}]}}]}),
            json!({"choices": [{"delta": {"tool_calls": [
                {"index": 1, "function": {"arguments": ":1}"}}]}}]}),
            json!({"choices": [{"delta": {"tool_calls": [
                {"index": 0, "function": {"arguments": "2}"}}]}, "finish_reason": "tool_calls"}]}),
        ];
        for value in chunks {
            assert_eq!(assembler.push(chunk(value)).expect("push"), None);
        }
        let response = assembler.finish().expect("complete");
        assert_eq!(response.stop, Some(StopReason::ToolUse));
        assert_eq!(
            response.tool_calls,
            vec![
                ToolCall {
                    id: "a".into(),
                    name: "one".into(),
                    arguments: r#"{"y":2}"#.into(),
                    signature: None,
                },
                ToolCall {
                    id: "b".into(),
                    name: "two".into(),
                    arguments: r#"{"x":1}"#.into(),
                    signature: None,
                },
            ]
        );
    }

    #[test]
    fn calls_without_index_are_told_apart_by_id() {
        let mut assembler = Assembler::default();
        for (id, name) in [("a", "one"), ("b", "two")] {
            assembler
                .push(chunk(json!({"choices": [{"delta": {"tool_calls": [
                    {"id": id, "function": {"name": name, "arguments": "{}"}}]}}]})))
                .expect("push");
        }
        assembler
            .push(chunk(
                json!({"choices": [{"delta": {}, "finish_reason": "tool_calls"}]}),
            ))
            .expect("end");
        let names: Vec<_> = assembler
            .finish()
            .expect("complete")
            .tool_calls
            .into_iter()
            .map(|c| c.name)
            .collect();
        assert_eq!(names, ["one", "two"]);
    }

    #[test]
    fn text_and_tool_calls_past_their_limits_end_the_response() {
        let limits = ResponseLimits {
            max_response_bytes: usize::MAX,
            max_reply_bytes: 10,
            max_tool_arguments_bytes: 20,
        };
        let mut assembler = Assembler::new(limits);
        let piece = || chunk(json!({"choices": [{"delta": {"content": "12345"}}]}));
        assembler.push(piece()).expect("5 bytes");
        assembler.push(piece()).expect("10 bytes");
        let err = assembler.push(piece()).expect_err("15 bytes");
        assert!(err.to_string().contains("llm.max_reply_bytes"), "{err}");

        let mut assembler = Assembler::new(limits);
        let fragment = || {
            chunk(json!({"choices": [{"delta": {"tool_calls": [
                {"index": 0, "function": {"arguments": "0123456789"}}]}}]}))
        };
        assembler.push(fragment()).expect("10 bytes");
        assembler.push(fragment()).expect("20 bytes");
        let err = assembler.push(fragment()).expect_err("30 bytes");
        assert!(
            err.to_string().contains("llm.max_tool_arguments_bytes"),
            "{err}"
        );
    }

    #[test]
    fn a_stream_that_ends_inside_a_tool_call_is_an_error() {
        let mut assembler = Assembler::default();
        assembler
            .push(chunk(json!({"choices": [{"delta": {"tool_calls": [
                {"index": 0, "id": "a", "function": {"name": "write", "arguments": "{\"path\": \"no"}}]}}]})))
            .expect("push");
        let err = assembler.finish().expect_err("cut");
        assert!(err.is_transient(), "tried again: {err}");
        assert!(err.to_string().contains("inside a tool call"), "{err}");
    }

    #[test]
    fn an_absurd_tool_call_index_is_an_error_not_an_overflow() {
        let mut assembler = Assembler::default();
        let err = assembler
            .push(chunk(json!({"choices": [{"delta": {"tool_calls": [
                {"index": usize::MAX, "id": "a"}]}}]})))
            .expect_err("refused");
        assert!(err.to_string().contains("past any real response"), "{err}");
    }

    #[test]
    fn too_many_tool_calls_end_the_response() {
        let mut assembler = Assembler::default();
        assembler.limits.max_tool_arguments_bytes = usize::MAX;
        for index in 0..MAX_TOOL_CALLS {
            assembler
                .push(chunk(json!({"choices": [{"delta": {"tool_calls": [
                    {"index": index, "id": format!("c{index}")}]}}]})))
                .expect("within the limit");
        }
        let err = assembler
            .push(chunk(json!({"choices": [{"delta": {"tool_calls": [
                {"index": MAX_TOOL_CALLS, "id": "one too many"}]}}]})))
            .expect_err("over");
        assert!(err.to_string().contains("tool calls at once"), "{err}");
    }

    #[test]
    fn an_error_event_fails_the_stream() {
        let mut assembler = Assembler::default();
        let result = assembler.push(chunk(json!({"error": {"message": "overloaded"}})));
        assert!(matches!(result, Err(LlmError::Stream(message)) if message.contains("overloaded")));
    }
}
