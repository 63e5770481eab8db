//! [`Holds`]: the chats a platform asked to slow down. A 429 on any call to a chat holds the
//! whole chat for the platform's `retry_after`: every later call to it waits (or, if it is best
//! effort, is skipped) until then, while other chats go on. Platforms escalate the waits of
//! bots that ignore them.

use std::time::Duration;

use dashmap::DashMap;
use switchboard_core::{ChatId, CoreError};
use tokio::time::Instant;

/// How long a chat is held after a rate limit that states no wait.
const UNSTATED_WAIT: Duration = Duration::from_secs(5);

/// The chats a platform asked to slow down, each until when. Every call to a held chat
/// waits (or, if it is best effort, is skipped) until then. An entry lives until the next
/// call to its chat finds it past, or until a later hold prunes it.
#[derive(Default)]
pub(crate) struct Holds(DashMap<ChatId, Instant>);

impl Holds {
    /// Holds over this many chats make the next hold prune the ones that are past.
    const PRUNE_AT: usize = 64;

    /// When `chat`'s hold ends, if it is held.
    pub(crate) fn until(&self, chat: &ChatId) -> Option<Instant> {
        let until = *self.0.get(chat)?;
        if until > Instant::now() {
            return Some(until);
        }
        self.0.remove_if(chat, |_, until| *until <= Instant::now());
        None
    }

    /// Waits until `chat` is not held.
    pub(crate) async fn wait(&self, chat: &ChatId) {
        while let Some(until) = self.until(chat) {
            tokio::time::sleep_until(until).await;
        }
    }

    /// Holds `chat` for what `err` asks, if it is a rate limit.
    pub(crate) fn note(&self, chat: &ChatId, err: &CoreError) {
        let CoreError::RateLimited { retry_after } = err else {
            return;
        };
        let wait = retry_after.unwrap_or(UNSTATED_WAIT);
        tracing::info!(%chat, wait_ms = wait.as_millis() as u64,
            "the platform is rate limiting this chat; every call to it waits");
        if self.0.len() >= Self::PRUNE_AT {
            let now = Instant::now();
            self.0.retain(|_, until| *until > now);
        }
        let until = Instant::now() + wait;
        self.0
            .entry(chat.clone())
            .and_modify(|held| *held = (*held).max(until))
            .or_insert(until);
    }

    /// Runs `call` to `chat` once its hold is over, and holds the chat if it is rate limited.
    pub(crate) async fn call<T>(
        &self,
        chat: &ChatId,
        call: impl Future<Output = Result<T, CoreError>>,
    ) -> Result<T, CoreError> {
        self.wait(chat).await;
        let result = call.await;
        if let Err(err) = &result {
            self.note(chat, err);
        }
        result
    }
}
