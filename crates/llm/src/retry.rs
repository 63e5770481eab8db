//! The one retry layer: [`Retrying`] wraps any provider, retries its transient failures
//! with [`RetryPolicy`]'s backoff, bounds the whole call by a deadline, and keeps the
//! person informed through [`StreamEvent::Status`]: when the model is silent for a while,
//! and before each retry. A retry after text was streamed first sends
//! [`StreamEvent::Reset`], so the text is replaced rather than shown twice.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use tokio::time::Instant;

use crate::error::{LlmError, secs};
use crate::provider::{ChatRequest, ChatResponse, LlmProvider, StreamEvent, StreamSink};

/// Exponential backoff with jitter; a server's Retry-After wins when it gives one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Retries after the first attempt (0 = never retry).
    pub max_retries: u32,
    /// The wait before the first retry, doubled for each further one.
    pub base_delay: Duration,
    /// The longest wait between attempts (Retry-After included): a server asking for
    /// more gets its error passed on instead.
    pub max_delay: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            max_retries: 3,
            base_delay: Duration::from_millis(500),
            max_delay: Duration::from_secs(30),
        }
    }
}

impl RetryPolicy {
    /// The wait before retry number `retry` (0-based), or `None` when no retry is left or
    /// the server asked for a longer wait than `max_delay`.
    pub fn delay(&self, retry: u32, retry_after: Option<Duration>) -> Option<Duration> {
        if retry >= self.max_retries {
            return None;
        }
        if let Some(wait) = retry_after {
            return (wait <= self.max_delay).then_some(wait);
        }
        let exp = self
            .base_delay
            .saturating_mul(2u32.saturating_pow(retry))
            .min(self.max_delay);
        // Jitter: anywhere from half to all of the exponential delay, so clients that
        // failed together do not retry together.
        let half = exp / 2;
        let jitter = half.mul_f64(fastrand::f64());
        Some(half + jitter)
    }
}

/// A provider that retries another's transient failures within a deadline.
pub struct Retrying {
    inner: Arc<dyn LlmProvider>,
    policy: RetryPolicy,
    /// The longest a whole call may take: attempts, and the waits between them.
    deadline: Duration,
    /// Silence after which the person is told the model is slow (and again after each
    /// further stretch of it).
    slow_notice: Duration,
}

impl Retrying {
    /// Retries `inner` by `policy`; a whole call ends with [`LlmError::CallTimeout`] after
    /// `deadline`.
    pub fn new(inner: Arc<dyn LlmProvider>, policy: RetryPolicy, deadline: Duration) -> Self {
        Self {
            inner,
            policy,
            deadline,
            slow_notice: Duration::from_secs(15),
        }
    }

    /// Tells the person the model is slow after this much silence (default 15 s).
    pub fn with_slow_notice(mut self, after: Duration) -> Self {
        self.slow_notice = after;
        self
    }

    /// Runs one attempt until it ends or the deadline passes, sending a status whenever
    /// nothing arrived for `slow_notice`.
    async fn watch(
        &self,
        attempt: impl Future<Output = Result<ChatResponse, LlmError>>,
        deadline: Instant,
        started: Instant,
        activity: &Activity,
        events: &StreamSink<'_>,
        attempts: u32,
    ) -> Result<ChatResponse, LlmError> {
        let mut attempt = std::pin::pin!(tokio::time::timeout_at(deadline, attempt));
        loop {
            let quiet_until = later(activity.last(), self.slow_notice);
            tokio::select! {
                // The outcome wins a tie: no "still waiting" at the moment the call ends.
                biased;
                result = &mut attempt => {
                    return result.unwrap_or(Err(LlmError::CallTimeout {
                        after: self.deadline,
                        attempts,
                    }));
                }
                () = tokio::time::sleep_until(quiet_until) => {
                    if later(activity.last(), self.slow_notice) <= Instant::now() {
                        let waited = started.elapsed().as_secs();
                        events(StreamEvent::Status(format!(
                            "Still waiting for the model ({waited} s so far)."
                        )));
                        activity.touch(false);
                    }
                }
            }
        }
    }
}

/// What the wrapper observes of an attempt's events.
struct Activity {
    /// When something last arrived (or a status was sent), and whether text was streamed
    /// since the last reset. Held only to read or update.
    state: Mutex<(Instant, bool)>,
}

impl Activity {
    fn new() -> Self {
        Self {
            state: Mutex::new((Instant::now(), false)),
        }
    }

    fn touch(&self, text: bool) {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        state.0 = Instant::now();
        state.1 |= text;
    }

    fn last(&self) -> Instant {
        self.state.lock().unwrap_or_else(PoisonError::into_inner).0
    }

    /// Whether text was streamed since the last call; resets the flag.
    fn take_streamed(&self) -> bool {
        std::mem::take(&mut self.state.lock().unwrap_or_else(PoisonError::into_inner).1)
    }
}

#[async_trait]
impl LlmProvider for Retrying {
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
        self.call(request, events)
            .await
            .map_err(|error| LlmError::Provider {
                provider: format!("{} {}", self.inner.name(), self.inner.model()),
                error: Box::new(error),
            })
    }
}

