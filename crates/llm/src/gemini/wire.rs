//! The Gemini API's wire format (`generateContent`), and its mapping to and from core's
//! conversation model.
//!
//! Gemini differs from the internal model where Anthropic does — the system prompt is a
//! field (`systemInstruction`), tool results are parts (`functionResponse`) of a *user*
//! content, a call's arguments are an object — and in three ways of its own: the model's
//! role is `model`; a result names the function it answers (and its id, which is sent back
//! too); and a part the model wrote may carry a `thoughtSignature` that must come back with
//! that part, exactly as it came (kept on the [`ToolCall`]).

use std::borrow::Cow;

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use switchboard_core::{ChatMessage, ToolCall, Usage};

use super::schema;
use crate::arguments;
use crate::provider::{ChatRequest, ImageData};

/// What a call of the current turn without a signature is sent with (one that another
/// provider of a failover chain made, or one from before Gemini answered this chat): the
/// value Google documents for calls it did not sign, so Gemini 3 does not refuse the
/// conversation.
pub(crate) const UNSIGNED: &str = "skip_thought_signature_validator";

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Request<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    system_instruction: Option<Content<'a>>,
    contents: Vec<Content<'a>>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    tools: Vec<Tools<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    generation_config: Option<GenerationConfig>,
}

#[derive(Serialize, Debug, PartialEq)]
struct Content<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    role: Option<&'static str>,
    parts: Vec<Part<'a>>,
}

#[derive(Serialize, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
struct Part<'a> {
    #[serde(flatten)]
    data: Kind<'a>,
    #[serde(skip_serializing_if = "Option::is_none")]
    thought_signature: Option<&'a str>,
}

#[derive(Serialize, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
enum Kind<'a> {
    Text(Cow<'a, str>),
    #[serde(rename_all = "camelCase")]
    InlineData {
        mime_type: &'a str,
        data: &'a str,
    },
    FunctionCall(Call<'a>),
    FunctionResponse(Answer<'a>),
}

#[derive(Serialize, Debug, PartialEq)]
struct Call<'a> {
    #[serde(skip_serializing_if = "str::is_empty")]
    id: &'a str,
    name: &'a str,
    args: Value,
}

#[derive(Serialize, Debug, PartialEq)]
struct Answer<'a> {
    #[serde(skip_serializing_if = "str::is_empty")]
    id: &'a str,
    name: &'a str,
    /// `{"output": …}`, or `{"error": …}` for a failed call (as Google's docs name them).
    response: Value,
}

impl<'a> Part<'a> {
    fn new(data: Kind<'a>) -> Self {
        Self {
            data,
            thought_signature: None,
        }
    }

    fn text(text: impl Into<Cow<'a, str>>) -> Self {
        Self::new(Kind::Text(text.into()))
    }

    fn image(image: &'a ImageData) -> Self {
        Self::new(Kind::InlineData {
            mime_type: &image.mime,
            data: &image.base64,
        })
    }
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Tools<'a> {
    function_declarations: Vec<Declaration<'a>>,
}

#[derive(Serialize)]
struct Declaration<'a> {
    name: &'a str,
    description: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    parameters: Option<Value>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct GenerationConfig {
    #[serde(skip_serializing_if = "Option::is_none")]
    temperature: Option<f32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    max_output_tokens: Option<u32>,
}

/// The settings of a request that come from config rather than from the turn.
pub(crate) struct Settings {
    pub temperature: Option<f32>,
    pub max_tokens: Option<u32>,
    /// Whether the model takes images.
    pub images: bool,
}

/// Maps a provider-neutral request to the wire.
pub(crate) fn request<'a>(settings: &Settings, request: &'a ChatRequest) -> Request<'a> {
    // Gemini 3 checks the signatures of the current turn's calls: those after the last
    // message a person (or a job) wrote.
    let turn_start = request
        .messages
        .iter()
        .rposition(|message| message.is_user())
        .unwrap_or(0);
    let mut contents: Vec<Content<'a>> = Vec::with_capacity(request.messages.len());
    for (index, message) in request.messages.iter().enumerate() {
        let current = index > turn_start;
        let (role, parts) = parts_of(settings, request, message, current);
        match contents.last_mut() {
            Some(last) if last.role == Some(role) => last.parts.extend(parts),
            _ => contents.push(Content {
                role: Some(role),
                parts,
            }),
        }
    }
    // A content may not be empty (an empty reply, a message of only an unsent image).
    for content in &mut contents {
        if content.parts.is_empty() {
            content.parts.push(Part::text("(empty)"));
        }
    }
    let declarations: Vec<Declaration<'a>> = request
        .tools
        .iter()
        .map(|tool| Declaration {
            name: &tool.name,
            description: &tool.description,
            parameters: schema::parameters(&tool.parameters),
        })
        .collect();
    let generation = GenerationConfig {
        temperature: settings.temperature,
        max_output_tokens: settings.max_tokens,
    };
    Request {
        system_instruction: (!request.system.is_empty()).then(|| Content {
            role: None,
            parts: vec![Part::text(request.system.as_str())],
        }),
        contents,
        tools: if declarations.is_empty() {
            Vec::new()
        } else {
            vec![Tools {
                function_declarations: declarations,
            }]
        },
        generation_config: (generation.temperature.is_some()
            || generation.max_output_tokens.is_some())
        .then_some(generation),
    }
}

