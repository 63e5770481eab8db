//! The chat-completions wire format, and its mapping to and from core's conversation model.

use std::borrow::Cow;

use serde::{Deserialize, Serialize};
use switchboard_core::{ChatMessage, ImagePart, ToolCall, ToolDefinition, Usage};

use crate::provider::{ChatRequest, ImageData};

#[derive(Serialize)]
pub(crate) struct Request<'a> {
    model: &'a str,
    messages: Vec<Message<'a>>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    tools: Vec<Tool<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    temperature: Option<f32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    max_tokens: Option<u32>,
    stream: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    stream_options: Option<StreamOptions>,
}

#[derive(Serialize)]
struct StreamOptions {
    include_usage: bool,
}

#[derive(Serialize)]
#[serde(tag = "role", rename_all = "lowercase")]
enum Message<'a> {
    System {
        content: &'a str,
    },
    User {
        content: UserContent<'a>,
    },
    Assistant {
        content: Option<&'a str>,
        #[serde(skip_serializing_if = "Vec::is_empty")]
        tool_calls: Vec<OutCall<'a>>,
    },
    Tool {
        tool_call_id: &'a str,
        content: &'a str,
    },
}

/// A user message's content: its text, or its text and images as parts.
#[derive(Serialize)]
#[serde(untagged)]
enum UserContent<'a> {
    Text(Cow<'a, str>),
    Parts(Vec<Part<'a>>),
}

#[derive(Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum Part<'a> {
    Text { text: Cow<'a, str> },
    ImageUrl { image_url: ImageUrl },
}

#[derive(Serialize)]
struct ImageUrl {
    url: String,
}

fn user_content<'a>(
    request: &'a ChatRequest,
    settings: &Settings<'_>,
    content: Cow<'a, str>,
    images: &'a [ImagePart],
) -> UserContent<'a> {
    let mut shown = request.shown(images, settings.images).peekable();
    if shown.peek().is_none() {
        return UserContent::Text(content);
    }
    let mut parts = vec![Part::Text { text: content }];
    parts.extend(shown.map(image_part));
    UserContent::Parts(parts)
}

fn image_part<'p>(image: &ImageData) -> Part<'p> {
    Part::ImageUrl {
        image_url: ImageUrl {
            url: format!("data:{};base64,{}", image.mime, image.base64),
        },
    }
}

/// The images of the tool results just written, as the user message that follows them:
/// chat completions take only text in a tool message.
#[derive(Default)]
struct ToolImages<'a> {
    parts: Vec<Part<'a>>,
}

impl<'a> ToolImages<'a> {
    fn add(&mut self, call: &str, name: &str, shown: impl Iterator<Item = &'a ImageData>) {
        for (index, image) in shown.enumerate() {
            if self.parts.is_empty() {
                self.parts.push(Part::Text {
                    text: "The images the tool calls returned:".into(),
                });
            }
            if index == 0 {
                self.parts.push(Part::Text {
                    text: format!("{name} (call {call}):").into(),
                });
            }
            self.parts.push(image_part(image));
        }
    }

    /// The message showing them, if there are any; empties the list.
    fn message(&mut self) -> Option<Message<'a>> {
        (!self.parts.is_empty()).then(|| Message::User {
            content: UserContent::Parts(std::mem::take(&mut self.parts)),
        })
    }
}

#[derive(Serialize)]
struct OutCall<'a> {
    id: &'a str,
    #[serde(rename = "type")]
    kind: &'static str,
    function: OutFunction<'a>,
}

#[derive(Serialize)]
struct OutFunction<'a> {
    name: &'a str,
    arguments: &'a str,
}

#[derive(Serialize)]
struct Tool<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    function: &'a ToolDefinition,
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
pub(crate) fn request<'a>(
    settings: &Settings<'a>,
    request: &'a ChatRequest,
    stream: bool,
) -> Request<'a> {
    let mut messages = Vec::with_capacity(request.messages.len() + 1);
    if !request.system.is_empty() {
        messages.push(Message::System {
            content: &request.system,
        });
    }
    let mut tool_images = ToolImages::default();
    for message in &request.messages {
        let wire = match &**message {
            ChatMessage::User { images, .. } => Message::User {
                // Opened by a line saying where it comes from, when a person did not write it.
                content: user_content(request, settings, message.model_text(), images),
            },
            ChatMessage::Assistant {
                content,
                tool_calls,
            } => Message::Assistant {
                // Several servers reject an empty string beside tool calls; null is standard.
                content: (!content.is_empty() || tool_calls.is_empty()).then_some(content.as_str()),
                tool_calls: tool_calls
                    .iter()
                    .map(|call| OutCall {
                        id: &call.id,
                        kind: "function",
                        function: OutFunction {
                            name: &call.name,
                            arguments: if call.arguments.trim().is_empty() {
                                "{}"
                            } else {
                                &call.arguments
                            },
                        },
                    })
                    .collect(),
            },
            ChatMessage::Tool {
                tool_call_id,
                name,
                content,
                images,
                ..
            } => {
                tool_images.add(tool_call_id, name, request.shown(images, settings.images));
                messages.push(Message::Tool {
                    tool_call_id,
                    content,
                });
                continue;
            }
        };
        messages.extend(tool_images.message());
        messages.push(wire);
    }
    messages.extend(tool_images.message());
    Request {
        model: settings.model,
        messages,
        tools: request
            .tools
            .iter()
            .map(|function| Tool {
                kind: "function",
                function,
            })
            .collect(),
        temperature: settings.temperature,
        max_tokens: settings.max_tokens,
        stream,
        stream_options: stream.then_some(StreamOptions {
            include_usage: true,
        }),
    }
}

