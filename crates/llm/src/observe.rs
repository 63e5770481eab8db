//! [`Observed`]: a provider whose every attempt's outcome is told to an [`Observer`] — the
//! daemon's health (is this model answering?) and its error counters. It wraps a plain
//! client, inside [`Retrying`](crate::Retrying), so each attempt counts: an unreachable
//! server shows after the first message's retries, not after the first few messages.

use std::sync::Arc;

use async_trait::async_trait;

use crate::error::LlmError;
use crate::provider::{ChatRequest, ChatResponse, LlmProvider, StreamSink};

/// Who is told how each attempt went.
pub trait Observer: Send + Sync {
    /// An attempt of `provider`'s (`openai`, `anthropic`) `model` ended: `Ok` when it
    /// answered, else its error.
    fn outcome(&self, provider: &str, model: &str, outcome: Result<(), &LlmError>);
}

/// A provider whose attempts are observed.
pub struct Observed {
    inner: Arc<dyn LlmProvider>,
    observer: Arc<dyn Observer>,
}

impl Observed {
    /// Observes `inner`.
    pub fn new(inner: Arc<dyn LlmProvider>, observer: Arc<dyn Observer>) -> Self {
        Self { inner, observer }
    }
}

#[async_trait]
impl LlmProvider for Observed {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn model(&self) -> &str {
        self.inner.model()
    }

    async fn chat(
        &self,
        request: &ChatRequest,
        events: &StreamSink<'_>,
    ) -> Result<ChatResponse, LlmError> {
        let result = self.inner.chat(request, events).await;
        self.observer.outcome(
            self.inner.name(),
            self.inner.model(),
            result.as_ref().map(|_| ()),
        );
        result
    }
}
