//! Whether the models answer — the language models, and the audio servers beside them:
//! every attempt of every model of a chain is told here ([`switchboard_llm::Observer`],
//! [`switchboard_audio::Observer`]), counted in `/metrics`
//! (`switchboard_llm_errors_total{provider,model,kind}`,
//! `switchboard_audio_errors_total{what,model,kind}`), and judged for `/healthz`: a model
//! whose last attempts all failed makes the daemon `degraded`, naming the model and the last
//! error, until one of its attempts succeeds — and a model whose key cannot be resolved does
//! from the start ([`ModelHealth::start_with`], again when a reload changes the models).
//! The language models and the audio servers are judged apart (one [`ModelHealth`] each:
//! `/healthz`'s `llm` and `audio`).
//!
//! How many failures in a row: one when the error cannot heal by itself (no API key, a key
//! the server refuses, an invalid URL) — [`FAILURES_TO_DEGRADE`] otherwise (timeouts,
//! refused connections, 5xx), so a blip that a retry got past does not flap the health.

use std::collections::BTreeMap;
use std::sync::{Mutex, PoisonError};

use serde_json::json;
use switchboard_audio::AudioError;
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
pub struct ModelHealth {
    /// By `provider model`. Written after each attempt, read by `/healthz`.
    models: Mutex<BTreeMap<String, State>>,
}

impl ModelHealth {
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

    /// Starts afresh for the audio servers of `config` (as [`ModelHealth::start_with`]).
    pub fn start_with_audio(&self, config: &crate::config::Config) {
        self.models
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clear();
        let missing = [
            ("transcription", config.transcription.missing_keys()),
            ("speech", config.speech.missing_keys()),
        ];
        for (what, keys) in missing {
            for (model, err) in keys {
                let failure = Failure {
                    permanent: true,
                    text: err.to_string(),
                };
                self.note(&format!("{what} {model}"), Some(failure));
            }
        }
    }

    /// Records one outcome; `count` says whether a failure goes into the error counter.
    fn record(&self, provider: &str, model: &str, outcome: Result<(), &LlmError>, count: bool) {
        let failure = outcome.err().map(|err| Failure {
            permanent: permanent(err),
            text: err.to_string(),
        });
        self.note(&format!("{provider} {model}"), failure);
        if let (Err(err), true) = (outcome, count) {
            metrics::counter!("switchboard_llm_errors_total",
                "provider" => provider.to_owned(), "model" => model.to_owned(), "kind" => err.kind())
            .increment(1);
        }
    }

    /// Notes how `model`'s last attempt went: well (`None`) or its failure.
    fn note(&self, model: &str, failure: Option<Failure>) {
        let mut models = self.models.lock().unwrap_or_else(PoisonError::into_inner);
        let state = models.entry(model.to_owned()).or_default();
        match failure {
            None => *state = State::default(),
            Some(failure) => {
                state.failures = state.failures.saturating_add(1);
                state.permanent = failure.permanent;
                state.last_error = failure.text.chars().take(MAX_ERROR_CHARS).collect();
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

/// A failed attempt, as health judges it.
struct Failure {
    /// It cannot heal by itself.
    permanent: bool,
    /// What it said.
    text: String,
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

impl Observer for ModelHealth {
    fn outcome(&self, provider: &str, model: &str, outcome: Result<(), &LlmError>) {
        self.record(provider, model, outcome, true);
    }
}

impl switchboard_audio::Observer for ModelHealth {
    fn outcome(&self, what: &'static str, model: &str, outcome: Result<(), &AudioError>) {
        let failure = outcome.err().map(|err| Failure {
            permanent: err.is_permanent(),
            text: err.to_string(),
        });
        self.note(&format!("{what} {model}"), failure);
        if let Err(err) = outcome {
            metrics::counter!("switchboard_audio_errors_total",
                "what" => what, "model" => model.to_owned(), "kind" => err.kind())
            .increment(1);
        }
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
        let health = ModelHealth::default();
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
        let health = ModelHealth::default();
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
