//! [`KeptSession`]: the gateway session kept in the state store for whoever connects next —
//! this daemon started again after a crash, or the gateway of a cluster that takes the
//! connection over — so it resumes the session, and Discord replays what was said meanwhile.
//! Read once per process (a session this process ended or Discord refused is not tried
//! again); forgotten when a normal close ended it.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use switchboard_core::{Change, StateStore};

/// Where the session's resume state is kept (in one process, `<state_dir>/discord.session`).
const SESSION_KEY: &str = "discord.session";

/// Where a session can be resumed.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct Resume {
    pub(crate) session: String,
    pub(crate) url: String,
    pub(crate) seq: u64,
}

/// The session as kept in a state store.
pub(crate) struct KeptSession {
    store: Arc<dyn StateStore>,
    /// Whether it was read already.
    read: AtomicBool,
}

impl KeptSession {
    pub(crate) fn new(store: Arc<dyn StateStore>) -> Self {
        Self {
            store,
            read: AtomicBool::new(false),
        }
    }

    /// The session the last connection kept — the first time only.
    pub(crate) async fn take(&self) -> Option<Resume> {
        if self.read.swap(true, Ordering::Relaxed) {
            return None;
        }
        match self.store.get(SESSION_KEY).await {
            Ok(Some(stored)) => serde_json::from_slice(&stored.bytes).ok(),
            Ok(None) => None,
            Err(err) => {
                tracing::warn!(error = %err, "Discord: the kept session could not be read; starting a new one");
                None
            }
        }
    }

    /// Keeps `resume`, resumable from `seq` (when that is below its own).
    pub(crate) async fn keep(&self, mut resume: Resume, seq: u64) {
        resume.seq = resume.seq.min(seq);
        let Ok(bytes) = serde_json::to_vec(&resume) else {
            return;
        };
        if let Err(err) = self.store.put(SESSION_KEY, bytes).await {
            tracing::warn!(error = %err, "Discord: the session could not be kept (the next connection starts a new one)");
        }
    }

    /// Forgets it (it was closed: no one can resume it).
    pub(crate) async fn forget(&self) {
        let mut forget = |_: Option<&[u8]>| Change::Delete;
        let _ = tokio::time::timeout(
            Duration::from_secs(2),
            self.store.update(SESSION_KEY, &mut forget),
        )
        .await;
    }
}
