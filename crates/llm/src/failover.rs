//! [`Failover`]: a chain of providers tried in order. A call goes to the first provider
//! that is not cooling down; when it fails in a way another provider may not (unreachable,
//! overloaded, too slow — after that provider's own retries), the call moves on to the
//! next. A provider whose calls failed [`COOL_AFTER`] times in a row is skipped for the
//! cooldown, so a dead primary does not cost every message its retries; once the cooldown
//! is over it is tried again first. Which provider answered is logged and counted.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use tokio::time::Instant;

use crate::error::LlmError;
use crate::provider::{ChatRequest, ChatResponse, LlmProvider, StreamEvent, StreamSink};

/// Consecutive failed calls after which a provider cools down.
pub const COOL_AFTER: u32 = 2;

/// One provider of the chain and what the chain knows of it.
struct Entry {
    provider: Arc<dyn LlmProvider>,
    /// `openai gpt-4o-mini`, for logs, status lines and counts.
    label: String,
    /// Consecutive failed calls, and until when it is skipped.
    health: Mutex<(u32, Option<Instant>)>,
    answered: AtomicU64,
}

impl Entry {
    fn cooling(&self, now: Instant) -> bool {
        let health = self.health.lock().unwrap_or_else(PoisonError::into_inner);
        health.1.is_some_and(|until| now < until)
    }

    fn succeeded(&self) {
        *self.health.lock().unwrap_or_else(PoisonError::into_inner) = (0, None);
        self.answered.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts a failure; returns whether the provider now cools down.
    fn failed(&self, cooldown: Duration) -> bool {
        let mut health = self.health.lock().unwrap_or_else(PoisonError::into_inner);
        health.0 += 1;
        if health.0 >= COOL_AFTER {
            health.0 = 0;
            health.1 = Some(Instant::now() + cooldown);
            return true;
        }
        false
    }
}

/// Providers tried in order; see the module doc.
pub struct Failover {
    entries: Vec<Entry>,
    cooldown: Duration,
}

impl Failover {
    /// A chain: `primary` first, then `fallbacks` in order. Each is usually a
    /// [`Retrying`](crate::Retrying) around a client. A provider that failed
    /// [`COOL_AFTER`] calls in a row is skipped for `cooldown`.
    pub fn new(
        primary: Arc<dyn LlmProvider>,
        fallbacks: Vec<Arc<dyn LlmProvider>>,
        cooldown: Duration,
    ) -> Self {
        let entries = std::iter::once(primary)
            .chain(fallbacks)
            .map(|provider| Entry {
                label: format!("{} {}", provider.name(), provider.model()),
                provider,
                health: Mutex::new((0, None)),
                answered: AtomicU64::new(0),
            })
            .collect();
        Self { entries, cooldown }
    }

    /// How many calls each provider answered, in chain order.
    pub fn answered(&self) -> Vec<(String, u64)> {
        self.entries
            .iter()
            .map(|entry| (entry.label.clone(), entry.answered.load(Ordering::Relaxed)))
            .collect()
    }
}

#[async_trait]
impl LlmProvider for Failover {
    fn name(&self) -> &str {
        self.entries[0].provider.name()
    }

    fn model(&self) -> &str {
        self.entries[0].provider.model()
    }

