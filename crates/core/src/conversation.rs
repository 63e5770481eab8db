//! The provider-neutral conversation model: what a session remembers and what the LLM
//! clients translate to their wire formats.

use std::collections::HashSet;

use serde::{Deserialize, Serialize};

use crate::origin::Origin;

/// One message of a conversation. System prompts are not part of history; they are built
/// fresh for every request.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "role", rename_all = "lowercase")]
pub enum ChatMessage {
    /// What the person wrote — or, when its origin says so, what a scheduled job or the
    /// heartbeat brought: its text and, as further content parts, the images that came with
    /// it.
    User {
        /// The text of the message.
        content: String,
        /// Images sent with it, by where they were saved (absent in files written before
        /// images were kept: they load as none).
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        images: Vec<ImagePart>,
        /// Where it came from; absent for a person (and in every file written before
        /// origins were kept).
        #[serde(default, skip_serializing_if = "Origin::is_default")]
        origin: Origin,
    },
    /// What the model answered: text, tool calls, or both.
    Assistant {
        /// The text of the answer (may be empty when the model only calls tools).
        #[serde(default)]
        content: String,
        /// The tools the model asked to run, in the order it asked.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        tool_calls: Vec<ToolCall>,
    },
    /// The result of one tool call, answering the call with the same id.
    Tool {
        /// The id of the [`ToolCall`] this answers.
        tool_call_id: String,
        /// The tool's name, kept for providers and logs that want it.
        name: String,
        /// The tool's output, or the error the model should read.
        content: String,
        /// Whether the call failed.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        is_error: bool,
        /// Images the tool returned (an MCP server's screenshot, an image file read), by
        /// where they were saved; shown to models that take images in the turn that called
        /// the tool. Absent in files written before tool images were kept.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        images: Vec<ImagePart>,
    },
}

impl ChatMessage {
    /// A user message a person wrote.
    pub fn user(content: impl Into<String>) -> Self {
        Self::User {
            content: content.into(),
            images: Vec::new(),
            origin: Origin::Person,
        }
    }

    /// The text a model is sent for this message: a user message not from a person opens
    /// with a line saying where it comes from ([`Origin::preamble`]).
    pub fn model_text(&self) -> std::borrow::Cow<'_, str> {
        match self {
            Self::User {
                content, origin, ..
            } => match origin.preamble() {
                Some(preamble) => format!("{preamble}\n\n{content}").into(),
                None => content.as_str().into(),
            },
            other => other.text().into(),
        }
    }

    /// Where a user message came from; a person for every other message.
    pub fn origin(&self) -> &Origin {
        static PERSON: Origin = Origin::Person;
        match self {
            Self::User { origin, .. } => origin,
            _ => &PERSON,
        }
    }

    /// The images of a user message or a tool result; empty for an assistant message.
    pub fn images(&self) -> &[ImagePart] {
        match self {
            Self::User { images, .. } | Self::Tool { images, .. } => images,
            Self::Assistant { .. } => &[],
        }
    }

    /// An assistant message with text only.
    pub fn assistant(content: impl Into<String>) -> Self {
        Self::Assistant {
            content: content.into(),
            tool_calls: Vec::new(),
        }
    }

    /// A tool result.
    pub fn tool_result(call: &ToolCall, content: impl Into<String>, is_error: bool) -> Self {
        Self::Tool {
            tool_call_id: call.id.clone(),
            name: call.name.clone(),
            content: content.into(),
            is_error,
            images: Vec::new(),
        }
    }

    /// Whether this is a user message (the start of a turn).
    pub fn is_user(&self) -> bool {
        matches!(self, Self::User { .. })
    }

    /// The tool calls of an assistant message; empty for every other message.
    pub fn tool_calls(&self) -> &[ToolCall] {
        match self {
            Self::Assistant { tool_calls, .. } => tool_calls,
            _ => &[],
        }
    }

    /// The id of the call a tool result answers, if this is a tool result.
    pub fn tool_call_id(&self) -> Option<&str> {
        match self {
            Self::Tool { tool_call_id, .. } => Some(tool_call_id),
            _ => None,
        }
    }

    /// The text of the message (a tool result's output).
    pub fn text(&self) -> &str {
        match self {
            Self::User { content, .. }
            | Self::Assistant { content, .. }
            | Self::Tool { content, .. } => content,
        }
    }
}

