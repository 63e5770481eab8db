//! Reassembly of a streamed Messages response: content blocks by index, text deltas passed
//! straight through, tool input JSON joined from its fragments, usage from the start and
//! the end of the message. A stream that ends before `message_stop` is an error (a cut
//! tool call must not be run), as is an `error` event.

use switchboard_core::{ToolCall, Usage};

use super::wire::{Delta, Event, InBlock, stop};
use crate::arguments;
use crate::error::LlmError;
use crate::limits::ResponseLimits;
use crate::openai::stream::{MAX_TOOL_CALLS, check_calls, check_reply, too_many_calls};
use crate::provider::ChatResponse;

/// The most content blocks one response may hold.
const MAX_BLOCKS: usize = 1024;

enum Block {
    Text,
    Call {
        id: String,
        name: String,
        /// The streamed input JSON so far (`None`: the start block's input stands).
        json: Option<String>,
        start: serde_json::Value,
    },
    Other,
}

/// Collects the events of one streamed response, within its limits.
pub(crate) struct Assembler {
    limits: ResponseLimits,
    content: String,
    blocks: Vec<(usize, Block)>,
    calls: usize,
    call_bytes: usize,
    usage: Usage,
    stop_reason: Option<String>,
    stopped: bool,
}

impl Assembler {
    pub(crate) fn new(limits: ResponseLimits) -> Self {
        Self {
            limits,
            content: String::new(),
            blocks: Vec::new(),
            calls: 0,
            call_bytes: 0,
            usage: Usage::default(),
            stop_reason: None,
            stopped: false,
        }
    }

    /// Takes one event; returns the text it added, if any.
    pub(crate) fn push(&mut self, event: Event) -> Result<Option<String>, LlmError> {
        match event {
            Event::MessageStart { message } => self.usage = message.usage.into(),
            Event::ContentBlockStart {
                index,
                content_block,
            } => {
                if self.blocks.len() >= MAX_BLOCKS {
                    return Err(LlmError::Decode(format!(
                        "the response has more than {MAX_BLOCKS} content blocks"
                    )));
                }
                let block = match content_block {
                    InBlock::Text { text } => {
                        self.blocks.push((index, Block::Text));
                        return self.text(text);
                    }
                    InBlock::ToolUse { id, name, input } => {
                        self.calls += 1;
                        if self.calls > MAX_TOOL_CALLS {
                            return Err(too_many_calls());
                        }
                        self.call_bytes += id.len() + name.len();
                        check_calls(self.call_bytes, &self.limits)?;
                        Block::Call {
                            id,
                            name,
                            json: None,
                            start: input,
                        }
                    }
                    InBlock::Other => Block::Other,
                };
                self.blocks.push((index, block));
            }
            Event::ContentBlockDelta { index, delta } => match delta {
                Delta::Text { text } => return self.text(text),
                Delta::InputJson { partial_json } => {
                    self.call_bytes += partial_json.len();
                    check_calls(self.call_bytes, &self.limits)?;
                    let block = self.blocks.iter_mut().rev().find(|(i, _)| *i == index);
                    match block {
                        Some((_, Block::Call { json, .. })) => {
                            json.get_or_insert_with(String::new).push_str(&partial_json);
                        }
                        _ => {
                            return Err(LlmError::Decode(format!(
                                "tool input for content block {index}, which is not a tool call"
                            )));
                        }
                    }
                }
                Delta::Other => {}
            },
            Event::ContentBlockStop { .. } | Event::Ping | Event::Unknown => {}
            Event::MessageDelta { delta, usage } => {
                if let Some(reason) = delta.stop_reason {
                    self.stop_reason = Some(reason);
                }
                if let Some(usage) = usage {
                    // Cumulative: the last one counts.
                    self.usage.output_tokens = usage.output_tokens;
                    if usage.all_input() > 0 {
                        self.usage.input_tokens = usage.all_input();
                    }
                    if let Some(cached) = usage.cache_read_input_tokens {
                        self.usage.cached_input_tokens = cached;
                    }
                }
            }
            Event::MessageStop => self.stopped = true,
            Event::Error { error } => {
                let kind = error["type"].as_str().unwrap_or("error");
                let message = error["message"].as_str().unwrap_or_default();
                let message: String = message.chars().take(300).collect();
                return Err(LlmError::Stream(format!("{kind}: {message}")));
            }
        }
        Ok(None)
    }

