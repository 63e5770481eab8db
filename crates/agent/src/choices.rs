//! [`ChoiceStore`]: what a chat has chosen for itself (its model, with `/model`), kept across
//! restarts; [`FileChoices`], the store of one agent's chats in one file of its state
//! directory; [`StateChoices`], a document per chat in a state store (a cluster's, so the
//! choice holds on whichever worker answers the chat next).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use switchboard_core::SessionKey;
use switchboard_sessions::durable;

/// The most chats whose choices are kept; a new chat's choice beyond is refused.
pub const MAX_CHATS: usize = 100_000;

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

/// One agent's chats' choices in `choices.json` of its state directory: read once, kept in
/// memory, and written whole (a temporary file, fsynced, renamed over it) at each change —
/// choices change when a person types `/model`, rarely.
pub struct FileChoices {
    path: PathBuf,
    /// The file's content; `None` until first read. The lock is held across the write, so
    /// two changes never race to the file.
    all: Mutex<Option<BTreeMap<SessionKey, Choices>>>,
}

impl FileChoices {
    /// The store of the state directory `dir` (the file is made at the first choice).
    pub fn new(dir: &Path) -> Self {
        Self {
            path: dir.join("choices.json"),
            all: Mutex::new(None),
        }
    }

    fn error(&self, message: impl std::fmt::Display) -> ChoiceStoreError {
        ChoiceStoreError {
            place: self.path.display().to_string(),
            message: message.to_string(),
        }
    }

    /// The file's choices; an unreadable file is logged and read as none (a chat then uses
    /// the agent's model, and the next choice writes a good file).
    fn read(&self) -> BTreeMap<SessionKey, Choices> {
        match std::fs::read(&self.path) {
            Ok(bytes) => serde_json::from_slice(&bytes).unwrap_or_else(|err| {
                tracing::warn!(path = %self.path.display(), error = %err,
                    "the chats' choices could not be read; every chat uses its agent's model");
                BTreeMap::new()
            }),
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => BTreeMap::new(),
            Err(err) => {
                tracing::warn!(path = %self.path.display(), error = %err,
                    "the chats' choices could not be read; every chat uses its agent's model");
                BTreeMap::new()
            }
        }
    }

    fn with<T>(&self, f: impl FnOnce(&mut BTreeMap<SessionKey, Choices>) -> T) -> T {
        let mut all = self.all.lock().unwrap_or_else(PoisonError::into_inner);
        let all = all.get_or_insert_with(|| self.read());
        f(all)
    }
}

#[async_trait]
impl ChoiceStore for FileChoices {
    async fn get(&self, session: &SessionKey) -> Choices {
        // Read once (a few KiB at most); after that, memory.
        self.with(|all| all.get(session).cloned().unwrap_or_default())
    }

    async fn set(&self, session: &SessionKey, choices: Choices) -> Result<(), ChoiceStoreError> {
        self.with(|all| {
            let before = all.get(session).cloned();
            if !choices.is_empty() && before.is_none() && all.len() >= MAX_CHATS {
                return Err(self.error(format!("{MAX_CHATS} chats have choices already")));
            }
            match &choices {
                empty if empty.is_empty() => all.remove(session),
                chosen => all.insert(session.clone(), chosen.clone()),
            };
            let bytes = serde_json::to_vec_pretty(&*all).map_err(|err| self.error(err))?;
            if let Err(err) = durable::replace(&self.path, &bytes) {
                // Memory stays as the file is.
                match before {
                    Some(before) => all.insert(session.clone(), before),
                    None => all.remove(session),
                };
                return Err(self.error(err));
            }
            Ok(())
        })
    }
}

/// One agent's chats' choices as documents of a state store
/// (`agents/<agent>/choices/<session>`), read at each turn.
pub struct StateChoices {
    state: std::sync::Arc<dyn switchboard_core::StateStore>,
    agent: String,
}

impl StateChoices {
    /// The choices of `agent`'s chats in `state`.
    pub fn new(state: std::sync::Arc<dyn switchboard_core::StateStore>, agent: &str) -> Self {
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

#[cfg(test)]
mod tests {
    use super::*;

    fn model(name: &str) -> Choices {
        Choices {
            model: Some(name.into()),
        }
    }

    #[tokio::test]
    async fn a_choice_is_kept_across_a_restart_and_forgotten_when_emptied() {
        let dir = tempfile::tempdir().expect("tempdir");
        let key = SessionKey::from("telegram_1");
        let store = FileChoices::new(dir.path());
        assert_eq!(store.get(&key).await, Choices::default());
        store.set(&key, model("big")).await.expect("set");
        store
            .set(&SessionKey::from("telegram_2"), model("small"))
            .await
            .expect("set");
        let again = FileChoices::new(dir.path());
        assert_eq!(again.get(&key).await, model("big"));
        again.set(&key, Choices::default()).await.expect("forget");
        let third = FileChoices::new(dir.path());
        assert_eq!(third.get(&key).await, Choices::default());
        assert_eq!(
            third.get(&SessionKey::from("telegram_2")).await,
            model("small")
        );
    }

    #[tokio::test]
    async fn choices_in_a_state_store_are_seen_by_another_handle() {
        let dir = tempfile::tempdir().expect("tempdir");
        let state: std::sync::Arc<dyn switchboard_core::StateStore> =
            std::sync::Arc::new(switchboard_sessions::FileState::new(dir.path()));
        let key = SessionKey::from("telegram_1");
        let one = StateChoices::new(state.clone(), "default");
        let other = StateChoices::new(state.clone(), "default");
        let elsewhere = StateChoices::new(state, "helper");
        one.set(&key, model("big")).await.expect("set");
        assert_eq!(other.get(&key).await, model("big"));
        assert_eq!(elsewhere.get(&key).await, Choices::default(), "per agent");
        other.set(&key, Choices::default()).await.expect("forget");
        assert_eq!(one.get(&key).await, Choices::default());
    }

    #[tokio::test]
    async fn a_broken_file_reads_as_no_choices_and_a_failed_write_changes_nothing() {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(dir.path().join("choices.json"), "{not json").expect("write");
        let store = FileChoices::new(dir.path());
        let key = SessionKey::from("websocket_c");
        assert_eq!(store.get(&key).await, Choices::default());
        // The directory is gone: the write fails, memory stays as the file was.
        let gone = FileChoices::new(&dir.path().join("missing"));
        let err = gone
            .set(&key, model("big"))
            .await
            .expect_err("no directory");
        assert!(err.to_string().contains("choices.json"), "{err}");
        assert_eq!(gone.get(&key).await, Choices::default());
    }
}