/// An image part of a user message or a tool result: a file in the workspace. History keeps where it is,
/// not its bytes; a request carries the bytes of the images it shows (see the LLM crate).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ImagePart {
    /// Where it was saved, relative to the workspace.
    pub path: String,
    /// Its MIME type (`image/png`, `image/jpeg`, `image/gif`, `image/webp`).
    pub mime: String,
}

impl ImagePart {
    /// The image types a model is shown (what OpenAI's and Anthropic's APIs take).
    pub const TYPES: [&'static str; 4] = ["image/png", "image/jpeg", "image/gif", "image/webp"];

    /// The largest image shown to a model, in bytes (Anthropic's limit is 5 MB).
    pub const MAX_BYTES: u64 = 5 * 1024 * 1024;

    /// Whether a model can be shown an image of type `mime`.
    pub fn shown_type(mime: &str) -> bool {
        Self::TYPES.contains(&mime)
    }

    /// The type of an image models take, by its first bytes (12 are enough); `None` for
    /// anything else.
    pub fn sniff(head: &[u8]) -> Option<&'static str> {
        if head.starts_with(b"\x89PNG\r\n\x1a\n") {
            Some("image/png")
        } else if head.starts_with(&[0xff, 0xd8, 0xff]) {
            Some("image/jpeg")
        } else if head.starts_with(b"GIF87a") || head.starts_with(b"GIF89a") {
            Some("image/gif")
        } else if head.len() >= 12 && head.starts_with(b"RIFF") && &head[8..12] == b"WEBP" {
            Some("image/webp")
        } else {
            None
        }
    }

    /// The file name extension for an image of type `mime` (`bin` for one not shown).
    pub fn extension(mime: &str) -> &'static str {
        match mime {
            "image/png" => "png",
            "image/jpeg" => "jpg",
            "image/gif" => "gif",
            "image/webp" => "webp",
            _ => "bin",
        }
    }
}

/// A tool call as the model asked for it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolCall {
    /// The provider's id for the call; the result carries it back.
    pub id: String,
    /// The tool's name.
    pub name: String,
    /// The arguments as the JSON text the model wrote (it may be invalid; the agent
    /// parses it and turns a parse failure into an error result).
    pub arguments: String,
    /// What the provider asked to get back with the call on the next request, as it sent
    /// it: Gemini's thought signature (the model's reasoning, encrypted; Gemini 3 refuses a
    /// conversation whose calls of the current turn lack theirs). Kept in history so a turn
    /// taken up again after a restart still has it; other providers ignore it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signature: Option<String>,
}

/// Renames the calls whose id is empty, already in `taken`, or repeated earlier in `calls`,
/// and adds every id to `taken`. Returns how many calls were renamed.
///
/// Providers refuse a conversation in which two tool calls share an id (and some models emit
/// such duplicates, or no ids at all), so ids are made unique across the whole history when
/// a response arrives and again when history is read back. A duplicate `x` becomes `x_2`
/// (or the next free suffix); an empty id becomes `call_1`, `call_2`, …
pub fn make_call_ids_unique(calls: &mut [ToolCall], taken: &mut HashSet<String>) -> usize {
    let mut renamed = 0;
    for call in calls {
        if !call.id.is_empty() && taken.insert(call.id.clone()) {
            continue;
        }
        let stem = if call.id.is_empty() { "call" } else { &call.id };
        let fresh = (1u64..)
            .map(|n| {
                if call.id.is_empty() {
                    format!("{stem}_{n}")
                } else {
                    format!("{stem}_{}", n + 1)
                }
            })
            .find(|candidate| !taken.contains(candidate))
            .unwrap_or_default();
        taken.insert(fresh.clone());
        call.id = fresh;
        renamed += 1;
    }
    renamed
}

/// A tool as the model sees it: sent with every request that offers tools.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ToolDefinition {
    /// The name the model calls it by.
    pub name: String,
    /// What it does and when to use it.
    pub description: String,
    /// JSON schema of its arguments (an object schema).
    pub parameters: serde_json::Value,
}

/// Tokens spent, summed over calls.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    /// Prompt tokens, those read from the provider's prompt cache included.
    pub input_tokens: u64,
    /// Completion tokens.
    pub output_tokens: u64,
    /// Of the prompt tokens, those read from the provider's prompt cache (priced lower).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub cached_input_tokens: u64,
    /// Of the output tokens, those the model spent thinking before it answered (OpenAI's
    /// reasoning tokens, Gemini's thoughts; priced as output).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub reasoning_tokens: u64,
}

