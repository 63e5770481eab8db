//! [`Spending`]: the daemon's policy over what the models cost — every call recorded, the
//! daily caps (`[limits] daily_usd`, `daily_usd_per_chat`), the warning at [`WARN_AT`] of a
//! cap, `/usage`. Shared by every agent: the caps count all of them.

use std::collections::BTreeMap;
use std::sync::{Arc, OnceLock, PoisonError, RwLock};

use jiff::civil::Date;
use jiff::tz::TimeZone;
use switchboard_core::{AgentName, SessionKey, Usage};

use super::price::Prices;
use super::store::{Spent, UsageKey, UsageRecord, UsageStore};
use switchboard_scheduler::Clock;

/// The share of a cap at which a chat is told, once a day, how close it is.
pub const WARN_AT: f64 = 0.8;

/// The daily caps, in US dollars; `None`: no cap.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Limits {
    /// All chats of all agents together, per day.
    pub daily_usd: Option<f64>,
    /// Each chat, per day.
    pub daily_usd_per_chat: Option<f64>,
}

/// Where the days begin: a zone by name, or the system's.
#[derive(Clone, Debug)]
enum Zone {
    Named(String),
    System,
}

/// Records what calls cost and enforces the caps.
pub struct Spending {
    store: Arc<dyn UsageStore>,
    /// The price table and the caps; replaced whole by a reload.
    policy: RwLock<Arc<(Prices, Limits)>>,
    zone: Zone,
    /// The zone, looked up at the first use (a daemon that never calls a model reads no
    /// zone file).
    resolved: OnceLock<(TimeZone, String)>,
    clock: Arc<dyn Clock>,
}

/// How far a chat is into a cap.
struct Standing {
    /// The share of the cap spent (the larger of the chat's and the daemon's).
    share: f64,
    /// What to tell about it, naming the cap.
    text: String,
}

impl Spending {
    /// Where the spending is kept.
    pub fn store(&self) -> &Arc<dyn UsageStore> {
        &self.store
    }

    /// Spending kept in `store`, priced by `prices`, capped by `limits`; days begin at
    /// midnight in `zone` (an IANA name; the system's zone when `None`), by `clock`.
    pub fn new(
        store: Arc<dyn UsageStore>,
        prices: Prices,
        limits: Limits,
        zone: Option<String>,
        clock: Arc<dyn Clock>,
    ) -> Self {
        Self {
            store,
            policy: RwLock::new(Arc::new((prices, limits))),
            zone: zone.map_or(Zone::System, Zone::Named),
            resolved: OnceLock::new(),
            clock,
        }
    }

    fn zone(&self) -> &(TimeZone, String) {
        self.resolved.get_or_init(|| match &self.zone {
            Zone::Named(name) => match switchboard_scheduler::zone(name) {
                Ok(zone) => (zone, name.clone()),
                Err(err) => {
                    tracing::error!(zone = %name, error = %err,
                        "the time zone of [limits] cannot be read; days are UTC's");
                    (TimeZone::UTC, "UTC".into())
                }
            },
            Zone::System => {
                let zone = TimeZone::try_system().unwrap_or(TimeZone::UTC);
                let name = zone
                    .iana_name()
                    .unwrap_or("the system's time zone")
                    .to_owned();
                (zone, name)
            }
        })
    }

    /// Today, in the configured zone.
    pub fn today(&self) -> Date {
        self.clock.now().to_zoned(self.zone().0.clone()).date()
    }