/// A whole (non-streamed) response.
#[derive(Deserialize)]
pub(crate) struct Response {
    #[serde(default)]
    pub choices: Vec<Choice>,
    pub usage: Option<WireUsage>,
}

#[derive(Deserialize)]
pub(crate) struct Choice {
    pub message: ResponseMessage,
    pub finish_reason: Option<String>,
}

#[derive(Deserialize)]
pub(crate) struct ResponseMessage {
    pub content: Option<String>,
    #[serde(default)]
    pub tool_calls: Option<Vec<InCall>>,
}

/// A tool call in a response or a stream chunk; every field may be missing in a chunk.
#[derive(Deserialize, Default)]
pub(crate) struct InCall {
    pub index: Option<usize>,
    pub id: Option<String>,
    pub function: Option<InFunction>,
}

#[derive(Deserialize, Default)]
pub(crate) struct InFunction {
    pub name: Option<String>,
    /// A JSON string by the standard; some servers send an object.
    pub arguments: Option<serde_json::Value>,
}

impl InFunction {
    pub(crate) fn arguments_text(&self) -> String {
        match &self.arguments {
            None | Some(serde_json::Value::Null) => String::new(),
            Some(serde_json::Value::String(text)) => text.clone(),
            Some(other) => other.to_string(),
        }
    }
}

#[derive(Deserialize, Clone, Copy)]
pub(crate) struct WireUsage {
    #[serde(default)]
    pub prompt_tokens: u64,
    #[serde(default)]
    pub completion_tokens: u64,
    /// OpenAI's (and compatible servers') prompt cache: `cached_tokens` of the prompt's.
    #[serde(default)]
    pub prompt_tokens_details: Option<PromptDetails>,
    /// Reasoning models' thinking: `reasoning_tokens` of the completion's.
    #[serde(default)]
    pub completion_tokens_details: Option<CompletionDetails>,
}

#[derive(Deserialize, Clone, Copy, Default)]
pub(crate) struct CompletionDetails {
    #[serde(default)]
    pub reasoning_tokens: Option<u64>,
}

#[derive(Deserialize, Clone, Copy, Default)]
pub(crate) struct PromptDetails {
    #[serde(default)]
    pub cached_tokens: Option<u64>,
}

impl From<WireUsage> for Usage {
    fn from(usage: WireUsage) -> Self {
        let cached = usage
            .prompt_tokens_details
            .and_then(|details| details.cached_tokens)
            .unwrap_or(0);
        Self {
            input_tokens: usage.prompt_tokens,
            output_tokens: usage.completion_tokens,
            cached_input_tokens: cached.min(usage.prompt_tokens),
            reasoning_tokens: usage
                .completion_tokens_details
                .and_then(|details| details.reasoning_tokens)
                .unwrap_or(0)
                .min(usage.completion_tokens),
        }
    }
}

/// One `data:` event of a stream.
#[derive(Deserialize)]
pub(crate) struct Chunk {
    #[serde(default)]
    pub choices: Vec<ChunkChoice>,
    pub usage: Option<WireUsage>,
    pub error: Option<serde_json::Value>,
}

#[derive(Deserialize)]
pub(crate) struct ChunkChoice {
    #[serde(default)]
    pub delta: Option<ChunkDelta>,
    pub finish_reason: Option<String>,
}

#[derive(Deserialize, Default)]
pub(crate) struct ChunkDelta {
    pub content: Option<String>,
    #[serde(default)]
    pub tool_calls: Option<Vec<InCall>>,
}

/// Gives every call an id (some local servers omit them) so results can answer it.
pub(crate) fn call_id(id: Option<String>, position: usize) -> String {
    id.filter(|id| !id.is_empty())
        .unwrap_or_else(|| format!("call_{position}"))
}

