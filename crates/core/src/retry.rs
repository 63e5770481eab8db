//! [`RetryingChannel`]: a channel whose sends are retried when the platform rate limits
//! (after the wait it asks for) or is briefly unavailable (with backoff). It wraps any
//! channel, as teloxide's adaptors wrap a bot, so no adapter writes its own retry loop.
//!
//! A retried send delivers the same outbound message again: an adapter whose one message
//! becomes several platform calls (a long reply split in parts) must resume where it
//! stopped rather than repeat what went out.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use tokio::time::Instant;

use crate::channel::{Channel, ChannelContext, Sent};
use crate::error::CoreError;
use crate::ids::{ChannelName, ChatId};
use crate::message::OutboundMessage;

/// How sends are retried.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChannelRetry {
    /// Attempts after the first.
    pub max_retries: u32,
    /// The first wait after an outage, doubled per retry (a rate limit's own wait wins).
    pub base_delay: Duration,
    /// The longest wait between attempts when the platform names none.
    pub max_delay: Duration,
    /// A message is given up on once retrying it would take longer than this.
    pub give_up_after: Duration,
}

impl Default for ChannelRetry {
    fn default() -> Self {
        Self {
            max_retries: 8,
            base_delay: Duration::from_millis(500),
            max_delay: Duration::from_secs(30),
            give_up_after: Duration::from_secs(600),
        }
    }
}

/// Retries another channel's transient send failures.
pub struct RetryingChannel {
    inner: Arc<dyn Channel>,
    retry: ChannelRetry,
}

impl RetryingChannel {
    /// Wraps `inner`.
    pub fn new(inner: Arc<dyn Channel>, retry: ChannelRetry) -> Self {
        Self { inner, retry }
    }
}

#[async_trait]
impl Channel for RetryingChannel {
    fn name(&self) -> ChannelName {
        self.inner.name()
    }

    async fn run(&self, ctx: ChannelContext) -> Result<(), CoreError> {
        self.inner.run(ctx).await
    }

    async fn may_notify(&self, chat: &ChatId) -> bool {
        self.inner.may_notify(chat).await
    }

    fn has_person(&self) -> bool {
        self.inner.has_person()
    }

    fn scope(&self) -> crate::ChannelScope {
        self.inner.scope()
    }

    async fn send(&self, message: OutboundMessage) -> Result<Sent, CoreError> {
        let started = Instant::now();
        let mut retry = 0u32;
        loop {
            let err = match self.inner.send(message.clone()).await {
                Ok(sent) => return Ok(sent),
                Err(err) if err.is_transient() && retry < self.retry.max_retries => err,
                Err(err) => return Err(err),
            };
            let wait = match &err {
                CoreError::RateLimited {
                    retry_after: Some(wait),
                } => *wait,
                _ => self
                    .retry
                    .base_delay
                    .saturating_mul(2u32.saturating_pow(retry))
                    .min(self.retry.max_delay),
            };
            if started.elapsed().saturating_add(wait) > self.retry.give_up_after {
                return Err(err);
            }
            tracing::info!(channel = %message.channel, chat = %message.chat_id, error = %err,
                wait_ms = wait.as_millis() as u64, retry = retry + 1, "retrying a delivery");
            tokio::time::sleep(wait).await;
            retry += 1;
        }
    }
}
