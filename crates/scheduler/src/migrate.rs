//! Jobs as earlier builds kept them in one process: `state_dir/scheduler/jobs.jsonl`,
//! whole records appended (a job put or removed, a run recorded, the job counter). At the
//! first start that keeps jobs in the state store the file is replayed, its jobs, runs and
//! counter written as documents ([`StateJobStore`]), and the file renamed
//! `jobs.jsonl.migrated` (left for the operator to remove). Every write puts a whole
//! document or records a run in place of itself, so a start killed half-way does it again
//! from the file with the same result.

use std::collections::BTreeMap;
use std::path::Path;

use super::job::{Job, Run};
use super::runs;
use super::state_store::StateJobStore;
use super::store::{JobStore, JobStoreError};

/// One line of the file: a JSON object with its kind in `"record"`. It is read as a JSON
/// value, and the rest as the record with the deserializers the store already has (serde's
/// reading of the tagged enum the earlier builds wrote would weigh ~40 KB of binary for code
/// that runs once).
enum Record {
    Job(Box<Job>),
    Removed {
        id: String,
    },
    Run(Run),
    /// The highest job number handed out.
    Counter {
        next: u64,
    },
}

impl Record {
    fn parse(line: &str) -> Result<Self, String> {
        let mut value: serde_json::Value =
            serde_json::from_str(line).map_err(|err| err.to_string())?;
        let tag = value
            .as_object_mut()
            .and_then(|object| object.remove("record"))
            .and_then(|tag| tag.as_str().map(str::to_owned))
            .unwrap_or_default();
        let rest = || serde_json::to_vec(&value).map_err(|err| err.to_string());
        match tag.as_str() {
            "job" => serde_json::from_slice(&rest()?)
                .map(|job| Self::Job(Box::new(job)))
                .map_err(|err| err.to_string()),
            "run" => serde_json::from_slice(&rest()?)
                .map(Self::Run)
                .map_err(|err| err.to_string()),
            "removed" => value["id"]
                .as_str()
                .map(|id| Self::Removed { id: id.to_owned() })
                .ok_or_else(|| "a removal without an id".into()),
            "counter" => value["next"]
                .as_u64()
                .map(|next| Self::Counter { next })
                .ok_or_else(|| "a counter without a number".into()),
            other => Err(format!("`{other}` is not a kind of job record")),
        }
    }
}

/// What the file says, replayed.
#[derive(Default)]
struct Replayed {
    jobs: BTreeMap<String, Job>,
    runs: BTreeMap<String, Vec<Run>>,
    next: u64,
}

/// Moves `state_dir/scheduler/jobs.jsonl` into `store`; the number of jobs moved (`None`:
/// there was no file).
pub async fn migrate_file(
    state_dir: &Path,
    store: &StateJobStore,
) -> Result<Option<usize>, JobStoreError> {
    let path = state_dir.join("scheduler").join("jobs.jsonl");
    let fail = |err: std::io::Error| JobStoreError {
        place: path.display().to_string(),
        message: err.to_string(),
    };
    let text = match std::fs::read_to_string(&path) {
        Ok(text) => text,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(err) => return Err(fail(err)),
    };
    let replayed = replay(&path, &text);
    for job in replayed.jobs.values() {
        store.put(job).await?;
    }
    for run in replayed.runs.values().flat_map(|runs| runs.iter().rev()) {
        store.record(run).await?;
    }
    store.number_from(replayed.next).await?;
    std::fs::rename(&path, path.with_extension("jsonl.migrated")).map_err(fail)?;
    tracing::info!(file = %path.display(), jobs = replayed.jobs.len(),
        "the scheduler's jobs moved into the state store");
    Ok(Some(replayed.jobs.len()))
}

/// The file's records in order; a line that does not read (the last, cut by a crash) is
/// skipped with a warning.
fn replay(path: &Path, text: &str) -> Replayed {
    let mut state = Replayed::default();
    for (number, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let record = match Record::parse(line) {
            Ok(record) => record,
            Err(err) => {
                tracing::warn!(file = %path.display(), line = number + 1, error = %err,
                    "a job record does not read; skipped");
                continue;
            }
        };
        match record {
            Record::Job(job) => {
                if let Some(n) = job.id.strip_prefix('j').and_then(|n| n.parse::<u64>().ok()) {
                    state.next = state.next.max(n + 1);
                }
                state.jobs.insert(job.id.clone(), *job);
            }
            Record::Removed { id } => {
                state.jobs.remove(&id);
            }
            Record::Run(run) => runs::record(state.runs.entry(run.job.clone()).or_default(), run),
            Record::Counter { next } => state.next = state.next.max(next),
        }
    }
    state
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use switchboard_core::StateStore;
    use switchboard_sessions::FileState;

    use super::*;
    use crate::job::Outcome;

    /// A file as an earlier build wrote it: j1 kept with two runs, j2 removed, the counter at 4, and a
    /// last line cut by a crash.
    fn old_file(job: &Job) -> String {
        let line = |record: serde_json::Value| format!("{record}\n");
        let mut job_value = serde_json::to_value(job).expect("job");
        job_value["record"] = "job".into();
        let mut other = job_value.clone();
        other["id"] = "j2".into();
        let run = |second: i64, outcome: Outcome| {
            let run = Run {
                job: "j1".into(),
                due: jiff::Timestamp::from_second(second).expect("ts"),
                started: None,
                finished: None,
                outcome,
                attempt: 1,
                epoch: None,
            };
            let mut value = serde_json::to_value(run).expect("run");
            value["record"] = "run".into();
            value
        };
        [
            line(serde_json::json!({"record": "counter", "next": 4})),
            line(job_value),
            line(other),
            line(run(60, Outcome::Answered)),
            line(run(120, Outcome::Quiet)),
            line(serde_json::json!({"record": "removed", "id": "j2"})),
        ]
        .concat()
            + r#"{"record":"job","id":"j3","na"#
    }

    #[tokio::test]
    async fn the_jobs_file_becomes_documents_once_even_when_a_start_is_killed_half_way() {
        let dir = tempfile::tempdir().expect("tempdir");
        let scheduler = dir.path().join("scheduler");
        std::fs::create_dir(&scheduler).expect("dir");
        let job = crate::test_setup::job("j1");
        std::fs::write(scheduler.join("jobs.jsonl"), old_file(&job)).expect("file");
        let state: Arc<dyn StateStore> = Arc::new(FileState::new(dir.path()));
        let store = StateJobStore::new(state);

        assert_eq!(
            migrate_file(dir.path(), &store).await.expect("moved"),
            Some(1)
        );
        std::fs::rename(
            scheduler.join("jobs.jsonl.migrated"),
            scheduler.join("jobs.jsonl"),
        )
        .expect("as if never renamed");
        assert_eq!(
            migrate_file(dir.path(), &store).await.expect("moved"),
            Some(1)
        );
        assert_eq!(migrate_file(dir.path(), &store).await.expect("moved"), None);

        let jobs = store.jobs().await.expect("jobs");
        assert_eq!(jobs, vec![job]);
        let runs = store.runs("j1", 10).await.expect("runs");
        assert_eq!(
            runs.iter()
                .map(|run| run.outcome.clone())
                .collect::<Vec<_>>(),
            [Outcome::Quiet, Outcome::Answered],
            "newest first, each once"
        );
        assert_eq!(
            store.new_id().await.expect("id"),
            "j4",
            "no id handed out again"
        );
    }
}
