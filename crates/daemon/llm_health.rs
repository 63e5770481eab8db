//! Whether the models answer: every attempt of every model of the chain is told here
//! ([`switchboard_llm::Observer`]), counted in `/metrics`
//! (`switchboard_llm_errors_total{provider,model,kind}`), and judged for `/healthz`: a model
//! whose last attempts all failed makes the daemon `degraded`, naming the model and the last
//! error, until one of its attempts succeeds — and a model whose key cannot be resolved does
//! from the start ([`LlmHealth::start_with`], again when a reload changes the models).
//!
//! How many failures in a row: one when the error cannot heal by itself (no API key, a key
//! the server refuses, an invalid URL) — [`FAILURES_TO_DEGRADE`] otherwise (timeouts,
//! refused connections, 5xx), so a blip that a retry got past does not flap the health.

use std::collections::BTreeMap;
use std::sync::{Mutex, PoisonError};

use serde_json::json;
use switchboard_llm::{LlmError, Observer};

/// Transient failures in a row that make a model count as failing.
pub const FAILURES_TO_DEGRADE: u32 = 3;

/// The longest error text kept per model.
const MAX_ERROR_CHARS: usize = 300;

/// What is known of one model.
#[derive(Clone, Debug, Default)]
struct State {
    /// Attempts that failed since the last that succeeded.
    failures: u32,
    /// Whether the last failure is one that cannot heal by itself.
    permanent: bool,
    /// The last failure, as text.
    last_error: String,
}

/// The models' recent outcomes, shared by the chain's observers and `/healthz`.
#[derive(Debug, Default)]
pub struct LlmHealth {
    /// By `provider model`. Written after each attempt, read by `/healthz`.
    models: Mutex<BTreeMap<String, State>>,
}

impl LlmHealth {
    /// Starts afresh for the models of `config` (at start, and when a reload changes the
    /// models): what is known of the old chain is forgotten, and a model whose key cannot
    /// be resolved counts as failing at once — every call to it will.
    pub fn start_with(&self, config: &crate::config::Config) {
        self.models
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clear();
        for (provider, model, err) in config.llm.missing_keys() {
            self.record(provider, &model, Err(&err), false);
        }
    }

    /// Records one outcome; `count` says whether a failure goes into the error counter.
    fn record(&self, provider: &str, model: &str, outcome: Result<(), &LlmError>, count: bool) {
        let mut models = self.models.lock().unwrap_or_else(PoisonError::into_inner);
        let state = models.entry(format!("{provider} {model}")).or_default();
        match outcome {
            Ok(()) => *state = State::default(),
            Err(err) => {
                state.failures = state.failures.saturating_add(1);
                state.permanent = permanent(err);
                state.last_error = err.to_string().chars().take(MAX_ERROR_CHARS).collect();
                if count {
                    metrics::counter!("switchboard_llm_errors_total",
                        "provider" => provider.to_owned(), "model" => model.to_owned(), "kind" => err.kind())
                    .increment(1);
                }
            }
        }
    }

    /// The `/healthz` check: `Ok`, or which models fail and why.
    pub fn check(&self) -> Result<(), serde_json::Value> {
        let models = self.models.lock().unwrap_or_else(PoisonError::into_inner);
        let failing: Vec<String> = models
            .iter()
            .filter(|(_, state)| {
                state.failures >= FAILURES_TO_DEGRADE || (state.permanent && state.failures > 0)
            })
            .map(|(model, state)| {
                format!(
                    "{model}: {} failed attempt{} in a row, the last: {}",
                    state.failures,
                    if state.failures == 1 { "" } else { "s" },
                    state.last_error
                )
            })
            .collect();
        if failing.is_empty() {
            Ok(())
        } else {
            Err(json!({"error": failing.join("; ")}))
        }
    }
}

/// Whether an error needs the operator (a key, a URL) rather than time.
fn permanent(err: &LlmError) -> bool {
    matches!(
        err.root(),
        LlmError::MissingApiKey { .. }
            | LlmError::InvalidBaseUrl { .. }
            | LlmError::Unauthorized { .. }
    )
}

impl Observer for LlmHealth {
    fn outcome(&self, provider: &str, model: &str, outcome: Result<(), &LlmError>) {
        self.record(provider, model, outcome, true);
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn timeout() -> LlmError {
        LlmError::Timeout {
            what: "waiting for the first byte",
            after: Duration::from_secs(30),
            key: "timeout_secs",
        }
    }

    #[test]
    fn transient_failures_degrade_after_three_in_a_row_and_a_success_clears() {
        let health = LlmHealth::default();
        health.outcome("openai", "m", Ok(()));
        assert!(health.check().is_ok());
        for _ in 0..FAILURES_TO_DEGRADE - 1 {
            health.outcome("openai", "m", Err(&timeout()));
        }
        assert!(health.check().is_ok(), "two timeouts are a blip");
        health.outcome("openai", "m", Err(&timeout()));
        let problem = health.check().expect_err("three in a row");
        let text = problem["error"].as_str().unwrap_or_default();
        assert!(
            text.starts_with("openai m: 3 failed attempts in a row"),
            "{text}"
        );
        assert!(text.contains("first byte"), "{text}");
        health.outcome("openai", "m", Ok(()));
        assert!(health.check().is_ok());
    }

    #[test]
    fn a_refused_or_missing_key_degrades_at_once_naming_the_model() {
        let health = LlmHealth::default();
        health.outcome("openai", "good", Ok(()));
        let refused = LlmError::Unauthorized {
            status: 401,
            body: "invalid key".into(),
        };
        health.outcome("anthropic", "claude", Err(&refused));
        let problem = health.check().expect_err("a refused key");
        let text = problem["error"].as_str().unwrap_or_default();
        assert!(
            text.starts_with("anthropic claude: 1 failed attempt in a row"),
            "{text}"
        );
        assert!(!text.contains("openai"), "{text}");
    }
}
