//! Spending as earlier builds kept it in one process: a file per month,
//! `state_dir/usage/YYYY-MM.jsonl`, a JSON line per model call (`"kind": "spent"`) or per
//! warning (`"kind": "warned"`). At the first start that keeps spending in the state store,
//! each such file is summed into the documents of its days and chats
//! ([`StateUsageStore::put_sums`]) and renamed `YYYY-MM.jsonl.migrated` (left for the
//! operator to remove). The documents are written whole, not added to, so a start killed
//! half-way does it again from the file with the same result.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use jiff::civil::Date;

use crate::{Spent, StateUsageStore, UsageKey, UsageRecord, UsageStoreError};

/// One line of a month's file.
enum Line {
    Spent(UsageRecord),
    Warned { day: Date, session: String },
}

impl Line {
    /// A line as the earlier builds wrote it: a JSON object with its kind in `"kind"` and
    /// the record's fields beside it — read field by field from a JSON value (serde's
    /// reading of that tagged, flattened enum would weigh more binary than this whole
    /// module, for code that runs once).
    fn parse(line: &str) -> Result<Self, String> {
        let value: serde_json::Value = serde_json::from_str(line).map_err(|err| err.to_string())?;
        let text = |field: &str| value[field].as_str().map(str::to_owned);
        let needed = |field: &str| text(field).ok_or_else(|| format!("no `{field}`"));
        let day: Date = needed("day")?.parse().map_err(|err| format!("{err}"))?;
        let count = |field: &str| value[field].as_u64().unwrap_or(0);
        match value["kind"].as_str() {
            Some("spent") => Ok(Self::Spent(UsageRecord {
                key: UsageKey {
                    day,
                    agent: needed("agent")?,
                    session: needed("session")?,
                    model: needed("model")?,
                    chat: text("chat"),
                },
                spent: Spent {
                    input: count("input"),
                    output: count("output"),
                    cached: count("cached"),
                    usd: value["usd"].as_f64().unwrap_or(0.0),
                    reasoning: 0,
                },
            })),
            Some("warned") => Ok(Self::Warned {
                day,
                session: needed("session")?,
            }),
            _ => Err("not a usage line of an earlier build".into()),
        }
    }
}

/// Moves the month files under `state_dir/usage/` into `store`; the number of files moved.
pub async fn migrate_files(
    state_dir: &Path,
    store: &StateUsageStore,
) -> Result<usize, UsageStoreError> {
    let dir = state_dir.join("usage");
    let fail = |path: &Path, err: std::io::Error| UsageStoreError {
        place: path.display().to_string(),
        message: err.to_string(),
    };
    let entries = match std::fs::read_dir(&dir) {
        Ok(entries) => entries,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(0),
        Err(err) => return Err(fail(&dir, err)),
    };
    let mut months: Vec<_> = entries
        .filter_map(Result::ok)
        .map(|entry| entry.path())
        .filter(|path| is_month_file(path))
        .collect();
    months.sort();
    for path in &months {
        let text = std::fs::read_to_string(path).map_err(|err| fail(path, err))?;
        let (sums, warned) = sum(path, &text);
        let chats = store.put_sums(&sums, &warned).await?;
        let mut done = path.as_os_str().to_owned();
        done.push(".migrated");
        std::fs::rename(path, &done).map_err(|err| fail(path, err))?;
        tracing::info!(file = %path.display(), chats, "the usage of a month moved into the state store");
    }
    Ok(months.len())
}

/// `YYYY-MM.jsonl`.
fn is_month_file(path: &Path) -> bool {
    path.file_name()
        .and_then(|name| name.to_str())
        .and_then(|name| name.strip_suffix(".jsonl"))
        .is_some_and(|month| {
            month.len() == 7
                && month.bytes().enumerate().all(|(at, byte)| {
                    if at == 4 {
                        byte == b'-'
                    } else {
                        byte.is_ascii_digit()
                    }
                })
        })
}

