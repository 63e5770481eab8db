//! [`UsageStore`]: where what the models cost is kept — per day, agent, chat and model. One
//! store keeps it ([`StateUsageStore`](crate::StateUsageStore), in the daemon's state store:
//! files in one process, the bucket on a cluster); the interface is what the caps and
//! `/usage` need of it.

use async_trait::async_trait;
use jiff::civil::Date;
use serde::{Deserialize, Serialize};

/// Tokens and dollars spent.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Spent {
    /// Input tokens, cached ones included.
    pub input: u64,
    /// Output tokens.
    pub output: u64,
    /// Of the input tokens, those read from the provider's cache.
    #[serde(default)]
    pub cached: u64,
    /// Of the output tokens, those the model spent thinking (absent in records written
    /// before they were counted).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub reasoning: u64,
    /// US dollars, by the price table (0 for a model it does not price).
    pub usd: f64,
}

impl std::ops::AddAssign for Spent {
    fn add_assign(&mut self, other: Self) {
        self.input += other.input;
        self.output += other.output;
        self.cached += other.cached;
        self.reasoning += other.reasoning;
        self.usd += other.usd;
    }
}

fn is_zero(value: &u64) -> bool {
    *value == 0
}

/// Whose spending, and when: the day (in the config's time zone), the agent, the session
/// it was spent in, the model — and the chat it counts against when that is not the session
/// (a sub-agent's, an isolated scheduled run's: their chat's).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct UsageKey {
    /// The day.
    pub day: Date,
    /// The agent's name.
    pub agent: String,
    /// The session (`telegram_123`, `cron_j1`, …).
    pub session: String,
    /// The model, as the config names it.
    pub model: String,
    /// The chat's session it counts against, when not `session`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chat: Option<String>,
}

impl UsageKey {
    /// The chat's session it counts against: its own, or the chat it worked for.
    pub fn chat(&self) -> &str {
        self.chat.as_deref().unwrap_or(&self.session)
    }
}

/// Spending under a key: one LLM call's, or a sum.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct UsageRecord {
    /// Whose and when.
    #[serde(flatten)]
    pub key: UsageKey,
    /// How much.
    #[serde(flatten)]
    pub spent: Spent,
}

/// A usage store that could not do what it was asked.
#[derive(Debug, thiserror::Error)]
#[error("the usage records ({place}): {message}")]
pub struct UsageStoreError {
    /// Which file or service.
    pub place: String,
    /// What went wrong.
    pub message: String,
}

/// Where spending is kept.
#[async_trait]
pub trait UsageStore: Send + Sync {
    /// Adds a call's (or a sum's) spending.
    async fn record(&self, record: &UsageRecord) -> Result<(), UsageStoreError>;
    /// What was spent from `from` to `to` (days, both included), summed per key.
    async fn spent(&self, from: Date, to: Date) -> Result<Vec<UsageRecord>, UsageStoreError>;
    /// What `day` cost in US dollars: all chats together, and what counts against `chat`
    /// (its own session's, its sub-agents', its isolated runs') — what the caps are checked
    /// against, after every call: no record is copied.
    async fn day_cost(&self, day: Date, chat: &str) -> Result<(f64, f64), UsageStoreError>;
    /// Notes that `chat` was warned on `day` that it passed the warning mark; `true` when
    /// this call noted it (it had not been warned that day), so it is warned once.
    async fn warn_once(&self, day: Date, chat: &str) -> Result<bool, UsageStoreError>;
}
