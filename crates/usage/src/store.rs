//! [`UsageStore`]: where what the models cost is kept — per day, agent, chat and model —
//! and [`FileUsageStore`], which keeps it in `state_dir/usage/YYYY-MM.jsonl`. The interface
//! is async and names no file, so a later store can keep it elsewhere (NATS for several
//! hosts) without the agent knowing.

use std::collections::{BTreeMap, BTreeSet};
use std::fs::OpenOptions;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};

use async_trait::async_trait;
use jiff::civil::Date;
use serde::{Deserialize, Serialize};
use switchboard_sessions::durable;

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
    /// US dollars, by the price table (0 for a model it does not price).
    pub usd: f64,
}

impl std::ops::AddAssign for Spent {
    fn add_assign(&mut self, other: Self) {
        self.input += other.input;
        self.output += other.output;
        self.cached += other.cached;
        self.usd += other.usd;
    }
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

/// One line of a month's file.
#[derive(Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
enum Line {
    /// Spending (one call's, or a sum after compaction).
    Spent(UsageRecord),
    /// A session was told it passed the warning mark that day.
    Warned { day: Date, session: String },
}

/// One month, as its file says.
#[derive(Default)]
struct Month {
    totals: BTreeMap<UsageKey, Spent>,
    warned: BTreeSet<(Date, String)>,
    /// Its file, open for appending once written to (a call's record is one `write`).
    file: Option<std::fs::File>,
}

impl Month {
    fn take(&mut self, line: Line) {
        match line {
            Line::Spent(record) => *self.totals.entry(record.key).or_default() += record.spent,
            Line::Warned { day, session } => {
                self.warned.insert((day, session));
            }
        }
    }

    /// Its sums from `from` to `to` (days, both included): keys order by day first, so
    /// this visits those days' keys only.
    fn range(&self, from: Date, to: Date) -> impl Iterator<Item = (&UsageKey, &Spent)> + '_ {
        let start = UsageKey {
            day: from,
            agent: String::new(),
            session: String::new(),
            model: String::new(),
            chat: None,
        };
        self.totals
            .range(start..)
            .take_while(move |(key, _)| key.day <= to)
    }

    /// What it holds from `from` to `to` (days, both included), a record per key.
    fn spent(&self, from: Date, to: Date) -> impl Iterator<Item = UsageRecord> + '_ {
        self.range(from, to).map(|(key, spent)| UsageRecord {
            key: key.clone(),
            spent: *spent,
        })
    }

    /// What `day` cost: all of it, and what counts against `chat`.
    fn day_cost(&self, day: Date, chat: &str) -> (f64, f64) {
        self.range(day, day)
            .fold((0.0, 0.0), |(all, mine), (key, spent)| {
                let counted = if key.chat() == chat { spent.usd } else { 0.0 };
                (all + spent.usd, mine + counted)
            })
    }

    /// The month as the fewest lines: a sum per key, and the warnings.
    fn lines(&self) -> impl Iterator<Item = Line> + '_ {
        let spent = self.totals.iter().map(|(key, spent)| {
            Line::Spent(UsageRecord {
                key: key.clone(),
                spent: *spent,
            })
        });
        let warned = self.warned.iter().map(|(day, session)| Line::Warned {
            day: *day,
            session: session.clone(),
        });
        spent.chain(warned)
    }
}

/// Months kept in memory (the current one, and the one before around its end).
const MONTHS_KEPT: usize = 2;

/// A month's file is rewritten as sums when it holds this many more lines than it needs.
const COMPACT_SLACK: usize = 10_000;

/// Spending in a file per month (`usage/YYYY-MM.jsonl`): each record a JSON line appended
/// with one write (a crash loses at most the line being written, which is cut off when the
/// file is read again); the months in use are kept in memory as sums, and a month's file
/// is rewritten as sums (atomically) when reading it finds it far longer than that.
pub struct FileUsageStore {
    dir: PathBuf,
    /// Months read so far, by (year, month): at most [`MONTHS_KEPT`]. The lock is held across
    /// a file's append, so a month in memory is always the file's content.
    months: Mutex<BTreeMap<(i16, i8), Month>>,
}