/// A file's lines summed per key, and the chats warned; a line that does not read (one
/// cut by a crash) is skipped with a warning.
fn sum(path: &Path, text: &str) -> (BTreeMap<UsageKey, Spent>, BTreeSet<(Date, String)>) {
    let (mut sums, mut warned) = (BTreeMap::<UsageKey, Spent>::new(), BTreeSet::new());
    for (number, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        match Line::parse(line) {
            Ok(Line::Spent(record)) => *sums.entry(record.key).or_default() += record.spent,
            Ok(Line::Warned { day, session }) => {
                warned.insert((day, session));
            }
            Err(err) => tracing::warn!(file = %path.display(), line = number + 1, error = %err,
                "a usage line does not read; skipped"),
        }
    }
    (sums, warned)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use switchboard_core::StateStore;
    use switchboard_sessions::FileState;

    use super::*;
    use crate::UsageStore;

    const NOVEMBER: &str = r#"{"kind":"spent","day":"2026-11-25","agent":"default","session":"telegram_1","model":"m","input":10,"output":2,"usd":0.5}
{"kind":"spent","day":"2026-11-25","agent":"default","session":"telegram_1","model":"m","input":5,"output":1,"usd":0.25}
{"kind":"spent","day":"2026-11-25","agent":"default","session":"spawn_telegram_1_3","model":"m","chat":"telegram_1","input":1,"output":1,"usd":1.0}
{"kind":"warned","day":"2026-11-25","session":"telegram_1"}
{"kind":"spent","day":"2026-11-26","agent":"helper","session":"websocket_x","model":"n","input":7,"output":7,"usd":0.0}
{"kind":"spent","day":"2026-11-2"#;

    #[tokio::test]
    async fn a_months_file_becomes_documents_once_even_when_a_start_is_killed_half_way() {
        let dir = tempfile::tempdir().expect("tempdir");
        let usage = dir.path().join("usage");
        std::fs::create_dir(&usage).expect("dir");
        std::fs::write(usage.join("2026-11.jsonl"), NOVEMBER).expect("file");
        std::fs::write(usage.join("notes.txt"), "not a month").expect("file");
        let state: Arc<dyn StateStore> = Arc::new(FileState::new(dir.path()));
        let store = StateUsageStore::new(state, crate::ALONE);

        // A start killed after the documents were written, before the file was renamed:
        // the next does it all again, and nothing counts twice.
        assert_eq!(migrate_files(dir.path(), &store).await.expect("moved"), 1);
        std::fs::rename(
            usage.join("2026-11.jsonl.migrated"),
            usage.join("2026-11.jsonl"),
        )
        .expect("as if never renamed");
        assert_eq!(migrate_files(dir.path(), &store).await.expect("moved"), 1);
        assert_eq!(migrate_files(dir.path(), &store).await.expect("moved"), 0);
        assert!(usage.join("2026-11.jsonl.migrated").exists());
        assert!(usage.join("notes.txt").exists());

        let day = jiff::civil::date(2026, 11, 25);
        let (all, chat) = store.day_cost(day, "telegram_1").await.expect("cost");
        assert!(
            (all - 1.75).abs() < 1e-9 && (chat - 1.75).abs() < 1e-9,
            "{all} {chat}"
        );
        assert!(!store.warn_once(day, "telegram_1").await.expect("warned"));
        let spent = store
            .spent(day, jiff::civil::date(2026, 11, 26))
            .await
            .expect("spent");
        let own = spent
            .iter()
            .find(|r| r.key.session == "telegram_1")
            .expect("its own");
        assert_eq!((own.spent.input, own.spent.output), (15, 3));
        assert!(
            spent
                .iter()
                .any(|r| r.key.agent == "helper" && r.spent.input == 7)
        );
        assert_eq!(spent.len(), 3, "{spent:?}");

        // Recording goes on from there.
        let mut more = own.clone();
        more.spent.usd = 0.25;
        store.record(&more).await.expect("record");
        let (all, _) = store.day_cost(day, "telegram_1").await.expect("cost");
        assert!((all - 2.0).abs() < 1e-9, "{all}");
    }
}