/// One message as Gemini's role and parts. `current`: the message belongs to the turn
/// being answered (its calls must carry a signature).
fn parts_of<'a>(
    settings: &Settings,
    request: &'a ChatRequest,
    message: &'a ChatMessage,
    current: bool,
) -> (&'static str, Vec<Part<'a>>) {
    match message {
        ChatMessage::User {
            content, images, ..
        } => {
            let mut parts = Vec::with_capacity(1 + images.len());
            if !content.is_empty() {
                parts.push(Part::text(message.model_text()));
            }
            parts.extend(request.shown(images, settings.images).map(Part::image));
            ("user", parts)
        }
        ChatMessage::Assistant {
            content,
            tool_calls,
        } => {
            let mut parts = Vec::with_capacity(1 + tool_calls.len());
            if !content.is_empty() {
                parts.push(Part::text(content.as_str()));
            }
            for (position, call) in tool_calls.iter().enumerate() {
                let mut part = Part::new(Kind::FunctionCall(Call {
                    id: &call.id,
                    name: &call.name,
                    args: arguments::object(&call.arguments),
                }));
                part.thought_signature = match &call.signature {
                    Some(signature) => Some(signature),
                    // Of parallel calls, Gemini signs the first only.
                    None if current && position == 0 => Some(UNSIGNED),
                    None => None,
                };
                parts.push(part);
            }
            ("model", parts)
        }
        ChatMessage::Tool {
            tool_call_id,
            name,
            content,
            is_error,
            images,
        } => {
            let response = if *is_error {
                json!({ "error": content })
            } else {
                json!({ "output": content })
            };
            let mut parts = vec![Part::new(Kind::FunctionResponse(Answer {
                id: tool_call_id,
                name,
                response,
            }))];
            parts.extend(request.shown(images, settings.images).map(Part::image));
            ("user", parts)
        }
    }
}

/// One response — a whole one, or one event of a stream (each is a response holding what
/// came since the one before).
#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Response {
    #[serde(default)]
    pub candidates: Vec<Candidate>,
    #[serde(default)]
    pub prompt_feedback: Option<PromptFeedback>,
    #[serde(default)]
    pub usage_metadata: Option<WireUsage>,
    /// An error sent inside a stream.
    #[serde(default)]
    pub error: Option<Value>,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Candidate {
    #[serde(default)]
    pub content: Option<InContent>,
    #[serde(default)]
    pub finish_reason: Option<String>,
    #[serde(default)]
    pub safety_ratings: Vec<SafetyRating>,
}

#[derive(Deserialize, Default)]
pub(crate) struct InContent {
    #[serde(default)]
    pub parts: Vec<InPart>,
}

/// A part of the model's content: text (a thought's, when `thought`), a call, and perhaps
/// the signature that goes with it.
#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub(crate) struct InPart {
    #[serde(default)]
    pub text: Option<String>,
    #[serde(default)]
    pub thought: bool,
    #[serde(default)]
    pub thought_signature: Option<String>,
    #[serde(default)]
    pub function_call: Option<InCall>,
}

