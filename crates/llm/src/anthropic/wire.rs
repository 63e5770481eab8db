//! The Messages API wire format, and its mapping to and from core's conversation model.
//!
//! Anthropic's model differs from the internal one in three ways the mapping bridges: the
//! system prompt is a field, not a message; tool results are `tool_result` blocks inside a
//! *user* message (so a step's results, and a user message after them, become one user
//! message — roles must alternate); and a tool call's input is a JSON object, not text.

use std::borrow::Cow;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use switchboard_core::{ChatMessage, ToolCall, Usage};

use crate::arguments;
use crate::provider::{ChatRequest, ImageData, StopReason};

/// What Anthropic requires when the config gives no `max_tokens`.
pub(crate) const DEFAULT_MAX_TOKENS: u32 = 4096;

#[derive(Serialize)]
pub(crate) struct Request<'a> {
    model: &'a str,
    max_tokens: u32,
    #[serde(skip_serializing_if = "str::is_empty")]
    system: &'a str,
    messages: Vec<Message<'a>>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    tools: Vec<Tool<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    temperature: Option<f32>,
    stream: bool,
}

#[derive(Serialize, Debug, PartialEq)]
struct Message<'a> {
    role: &'static str,
    content: Vec<Block<'a>>,
}

#[derive(Serialize, Debug, PartialEq)]
#[serde(tag = "type", rename_all = "snake_case")]
enum Block<'a> {
    Text {
        text: Cow<'a, str>,
    },
    Image {
        source: ImageSource<'a>,
    },
    ToolUse {
        id: &'a str,
        name: &'a str,
        input: Value,
    },
    ToolResult {
        tool_use_id: &'a str,
        content: ResultContent<'a>,
        #[serde(skip_serializing_if = "std::ops::Not::not")]
        is_error: bool,
    },
}

/// A tool result's content: its text, or its text and the images it returned.
#[derive(Serialize, Debug, PartialEq)]
#[serde(untagged)]
enum ResultContent<'a> {
    Text(&'a str),
    Blocks(Vec<Block<'a>>),
}

fn image_block<'a>(image: &'a ImageData) -> Block<'a> {
    Block::Image {
        source: ImageSource {
            kind: "base64",
            media_type: &image.mime,
            data: &image.base64,
        },
    }
}

#[derive(Serialize, Debug, PartialEq)]
struct ImageSource<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    media_type: &'a str,
    data: &'a str,
}

#[derive(Serialize)]
struct Tool<'a> {
    name: &'a str,
    description: &'a str,
    input_schema: &'a Value,
}

/// The settings of a request that come from config rather than from the turn.
pub(crate) struct Settings<'a> {
    pub model: &'a str,
    pub temperature: Option<f32>,
    pub max_tokens: Option<u32>,
    /// Whether the model takes images.
    pub images: bool,
}

/// Maps a provider-neutral request to the wire.
pub(crate) fn request<'a>(settings: &Settings<'a>, request: &'a ChatRequest) -> Request<'a> {
    let mut messages: Vec<Message<'a>> = Vec::with_capacity(request.messages.len());
    for message in &request.messages {
        let (role, blocks) = blocks_of(settings, request, message);
        match messages.last_mut() {
            Some(last) if last.role == role => last.content.extend(blocks),
            _ => messages.push(Message {
                role,
                content: blocks,
            }),
        }
    }
    // A message may not be empty (an empty reply, a message of only an unsent image).
    for message in &mut messages {
        if message.content.is_empty() {
            message.content.push(Block::Text {
                text: "(empty)".into(),
            });
        }
    }
    Request {
        model: settings.model,
        max_tokens: settings.max_tokens.unwrap_or(DEFAULT_MAX_TOKENS),
        system: &request.system,
        messages,
        tools: request
            .tools
            .iter()
            .map(|tool| Tool {
                name: &tool.name,
                description: &tool.description,
                input_schema: &tool.parameters,
            })
            .collect(),
        temperature: settings.temperature,
        stream: request.stream,
    }
}

/// One message of the conversation as Anthropic's role and content blocks (a tool's
/// result is a block of a user message).
fn blocks_of<'a>(
    settings: &Settings<'a>,
    request: &'a ChatRequest,
    message: &'a ChatMessage,
) -> (&'static str, Vec<Block<'a>>) {
    match message {
        ChatMessage::User {
            content, images, ..
        } => {
            let mut blocks = Vec::with_capacity(1 + images.len());
            if !content.is_empty() {
                // Opened by a line saying where it comes from, when a person did not
                // write it.
                blocks.push(Block::Text {
                    text: message.model_text(),
                });
            }
            blocks.extend(request.shown(images, settings.images).map(image_block));
            ("user", blocks)
        }
        ChatMessage::Assistant {
            content,
            tool_calls,
        } => {
            let mut blocks = Vec::with_capacity(1 + tool_calls.len());
            if !content.is_empty() {
                blocks.push(Block::Text {
                    text: content.as_str().into(),
                });
            }
            blocks.extend(tool_calls.iter().map(|call| Block::ToolUse {
                id: &call.id,
                name: &call.name,
                input: arguments::object(&call.arguments),
            }));
            ("assistant", blocks)
        }
        ChatMessage::Tool {
            tool_call_id,
            content,
            is_error,
            images,
            ..
        } => {
            let mut shown = request.shown(images, settings.images).peekable();
            let content = if shown.peek().is_none() {
                ResultContent::Text(content)
            } else {
                let mut blocks = Vec::new();
                if !content.is_empty() {
                    blocks.push(Block::Text {
                        text: content.as_str().into(),
                    });
                }
                blocks.extend(shown.map(image_block));
                ResultContent::Blocks(blocks)
            };
            (
                "user",
                vec![Block::ToolResult {
                    tool_use_id: tool_call_id,
                    content,
                    is_error: *is_error,
                }],
            )
        }
    }
}

