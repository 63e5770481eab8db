//! [`StateUsageStore`]: spending kept as documents of the daemon's [`StateStore`] — files
//! under `state_dir/usage/` in one process; on a cluster, its shared bucket, so every worker
//! checks the caps against what all of them spent.
//!
//! A chat's day is one document (`usage/chat/<day>/<session>`: its sums per agent, model
//! and the session spent in — its own, its sub-agents', its isolated runs' — and whether it
//! was warned); the day's total is one document per writer
//! (`usage/day/<day>/<member>`), so workers recording at once never wait on each other's
//! total, and the check after a call reads the chat's document and the day's few totals. A
//! report scans one prefix per day. Each change is one [`StateStore::update_often`]: two
//! workers recording in one chat at once both count, and one process does not wait for the
//! disk at every model call.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use async_trait::async_trait;
use jiff::civil::Date;
use serde::{Deserialize, Serialize};
use switchboard_core::state::{json_change, json_change_compact, segment};
use switchboard_core::{StateError, StateStore};

use super::store::{Spent, UsageKey, UsageRecord, UsageStore, UsageStoreError};

/// The most days one report reads (ten years).
const MAX_DAYS: usize = 3_660;

/// A chat's spending on one day.
#[derive(Default, Serialize, Deserialize)]
struct ChatDay {
    session: String,
    /// Sums per agent and model.
    spent: Vec<Sum>,
    #[serde(default)]
    warned: bool,
}

#[derive(Serialize, Deserialize)]
struct Sum {
    agent: String,
    model: String,
    /// The session it was spent in, when not the chat's own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    session: Option<String>,
    #[serde(flatten)]
    spent: Spent,
}

/// A day's total of one writer, all its chats together.
#[derive(Default, Serialize, Deserialize)]
struct DayTotal {
    usd: f64,
}

/// The writer name of a process alone (on a cluster, each member writes as itself).
pub const ALONE: &str = "local";

/// Spending in a state store.
#[derive(Clone, Debug)]
pub struct StateUsageStore {
    state: Arc<dyn StateStore>,
    /// The key segment of this writer's day totals (a cluster's member).
    writer: String,
}

impl StateUsageStore {
    /// The spending kept in `state`, whose day totals this process adds to as `writer`
    /// (its member name, [`ALONE`] in one process; any name, for a process that only
    /// reads).
    pub fn new(state: Arc<dyn StateStore>, writer: &str) -> Self {
        Self {
            state,
            writer: segment(writer),
        }
    }

    fn fail(&self) -> impl Fn(StateError) -> UsageStoreError + '_ {
        |err| UsageStoreError {
            place: self.state.place(),
            message: err.to_string(),
        }
    }

    async fn chat_day(&self, day: Date, session: &str) -> Result<ChatDay, UsageStoreError> {
        let stored = self
            .state
            .get(&chat_key(day, session))
            .await
            .map_err(self.fail())?;
        Ok(stored
            .and_then(|stored| serde_json::from_slice(&stored.bytes).ok())
            .unwrap_or_default())
    }
}

impl StateUsageStore {
    /// Writes `sums` (a sum per key) and `warned` (chats warned, by day) as the documents
    /// of their days and chats, in place of what those hold, this writer's day totals being
    /// their sums: what a day read from elsewhere (the files of before) becomes. Written
    /// again with the same sums, the documents are the same.
    pub(crate) async fn put_sums(
        &self,
        sums: &BTreeMap<UsageKey, Spent>,
        warned: &BTreeSet<(Date, String)>,
    ) -> Result<usize, UsageStoreError> {
        let mut chats: BTreeMap<(Date, &str), ChatDay> = BTreeMap::new();
        let mut totals: BTreeMap<Date, f64> = BTreeMap::new();
        for (key, spent) in sums {
            let chat = chats.entry((key.day, key.chat())).or_default();
            key.chat().clone_into(&mut chat.session);
            chat.spent.push(Sum {
                agent: key.agent.clone(),
                model: key.model.clone(),
                session: key.chat.is_some().then(|| key.session.clone()),
                spent: *spent,
            });
            *totals.entry(key.day).or_default() += spent.usd;
        }
        for (day, session) in warned {
            let chat = chats.entry((*day, session)).or_default();
            session.clone_into(&mut chat.session);
            chat.warned = true;
        }
        let fail = |err: serde_json::Error| UsageStoreError {
            place: self.state.place(),
            message: err.to_string(),
        };
        for ((day, session), chat) in &chats {
            let bytes = serde_json::to_vec(chat).map_err(fail)?;
            self.state
                .put(&chat_key(*day, session), bytes)
                .await
                .map_err(self.fail())?;
        }
        for (day, usd) in totals {
            let bytes = serde_json::to_vec(&DayTotal { usd }).map_err(fail)?;
            self.state
                .put(&format!("{}/{}", day_prefix(day), self.writer), bytes)
                .await
                .map_err(self.fail())?;
        }
        Ok(chats.len())
    }
}

