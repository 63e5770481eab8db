//! A chat's conversation so far, read from the session store of the agent bound to it
//! without touching the session (its worker may be appending): what channels that show it
//! again (the web page) read through [`Transcripts`].

use switchboard_agent::Agents;
use switchboard_core::{
    ChannelName, ChatId, ChatMessage, MemoryHit, MemoryQuery, MemoryScope, SessionKey, Transcripts,
};

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

    /// Every agent's memory (those that have one), the hits in `channel`'s chats kept.
    async fn search(
        &self,
        channel: &ChannelName,
        query: &str,
        limit: usize,
    ) -> Result<Vec<(ChatId, MemoryHit)>, String> {
        let prefix = format!("{channel}_");
        let mut found = Vec::new();
        let mut searched = false;
        for agent in self.0.iter() {
            let Some(memory) = agent.memory() else {
                continue;
            };
            searched = true;
            let mut search = MemoryQuery::new(query, MemoryScope::Chats);
            // Room for the other channels' hits, which are left out.
            search.limit = MemoryQuery::MAX_LIMIT;
            let hits = memory
                .memory
                .search(agent.name(), search)
                .await
                .map_err(|err| err.to_string())?;
            found.extend(hits.into_iter().filter_map(|hit| {
                let chat = hit.place.strip_prefix(&prefix)?.to_owned();
                Some((ChatId::from(chat), hit))
            }));
        }
        if !searched {
            return Err("Search is off: the daemon's [memory] is not enabled.".into());
        }
        found.truncate(limit);
        Ok(found)
    }
}