/// Maps a whole response to core's types.
pub(crate) fn tool_calls(calls: Vec<InCall>) -> Vec<ToolCall> {
    calls
        .into_iter()
        .enumerate()
        .map(|(position, call)| {
            let function = call.function.unwrap_or_default();
            ToolCall {
                id: call_id(call.id, position),
                name: function.name.clone().unwrap_or_default(),
                arguments: function.arguments_text(),
                signature: None,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn request_maps_every_role() {
        let call = ToolCall {
            id: "c1".into(),
            name: "echo".into(),
            arguments: String::new(),
            signature: None,
        };
        let request = ChatRequest {
            system: "be brief".into(),
            messages: vec![
                ChatMessage::user("hi").into(),
                ChatMessage::Assistant {
                    content: String::new(),
                    tool_calls: vec![call.clone()],
                }
                .into(),
                ChatMessage::tool_result(&call, "out", false).into(),
                ChatMessage::assistant("done").into(),
            ],
            tools: vec![ToolDefinition {
                name: "echo".into(),
                description: "echoes".into(),
                parameters: json!({"type": "object"}),
            }]
            .into(),
            stream: true,
            images: Vec::new(),
        };
        let settings = Settings {
            model: "m",
            temperature: Some(0.5),
            max_tokens: None,
            images: true,
        };
        let wire = serde_json::to_value(super::request(&settings, &request, true)).expect("json");
        assert_eq!(
            wire,
            json!({
                "model": "m",
                "messages": [
                    {"role": "system", "content": "be brief"},
                    {"role": "user", "content": "hi"},
                    {"role": "assistant", "content": null, "tool_calls": [
                        {"id": "c1", "type": "function", "function": {"name": "echo", "arguments": "{}"}}
                    ]},
                    {"role": "tool", "tool_call_id": "c1", "content": "out"},
                    {"role": "assistant", "content": "done"}
                ],
                "tools": [{"type": "function", "function": {
                    "name": "echo", "description": "echoes", "parameters": {"type": "object"}}}],
                "temperature": 0.5,
                "stream": true,
                "stream_options": {"include_usage": true}
            })
        );
    }

    /// Two calls, the first returned an image: both results, then a user message showing
    /// it (a tool message takes only text); a model that takes no images gets none.
    #[test]
    fn tool_images_follow_the_results_in_a_user_message() {
        let call = |id: &str| ToolCall {
            id: id.into(),
            name: "shot".into(),
            arguments: "{}".into(),
            signature: None,
        };
        let mut shot = ChatMessage::tool_result(&call("a"), "took it", false);
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
                    tool_calls: vec![call("a"), call("b")],
                }
                .into(),
                shot.into(),
                ChatMessage::tool_result(&call("b"), "none", false).into(),
            ],
            images: vec![ImageData {
                path: "media/tools/a.png".into(),
                mime: "image/png".into(),
                base64: "iVBO".into(),
            }],
            ..ChatRequest::default()
        };
        let wire = |images| {
            let settings = Settings {
                model: "m",
                temperature: None,
                max_tokens: None,
                images,
            };
            serde_json::to_value(super::request(&settings, &request, false)).expect("json")
        };
        let shown = wire(true);
        let messages = shown["messages"].as_array().expect("messages");
        assert_eq!(messages.len(), 5, "{shown}");
        assert_eq!(messages[2]["role"], "tool");
        assert_eq!(messages[3]["role"], "tool");
        assert_eq!(
            messages[4],
            json!({"role": "user", "content": [
                {"type": "text", "text": "The images the tool calls returned:"},
                {"type": "text", "text": "shot (call a):"},
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBO"}}
            ]})
        );
        switchboard_testkit::strict::check_openai_request(&shown).expect("strict rules");
        let blind = wire(false);
        assert_eq!(
            blind["messages"].as_array().map(Vec::len),
            Some(4),
            "{blind}"
        );
        assert!(!blind.to_string().contains("iVBO"));
    }

    #[test]
    fn response_tool_calls_get_ids_and_text_arguments() {
        let response: Response = serde_json::from_value(json!({
            "choices": [{"message": {"content": null, "tool_calls": [
                {"id": "a", "type": "function", "function": {"name": "x", "arguments": "{\"k\":1}"}},
                {"function": {"name": "y", "arguments": {"k": 2}}}
            ]}, "finish_reason": "tool_calls"}]
        }))
        .expect("parse");
        let message = response.choices.into_iter().next().expect("choice").message;
        let calls = tool_calls(message.tool_calls.unwrap_or_default());
        assert_eq!(calls[0].id, "a");
        assert_eq!(calls[0].arguments, r#"{"k":1}"#);
        assert_eq!(calls[1].id, "call_1");
        assert_eq!(calls[1].arguments, r#"{"k":2}"#);
    }
}
