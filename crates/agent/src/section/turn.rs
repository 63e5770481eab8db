//! The policies of the agent loop in the config — `[agent.verify]`, `[agent.approvals]`,
//! the `ask_user` tool's wait — and building them into the agent.

use std::time::Duration;

use serde::Deserialize;
use switchboard_core::{ConfigError, ConfigSource as Source};
use switchboard_llm::section::{ProviderKind, check_url};
use switchboard_spawn::SpawnConfig;
use toml::Spanned;

use super::AgentSection;
use crate::Approvals;

/// `[agent.verify]`: checks of a final reply before it is sent.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct VerifySection {
    /// Whether the rules (and the judge) run.
    pub enabled: bool,
    /// Attempts at a passing reply, the first included.
    pub max_attempts: Spanned<usize>,
    /// The shortest reply accepted, in characters.
    pub min_chars: usize,
    /// The longest reply accepted, in characters.
    pub max_chars: Option<usize>,
    /// An LLM that judges each reply.
    pub judge: Option<JudgeSection>,
}

impl Default for VerifySection {
    fn default() -> Self {
        Self {
            enabled: false,
            max_attempts: Spanned::new(0..0, 3),
            min_chars: 1,
            max_chars: None,
            judge: None,
        }
    }
}

/// `[agent.verify.judge]`: a model like an entry of `llm.fallbacks`, and its prompt.
/// Timeouts, limits and retries are `[llm]`'s.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JudgeSection {
    /// The API the server speaks.
    pub provider: Spanned<ProviderKind>,
    /// The API root; the provider's own when absent.
    pub base_url: Option<Spanned<String>>,
    /// The key, usually `${SOME_ENV_VAR}`.
    pub api_key: Option<Spanned<String>>,
    /// The model.
    pub model: String,
    /// Its instructions; a built-in prompt asking for PASS or FAIL when absent.
    pub prompt: Option<String>,
}

/// `[agent.approvals]`: tool calls that need the person's consent.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ApprovalsSection {
    /// Tools every call of which needs consent.
    pub tools: Vec<String>,
    /// Regular expressions: an `exec` command matching one needs consent.
    pub commands: Spanned<Vec<String>>,
    /// Seconds to wait for `/approve`; silence is a denial.
    pub timeout_secs: Spanned<f64>,
}

impl Default for ApprovalsSection {
    fn default() -> Self {
        Self {
            tools: Vec::new(),
            commands: Spanned::new(0..0, Vec::new()),
            timeout_secs: Spanned::new(0..0, 300.0),
        }
    }
}

/// `[agent.spawn]`: sub-agents.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SpawnSection {
    /// Whether turns are offered the `spawn` tool.
    pub enabled: bool,
    /// How deep sub-agents may nest (1: a chat's turn starts children, they start none).
    pub max_depth: Spanned<usize>,
    /// Sub-agents of one chat running at once, at every depth.
    pub max_children: Spanned<usize>,
    /// Sub-agents one message of a chat may start in all, at every depth.
    pub max_per_turn: Spanned<usize>,
    /// Seconds a sub-agent's turn may take in all.
    pub timeout_secs: Spanned<f64>,
    /// A sub-agent's token budget; the agent's `max_turn_tokens` when absent.
    pub max_turn_tokens: Option<u64>,
    /// The tools a sub-agent is offered, of its agent's; every one when absent.
    pub tools: Option<Vec<String>>,
    /// Tools a sub-agent is not offered.
    pub exclude_tools: Vec<String>,
}

impl Default for SpawnSection {
    fn default() -> Self {
        let defaults = SpawnConfig::default();
        Self {
            enabled: defaults.enabled,
            max_depth: Spanned::new(0..0, defaults.max_depth),
            max_children: Spanned::new(0..0, defaults.max_children),
            max_per_turn: Spanned::new(0..0, defaults.max_per_turn),
            timeout_secs: Spanned::new(0..0, defaults.timeout.as_secs_f64()),
            max_turn_tokens: None,
            tools: None,
            exclude_tools: defaults.exclude_tools,
        }
    }
}

impl SpawnSection {
    /// How the agent's turns may start sub-agents.
    pub fn config(&self) -> SpawnConfig {
        SpawnConfig {
            enabled: self.enabled,
            max_depth: *self.max_depth.get_ref(),
            max_children: *self.max_children.get_ref(),
            max_per_turn: *self.max_per_turn.get_ref(),
            timeout: Duration::from_secs_f64(*self.timeout_secs.get_ref()),
            max_turn_tokens: self.max_turn_tokens,
            tools: self.tools.clone(),
            exclude_tools: self.exclude_tools.clone(),
        }
    }
}

/// Checks what serde cannot in an agent's section (`key`: `agent` or `agents.NAME`).
pub fn validate(agent: &AgentSection, key: &str, source: &Source) -> Result<(), ConfigError> {
    if *agent.verify.max_attempts.get_ref() == 0 {
        return Err(source.error_at(
            Some(agent.verify.max_attempts.span()),
            format!("{key}.verify.max_attempts"),
            "must be at least 1".into(),
        ));
    }
    if let Some(judge) = &agent.verify.judge {
        check_url(
            source,
            judge.base_url.as_ref(),
            &format!("{key}.verify.judge.base_url"),
        )?;
    }
    let commands = &agent.approvals.commands;
    let probe = Approvals::new(Vec::new(), commands.get_ref(), Default::default());
    if let Err(err) = probe {
        return Err(source.error_at(
            Some(commands.span()),
            format!("{key}.approvals.commands"),
            format!("not a valid regular expression: {err}"),
        ));
    }
    if agent.max_turn_tokens == Some(0) || agent.spawn.max_turn_tokens == Some(0) {
        return Err(source.error_at(
            None,
            format!("{key}.max_turn_tokens"),
            "must be at least 1 (leave it out for no budget)".into(),
        ));
    }
    let spawn = &agent.spawn;
    for (value, name, range) in [
        (&spawn.max_depth, "max_depth", 1..=4),
        (&spawn.max_children, "max_children", 1..=32),
        (&spawn.max_per_turn, "max_per_turn", 1..=256),
    ] {
        if !range.contains(value.get_ref()) {
            return Err(source.error_at(
                Some(value.span()),
                format!("{key}.spawn.{name}"),
                format!(
                    "must be from {} to {}, got {}",
                    range.start(),
                    range.end(),
                    value.get_ref()
                ),
            ));
        }
    }
    let secs = *spawn.timeout_secs.get_ref();
    if !(secs.is_finite() && secs > 0.0 && secs <= 86_400.0) {
        return Err(source.error_at(
            Some(spawn.timeout_secs.span()),
            format!("{key}.spawn.timeout_secs"),
            format!("must be a positive number of seconds up to a day, got {secs}"),
        ));
    }
    Ok(())
}