impl Retrying {
    async fn call(
        &self,
        request: &ChatRequest,
        events: &StreamSink<'_>,
    ) -> Result<ChatResponse, LlmError> {
        let started = Instant::now();
        let deadline = later(started, self.deadline);
        let activity = Activity::new();
        let observe = |event: StreamEvent| {
            activity.touch(matches!(event, StreamEvent::Text(_)));
            events(event);
        };
        let mut attempts = 0u32;
        loop {
            attempts += 1;
            let attempt = self.inner.chat(request, &observe);
            let err = match self
                .watch(attempt, deadline, started, &activity, events, attempts)
                .await
            {
                Ok(response) => return Ok(response),
                Err(err) => err,
            };
            if !err.is_transient() {
                return Err(err);
            }
            let Some(wait) = self.policy.delay(attempts - 1, err.retry_after()) else {
                return Err(if attempts > 1 {
                    LlmError::Exhausted {
                        attempts,
                        last: Box::new(err),
                    }
                } else {
                    err
                });
            };
            if later(Instant::now(), wait) >= deadline {
                return Err(LlmError::CallTimeout {
                    after: self.deadline,
                    attempts,
                });
            }
            tracing::warn!(provider = self.inner.name(), model = self.inner.model(), attempt = attempts,
                wait_ms = wait.as_millis() as u64, error = %err.detail(), "retrying LLM call");
            if activity.take_streamed() {
                events(StreamEvent::Reset);
            }
            events(StreamEvent::Status(format!(
                "{}; trying again in {} (attempt {} of {}).",
                capitalize(&err.summary()),
                secs(round_up(wait)),
                attempts + 1,
                self.policy.max_retries + 1
            )));
            activity.touch(false);
            tokio::time::sleep(wait).await;
        }
    }
}

/// `at + wait`, or about a century from `at` when that overflows (`Duration::MAX` means
/// "never"; it must not panic).
fn later(at: Instant, wait: Duration) -> Instant {
    at.checked_add(wait)
        .unwrap_or_else(|| at + Duration::from_secs(100 * 365 * 86_400))
}

/// A wait rounded up to a whole second, for people.
fn round_up(wait: Duration) -> Duration {
    Duration::from_secs(wait.as_secs() + u64::from(wait.subsec_nanos() > 0))
}

