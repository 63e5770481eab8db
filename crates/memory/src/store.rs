//! [`IndexedStore`]: a session store that tells the memory index what it wrote.

use std::sync::Arc;

use switchboard_core::{AgentName, ChatMessage, SessionKey};
use switchboard_sessions::{
    Batch, Loaded, Revision, SessionInfo, SessionStore, Snapshot, StoreError, StoreHealth,
};

use crate::MemoryIndex;

/// An agent's session store, whose every write that lands is word to the index (which reads
/// the file itself: what it indexes is always what is on disk).
pub struct IndexedStore {
    inner: Arc<dyn SessionStore>,
    agent: AgentName,
    index: MemoryIndex,
}

impl std::fmt::Debug for IndexedStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IndexedStore")
            .field("agent", &self.agent)
            .finish_non_exhaustive()
    }
}

impl IndexedStore {
    /// `inner`, the store of `agent`, telling `index`.
    pub fn new(inner: Arc<dyn SessionStore>, agent: AgentName, index: MemoryIndex) -> Self {
        Self {
            inner,
            agent,
            index,
        }
    }
}

#[async_trait::async_trait]
impl SessionStore for IndexedStore {
    async fn load(&self, key: &SessionKey) -> Result<Loaded, StoreError> {
        self.inner.load(key).await
    }

    async fn append(
        &self,
        key: &SessionKey,
        revision: Revision,
        batch: &Batch<'_>,
    ) -> Result<Revision, StoreError> {
        let written = self.inner.append(key, revision, batch).await?;
        if !batch.messages.is_empty() {
            self.index.touched(&self.agent, key);
        }
        Ok(written)
    }

    async fn compact(
        &self,
        key: &SessionKey,
        revision: Revision,
        snapshot: &Snapshot<'_>,
    ) -> Result<Revision, StoreError> {
        let written = self.inner.compact(key, revision, snapshot).await?;
        self.index.touched(&self.agent, key);
        Ok(written)
    }

    fn release(&self, key: &SessionKey) {
        self.inner.release(key);
    }

    async fn transcript(&self, key: &SessionKey) -> Result<Vec<ChatMessage>, StoreError> {
        self.inner.transcript(key).await
    }

    async fn has_history(&self, key: &SessionKey) -> bool {
        self.inner.has_history(key).await
    }

    async fn archive(&self, key: &SessionKey, revision: Revision) -> Result<Revision, StoreError> {
        // What was written last is read before its conversation is marked closed.
        self.index.touched(&self.agent, key);
        let written = self.inner.archive(key, revision).await?;
        self.index.archived(&self.agent, key);
        Ok(written)
    }

    async fn list(&self) -> Result<Vec<SessionInfo>, StoreError> {
        self.inner.list().await
    }

    fn health(&self) -> StoreHealth {
        self.inner.health()
    }
}