    async fn chat(
        &self,
        request: &ChatRequest,
        events: &StreamSink<'_>,
    ) -> Result<ChatResponse, LlmError> {
        let now = Instant::now();
        let mut order: Vec<&Entry> = self.entries.iter().filter(|e| !e.cooling(now)).collect();
        if order.is_empty() {
            // All cool down: better to try them than to refuse outright.
            order = self.entries.iter().collect();
        }
        let mut errors = Vec::new();
        for (position, entry) in order.iter().enumerate() {
            let streamed = AtomicBool::new(false);
            let observe = |event: StreamEvent| {
                if matches!(event, StreamEvent::Text(_)) {
                    streamed.store(true, Ordering::Relaxed);
                }
                events(event);
            };
            let result = entry.provider.chat(request, &observe).await;
            match result.map_err(|err| named(err, &entry.label)) {
                Ok(response) => {
                    entry.succeeded();
                    if !std::ptr::eq(*entry, &self.entries[0]) {
                        tracing::info!(provider = %entry.label, "a fallback model answered");
                    }
                    return Ok(response);
                }
                Err(err) if err.fails_over() => {
                    if entry.failed(self.cooldown) {
                        tracing::warn!(provider = %entry.label, cooldown_s = self.cooldown.as_secs(),
                            "model keeps failing; skipped while it cools down");
                    }
                    tracing::warn!(provider = %entry.label, error = %err.detail(), "model failed");
                    if let Some(next) = order.get(position + 1) {
                        if streamed.load(Ordering::Relaxed) {
                            events(StreamEvent::Reset);
                        }
                        events(StreamEvent::Status(format!(
                            "{} did not answer ({}); asking {} instead.",
                            entry.label,
                            err.root().summary(),
                            next.label
                        )));
                    }
                    errors.push(err);
                }
                Err(err) => return Err(err),
            }
        }
        Err(match errors.len() {
            1 => errors.remove(0),
            _ => LlmError::AllFailed(errors),
        })
    }
}

/// The error under its provider's name (a [`Retrying`](crate::Retrying) names it already).
fn named(err: LlmError, label: &str) -> LlmError {
    match err {
        LlmError::Provider { .. } => err,
        other => LlmError::Provider {
            provider: label.to_owned(),
            error: Box::new(other),
        },
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicUsize;

    use super::*;

    /// A provider that fails with `error` while `failing` is set, counting calls.
    struct Flaky {
        name: &'static str,
        failing: AtomicBool,
        transient: bool,
        calls: AtomicUsize,
    }

    impl Flaky {
        fn new(name: &'static str, failing: bool, transient: bool) -> Arc<Self> {
            Arc::new(Self {
                name,
                failing: AtomicBool::new(failing),
                transient,
                calls: AtomicUsize::new(0),
            })
        }
    }

    #[async_trait]
    impl LlmProvider for Flaky {
        fn name(&self) -> &str {
            self.name
        }
        fn model(&self) -> &str {
            "m"
        }
        async fn chat(
            &self,
            _: &ChatRequest,
            events: &StreamSink<'_>,
        ) -> Result<ChatResponse, LlmError> {
            self.calls.fetch_add(1, Ordering::Relaxed);
            if !self.failing.load(Ordering::Relaxed) {
                return Ok(ChatResponse {
                    content: self.name.into(),
                    ..ChatResponse::default()
                });
            }
            events(StreamEvent::Text("half an answer".into()));
            Err(if self.transient {
                LlmError::Status {
                    status: 503,
                    body: String::new(),
                    retry_after: None,
                }
            } else {
                LlmError::Decode("nonsense".into())
            })
        }
    }

    fn chain(primary: &Arc<Flaky>, fallback: &Arc<Flaky>) -> Failover {
        Failover::new(
            primary.clone(),
            vec![fallback.clone()],
            Duration::from_secs(60),
        )
    }

    async fn call(chain: &Failover) -> (Result<ChatResponse, LlmError>, Vec<StreamEvent>) {
        let seen = Mutex::new(Vec::new());
        let result = chain
            .chat(&ChatRequest::default(), &|event| {
                seen.lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .push(event)
            })
            .await;
        (result, seen.into_inner().unwrap_or_default())
    }

    #[tokio::test(start_paused = true)]
    async fn a_failing_primary_hands_the_call_on_then_cools_down_then_is_tried_again() {
        let primary = Flaky::new("primary", true, true);
        let fallback = Flaky::new("fallback", false, true);
        let chain = chain(&primary, &fallback);

        let (result, events) = call(&chain).await;
        assert_eq!(result.expect("answered").content, "fallback");
        assert!(
            events.contains(&StreamEvent::Reset),
            "the half answer is void"
        );
        assert!(
            events
                .iter()
                .any(|e| matches!(e, StreamEvent::Status(s) if s.contains("asking fallback m"))),
            "{events:?}"
        );
        // A second failure in a row: the primary cools down and is not even tried.
        call(&chain).await.0.expect("answered");
        assert_eq!(primary.calls.load(Ordering::Relaxed), 2);
        call(&chain).await.0.expect("answered");
        assert_eq!(
            primary.calls.load(Ordering::Relaxed),
            2,
            "skipped while cooling"
        );

        primary.failing.store(false, Ordering::Relaxed);
        tokio::time::advance(Duration::from_secs(61)).await;
        assert_eq!(call(&chain).await.0.expect("answered").content, "primary");
        assert_eq!(
            chain.answered(),
            [("primary m".to_owned(), 1), ("fallback m".to_owned(), 3)]
        );
    }

    #[tokio::test(start_paused = true)]
    async fn an_error_about_the_request_is_not_handed_on() {
        let primary = Flaky::new("primary", true, false);
        let fallback = Flaky::new("fallback", false, true);
        let chain = chain(&primary, &fallback);
        let err = call(&chain).await.0.expect_err("fails");
        assert!(matches!(err.root(), LlmError::Decode(_)), "{err}");
        assert!(err.to_string().starts_with("primary m: "), "{err}");
        assert_eq!(fallback.calls.load(Ordering::Relaxed), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn when_all_fail_every_error_is_named_and_cooling_ones_are_still_tried() {
        let primary = Flaky::new("primary", true, true);
        let fallback = Flaky::new("fallback", true, true);
        let chain = chain(&primary, &fallback);
        for _ in 0..3 {
            let err = call(&chain).await.0.expect_err("all down");
            assert!(
                matches!(&err, LlmError::AllFailed(errors) if errors.len() == 2),
                "{err}"
            );
            assert!(
                err.to_string().starts_with("every configured model failed"),
                "{err}"
            );
        }
        assert_eq!(primary.calls.load(Ordering::Relaxed), 3);
    }
}