/// A whole (non-streamed) response.
#[derive(Deserialize)]
pub(crate) struct Response {
    #[serde(default)]
    pub content: Vec<InBlock>,
    pub stop_reason: Option<String>,
    #[serde(default)]
    pub usage: WireUsage,
}

/// A content block of a response (or the start of one in a stream).
#[derive(Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub(crate) enum InBlock {
    Text {
        #[serde(default)]
        text: String,
    },
    ToolUse {
        #[serde(default)]
        id: String,
        #[serde(default)]
        name: String,
        #[serde(default)]
        input: Value,
    },
    /// Thinking, redacted thinking, server tools: not part of the reply.
    #[serde(other)]
    Other,
}

/// Anthropic's usage: `input_tokens` are the prompt's tokens *not* read from or written to
/// the cache; those are counted apart.
#[derive(Deserialize, Default, Clone, Copy)]
pub(crate) struct WireUsage {
    #[serde(default)]
    pub input_tokens: u64,
    #[serde(default)]
    pub output_tokens: u64,
    #[serde(default)]
    pub cache_read_input_tokens: Option<u64>,
    #[serde(default)]
    pub cache_creation_input_tokens: Option<u64>,
}

impl WireUsage {
    /// Every prompt token, cached or not (the internal model counts them together).
    pub(crate) fn all_input(&self) -> u64 {
        self.input_tokens
            + self.cache_read_input_tokens.unwrap_or(0)
            + self.cache_creation_input_tokens.unwrap_or(0)
    }
}

impl From<WireUsage> for Usage {
    fn from(usage: WireUsage) -> Self {
        Self {
            input_tokens: usage.all_input(),
            output_tokens: usage.output_tokens,
            cached_input_tokens: usage.cache_read_input_tokens.unwrap_or(0),
            reasoning_tokens: 0,
        }
    }
}

/// One event of a stream (its `data:`; the `event:` line repeats the type).
#[derive(Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub(crate) enum Event {
    MessageStart {
        message: StartedMessage,
    },
    ContentBlockStart {
        index: usize,
        content_block: InBlock,
    },
    ContentBlockDelta {
        index: usize,
        delta: Delta,
    },
    ContentBlockStop {
        #[allow(dead_code)]
        index: usize,
    },
    MessageDelta {
        delta: MessageDelta,
        #[serde(default)]
        usage: Option<WireUsage>,
    },
    MessageStop,
    Ping,
    Error {
        error: Value,
    },
    #[serde(other)]
    Unknown,
}

#[derive(Deserialize)]
pub(crate) struct StartedMessage {
    #[serde(default)]
    pub usage: WireUsage,
}

#[derive(Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub(crate) enum Delta {
    #[serde(rename = "text_delta")]
    Text { text: String },
    #[serde(rename = "input_json_delta")]
    InputJson { partial_json: String },
    /// Thinking and signatures: not part of the reply.
    #[serde(other)]
    Other,
}

#[derive(Deserialize)]
pub(crate) struct MessageDelta {
    pub stop_reason: Option<String>,
}

/// Maps a whole response's blocks to text and calls.
pub(crate) fn parts(blocks: Vec<InBlock>) -> (String, Vec<ToolCall>) {
    let mut text = String::new();
    let mut calls = Vec::new();
    for block in blocks {
        match block {
            InBlock::Text { text: piece } => text.push_str(&piece),
            InBlock::ToolUse { id, name, input } => calls.push(ToolCall {
                id,
                name,
                arguments: arguments::text(&input),
                signature: None,
            }),
            InBlock::Other => {}
        }
    }
    (text, calls)
}

