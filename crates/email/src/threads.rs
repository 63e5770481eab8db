//! [`Threads`]: what a reply in each chat needs ([`Thread`]), kept in the state store
//! (`email/thread/<chat>`) so a reply after a restart — or from the gateway that took the
//! channel over — still goes to the right person, in the right thread.

use std::sync::Arc;

use switchboard_adapter::Remembered;
use switchboard_core::StateStore;

use crate::convert::Thread;

/// Threads remembered in memory (the rest are read from the store).
const REMEMBERED: usize = 4096;

pub(crate) struct Threads {
    state: Arc<dyn StateStore>,
    memory: Remembered<String, Thread>,
}

impl Threads {
    pub(crate) fn new(state: Arc<dyn StateStore>) -> Self {
        Self {
            state,
            memory: Remembered::new(REMEMBERED),
        }
    }

    fn key(chat: &str) -> String {
        format!("email/thread/{}", switchboard_core::state::segment(chat))
    }

    /// Notes `thread` as `chat`'s (kept before its mail is taken in: a reply finds it).
    pub(crate) async fn note(&self, chat: &str, thread: Thread) {
        match serde_json::to_vec(&thread) {
            Ok(bytes) => {
                if let Err(err) = self.state.put(&Self::key(chat), bytes).await {
                    tracing::warn!(error = %err, "email: a thread could not be kept (a reply after a restart cannot find it)");
                }
            }
            Err(err) => tracing::warn!(error = %err, "email: a thread could not be written down"),
        }
        self.memory.note(chat.to_owned(), thread);
    }

    /// `chat`'s thread, if a mail of it was taken in.
    pub(crate) async fn get(&self, chat: &str) -> Option<Thread> {
        if let Some(thread) = self.memory.get(chat) {
            return Some(thread);
        }
        let stored = self.state.get(&Self::key(chat)).await.ok()??;
        let thread: Thread = serde_json::from_slice(&stored.bytes).ok()?;
        self.memory.note(chat.to_owned(), thread.clone());
        Some(thread)
    }
}