fn chat_key(day: Date, session: &str) -> String {
    format!("usage/chat/{day}/{}", segment(session))
}

fn day_prefix(day: Date) -> String {
    format!("usage/day/{day}")
}

#[async_trait]
impl UsageStore for StateUsageStore {
    async fn record(&self, record: &UsageRecord) -> Result<(), UsageStoreError> {
        let key = &record.key;
        let chat = chat_key(key.day, key.chat());
        let elsewhere = key.chat.is_some().then(|| key.session.clone());
        let mut change = json_change_compact(&chat, |day: &mut ChatDay| {
            key.chat().clone_into(&mut day.session);
            match day.spent.iter_mut().find(|sum| {
                sum.agent == key.agent && sum.model == key.model && sum.session == elsewhere
            }) {
                Some(sum) => sum.spent += record.spent,
                None => day.spent.push(Sum {
                    agent: key.agent.clone(),
                    model: key.model.clone(),
                    session: elsewhere.clone(),
                    spent: record.spent,
                }),
            }
            true
        });
        self.state
            .update_often(&chat, &mut change)
            .await
            .map_err(self.fail())?;
        let total = format!("{}/{}", day_prefix(key.day), self.writer);
        let mut change = json_change_compact(&total, |day: &mut DayTotal| {
            day.usd += record.spent.usd;
            true
        });
        self.state
            .update_often(&total, &mut change)
            .await
            .map_err(self.fail())
    }

    async fn spent(&self, from: Date, to: Date) -> Result<Vec<UsageRecord>, UsageStoreError> {
        let mut out = Vec::new();
        let mut day = from;
        for _ in 0..MAX_DAYS {
            if day > to {
                break;
            }
            let found = self
                .state
                .scan(&format!("usage/chat/{day}"))
                .await
                .map_err(self.fail())?;
            for (_, bytes) in found {
                let Ok(chat) = serde_json::from_slice::<ChatDay>(&bytes) else {
                    continue;
                };
                out.extend(chat.spent.into_iter().map(|sum| UsageRecord {
                    key: UsageKey {
                        day,
                        agent: sum.agent,
                        chat: sum.session.is_some().then(|| chat.session.clone()),
                        session: sum.session.unwrap_or_else(|| chat.session.clone()),
                        model: sum.model,
                    },
                    spent: sum.spent,
                }));
            }
            let Ok(next) = day.tomorrow() else { break };
            day = next;
        }
        out.sort_by(|a, b| a.key.cmp(&b.key));
        Ok(out)
    }

    async fn day_cost(&self, day: Date, chat: &str) -> Result<(f64, f64), UsageStoreError> {
        let all: f64 = self
            .state
            .scan(&day_prefix(day))
            .await
            .map_err(self.fail())?
            .iter()
            .filter_map(|(_, bytes)| serde_json::from_slice::<DayTotal>(bytes).ok())
            .map(|total| total.usd)
            .sum();
        let mine = self.chat_day(day, chat).await?;
        Ok((all, mine.spent.iter().map(|sum| sum.spent.usd).sum()))
    }

    async fn warn_once(&self, day: Date, session: &str) -> Result<bool, UsageStoreError> {
        let key = chat_key(day, session);
        let mut first = false;
        let mut change = json_change(&key, |chat: &mut ChatDay| {
            first = !chat.warned;
            chat.session = session.to_owned();
            chat.warned = true;
            first
        });
        self.state
            .update(&key, &mut change)
            .await
            .map_err(self.fail())?;
        drop(change);
        Ok(first)
    }
}

#[cfg(test)]
#[path = "state_store_tests.rs"]
mod tests;
