//! [`HubOutbox`]: where the `message` tool sends — the daemon's channels, through the hub's
//! lanes — and who it may send to.

use std::collections::BTreeMap;
use std::sync::Arc;

use async_trait::async_trait;
use switchboard_core::{
    AgentName, Bus, ChannelName, ChatId, CoreError, OutboundKind, OutboundMessage, SessionKey,
};
use switchboard_sessions::SessionStore;
use switchboard_tools::ToolError;
use switchboard_tools::builtin::Outbox;

/// Sends the agents' own messages. A chat may be written to only when its channel runs,
/// the channel still allows its people ([`switchboard_core::Channel::may_notify`]), and it
/// has a conversation with the agent that sends on record — so an agent can reach the
/// people who talk to it, and no one else (not another agent's people).
pub struct HubOutbox {
    hub: Arc<dyn Bus>,
    /// Each agent's sessions, by agent.
    stores: BTreeMap<AgentName, Arc<dyn SessionStore>>,
}

impl HubOutbox {
    /// An outbox over `hub`, judging an agent's chats by what its store holds.
    pub fn new(hub: Arc<dyn Bus>, stores: BTreeMap<AgentName, Arc<dyn SessionStore>>) -> Self {
        Self { hub, stores }
    }
}

impl std::fmt::Debug for HubOutbox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("HubOutbox")
    }
}

#[async_trait]
impl Outbox for HubOutbox {
    async fn send(
        &self,
        from: &AgentName,
        channel: &str,
        chat: &str,
        text: &str,
    ) -> Result<(), ToolError> {
        let channel_name = ChannelName::from(channel);
        let chat_id = ChatId::from(chat);
        let allowed = match self.hub.may_notify(&channel_name, &chat_id).await {
            Err(CoreError::UnknownChannel(_)) => {
                return Err(ToolError::Denied(format!("no channel `{channel}` runs")));
            }
            Err(err) => return Err(ToolError::Failed(err.to_string())),
            Ok(allowed) => allowed,
        };
        let key = SessionKey::of(&channel_name, &chat_id);
        let Some(store) = self.stores.get(from).cloned() else {
            return Err(ToolError::Failed(format!("no agent is called `{from}`")));
        };
        let known = store.has_history(&key).await;
        if !known {
            return Err(ToolError::Denied(format!(
                "{channel} chat {chat} has never talked to the agent; it can only be written to \
                 once it has"
            )));
        }
        if !allowed {
            return Err(ToolError::Denied(format!(
                "the people of {channel} chat {chat} are not allowed to talk to the agent"
            )));
        }
        let message = OutboundMessage {
            channel: channel_name,
            chat_id,
            reply_to: None,
            kind: OutboundKind::Post(text.to_owned()),
            cursor: None,
            turn: None,
        };
        self.hub
            .deliver_outbound(message)
            .await
            .map(drop)
            .map_err(|err| ToolError::Failed(format!("it could not be delivered: {err}")))
    }
}