impl FileUsageStore {
    /// The store of the state directory `state_dir` (in `usage/` there).
    pub fn new(state_dir: &Path) -> Self {
        Self {
            dir: state_dir.join("usage"),
            months: Mutex::new(BTreeMap::new()),
        }
    }

    fn path(&self, (year, month): (i16, i8)) -> PathBuf {
        self.dir.join(format!("{year:04}-{month:02}.jsonl"))
    }

    fn error(&self, path: &Path, message: impl std::fmt::Display) -> UsageStoreError {
        UsageStoreError {
            place: path.display().to_string(),
            message: message.to_string(),
        }
    }

    /// The month's sums, read from its file the first time.
    fn month<'m>(
        &self,
        months: &'m mut BTreeMap<(i16, i8), Month>,
        which: (i16, i8),
    ) -> Result<&'m mut Month, UsageStoreError> {
        if months.get(&which).is_none() {
            let month = self.read(which)?;
            while months.len() >= MONTHS_KEPT {
                months.pop_first();
            }
            months.insert(which, month);
        }
        months
            .get_mut(&which)
            .ok_or_else(|| self.error(&self.path(which), "a month left memory while read"))
    }

    fn read(&self, which: (i16, i8)) -> Result<Month, UsageStoreError> {
        let path = self.path(which);
        let text = match std::fs::read_to_string(&path) {
            Ok(text) => text,
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(Month::default()),
            Err(err) => return Err(self.error(&path, err)),
        };
        // A last line without its newline was cut by a crash while written: dropped.
        let whole = &text[..text.rfind('\n').map_or(0, |at| at + 1)];
        if whole.len() < text.len() {
            tracing::warn!(path = %path.display(), "a usage file ends in a cut line (a crash while writing?); it is dropped");
            durable::cut_partial_tail(&path).map_err(|err| self.error(&path, err))?;
        }
        let mut month = Month::default();
        let mut lines = 0;
        for line in whole.lines().filter(|line| !line.trim().is_empty()) {
            lines += 1;
            match serde_json::from_str::<Line>(line) {
                Ok(line) => month.take(line),
                Err(err) => tracing::warn!(path = %path.display(), error = %err,
                    "an unreadable usage line is skipped"),
            }
        }
        if lines > month.totals.len() + month.warned.len() + COMPACT_SLACK {
            let mut bytes = Vec::new();
            for line in month.lines() {
                serde_json::to_writer(&mut bytes, &line).map_err(|err| self.error(&path, err))?;
                bytes.push(b'\n');
            }
            durable::replace(&path, &bytes).map_err(|err| self.error(&path, err))?;
            tracing::info!(path = %path.display(), lines, "a usage file was compacted");
        }
        Ok(month)
    }

    /// Appends `line` to the month's file (opened, and its directory made, the first
    /// time); after a failure the file is opened again at the next record.
    fn append(
        &self,
        which: (i16, i8),
        month: &mut Month,
        line: &Line,
    ) -> Result<(), UsageStoreError> {
        let path = self.path(which);
        let mut bytes = serde_json::to_vec(line).map_err(|err| self.error(&path, err))?;
        bytes.push(b'\n');
        let file = match &mut month.file {
            Some(file) => file,
            None => {
                durable::create_private_dir(&self.dir).map_err(|err| self.error(&self.dir, err))?;
                let file = OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(&path)
                    .map_err(|err| self.error(&path, err))?;
                month.file.insert(file)
            }
        };
        file.write_all(&bytes).map_err(|err| {
            month.file = None;
            self.error(&path, err)
        })
    }
}

fn month_of(day: Date) -> (i16, i8) {
    (day.year(), day.month())
}