    fn text(&mut self, piece: String) -> Result<Option<String>, LlmError> {
        if piece.is_empty() {
            return Ok(None);
        }
        check_reply(self.content.len() + piece.len(), &self.limits)?;
        self.content.push_str(&piece);
        Ok(Some(piece))
    }

    /// Whether `message_stop` arrived (the stream is complete).
    pub(crate) fn is_complete(&self) -> bool {
        self.stopped
    }

    /// The whole response; an error if the stream ended before `message_stop`.
    pub(crate) fn finish(self) -> Result<ChatResponse, LlmError> {
        if !self.stopped {
            let inside = self
                .blocks
                .last()
                .is_some_and(|(_, block)| matches!(block, Block::Call { .. }));
            return Err(LlmError::Stream(if inside {
                "the stream ended inside a tool call, before the response was complete".into()
            } else {
                "the stream ended before the response was complete".into()
            }));
        }
        let mut blocks = self.blocks;
        blocks.sort_by_key(|(index, _)| *index);
        let tool_calls = blocks
            .into_iter()
            .filter_map(|(_, block)| match block {
                Block::Call {
                    id,
                    name,
                    json,
                    start,
                } => Some(ToolCall {
                    id,
                    name,
                    arguments: match json {
                        Some(json) if !json.trim().is_empty() => json,
                        _ => arguments::text(&start),
                    },
                    signature: None,
                }),
                Block::Text | Block::Other => None,
            })
            .collect();
        Ok(ChatResponse {
            content: self.content,
            tool_calls,
            usage: self.usage,
            stop: stop(self.stop_reason.as_deref()),
            ..ChatResponse::default()
        })
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::provider::StopReason;

    fn feed(events: &[serde_json::Value]) -> Result<(Assembler, String), LlmError> {
        let mut assembler = Assembler::new(ResponseLimits::default());
        let mut text = String::new();
        for event in events {
            let event: Event = serde_json::from_value(event.clone()).expect("event");
            if let Some(piece) = assembler.push(event)? {
                text.push_str(&piece);
            }
        }
        Ok((assembler, text))
    }

    fn conversation() -> Vec<serde_json::Value> {
        vec![
            json!({"type": "message_start", "message": {"usage": {"input_tokens": 20, "output_tokens": 1}}}),
            json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
            json!({"type": "ping"}),
            json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Let me "}}),
            json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "look."}}),
            json!({"type": "content_block_stop", "index": 0}),
            json!({"type": "content_block_start", "index": 1, "content_block": {"type": "tool_use", "id": "toolu_1", "name": "read_file", "input": {}}}),
            json!({"type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta", "partial_json": "{\"path\": "}}),
            json!({"type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta", "partial_json": "\"a.txt\"}"}}),
            json!({"type": "content_block_stop", "index": 1}),
            json!({"type": "message_delta", "delta": {"stop_reason": "tool_use"}, "usage": {"output_tokens": 30}}),
            json!({"type": "message_stop"}),
        ]
    }

    #[test]
    fn text_and_tool_input_assemble() {
        let (assembler, text) = feed(&conversation()).expect("feed");
        assert_eq!(text, "Let me look.");
        let response = assembler.finish().expect("complete");
        assert_eq!(response.content, "Let me look.");
        assert_eq!(response.stop, Some(StopReason::ToolUse));
        assert_eq!(
            response.tool_calls,
            [ToolCall {
                id: "toolu_1".into(),
                name: "read_file".into(),
                arguments: r#"{"path": "a.txt"}"#.into(),
                signature: None,
            }]
        );
        assert_eq!(response.usage, Usage::new(20, 30));
    }

    #[test]
    fn a_stream_cut_inside_a_tool_call_is_a_transient_error() {
        let events = conversation();
        let (assembler, _) = feed(&events[..8]).expect("feed");
        let err = assembler.finish().expect_err("cut");
        assert!(err.is_transient(), "{err}");
        assert!(err.to_string().contains("inside a tool call"), "{err}");
    }

    #[test]
    fn an_error_event_ends_the_stream_with_its_message() {
        let err = feed(&[
            json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}),
        ])
        .err()
        .expect("error");
        assert_eq!(
            err.to_string(),
            "the LLM's stream failed: overloaded_error: Overloaded"
        );
    }

    #[test]
    fn input_for_a_block_that_is_not_a_call_is_refused() {
        let err = feed(&[
            json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
            json!({"type": "content_block_delta", "index": 0, "delta": {"type": "input_json_delta", "partial_json": "{"}}),
        ])
        .err()
        .expect("error");
        assert!(err.to_string().contains("not a tool call"), "{err}");
    }
}
