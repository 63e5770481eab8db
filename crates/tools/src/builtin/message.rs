//! `message`: the agent writes to a chat on its own — to notify, or to report scheduled
//! work. Only to chats that have talked to the agent and whose people are still allowed:
//! the daemon's [`Outbox`] decides, the tool only asks.

use std::sync::Arc;

use async_trait::async_trait;
use serde::Deserialize;
use serde_json::json;
use switchboard_core::AgentName;

use super::args;
use crate::{Tool, ToolContext, ToolError, ToolOutput};

/// A message longer than this is refused (channels split long ones, within reason).
const MAX_TEXT_BYTES: usize = 16 * 1024;

/// Where `message` sends: the daemon, over its channels.
#[async_trait]
pub trait Outbox: Send + Sync + std::fmt::Debug + 'static {
    /// Sends `text` from the agent `from` to `chat` of `channel` once it is delivered, or
    /// says why not ([`ToolError::Denied`] for a chat that agent may not write to).
    async fn send(
        &self,
        from: &AgentName,
        channel: &str,
        chat: &str,
        text: &str,
    ) -> Result<(), ToolError>;
}

/// Sends a message to a chat.
#[derive(Debug)]
pub struct SendMessage {
    outbox: Arc<dyn Outbox>,
}

impl SendMessage {
    /// A `message` tool sending through `outbox`.
    pub fn new(outbox: Arc<dyn Outbox>) -> Self {
        Self { outbox }
    }
}

#[derive(Deserialize)]
struct Args {
    channel: String,
    chat_id: String,
    text: String,
}

#[async_trait]
impl Tool for SendMessage {
    fn name(&self) -> &str {
        "message"
    }

    fn description(&self) -> &str {
        "Send a message to a chat on any channel (e.g. channel \"telegram\", chat_id \
         \"123456\"): to notify someone or report on work. Only chats that have talked to \
         you and are still allowed can be written to. The current chat's reply needs no tool."
    }

    fn parameters(&self) -> serde_json::Value {
        json!({
            "type": "object",
            "properties": {
                "channel": {"type": "string", "description": "the channel, e.g. telegram or websocket"},
                "chat_id": {"type": "string", "description": "the chat's id on that channel"},
                "text": {"type": "string", "description": "the message (Markdown)"}
            },
            "required": ["channel", "chat_id", "text"]
        })
    }

    async fn call(
        &self,
        value: serde_json::Value,
        ctx: &ToolContext,
    ) -> Result<ToolOutput, ToolError> {
        let args: Args = args(value)?;
        if args.text.trim().is_empty() {
            return Err(ToolError::InvalidArguments("the text is empty".into()));
        }
        if args.text.len() > MAX_TEXT_BYTES {
            return Err(ToolError::InvalidArguments(format!(
                "the text is {} bytes; at most {MAX_TEXT_BYTES}",
                args.text.len()
            )));
        }
        tokio::select! {
            sent = self.outbox.send(&ctx.agent, args.channel.trim(), args.chat_id.trim(), &args.text) => sent?,
            () = ctx.cancel.cancelled() => return Err(ToolError::Cancelled),
        }
        Ok(format!(
            "sent to {} chat {}",
            args.channel.trim(),
            args.chat_id.trim()
        )
        .into())
    }
}
