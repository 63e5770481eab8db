//! switchboard-usage: what turns cost, and the daily caps on it.
//!
//! Every LLM call's tokens are priced ([`Prices`], from the config's price table) and
//! recorded per day, agent, chat and model in a [`UsageStore`] the moment the call
//! answered — so a turn killed half-way still counts what it spent, and a restart keeps the
//! day's total. [`Spending`] is the policy over it: a turn of a chat over its daily cap, or
//! of any chat once the daemon's is reached, is refused before the model is called (a
//! scheduled run is skipped and recorded); a chat is told once a day when it passes 80 % of
//! a cap; `/usage` reads today's and this month's totals. Days are the config's time zone's.
//!
//! # Layout
//! - `price`: [`Price`] and [`Prices`], dollars per million tokens.
//! - `store`: [`UsageStore`], what spending is kept as ([`UsageRecord`]).
//! - `state_store`: [`StateUsageStore`], spending as documents of the daemon's state store
//!   (files in one process, the bucket on a cluster).
//! - `migrate`: [`migrate_files`], the month files of earlier versions moved into it.
//! - `spending`: [`Spending`], [`Limits`]: recording, the caps, `/usage`.
//! - `section`: `[limits]` ([`LimitsSection`]) and the prices of `[llm.prices]`, read.

mod migrate;
mod price;
mod section;
mod spending;
mod state_store;
mod store;

pub use migrate::migrate_files;
pub use price::{Price, Prices};
pub use section::{LimitsSection, prices};
pub use spending::{Limits, Spending, WARN_AT};
pub use state_store::{ALONE, StateUsageStore};
pub use store::{Spent, UsageKey, UsageRecord, UsageStore, UsageStoreError};