#[derive(Deserialize, Default)]
pub(crate) struct InCall {
    #[serde(default)]
    pub id: Option<String>,
    #[serde(default)]
    pub name: String,
    #[serde(default)]
    pub args: Value,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub(crate) struct SafetyRating {
    #[serde(default)]
    pub category: String,
    #[serde(default)]
    pub blocked: bool,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub(crate) struct PromptFeedback {
    #[serde(default)]
    pub block_reason: Option<String>,
    #[serde(default)]
    pub safety_ratings: Vec<SafetyRating>,
}

/// Gemini's usage: the prompt's tokens (cached ones among them), the answer's, and the
/// thoughts' apart from the answer's (billed as output).
#[derive(Deserialize, Default, Clone, Copy)]
#[serde(rename_all = "camelCase")]
pub(crate) struct WireUsage {
    #[serde(default)]
    pub prompt_token_count: u64,
    #[serde(default)]
    pub tool_use_prompt_token_count: u64,
    #[serde(default)]
    pub candidates_token_count: u64,
    #[serde(default)]
    pub thoughts_token_count: u64,
    #[serde(default)]
    pub cached_content_token_count: u64,
}

impl From<WireUsage> for Usage {
    fn from(usage: WireUsage) -> Self {
        let input = usage.prompt_token_count + usage.tool_use_prompt_token_count;
        Self {
            input_tokens: input,
            output_tokens: usage.candidates_token_count + usage.thoughts_token_count,
            cached_input_tokens: usage.cached_content_token_count.min(input),
            reasoning_tokens: usage.thoughts_token_count,
        }
    }
}

/// The categories a filter blocked, after its reason: `SAFETY (HARM_CATEGORY_HARASSMENT)`.
pub(crate) fn blocked(reason: &str, ratings: &[SafetyRating]) -> String {
    let categories: Vec<&str> = ratings
        .iter()
        .filter(|rating| rating.blocked)
        .map(|rating| rating.category.as_str())
        .collect();
    if categories.is_empty() {
        reason.to_owned()
    } else {
        format!("{reason} ({})", categories.join(", "))
    }
}

/// A call as the internal model keeps it: its arguments as text, its signature.
pub(crate) fn tool_call(call: InCall, signature: Option<String>) -> ToolCall {
    ToolCall {
        id: call.id.unwrap_or_default(),
        name: call.name,
        arguments: arguments::text(&call.args),
        signature,
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use switchboard_core::{ImagePart, ToolDefinition};

    use super::*;

    fn call(id: &str, signature: Option<&str>) -> ToolCall {
        ToolCall {
            id: id.into(),
            name: "echo".into(),
            arguments: r#"{"text":"x"}"#.into(),
            signature: signature.map(str::to_owned),
        }
    }

    #[test]
    fn request_carries_the_system_prompt_apart_results_as_parts_and_signatures_back() {
        let request = ChatRequest {
            system: "be brief".into(),
            messages: vec![
                ChatMessage::User {
                    content: "look".into(),
                    images: vec![ImagePart {
                        path: "media/a.png".into(),
                        mime: "image/png".into(),
                    }],
                    origin: switchboard_core::Origin::Person,
                }
                .into(),
                ChatMessage::Assistant {
                    content: "Checking.".into(),
                    tool_calls: vec![call("a", Some("sig_1")), call("b", None)],
                }
                .into(),
                ChatMessage::tool_result(&call("a", None), "x", false).into(),
                ChatMessage::tool_result(&call("b", None), "no such file", true).into(),
                ChatMessage::assistant("Done.").into(),
            ],
            tools: vec![ToolDefinition {
                name: "echo".into(),
                description: "echoes".into(),
                parameters: json!({"type": "object", "properties": {"text": {"type": "string"}}}),
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
            temperature: Some(0.5),
            max_tokens: None,
            images: true,
        };
        let wire = serde_json::to_value(super::request(&settings, &request)).expect("json");
        assert_eq!(
            wire,
            json!({
                "systemInstruction": {"parts": [{"text": "be brief"}]},
                "contents": [
                    {"role": "user", "parts": [
                        {"text": "look"},
                        {"inlineData": {"mimeType": "image/png", "data": "iVBO"}}
                    ]},
                    {"role": "model", "parts": [
                        {"text": "Checking."},
                        {"functionCall": {"id": "a", "name": "echo", "args": {"text": "x"}},
                            "thoughtSignature": "sig_1"},
                        {"functionCall": {"id": "b", "name": "echo", "args": {"text": "x"}}}
                    ]},
                    {"role": "user", "parts": [
                        {"functionResponse": {"id": "a", "name": "echo", "response": {"output": "x"}}},
                        {"functionResponse": {"id": "b", "name": "echo", "response": {"error": "no such file"}}}
                    ]},
                    {"role": "model", "parts": [{"text": "Done."}]}
                ],
                "tools": [{"functionDeclarations": [{"name": "echo", "description": "echoes",
                    "parameters": {"type": "object", "properties": {"text": {"type": "string"}}}}]}],
                "generationConfig": {"temperature": 0.5}
            })
        );
    }

    /// A call of this turn that Gemini did not sign (another provider of the chain made it)
    /// goes with the value Google documents for that; one of an earlier turn goes bare.
    #[test]
    fn unsigned_calls_of_the_current_turn_get_the_documented_stand_in() {
        let request = ChatRequest {
            messages: vec![
                ChatMessage::user("one").into(),
                ChatMessage::Assistant {
                    content: String::new(),
                    tool_calls: vec![call("a", None)],
                }
                .into(),
                ChatMessage::tool_result(&call("a", None), "x", false).into(),
                ChatMessage::assistant("ok").into(),
                ChatMessage::user("two").into(),
                ChatMessage::Assistant {
                    content: String::new(),
                    tool_calls: vec![call("b", None), call("c", None)],
                }
                .into(),
                ChatMessage::tool_result(&call("b", None), "x", false).into(),
                ChatMessage::tool_result(&call("c", None), "x", false).into(),
            ],
            ..ChatRequest::default()
        };
        let settings = Settings {
            temperature: None,
            max_tokens: None,
            images: true,
        };
        let wire = serde_json::to_value(super::request(&settings, &request)).expect("json");
        let signature = |content: usize, part: usize| {
            wire["contents"][content]["parts"][part]["thoughtSignature"].clone()
        };
        assert_eq!(signature(1, 0), Value::Null, "an earlier turn's call");
        assert_eq!(signature(5, 0), json!(UNSIGNED), "this turn's first call");
        assert_eq!(signature(5, 1), Value::Null, "a parallel call after it");
        assert!(wire.get("generationConfig").is_none());
        assert!(wire.get("systemInstruction").is_none());
    }
}
