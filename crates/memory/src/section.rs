//! `[memory]`: whether the agent's memory is searched, and what it recalls by itself.

use serde::Deserialize;
use switchboard_core::{ConfigError, ConfigSource as Source};
use toml::Spanned;

/// `[memory]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct MemorySection {
    /// Whether the index is kept and searched (`memory_search`, `/memory`, recall). Off: no
    /// thread, no database, nothing read.
    pub enabled: bool,
    /// Before each turn, the best this many hits for the new message (not in the window
    /// already) go into the context with their dates; 0: none.
    pub recall: Spanned<usize>,
    /// The most tokens recalled hits may take (about four bytes a token).
    pub recall_max_tokens: Spanned<usize>,
    /// Hits `memory_search` and `/memory` return when not asked for a number.
    pub max_results: Spanned<usize>,
    /// Whether what leaves a chat's window is folded into a running summary the model
    /// writes, kept with the session and put at the top of its context (works without
    /// `enabled`).
    pub summarize: bool,
}

impl Default for MemorySection {
    fn default() -> Self {
        Self {
            enabled: false,
            recall: Spanned::new(0..0, 0),
            recall_max_tokens: Spanned::new(0..0, 600),
            max_results: Spanned::new(0..0, 8),
            summarize: false,
        }
    }
}

impl MemorySection {
    /// Checks the values; errors name `memory.<key>` at its line.
    pub fn validate(&self, source: &Source) -> Result<(), ConfigError> {
        let at_most = |value: &Spanned<usize>, min: usize, max: usize, key: &str| {
            let got = *value.get_ref();
            if got < min || got > max {
                Err(source.error_at(
                    Some(value.span()),
                    format!("memory.{key}"),
                    format!("must be between {min} and {max}, got {got}"),
                ))
            } else {
                Ok(())
            }
        };
        at_most(&self.recall, 0, 20, "recall")?;
        at_most(&self.recall_max_tokens, 50, 8000, "recall_max_tokens")?;
        at_most(
            &self.max_results,
            1,
            switchboard_core::MemoryQuery::MAX_LIMIT,
            "max_results",
        )?;
        if !self.enabled && *self.recall.get_ref() > 0 {
            return Err(source.error_at(
                Some(self.recall.span()),
                "memory.recall".into(),
                "recall needs the index: set memory.enabled = true".into(),
            ));
        }
        Ok(())
    }
}
