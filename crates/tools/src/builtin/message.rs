//! `message`: the agent writes to a chat on its own — to notify, or to report scheduled
//! work. Only to chats that have talked to the agent and whose people are still allowed:
//! the daemon's [`Outbox`] decides, the tool only asks, and says "sent" on the platform's
//! receipt.

use std::sync::Arc;

use async_trait::async_trait;
use serde::Deserialize;
use serde_json::json;
use switchboard_core::{ChannelName, ChatId, Sent};

use super::args;
use crate::outbox::{Outbox, Outgoing, SendTo, SentBy};
use crate::{Tool, ToolContext, ToolError, ToolOutput};

/// A message longer than this is refused (channels split long ones, within reason).
const MAX_TEXT_BYTES: usize = 16 * 1024;

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
        let channel = ChannelName::from(args.channel.trim());
        let chat = ChatId::from(args.chat_id.trim());
        let own = ctx
            .chat
            .as_ref()
            .is_some_and(|turn| turn.channel == channel && turn.chat == chat);
        let by = SentBy {
            agent: &ctx.agent,
            session: &ctx.session,
            turn: ctx.chat.as_ref().and_then(|turn| turn.turn.as_ref()),
        };
        let to = SendTo {
            channel: &channel,
            chat: &chat,
            own,
            answering: None,
        };
        let sent = tokio::select! {
            sent = self.outbox.send(by, to, Outgoing::Text(args.text)) => sent?,
            () = ctx.cancel.cancelled() => return Err(ToolError::Cancelled),
        };
        Ok(receipt(&sent, &format!("{channel} chat {chat}")).into())
    }
}

/// What a tool tells the model of a delivery to `place`: sent (the platform's message id),
/// or only handed over (a cluster's gateway did not confirm it in time).
pub(crate) fn receipt(sent: &Sent, place: &str) -> String {
    match (&sent.id, sent.unconfirmed) {
        (_, true) => format!(
            "handed to the gateway for {place}, but it did not confirm the delivery in time: \
             it is stored and will go out once that gateway can send it; do not send it again"
        ),
        (Some(id), false) => format!("sent to {place} (message {id})"),
        (None, false) => format!("sent to {place}"),
    }
}
