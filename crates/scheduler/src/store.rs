//! [`JobStore`]: where jobs and their runs are kept — an interface, so that a later store
//! (NATS JetStream, for several hosts) can take the file store's place without the
//! scheduler knowing — and [`FileJobStore`], the one in the state directory.
//!
//! The file store is one file of whole records, as sessions are (`durable`): a job put, a
//! job removed, a run recorded, each one JSON line appended and fsynced under an exclusive
//! lock (`jobs.lock`, so the operator's `switchboard cron` and the daemon never interleave),
//! a torn last line cut on start, and the file rewritten atomically when it holds far more
//! records than it needs. Every operation reads the file again first when another process
//! wrote it since ([`JobStore::version`] tells the scheduler so too).

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use switchboard_sessions::durable;

use super::job::{Job, Outcome, Run};
use super::runs;

/// A job store that could not do what it was asked.
#[derive(Debug, thiserror::Error)]
#[error("the job store ({place}): {message}")]
pub struct JobStoreError {
    /// Which file or service.
    pub place: String,
    /// What went wrong.
    pub message: String,
}

/// A change to one job: it sees the job as stored and says whether to write it back. It may
/// be called more than once (a store shared by several hosts calls it again when another
/// changed the job in between); only the last call's job is written.
pub type JobChange = Box<dyn for<'j> FnMut(&'j mut Job) -> bool + Send>;

/// Where jobs and their runs are kept.
#[async_trait]
pub trait JobStore: Send + Sync {
    /// Every job, by id.
    async fn jobs(&self) -> Result<Vec<Job>, JobStoreError>;
    /// One job, if there is one with this id.
    async fn job(&self, id: &str) -> Result<Option<Job>, JobStoreError>;
    /// Adds a job, or replaces the one with its id.
    async fn put(&self, job: &Job) -> Result<(), JobStoreError>;
    /// Changes a job in one step, if it is there: `change` sees it as it is now and says
    /// whether to write what it made of it. Returns the job as written, or `None` (no such
    /// job, or `change` declined). So nothing another writer did in between is undone — a
    /// job removed meanwhile stays removed, one paused stays paused.
    async fn update(&self, id: &str, change: JobChange) -> Result<Option<Job>, JobStoreError>;
    /// Removes a job; whether there was one. Its runs stay readable.
    async fn remove(&self, id: &str) -> Result<bool, JobStoreError>;
    /// Records a run: a later record of the same run (job and due time) replaces it.
    async fn record(&self, run: &Run) -> Result<(), JobStoreError>;
    /// Claims a run's due time before the run is handed over, in one step against every
    /// other scheduler (see `runs`): `Ok(None)` when it is this caller's, else the run
    /// already on record.
    async fn claim(&self, run: &Run) -> Result<Option<Run>, JobStoreError>;
    /// Adopts the pending try `attempt` of `job`'s run due at `due` for the holding `epoch`
    /// of the duty (see `runs`): the run as adopted, or `None` (not on record, ended, or that
    /// holding's already).
    async fn adopt(
        &self,
        job: &str,
        due: jiff::Timestamp,
        attempt: u32,
        epoch: u64,
    ) -> Result<Option<Run>, JobStoreError>;
    /// Settles try `attempt` of `job`'s run due at `due` with `outcome` at `finished`, if it
    /// is still pending (see `runs`): the run as settled, or `None` when it was not pending
    /// (settled already, wherever its turn ended).
    async fn settle(
        &self,
        job: &str,
        due: jiff::Timestamp,
        attempt: u32,
        outcome: &Outcome,
        finished: jiff::Timestamp,
    ) -> Result<Option<Run>, JobStoreError>;
    /// A job's last runs, newest first, at most `limit` (and at most [`RUNS_KEPT`] besides
    /// those still pending).
    ///
    /// [`RUNS_KEPT`]: runs::RUNS_KEPT
    async fn runs(&self, job: &str, limit: usize) -> Result<Vec<Run>, JobStoreError>;
    /// An id no job has had yet.
    async fn new_id(&self) -> Result<String, JobStoreError>;
    /// A number that changes whenever the store changes, whoever changed it.
    async fn version(&self) -> u64;
}

/// One line of the file.
#[derive(Serialize, Deserialize)]
#[serde(tag = "record", rename_all = "snake_case")]
enum Record {
    Job(Box<Job>),
    Removed {
        id: String,
    },
    Run(Run),
    /// The highest job number handed out (so ids are not reused after a removal).
    Counter {
        next: u64,
    },
}

/// What the file says, replayed.
#[derive(Default)]
struct State {
    jobs: BTreeMap<String, Job>,
    runs: BTreeMap<String, Vec<Run>>,
    next: u64,
    /// Records in the file (to know when to rewrite it).
    records: usize,
    /// The file's length and modification time when this state was read or written.
    seen: (u64, i128),
}

