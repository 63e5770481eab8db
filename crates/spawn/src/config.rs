//! [`SpawnConfig`]: how an agent's turns may start sub-agents (`[agent.spawn]`).

use std::time::Duration;

/// How an agent's turns may start sub-agents.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SpawnConfig {
    /// Whether its turns are offered the `spawn` tool.
    pub enabled: bool,
    /// How deep children may nest: 1 lets a person's turn start children, who may not start
    /// their own.
    pub max_depth: usize,
    /// Sub-agents of one chat running at once, at every depth.
    pub max_children: usize,
    /// Sub-agents one message of a chat may start in all, at every depth.
    pub max_per_turn: usize,
    /// How long a child's turn may take in all.
    pub timeout: Duration,
    /// A child's token budget (in + out over its calls); the agent's `max_turn_tokens`
    /// when `None`.
    pub max_turn_tokens: Option<u64>,
    /// The tools a child is offered, of its agent's (names, `*` patterns); all when `None`.
    pub tools: Option<Vec<String>>,
    /// Tools a child is not offered.
    pub exclude_tools: Vec<String>,
}

impl Default for SpawnConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            max_depth: 1,
            max_children: 4,
            max_per_turn: 16,
            timeout: Duration::from_secs(300),
            max_turn_tokens: None,
            tools: None,
            exclude_tools: ["spawn", "message", "cron"].map(str::to_owned).to_vec(),
        }
    }
}