#[async_trait]
impl UsageStore for FileUsageStore {
    async fn record(&self, record: &UsageRecord) -> Result<(), UsageStoreError> {
        let which = month_of(record.key.day);
        let mut months = self.months.lock().unwrap_or_else(PoisonError::into_inner);
        let month = self.month(&mut months, which)?;
        self.append(which, month, &Line::Spent(record.clone()))?;
        month.take(Line::Spent(record.clone()));
        Ok(())
    }

    async fn spent(&self, from: Date, to: Date) -> Result<Vec<UsageRecord>, UsageStoreError> {
        let mut out = Vec::new();
        let mut months = self.months.lock().unwrap_or_else(PoisonError::into_inner);
        let mut which = month_of(from);
        while which <= month_of(to) {
            let cached = months.contains_key(&which);
            // Months other than those kept are read for this answer only (the CLI's report).
            let read;
            let month = if cached || months.len() < MONTHS_KEPT {
                &*self.month(&mut months, which)?
            } else {
                read = self.read(which)?;
                &read
            };
            out.extend(month.spent(from, to));
            which = if which.1 == 12 {
                (which.0 + 1, 1)
            } else {
                (which.0, which.1 + 1)
            };
        }
        Ok(out)
    }

    async fn day_cost(&self, day: Date, session: &str) -> Result<(f64, f64), UsageStoreError> {
        let mut months = self.months.lock().unwrap_or_else(PoisonError::into_inner);
        Ok(self
            .month(&mut months, month_of(day))?
            .day_cost(day, session))
    }

    async fn warn_once(&self, day: Date, session: &str) -> Result<bool, UsageStoreError> {
        let which = month_of(day);
        let mut months = self.months.lock().unwrap_or_else(PoisonError::into_inner);
        let month = self.month(&mut months, which)?;
        if month.warned.contains(&(day, session.to_owned())) {
            return Ok(false);
        }
        let line = Line::Warned {
            day,
            session: session.to_owned(),
        };
        self.append(which, month, &line)?;
        month.take(line);
        Ok(true)
    }
}

/// Spending kept in memory only (the terminal agent, tests).
#[derive(Default)]
pub struct MemoryUsageStore(Mutex<Month>);

#[async_trait]
impl UsageStore for MemoryUsageStore {
    async fn record(&self, record: &UsageRecord) -> Result<(), UsageStoreError> {
        let mut month = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        month.take(Line::Spent(record.clone()));
        Ok(())
    }

    async fn spent(&self, from: Date, to: Date) -> Result<Vec<UsageRecord>, UsageStoreError> {
        let month = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        Ok(month.spent(from, to).collect())
    }

    async fn day_cost(&self, day: Date, session: &str) -> Result<(f64, f64), UsageStoreError> {
        let month = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        Ok(month.day_cost(day, session))
    }

