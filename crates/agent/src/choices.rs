//! [`ChoiceStore`]: what a chat has chosen for itself (its model, with `/model`), kept across
//! restarts: [`StateChoices`], a document per chat in the daemon's state store (a file in
//! one process; on a cluster the bucket, so the choice holds on whichever worker answers
//! the chat next), and [`MemoryChoices`] for an agent that keeps nothing.
//! [`migrate_choices`] moves the `choices.json` files of earlier versions into the store.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Mutex, PoisonError};

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use switchboard_core::{AgentName, SessionKey, StateStore};

/// A chat's choices. All default to the agent's.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Choices {
    /// The model its turns use first (`/model`); `None`: the agent's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
}

impl Choices {
    /// Whether nothing is chosen.
    pub fn is_empty(&self) -> bool {
        self.model.is_none()
    }
}

/// A choice store that could not do what it was asked.
#[derive(Debug, thiserror::Error)]
#[error("the chats' choices ({place}): {message}")]
pub struct ChoiceStoreError {
    /// Which file or service.
    pub place: String,
    /// What went wrong.
    pub message: String,
}

/// Where chats' choices are kept.
#[async_trait]
pub trait ChoiceStore: Send + Sync {
    /// What `session` has chosen (nothing, when it never chose).
    async fn get(&self, session: &SessionKey) -> Choices;
    /// Replaces what `session` has chosen (an empty choice forgets it).
    async fn set(&self, session: &SessionKey, choices: Choices) -> Result<(), ChoiceStoreError>;
}

/// Choices kept in memory only (the terminal, tests).
#[derive(Default)]
pub struct MemoryChoices(Mutex<BTreeMap<SessionKey, Choices>>);

#[async_trait]
impl ChoiceStore for MemoryChoices {
    async fn get(&self, session: &SessionKey) -> Choices {
        let all = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        all.get(session).cloned().unwrap_or_default()
    }

    async fn set(&self, session: &SessionKey, choices: Choices) -> Result<(), ChoiceStoreError> {
        let mut all = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        if choices.is_empty() {
            all.remove(session);
        } else {
            all.insert(session.clone(), choices);
        }
        Ok(())
    }
}

/// One agent's chats' choices as documents of a state store
/// (`agents/<agent>/choices/<session>`), read at each turn (in one process, a small file
/// read in place; none, for a chat that never chose).
pub struct StateChoices {
    state: std::sync::Arc<dyn StateStore>,
    agent: String,
}

impl StateChoices {
    /// The choices of `agent`'s chats in `state`.
    pub fn new(state: std::sync::Arc<dyn StateStore>, agent: &str) -> Self {
        Self {
            state,
            agent: switchboard_core::state::segment(agent),
        }
    }

    fn key(&self, session: &SessionKey) -> String {
        format!(
            "agents/{}/choices/{}",
            self.agent,
            switchboard_core::state::segment(session.as_str())
        )
    }
}

#[async_trait]
impl ChoiceStore for StateChoices {
    async fn get(&self, session: &SessionKey) -> Choices {
        match self.state.get(&self.key(session)).await {
            Ok(Some(stored)) => serde_json::from_slice(&stored.bytes).unwrap_or_else(|err| {
                tracing::warn!(%session, error = %err,
                    "a chat's choices could not be read; it uses its agent's model");
                Choices::default()
            }),
            Ok(None) => Choices::default(),
            Err(err) => {
                tracing::warn!(%session, error = %err,
                    "a chat's choices could not be read; it uses its agent's model");
                Choices::default()
            }
        }
    }

    async fn set(&self, session: &SessionKey, choices: Choices) -> Result<(), ChoiceStoreError> {
        let fail = |err: &dyn std::fmt::Display| ChoiceStoreError {
            place: self.state.place(),
            message: err.to_string(),
        };
        let key = self.key(session);
        if choices.is_empty() {
            let mut forget = |_: Option<&[u8]>| switchboard_core::Change::Delete;
            return self
                .state
                .update(&key, &mut forget)
                .await
                .map_err(|err| fail(&err));
        }
        let bytes = serde_json::to_vec(&choices).map_err(|err| fail(&err))?;
        self.state.put(&key, bytes).await.map_err(|err| fail(&err))
    }
}

/// Moves the `choices.json` files that earlier builds kept in each agent's state
/// directory (`state_dir/choices.json` for the default agent, `state_dir/agents/NAME/` for
/// the others) into `state`, renaming each `choices.json.migrated`; the number of chats
/// moved. Each choice is written whole, so a start killed half-way does it again with the
/// same result.
pub async fn migrate_choices(
    state_dir: &Path,
    state: &std::sync::Arc<dyn StateStore>,
) -> Result<usize, ChoiceStoreError> {
    let mut files = vec![(AgentName::default(), state_dir.join("choices.json"))];
    if let Ok(agents) = std::fs::read_dir(state_dir.join("agents")) {
        for agent in agents.filter_map(Result::ok) {
            let name = agent.file_name().to_string_lossy().into_owned();
            files.push((
                AgentName::from(name.as_str()),
                agent.path().join("choices.json"),
            ));
        }
    }
    let mut moved = 0;
    for (agent, path) in files {
        let fail = |message: String| ChoiceStoreError {
            place: path.display().to_string(),
            message,
        };
        let bytes = match std::fs::read(&path) {
            Ok(bytes) => bytes,
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => continue,
            Err(err) => return Err(fail(err.to_string())),
        };
        let chats: BTreeMap<SessionKey, Choices> =
            serde_json::from_slice(&bytes).unwrap_or_else(|err| {
                tracing::warn!(path = %path.display(), error = %err,
                    "the chats' choices could not be read; they are not kept");
                BTreeMap::new()
            });
        let store = StateChoices::new(state.clone(), agent.as_str());
        for (session, choices) in &chats {
            store.set(session, choices.clone()).await?;
        }
        moved += chats.len();
        std::fs::rename(&path, path.with_extension("json.migrated"))
            .map_err(|err| fail(err.to_string()))?;
        tracing::info!(path = %path.display(), chats = chats.len(),
            "the chats' choices moved into the state store");
    }
    Ok(moved)
}

#[cfg(test)]
#[path = "choices_tests.rs"]
mod tests;
