//! [`JobStore`]: what the scheduler needs of where jobs and their runs are kept. One store
//! keeps them ([`StateJobStore`](crate::StateJobStore), in the daemon's state store: files
//! in one process, the bucket on a cluster); every change is one step against every other
//! writer (the operator's `switchboard cron`, another worker), and [`JobStore::version`]
//! tells the scheduler when anyone changed the jobs.

use async_trait::async_trait;

use super::job::{Job, Outcome, Run};

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
    /// [`RUNS_KEPT`]: crate::RUNS_KEPT
    async fn runs(&self, job: &str, limit: usize) -> Result<Vec<Run>, JobStoreError>;
    /// An id no job has had yet.
    async fn new_id(&self) -> Result<String, JobStoreError>;
    /// A number that changes whenever the store changes, whoever changed it.
    async fn version(&self) -> u64;
}