/// The stop reason as the internal model has it.
pub(crate) fn stop(reason: Option<&str>) -> Option<StopReason> {
    reason.map(StopReason::parse)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use serde_json::json;
    use switchboard_core::{ImagePart, ToolDefinition};

    use super::*;

    #[test]
    fn request_puts_the_system_prompt_aside_and_results_in_user_messages() {
        let call = |id: &str| ToolCall {
            id: id.into(),
            name: "echo".into(),
            arguments: r#"{"text":"x"}"#.into(),
            signature: None,
        };
        let request = ChatRequest {
            system: "be brief".into(),
            messages: vec![
                ChatMessage::User {
                    content: "look".into(),
                    images: vec![
                        ImagePart {
                            path: "media/a.png".into(),
                            mime: "image/png".into(),
                        },
                        ImagePart {
                            path: "media/old.png".into(),
                            mime: "image/png".into(),
                        },
                    ],
                    origin: switchboard_core::Origin::Person,
                }
                .into(),
                ChatMessage::Assistant {
                    content: "Checking.".into(),
                    tool_calls: vec![
                        call("a"),
                        ToolCall {
                            arguments: "{broken".into(),
                            ..call("b")
                        },
                    ],
                }
                .into(),
                ChatMessage::tool_result(&call("a"), "x", false).into(),
                ChatMessage::tool_result(&call("b"), "bad arguments", true).into(),
                ChatMessage::user("and?").into(),
                ChatMessage::assistant("").into(),
            ],
            tools: vec![ToolDefinition {
                name: "echo".into(),
                description: "echoes".into(),
                parameters: json!({"type": "object"}),
            }]
            .into(),
            stream: true,
            images: vec![ImageData {
                path: "media/a.png".into(),
                mime: "image/png".into(),
                base64: Arc::from("iVBO"),
            }],
        };
        let settings = Settings {
            model: "claude",
            temperature: None,
            max_tokens: None,
            images: true,
        };
        let wire = serde_json::to_value(super::request(&settings, &request)).expect("json");
        assert_eq!(
            wire,
            json!({
                "model": "claude",
                "max_tokens": DEFAULT_MAX_TOKENS,
                "system": "be brief",
                "messages": [
                    {"role": "user", "content": [
                        {"type": "text", "text": "look"},
                        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBO"}}
                    ]},
                    {"role": "assistant", "content": [
                        {"type": "text", "text": "Checking."},
                        {"type": "tool_use", "id": "a", "name": "echo", "input": {"text": "x"}},
                        {"type": "tool_use", "id": "b", "name": "echo", "input": {}}
                    ]},
                    {"role": "user", "content": [
                        {"type": "tool_result", "tool_use_id": "a", "content": "x"},
                        {"type": "tool_result", "tool_use_id": "b", "content": "bad arguments", "is_error": true},
                        {"type": "text", "text": "and?"}
                    ]},
                    {"role": "assistant", "content": [{"type": "text", "text": "(empty)"}]}
                ],
                "tools": [{"name": "echo", "description": "echoes", "input_schema": {"type": "object"}}],
                "stream": true
            })
        );
    }

    /// A result that returned an image carries it in its `tool_result` block; a model that
    /// takes no images gets the text alone.
    #[test]
    fn tool_images_go_in_their_tool_result() {
        let call = ToolCall {
            id: "a".into(),
            name: "shot".into(),
            arguments: "{}".into(),
            signature: None,
        };
        let mut shot = ChatMessage::tool_result(&call, "took it", false);
        if let ChatMessage::Tool { images, .. } = &mut shot {
            images.push(ImagePart {
                path: "media/tools/a.png".into(),
                mime: "image/png".into(),
            });
        }
        let request = ChatRequest {
            messages: vec![
                ChatMessage::user("look").into(),
                ChatMessage::Assistant {
                    content: String::new(),
                    tool_calls: vec![call.clone()],
                }
                .into(),
                shot.into(),
            ],
            images: vec![ImageData {
                path: "media/tools/a.png".into(),
                mime: "image/png".into(),
                base64: Arc::from("iVBO"),
            }],
            ..ChatRequest::default()
        };
        let wire = |images| {
            let settings = Settings {
                model: "claude",
                temperature: None,
                max_tokens: None,
                images,
            };
            serde_json::to_value(super::request(&settings, &request)).expect("json")
        };
        let shown = wire(true);
        assert_eq!(
            shown["messages"][2]["content"],
            json!([{"type": "tool_result", "tool_use_id": "a", "content": [
                {"type": "text", "text": "took it"},
                {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBO"}}
            ]}])
        );
        switchboard_testkit::strict::check_anthropic_request(&shown).expect("strict rules");
        assert_eq!(
            wire(false)["messages"][2]["content"],
            json!([{"type": "tool_result", "tool_use_id": "a", "content": "took it"}])
        );
    }

    #[test]
    fn a_whole_response_maps_text_calls_and_unknown_blocks() {
        let response: Response = serde_json::from_value(json!({
            "content": [
                {"type": "thinking", "thinking": "hmm", "signature": "s"},
                {"type": "text", "text": "Let me look."},
                {"type": "tool_use", "id": "toolu_1", "name": "read_file", "input": {"path": "a"}}
            ],
            "stop_reason": "tool_use",
            "usage": {"input_tokens": 12, "output_tokens": 7}
        }))
        .expect("parse");
        let (text, calls) = parts(response.content);
        assert_eq!(text, "Let me look.");
        assert_eq!(calls[0].arguments, r#"{"path":"a"}"#);
        assert_eq!(
            stop(response.stop_reason.as_deref()),
            Some(StopReason::ToolUse)
        );
    }
}