fn capitalize(text: &str) -> String {
    let mut chars = text.chars();
    chars
        .next()
        .map(|first| first.to_uppercase().chain(chars).collect())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use std::collections::VecDeque;

    use super::*;

    #[test]
    fn delays_grow_exponentially_within_jitter_bounds() {
        let policy = RetryPolicy {
            max_retries: 5,
            base_delay: Duration::from_millis(100),
            max_delay: Duration::from_secs(1),
        };
        for (retry, full) in [(0, 100), (1, 200), (2, 400), (3, 800), (4, 1000)] {
            for _ in 0..50 {
                let delay = policy.delay(retry, None).expect("retry left");
                let full = Duration::from_millis(full);
                assert!(delay >= full / 2 && delay <= full, "{retry}: {delay:?}");
            }
        }
    }

    #[test]
    fn retries_run_out() {
        let policy = RetryPolicy {
            max_retries: 2,
            ..RetryPolicy::default()
        };
        assert!(policy.delay(1, None).is_some());
        assert!(policy.delay(2, None).is_none());
    }

    #[test]
    fn retry_after_is_honoured_up_to_the_cap() {
        let policy = RetryPolicy::default();
        assert_eq!(
            policy.delay(0, Some(Duration::from_secs(2))),
            Some(Duration::from_secs(2))
        );
        assert_eq!(policy.delay(0, Some(Duration::from_secs(3600))), None);
    }

    /// One scripted step of a fake provider: streamed text pieces, then an outcome after a
    /// pause.
    struct Step {
        text: Vec<&'static str>,
        pause: Duration,
        outcome: Result<&'static str, fn() -> LlmError>,
    }

    /// A provider that plays [`Step`]s, one per call.
    struct Scripted {
        steps: Mutex<VecDeque<Step>>,
        calls: std::sync::atomic::AtomicU32,
    }

    impl Scripted {
        fn new(steps: Vec<Step>) -> Arc<Self> {
            Arc::new(Self {
                steps: Mutex::new(steps.into()),
                calls: Default::default(),
            })
        }
    }

    #[async_trait]
    impl LlmProvider for Scripted {
        fn name(&self) -> &str {
            "scripted"
        }
        fn model(&self) -> &str {
            "m"
        }
        async fn chat(
            &self,
            _: &ChatRequest,
            events: &StreamSink<'_>,
        ) -> Result<ChatResponse, LlmError> {
            self.calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let step = self
                .steps
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .pop_front()
                .expect("a scripted step");
            for piece in step.text {
                events(StreamEvent::Text(piece.into()));
            }
            tokio::time::sleep(step.pause).await;
            step.outcome
                .map(|content| ChatResponse {
                    content: content.into(),
                    ..ChatResponse::default()
                })
                .map_err(|make| make())
        }
    }

    fn broken() -> LlmError {
        LlmError::Stream("connection reset".into())
    }

    fn policy(max_retries: u32) -> RetryPolicy {
        RetryPolicy {
            max_retries,
            base_delay: Duration::from_secs(1),
            max_delay: Duration::from_secs(30),
        }
    }

    async fn run(retrying: &Retrying) -> (Result<ChatResponse, LlmError>, Vec<StreamEvent>) {
        let seen = Mutex::new(Vec::new());
        let sink = |event: StreamEvent| {
            seen.lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push(event)
        };
        let result = retrying.chat(&ChatRequest::default(), &sink).await;
        (
            result,
            seen.into_inner().unwrap_or_else(PoisonError::into_inner),
        )
    }

    #[tokio::test(start_paused = true)]
    async fn a_retry_after_streamed_text_resets_it_instead_of_repeating_it() {
        let inner = Scripted::new(vec![
            Step {
                text: vec!["think", "ing"],
                pause: Duration::ZERO,
                outcome: Err(broken),
            },
            Step {
                text: vec!["thinking", " done"],
                pause: Duration::ZERO,
                outcome: Ok("thinking done"),
            },
        ]);
        let retrying = Retrying::new(inner.clone(), policy(3), Duration::from_secs(300));
        let (result, events) = run(&retrying).await;
        assert_eq!(result.expect("second attempt").content, "thinking done");
        // What a client shows: text since the last reset.
        let mut shown = String::new();
        for event in &events {
            match event {
                StreamEvent::Text(text) => shown.push_str(text),
                StreamEvent::Reset => shown.clear(),
                StreamEvent::Status(_) => {}
            }
        }
        assert_eq!(shown, "thinking done", "{events:?}");
        let reset = events.iter().position(|e| *e == StreamEvent::Reset);
        let status = events
            .iter()
            .position(|e| matches!(e, StreamEvent::Status(s) if s.contains("attempt 2 of 4")));
        assert!(reset.is_some() && status > reset, "{events:?}");
    }

    #[tokio::test(start_paused = true)]
    async fn a_silent_model_gets_status_lines_and_the_call_ends_at_its_deadline() {
        let inner = Scripted::new(
            (0..4)
                .map(|_| Step {
                    text: vec![],
                    pause: Duration::from_secs(3600),
                    outcome: Ok("never"),
                })
                .collect(),
        );
        let retrying = Retrying::new(inner, policy(3), Duration::from_secs(60))
            .with_slow_notice(Duration::from_secs(15));
        let started = Instant::now();
        let (result, events) = run(&retrying).await;
        let err = result.expect_err("deadline");
        assert!(matches!(err.root(), LlmError::CallTimeout { .. }), "{err}");
        assert!(
            err.to_string().contains("llm.request_timeout_secs"),
            "{err}"
        );
        assert_eq!(started.elapsed(), Duration::from_secs(60));
        let statuses: Vec<_> = events
            .iter()
            .filter_map(|e| match e {
                StreamEvent::Status(s) => Some(s.as_str()),
                _ => None,
            })
            .collect();
        assert_eq!(
            statuses,
            [
                "Still waiting for the model (15 s so far).",
                "Still waiting for the model (30 s so far).",
                "Still waiting for the model (45 s so far)."
            ]
        );
    }

    #[tokio::test(start_paused = true)]
    async fn retries_and_their_waits_stay_within_the_deadline() {
        // Each attempt fails after 20 s; waits are 1 s doubling (jitter halves at most).
        let inner = Scripted::new(
            (0..4)
                .map(|_| Step {
                    text: vec![],
                    pause: Duration::from_secs(20),
                    outcome: Err(broken),
                })
                .collect(),
        );
        let retrying = Retrying::new(inner.clone(), policy(3), Duration::from_secs(50))
            .with_slow_notice(Duration::from_secs(3600));
        let started = Instant::now();
        let (result, _) = run(&retrying).await;
        assert!(matches!(
            result.as_ref().map_err(LlmError::root),
            Err(LlmError::CallTimeout { .. })
        ));
        assert!(started.elapsed() <= Duration::from_secs(50));
        assert!(inner.calls.load(std::sync::atomic::Ordering::SeqCst) <= 3);
    }

    #[tokio::test(start_paused = true)]
    async fn transient_errors_that_persist_say_how_many_attempts_were_made() {
        let inner = Scripted::new(
            (0..3)
                .map(|_| Step {
                    text: vec![],
                    pause: Duration::ZERO,
                    outcome: Err(broken),
                })
                .collect(),
        );
        let retrying = Retrying::new(inner.clone(), policy(2), Duration::from_secs(300));
        let (result, events) = run(&retrying).await;
        let err = result.expect_err("exhausted");
        assert!(
            err.to_string().contains("gave up after 3 attempts"),
            "{err}"
        );
        assert_eq!(inner.calls.load(std::sync::atomic::Ordering::SeqCst), 3);
        assert!(
            !events.contains(&StreamEvent::Reset),
            "nothing was streamed"
        );
    }
}