impl State {
    fn apply(&mut self, record: Record) {
        self.records += 1;
        match record {
            Record::Job(job) => {
                self.bump(&job.id);
                self.jobs.insert(job.id.clone(), *job);
            }
            Record::Removed { id } => {
                self.jobs.remove(&id);
            }
            Record::Run(run) => runs::record(self.runs.entry(run.job.clone()).or_default(), run),
            Record::Counter { next } => self.next = self.next.max(next),
        }
    }

    /// Keeps the counter past an id of the form `j<n>`.
    fn bump(&mut self, id: &str) {
        if let Some(n) = id.strip_prefix('j').and_then(|n| n.parse::<u64>().ok()) {
            self.next = self.next.max(n + 1);
        }
    }

    /// The records that say all of this state, for a rewrite.
    fn records(&self) -> Vec<Record> {
        let mut out = vec![Record::Counter { next: self.next }];
        out.extend(
            self.jobs
                .values()
                .cloned()
                .map(|job| Record::Job(Box::new(job))),
        );
        for runs in self.runs.values() {
            out.extend(runs.iter().rev().cloned().map(Record::Run));
        }
        out
    }
}

/// The job store in `<state_dir>/scheduler/`.
#[derive(Clone)]
pub struct FileJobStore {
    dir: PathBuf,
    /// The file as last read; held only for one operation, in a blocking task.
    state: Arc<Mutex<State>>,
}

impl FileJobStore {
    /// The store of `state_dir` (its directory is made when first written).
    pub fn new(state_dir: &Path) -> Self {
        Self {
            dir: state_dir.join("scheduler"),
            state: Arc::new(Mutex::new(State::default())),
        }
    }

    fn file(&self) -> PathBuf {
        self.dir.join("jobs.jsonl")
    }

    /// Runs `work` on the state, read again if the file changed, under the file's lock, in
    /// a blocking task; what it returns as records is appended (or, when the file has grown
    /// far past what it needs, the whole state is written anew).
    async fn with<T: Send + 'static>(
        &self,
        work: impl FnOnce(&mut State) -> (T, Vec<Record>) + Send + 'static,
    ) -> Result<T, JobStoreError> {
        let store = self.clone();
        let fail = |message: String| JobStoreError {
            place: self.file().display().to_string(),
            message,
        };
        tokio::task::spawn_blocking(move || store.with_blocking(work))
            .await
            .map_err(|err| fail(format!("the store's task ended: {err}")))?
            .map_err(|err| fail(err.to_string()))
    }

    /// Changes a run of `job` by `rule` in one step: the run as changed (recorded), or
    /// `None` when the rule changed nothing.
    async fn change_run(
        &self,
        job: &str,
        rule: impl FnOnce(&mut [Run]) -> Option<Run> + Send + 'static,
    ) -> Result<Option<Run>, JobStoreError> {
        let job = job.to_owned();
        self.with(move |state| {
            let mut kept = state.runs.get(&job).cloned().unwrap_or_default();
            match rule(&mut kept) {
                Some(changed) => (Some(changed.clone()), vec![Record::Run(changed)]),
                None => (None, Vec::new()),
            }
        })
        .await
    }

    fn with_blocking<T>(
        &self,
        work: impl FnOnce(&mut State) -> (T, Vec<Record>),
    ) -> std::io::Result<T> {
        durable::create_private_dir(&self.dir)?;
        let lock = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(self.dir.join("jobs.lock"))?;
        lock.lock()?;
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        let path = self.file();
        if stamp(&path) != state.seen {
            *state = read(&path)?;
        }
        let (value, records) = work(&mut state);
        if !records.is_empty() {
            for record in records {
                let mut line = serde_json::to_vec(&record).map_err(std::io::Error::other)?;
                line.push(b'\n');
                state.apply(record);
                let file = OpenOptions::new().create(true).append(true).open(&path)?;
                durable::append_whole(&file, &line).map_err(|failure| failure.error)?;
                file.sync_data()?;
            }
            let needed = 1 + state.jobs.len() + state.runs.values().map(Vec::len).sum::<usize>();
            if state.records > 2 * needed + 64 {
                let mut bytes = Vec::new();
                for record in state.records() {
                    serde_json::to_writer(&mut bytes, &record).map_err(std::io::Error::other)?;
                    bytes.push(b'\n');
                }
                durable::replace(&path, &bytes)?;
                state.records = needed;
            }
            state.seen = stamp(&path);
        }
        drop(state);
        lock.unlock()?;
        Ok(value)
    }
}

/// The file's length and modification time (nanoseconds), or zeros when there is none.
fn stamp(path: &Path) -> (u64, i128) {
    std::fs::metadata(path).map_or((0, 0), |meta| {
        let modified = meta
            .modified()
            .ok()
            .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
            .map_or(0, |d| d.as_nanos() as i128);
        (meta.len(), modified)
    })
}