    fn policy(&self) -> Arc<(Prices, Limits)> {
        self.policy
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// The caps.
    pub fn limits(&self) -> Limits {
        self.policy().1
    }

    /// Replaces the price table and the caps (a reload); what was recorded stays as it was
    /// priced.
    pub fn reconfigure(&self, prices: Prices, limits: Limits) {
        *self.policy.write().unwrap_or_else(PoisonError::into_inner) = Arc::new((prices, limits));
    }

    /// Records one LLM call of `agent` in `session`, counted against `chat` (the session's
    /// own chat, or the chat a sub-agent or an isolated run works for); returns what to tell
    /// the chat when this call took it past [`WARN_AT`] of a cap (once a day per chat). A
    /// failure to record is logged: it must not cost the person their answer.
    pub async fn record(
        &self,
        agent: &AgentName,
        session: &SessionKey,
        chat: &SessionKey,
        model: &str,
        usage: &Usage,
    ) -> Option<String> {
        let usd = self.policy().0.cost(model, usage).unwrap_or(0.0);
        let day = self.today();
        let record = UsageRecord {
            key: UsageKey {
                day,
                agent: agent.to_string(),
                session: session.to_string(),
                model: model.to_owned(),
                chat: (chat != session).then(|| chat.to_string()),
            },
            spent: Spent {
                input: usage.input_tokens,
                output: usage.output_tokens,
                cached: usage.cached_input_tokens,
                reasoning: usage.reasoning_tokens,
                usd,
            },
        };
        if let Err(err) = self.store.record(&record).await {
            tracing::error!(session = %session, error = %err, "a call's usage could not be recorded");
            return None;
        }
        let standing = self.standing(chat, day).await?;
        if standing.share < WARN_AT || standing.share >= 1.0 {
            return None;
        }
        match self.store.warn_once(day, chat.as_str()).await {
            Ok(true) => Some(format!(
                "{} At the limit, new requests are refused until midnight ({}); /usage shows \
                 what was spent.",
                standing.text,
                self.zone().1
            )),
            Ok(false) => None,
            Err(err) => {
                tracing::warn!(session = %chat, error = %err, "a spending warning could not be noted");
                None
            }
        }
    }

    /// Why a new turn counted against `chat` is refused, when a cap is reached; `None`
    /// while it may run.
    pub async fn refusal(&self, chat: &SessionKey) -> Option<String> {
        let day = self.today();
        let standing = self.standing(chat, day).await?;
        (standing.share >= 1.0).then(|| {
            format!(
                "{} New requests are refused until midnight ({}); /usage shows what was spent.",
                standing.text,
                self.zone().1
            )
        })
    }

    /// How far `chat` is into the caps today; `None` without caps.
    async fn standing(&self, chat: &SessionKey, day: Date) -> Option<Standing> {
        let limits = self.limits();
        if limits == Limits::default() {
            return None;
        }
        let (all, chat) = match self.store.day_cost(day, chat.as_str()).await {
            Ok(cost) => cost,
            Err(err) => {
                tracing::warn!(error = %err, "today's spending could not be read; no cap applies");
                return None;
            }
        };
        let mut best: Option<Standing> = None;
        if let Some(cap) = limits.daily_usd_per_chat {
            let share = share(chat, cap);
            let text = format!(
                "This chat has spent ${chat:.2} of its ${cap:.2} a day \
                 (limits.daily_usd_per_chat, {:.0} %).",
                (share * 100.0).min(999.0)
            );
            best = Some(Standing { share, text });
        }
        if let Some(cap) = limits.daily_usd {
            let share = share(all, cap);
            if best.as_ref().is_none_or(|best| share > best.share) {
                let text = format!(
                    "switchboard has spent ${all:.2} of its ${cap:.2} a day across all chats \
                     (limits.daily_usd, {:.0} %).",
                    (share * 100.0).min(999.0)
                );
                best = Some(Standing { share, text });
            }
        }
        best
    }

    /// The answer to `/usage` in the chat `chat`: today's and this month's tokens and cost,
    /// its sub-agents' and isolated runs' included (and said apart).
    pub async fn report(&self, chat: &SessionKey) -> String {
        let today = self.today();
        let first = today.first_of_month();
        let spent = match self.store.spent(first, today).await {
            Ok(spent) => spent,
            Err(err) => return format!("What was spent could not be read: {err}"),
        };
        let mut day = Spent::default();
        let mut month = Spent::default();
        let mut day_elsewhere = Spent::default();
        for record in spent.iter().filter(|r| r.key.chat() == chat.as_str()) {
            month += record.spent;
            if record.key.day == today {
                day += record.spent;
                if record.key.chat.is_some() {
                    day_elsewhere += record.spent;
                }
            }
        }
        let policy = self.policy();
        let (prices, limits) = &*policy;
        let priced = !prices.is_empty();
        let mut text = format!("Today: {}", describe(&day, priced));
        if day_elsewhere != Spent::default() {
            text.push_str(&format!(
                " (of which its sub-agents and scheduled runs: {})",
                describe(&day_elsewhere, priced)
            ));
        }
        text.push_str(&format!(". This month: {}.", describe(&month, priced)));
        let caps: Vec<String> = [
            limits
                .daily_usd_per_chat
                .map(|cap| format!("${cap:.2} a day for this chat")),
            limits
                .daily_usd
                .map(|cap| format!("${cap:.2} a day for all chats")),
        ]
        .into_iter()
        .flatten()
        .collect();
        if !caps.is_empty() {
            text.push_str(&format!(
                " Limits: {} (days begin at midnight, {}).",
                caps.join(", "),
                self.zone().1
            ));
        }
        text
    }

    /// Today's and this month's spending per agent (for `/metrics`).
    pub async fn by_agent(&self) -> BTreeMap<String, (Spent, Spent)> {
        let today = self.today();
        let spent = self
            .store
            .spent(today.first_of_month(), today)
            .await
            .unwrap_or_default();
        let mut out: BTreeMap<String, (Spent, Spent)> = BTreeMap::new();
        for record in spent {
            let entry = out.entry(record.key.agent.clone()).or_default();
            entry.1 += record.spent;
            if record.key.day == today {
                entry.0 += record.spent;
            }
        }
        out
    }
}

/// `spent` as a share of `cap` (a cap of 0 is reached at once).
fn share(spent: f64, cap: f64) -> f64 {
    if cap <= 0.0 { 1.0 } else { spent / cap }
}

/// Tokens (and dollars, when there are prices) in a few words.
fn describe(spent: &Spent, priced: bool) -> String {
    let cached = if spent.cached > 0 {
        format!(" ({} cached)", spent.cached)
    } else {
        String::new()
    };
    let thinking = if spent.reasoning > 0 {
        format!(" ({} thinking)", spent.reasoning)
    } else {
        String::new()
    };
    let tokens = format!(
        "{} tokens in{cached}, {} out{thinking}",
        spent.input, spent.output
    );
    if priced {
        format!("{tokens}, ${:.4}", spent.usd)
    } else {
        tokens
    }
}

/// The scheduler skips a run whose chat may not spend now.
#[async_trait::async_trait]
impl switchboard_scheduler::Budget for Spending {
    async fn refusal(&self, chat: &SessionKey) -> Option<String> {
        Spending::refusal(self, chat).await
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::{Price, StateUsageStore};
    use switchboard_scheduler::TokioClock;

    /// The spending, kept in files of a directory that lives as long as it.
    fn spending(limits: Limits) -> (Spending, tempfile::TempDir) {
        let prices = Prices::new([(
            "m".to_owned(),
            Price {
                input_per_mtok: 1.0,
                output_per_mtok: 0.0,
                cached_input_per_mtok: None,
            },
        )]);
        // 2026-11-25 23:00 in Berlin.
        let start: jiff::Timestamp = "2026-11-25T22:00:00Z".parse().expect("time");
        let dir = tempfile::tempdir().expect("tempdir");
        let state = Arc::new(switchboard_sessions::FileState::new(dir.path()));
        let spending = Spending::new(
            Arc::new(StateUsageStore::new(state, crate::ALONE)),
            prices,
            limits,
            Some("Europe/Berlin".into()),
            Arc::new(TokioClock::starting_at(start)),
        );
        (spending, dir)
    }

    /// `dollars` worth of the model `m` ($1 per million input tokens).
    fn usd(dollars: f64) -> Usage {
        Usage::new((dollars * 1_000_000.0) as u64, 0)
    }

    #[tokio::test(start_paused = true)]
    async fn a_chat_is_warned_once_at_80_percent_refused_at_100_and_free_again_the_next_day() {
        let (spending, _dir) = spending(Limits {
            daily_usd: None,
            daily_usd_per_chat: Some(1.0),
        });
        let (agent, chat, other) = (
            AgentName::default(),
            SessionKey::from("telegram_1"),
            SessionKey::from("telegram_2"),
        );
        assert_eq!(
            spending.record(&agent, &chat, &chat, "m", &usd(0.5)).await,
            None
        );
        let warned = spending.record(&agent, &chat, &chat, "m", &usd(0.35)).await;
        let warned = warned.expect("told at 85 %");
        assert!(warned.contains("$0.85 of its $1.00 a day"), "{warned}");
        assert!(warned.contains("midnight (Europe/Berlin)"), "{warned}");
        assert_eq!(
            spending.record(&agent, &chat, &chat, "m", &usd(0.05)).await,
            None,
            "once"
        );
        assert_eq!(spending.refusal(&chat).await, None);
        spending.record(&agent, &chat, &chat, "m", &usd(0.2)).await;
        let refused = spending.refusal(&chat).await.expect("refused at 110 %");
        assert!(refused.contains("limits.daily_usd_per_chat"), "{refused}");
        assert_eq!(
            spending.refusal(&other).await,
            None,
            "another chat has its own cap"
        );
        // A model without a price costs nothing.
        spending
            .record(&agent, &other, &other, "unpriced", &usd(5.0))
            .await;
        assert_eq!(spending.refusal(&other).await, None);
        // Midnight in Berlin, an hour later.
        tokio::time::advance(Duration::from_secs(3600 + 1)).await;
        assert_eq!(spending.today(), jiff::civil::date(2026, 11, 26));
        assert_eq!(spending.refusal(&chat).await, None, "a new day");
        let report = spending.report(&chat).await;
        assert!(
            report.starts_with("Today: 0 tokens in, 0 out, $0.0000."),
            "{report}"
        );
        assert!(
            report.contains("This month: 1100000 tokens in, 0 out, $1.1000."),
            "{report}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn the_daemons_cap_counts_every_chat_and_agent() {
        let (spending, _dir) = spending(Limits {
            daily_usd: Some(1.0),
            daily_usd_per_chat: Some(10.0),
        });
        let home = AgentName::from("home");
        for n in 0..4 {
            let chat = SessionKey::from(format!("telegram_{n}"));
            spending.record(&home, &chat, &chat, "m", &usd(0.3)).await;
        }
        let refused = spending
            .refusal(&SessionKey::from("websocket_new"))
            .await
            .expect("the daemon's cap is reached");
        assert!(
            refused.contains("$1.20 of its $1.00 a day across all chats"),
            "{refused}"
        );
        let by_agent = spending.by_agent().await;
        assert!((by_agent["home"].0.usd - 1.2).abs() < 1e-9);
    }
}