fn is_zero(value: &u64) -> bool {
    *value == 0
}

impl Usage {
    /// `input` tokens in (none cached) and `output` out.
    pub fn new(input: u64, output: u64) -> Self {
        Self {
            input_tokens: input,
            output_tokens: output,
            cached_input_tokens: 0,
            reasoning_tokens: 0,
        }
    }
}

impl std::ops::AddAssign for Usage {
    fn add_assign(&mut self, other: Self) {
        self.input_tokens += other.input_tokens;
        self.output_tokens += other.output_tokens;
        self.cached_input_tokens += other.cached_input_tokens;
        self.reasoning_tokens += other.reasoning_tokens;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_round_trip_through_json() {
        let call = ToolCall {
            id: "call_1".into(),
            name: "echo".into(),
            arguments: r#"{"text":"hi"}"#.into(),
            signature: None,
        };
        let messages = vec![
            ChatMessage::user("hi"),
            ChatMessage::Assistant {
                content: String::new(),
                tool_calls: vec![call.clone()],
            },
            ChatMessage::tool_result(&call, "hi", false),
            ChatMessage::assistant("done"),
        ];
        for message in messages {
            let json = serde_json::to_string(&message).expect("serialize");
            let back: ChatMessage = serde_json::from_str(&json).expect("deserialize");
            assert_eq!(back, message);
        }
    }

    fn call(id: &str) -> ToolCall {
        ToolCall {
            id: id.into(),
            name: "t".into(),
            arguments: "{}".into(),
            signature: None,
        }
    }

    #[test]
    fn duplicate_and_empty_call_ids_are_renamed_and_unique_ones_kept() {
        let mut taken: HashSet<String> = ["a".to_owned(), "a_2".to_owned()].into();
        let mut calls = vec![call("a"), call("b"), call("b"), call(""), call("")];
        assert_eq!(make_call_ids_unique(&mut calls, &mut taken), 4);
        let ids: Vec<&str> = calls.iter().map(|c| c.id.as_str()).collect();
        assert_eq!(ids, ["a_3", "b", "b_2", "call_1", "call_2"]);
        for id in ids {
            assert!(taken.contains(id));
        }
        let mut fresh = vec![call("x"), call("y")];
        assert_eq!(make_call_ids_unique(&mut fresh, &mut taken), 0);
    }

    #[test]
    fn a_user_message_from_before_images_loads_and_one_with_images_round_trips() {
        let old: ChatMessage =
            serde_json::from_str(r#"{"role":"user","content":"hi"}"#).expect("old line");
        assert_eq!(old, ChatMessage::user("hi"));
        let with = ChatMessage::User {
            content: "look".into(),
            images: vec![ImagePart {
                path: "media/telegram/1-photo.jpg".into(),
                mime: "image/jpeg".into(),
            }],
            origin: Origin::Person,
        };
        let json = serde_json::to_string(&with).expect("serialize");
        assert!(
            !json.contains("origin"),
            "a person's origin is not written: {json}"
        );
        assert_eq!(
            serde_json::from_str::<ChatMessage>(&json).expect("back"),
            with
        );
    }

    #[test]
    fn a_scheduled_message_keeps_its_origin_and_the_model_reads_what_it_is() {
        let scheduled = ChatMessage::User {
            content: "Remind me to drink tea.".into(),
            images: Vec::new(),
            origin: Origin::Schedule {
                job: "3".into(),
                name: "tea".into(),
            },
        };
        let json = serde_json::to_string(&scheduled).expect("serialize");
        assert_eq!(
            serde_json::from_str::<ChatMessage>(&json).expect("back"),
            scheduled
        );
        let text = scheduled.model_text();
        assert!(
            text.starts_with("[Scheduled task \"tea\" (job 3)"),
            "{text}"
        );
        assert!(text.ends_with("\n\nRemind me to drink tea."), "{text}");
        assert_eq!(ChatMessage::user("hi").model_text(), "hi");
    }

    #[test]
    fn user_message_serializes_with_role_tag() {
        let json = serde_json::to_string(&ChatMessage::user("x")).expect("serialize");
        assert_eq!(json, r#"{"role":"user","content":"x"}"#);
    }
}
