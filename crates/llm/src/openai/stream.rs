//! Reassembly of a streamed response: text deltas pass straight through, tool-call
//! fragments (id and name first, arguments in pieces) are joined by their index.

use switchboard_core::{ToolCall, Usage};

use super::wire::{Chunk, call_id};
use crate::error::LlmError;
use crate::provider::ChatResponse;

#[derive(Default)]
struct PartialCall {
    index: usize,
    id: Option<String>,
    name: String,
    arguments: String,
}

/// Collects the chunks of one streamed response.
#[derive(Default)]
pub(crate) struct Assembler {
    content: String,
    calls: Vec<PartialCall>,
    usage: Usage,
    finish_reason: Option<String>,
}

impl Assembler {
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
                self.content.push_str(&piece);
                match &mut text {
                    Some(text) => text.push_str(&piece),
                    None => text = Some(piece),
                }
            }
            for fragment in delta.tool_calls.unwrap_or_default() {
                self.push_call_fragment(fragment);
            }
        }
        Ok(text)
    }

    fn push_call_fragment(&mut self, fragment: super::wire::InCall) {
        let function = fragment.function.unwrap_or_default();
        // Servers that omit `index` send each call whole or start a new one with an id.
        let index = fragment.index.unwrap_or_else(|| {
            let last = self.calls.last();
            match (&fragment.id, last) {
                (Some(id), Some(last)) if last.id.as_ref() != Some(id) => last.index + 1,
                (_, Some(last)) => last.index,
                (_, None) => 0,
            }
        });
        let position = match self.calls.iter().position(|call| call.index == index) {
            Some(position) => position,
            None => {
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
        call.arguments.push_str(&function.arguments_text());
    }

    /// The whole response.
    pub(crate) fn finish(self) -> ChatResponse {
        let mut calls = self.calls;
        calls.sort_by_key(|call| call.index);
        ChatResponse {
            content: self.content,
            tool_calls: calls
                .into_iter()
                .enumerate()
                .map(|(position, call)| ToolCall {
                    id: call_id(call.id, position),
                    name: call.name,
                    arguments: call.arguments,
                })
                .collect(),
            usage: self.usage,
            finish_reason: self.finish_reason,
        }
    }
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
        let response = assembler.finish();
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
        let response = assembler.finish();
        assert_eq!(response.finish_reason.as_deref(), Some("tool_calls"));
        assert_eq!(
            response.tool_calls,
            vec![
                ToolCall {
                    id: "a".into(),
                    name: "one".into(),
                    arguments: r#"{"y":2}"#.into()
                },
                ToolCall {
                    id: "b".into(),
                    name: "two".into(),
                    arguments: r#"{"x":1}"#.into()
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
        let names: Vec<_> = assembler
            .finish()
            .tool_calls
            .into_iter()
            .map(|c| c.name)
            .collect();
        assert_eq!(names, ["one", "two"]);
    }

    #[test]
    fn an_error_event_fails_the_stream() {
        let mut assembler = Assembler::default();
        let result = assembler.push(chunk(json!({"error": {"message": "overloaded"}})));
        assert!(matches!(result, Err(LlmError::Stream(message)) if message.contains("overloaded")));
    }
}