/// Reads the file into a state: a torn last line (a crash mid-append) is cut off first; a
/// line that does not read is skipped with a warning.
fn read(path: &Path) -> std::io::Result<State> {
    let mut state = State::default();
    durable::cut_partial_tail(path)?;
    let file = match File::open(path) {
        Ok(file) => file,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(state),
        Err(err) => return Err(err),
    };
    for (number, line) in BufReader::new(file).lines().enumerate() {
        let line = line?;
        if line.trim().is_empty() {
            continue;
        }
        match serde_json::from_str::<Record>(&line) {
            Ok(record) => state.apply(record),
            Err(err) => tracing::warn!(file = %path.display(), line = number + 1, error = %err,
                "a job record does not read; skipped"),
        }
    }
    state.seen = stamp(path);
    Ok(state)
}

#[async_trait]
impl JobStore for FileJobStore {
    async fn jobs(&self) -> Result<Vec<Job>, JobStoreError> {
        // No file, no jobs: nothing to lock or read (a daemon that never had a job).
        if !self.file().exists() {
            return Ok(Vec::new());
        }
        self.with(|state| (state.jobs.values().cloned().collect(), Vec::new()))
            .await
    }

    async fn job(&self, id: &str) -> Result<Option<Job>, JobStoreError> {
        let id = id.to_owned();
        self.with(move |state| (state.jobs.get(&id).cloned(), Vec::new()))
            .await
    }

    async fn put(&self, job: &Job) -> Result<(), JobStoreError> {
        let job = Box::new(job.clone());
        self.with(move |_| ((), vec![Record::Job(job)])).await
    }

    async fn update(&self, id: &str, mut change: JobChange) -> Result<Option<Job>, JobStoreError> {
        let id = id.to_owned();
        self.with(move |state| {
            let Some(mut job) = state.jobs.get(&id).cloned() else {
                return (None, Vec::new());
            };
            if !change(&mut job) {
                return (None, Vec::new());
            }
            (Some(job.clone()), vec![Record::Job(Box::new(job))])
        })
        .await
    }

    async fn remove(&self, id: &str) -> Result<bool, JobStoreError> {
        let id = id.to_owned();
        self.with(move |state| {
            if state.jobs.contains_key(&id) {
                (true, vec![Record::Removed { id }])
            } else {
                (false, Vec::new())
            }
        })
        .await
    }

    async fn record(&self, run: &Run) -> Result<(), JobStoreError> {
        let run = run.clone();
        self.with(move |_| ((), vec![Record::Run(run)])).await
    }

    async fn claim(&self, run: &Run) -> Result<Option<Run>, JobStoreError> {
        let run = run.clone();
        self.with(move |state| {
            let mut kept = state.runs.get(&run.job).cloned().unwrap_or_default();
            match runs::claim(&mut kept, &run) {
                None => (None, vec![Record::Run(run)]),
                taken => (taken, Vec::new()),
            }
        })
        .await
    }

    async fn adopt(
        &self,
        job: &str,
        due: jiff::Timestamp,
        attempt: u32,
        epoch: u64,
    ) -> Result<Option<Run>, JobStoreError> {
        self.change_run(job, move |kept| runs::adopt(kept, due, attempt, epoch))
            .await
    }

    async fn settle(
        &self,
        job: &str,
        due: jiff::Timestamp,
        attempt: u32,
        outcome: &Outcome,
        finished: jiff::Timestamp,
    ) -> Result<Option<Run>, JobStoreError> {
        let outcome = outcome.clone();
        self.change_run(job, move |kept| {
            runs::settle(kept, due, attempt, &outcome, finished)
        })
        .await
    }

    async fn runs(&self, job: &str, limit: usize) -> Result<Vec<Run>, JobStoreError> {
        let job = job.to_owned();
        self.with(move |state| {
            let runs = state
                .runs
                .get(&job)
                .map(|runs| runs.iter().take(limit).cloned().collect())
                .unwrap_or_default();
            (runs, Vec::new())
        })
        .await
    }

    async fn new_id(&self) -> Result<String, JobStoreError> {
        self.with(|state| {
            let next = state.next.max(1);
            (format!("j{next}"), vec![Record::Counter { next: next + 1 }])
        })
        .await
    }

    async fn version(&self) -> u64 {
        // One `stat`, done in place: the loop asks this every few seconds, and a blocking
        // task for it would keep a thread of the blocking pool awake.
        let (len, modified) = stamp(&self.file());
        len.wrapping_mul(1_000_003) ^ (modified as u64)
    }
}

#[cfg(test)]
#[path = "store_tests.rs"]
mod tests;