    async fn warn_once(&self, day: Date, session: &str) -> Result<bool, UsageStoreError> {
        let mut month = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        Ok(month.warned.insert((day, session.to_owned())))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(day: Date, session: &str, input: u64, usd: f64) -> UsageRecord {
        UsageRecord {
            key: UsageKey {
                day,
                agent: "default".into(),
                session: session.into(),
                model: "m".into(),
                chat: None,
            },
            spent: Spent {
                input,
                output: 1,
                cached: 0,
                usd,
            },
        }
    }

    /// What every usage store does: `store` and `again` are two handles on the same
    /// records (a restart, or two workers).
    async fn behaves_as_a_usage_store(store: &dyn UsageStore, again: &dyn UsageStore) {
        let (nov30, dec1) = (
            jiff::civil::date(2026, 11, 30),
            jiff::civil::date(2026, 12, 1),
        );
        store
            .record(&record(nov30, "a", 10, 0.5))
            .await
            .expect("record");
        store
            .record(&record(nov30, "a", 5, 0.25))
            .await
            .expect("record");
        store
            .record(&record(dec1, "a", 1, 1.0))
            .await
            .expect("record");
        assert!(store.warn_once(dec1, "a").await.expect("warn"));
        assert!(!store.warn_once(dec1, "a").await.expect("once"));

        let november = again.spent(nov30, nov30).await.expect("spent");
        assert_eq!(november.len(), 1);
        assert_eq!(november[0].spent.input, 15);
        assert!((november[0].spent.usd - 0.75).abs() < 1e-9);
        let both = again.spent(nov30, dec1).await.expect("spent");
        assert_eq!(both.len(), 2);
        assert!(!again.warn_once(dec1, "a").await.expect("kept"));
        again
            .record(&record(nov30, "b", 1, 2.0))
            .await
            .expect("record");
        let (all, a) = again.day_cost(nov30, "a").await.expect("cost");
        assert!(
            (all - 2.75).abs() < 1e-9 && (a - 0.75).abs() < 1e-9,
            "{all} {a}"
        );
    }

    #[tokio::test]
    async fn records_are_summed_per_key_kept_across_a_restart_and_read_by_day_range() {
        let dir = tempfile::tempdir().expect("tempdir");
        behaves_as_a_usage_store(
            &FileUsageStore::new(dir.path()),
            &FileUsageStore::new(dir.path()),
        )
        .await;
        assert!(dir.path().join("usage/2026-12.jsonl").exists());
    }

    #[tokio::test]
    async fn spending_in_a_state_store_behaves_the_same() {
        let dir = tempfile::tempdir().expect("tempdir");
        let state = || {
            let files: std::sync::Arc<dyn switchboard_core::StateStore> =
                std::sync::Arc::new(switchboard_sessions::FileState::new(dir.path()));
            super::super::StateUsageStore::new(files, "one")
        };
        behaves_as_a_usage_store(&state(), &state()).await;
        assert!(dir.path().join("usage/day/2026-11-30/one").exists());
        // Another writer's totals count toward the day's.
        let files: std::sync::Arc<dyn switchboard_core::StateStore> =
            std::sync::Arc::new(switchboard_sessions::FileState::new(dir.path()));
        let other = super::super::StateUsageStore::new(files, "two");
        let nov30 = jiff::civil::date(2026, 11, 30);
        other
            .record(&record(nov30, "c", 1, 1.0))
            .await
            .expect("record");
        let (all, c) = state().day_cost(nov30, "c").await.expect("cost");
        assert!(
            (all - 3.75).abs() < 1e-9 && (c - 1.0).abs() < 1e-9,
            "{all} {c}"
        );
    }

    #[tokio::test]
    async fn a_cut_last_line_is_dropped_and_a_long_file_compacted() {
        let dir = tempfile::tempdir().expect("tempdir");
        let day = jiff::civil::date(2026, 11, 25);
        let store = FileUsageStore::new(dir.path());
        for _ in 0..(COMPACT_SLACK + 10) {
            store
                .record(&record(day, "a", 1, 0.0))
                .await
                .expect("record");
        }
        let path = dir.path().join("usage/2026-11.jsonl");
        let mut file = OpenOptions::new().append(true).open(&path).expect("open");
        file.write_all(b"{\"kind\":\"spent\",\"day\":\"2026-11-2")
            .expect("cut");
        drop(file);
        let again = FileUsageStore::new(dir.path());
        let spent = again.spent(day, day).await.expect("spent");
        assert_eq!(spent[0].spent.input, (COMPACT_SLACK + 10) as u64);
        let text = std::fs::read_to_string(&path).expect("read");
        assert_eq!(text.lines().count(), 1, "compacted to one sum: {text}");
        again
            .record(&record(day, "a", 1, 0.0))
            .await
            .expect("after");
        let third = FileUsageStore::new(dir.path());
        assert_eq!(
            third.spent(day, day).await.expect("spent")[0].spent.input,
            (COMPACT_SLACK + 11) as u64
        );
    }
}
