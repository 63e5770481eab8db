//! A chat's conversation so far, read from the session store of the agent bound to it
//! without touching the session (its worker may be appending): what channels that show it
//! again (the web page) read through [`Transcripts`].

use switchboard_agent::Agents;
use switchboard_core::{ChannelName, ChatId, ChatMessage, SessionKey, Transcripts};

/// Transcripts from the agents' session stores.
pub(crate) struct SessionHistory(pub(crate) Agents);

#[async_trait::async_trait]
impl Transcripts for SessionHistory {
    async fn transcript(
        &self,
        channel: &ChannelName,
        chat: &ChatId,
    ) -> Result<Vec<ChatMessage>, Box<dyn std::error::Error + Send + Sync>> {
        let key = SessionKey::of(channel, chat);
        let agent = self.0.for_chat(channel, chat, None);
        Ok(agent.store().transcript(&key).await?)
    }
}
