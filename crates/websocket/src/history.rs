//! What a person sees of a conversation, for `history` frames (and the control panel's
//! transcripts): what was said, each tool call with the start of its result, and the
//! replies, read from the agent's session store through [`Transcripts`].

use std::collections::HashMap;

use switchboard_core::{ChatMessage, preview};

use crate::protocol::{Said, SaidTool};

/// The most of a chat's history one `history` frame carries (the newest messages kept).
const MAX_HISTORY_BYTES: usize = 256 * 1024;

/// What a page shows of a conversation: what was said, each tool call with the start of
/// its result, and the replies (text written beside tool calls left out: the reply that
/// followed replaced it) — the newest [`MAX_HISTORY_BYTES`] of it.
pub fn said_of(messages: Vec<ChatMessage>) -> Vec<Said> {
    let mut said: Vec<Said> = Vec::new();
    let mut calls: HashMap<String, usize> = HashMap::new();
    for message in messages {
        match message {
            ChatMessage::User { content, .. } => said.push(Said::text("user", content)),
            ChatMessage::Assistant {
                content,
                tool_calls,
            } if tool_calls.is_empty() => {
                if !content.is_empty() {
                    said.push(Said::text("assistant", content));
                }
            }
            ChatMessage::Assistant { tool_calls, .. } => {
                for call in tool_calls {
                    calls.insert(call.id.clone(), said.len());
                    said.push(Said {
                        role: "tool",
                        content: String::new(),
                        tool: Some(SaidTool {
                            id: call.id,
                            name: call.name,
                            arguments: preview(&call.arguments),
                            result: None,
                            ok: true,
                        }),
                    });
                }
            }
            ChatMessage::Tool {
                tool_call_id,
                content,
                is_error,
                ..
            } => {
                if let Some(tool) = calls
                    .get(&tool_call_id)
                    .and_then(|&index| said[index].tool.as_mut())
                {
                    tool.result = Some(preview(&content));
                    tool.ok = !is_error;
                }
            }
        }
    }
    let mut bytes = 0;
    let keep = said
        .iter()
        .rev()
        .take_while(|message| {
            bytes += message.content.len()
                + message.tool.as_ref().map_or(0, |tool| {
                    tool.arguments.len() + tool.result.as_ref().map_or(0, String::len)
                });
            bytes <= MAX_HISTORY_BYTES
        })
        .count();
    said.split_off(said.len() - keep)
}
