//! [`StateJobStore`]: jobs kept as documents of the daemon's [`StateStore`] — files under
//! `state_dir/scheduler/` in one process; on a cluster, its shared bucket — so the daemon,
//! every worker and the operator's `switchboard cron` see the same jobs.
//!
//! A job is one document (`scheduler/job/<id>`), its last runs another
//! (`scheduler/runs/<id>`, newest first), and `scheduler/counter` holds the next job number
//! and a version moved by every change to a job. Each change is one
//! [`StateStore::update`]: two hosts changing one job never undo each other. The scheduler
//! asks for the version every few seconds: one read of the counter (in one process, a small
//! file read in place).

use std::sync::Arc;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use switchboard_core::state::{json_change, segment};
use switchboard_core::{Change, StateError, StateStore};

use super::job::{Job, Outcome, Run};
use super::runs;
use super::store::{JobChange, JobStore, JobStoreError};

const COUNTER: &str = "scheduler/counter";

/// The job number handed out next, and the version of the jobs.
#[derive(Default, Serialize, Deserialize)]
struct Counter {
    next: u64,
    version: u64,
}

/// Jobs in a state store.
#[derive(Clone, Debug)]
pub struct StateJobStore {
    state: Arc<dyn StateStore>,
}

impl StateJobStore {
    /// The jobs kept in `state`.
    pub fn new(state: Arc<dyn StateStore>) -> Self {
        Self { state }
    }

    fn fail(&self) -> impl Fn(StateError) -> JobStoreError + '_ {
        |err| JobStoreError {
            place: self.state.place(),
            message: err.to_string(),
        }
    }

    /// Moves the version, and the counter past `id` when it is `j<n>`.
    async fn touched(&self, id: Option<&str>) -> Result<(), JobStoreError> {
        let number = id
            .and_then(|id| id.strip_prefix('j'))
            .and_then(|n| n.parse::<u64>().ok());
        let mut change = json_change(COUNTER, |counter: &mut Counter| {
            counter.version += 1;
            if let Some(n) = number {
                counter.next = counter.next.max(n + 1);
            }
            true
        });
        self.state
            .update(COUNTER, &mut change)
            .await
            .map_err(self.fail())
    }
}

impl StateJobStore {
    /// Keeps the job numbers handed out from now on at `next` or above (jobs moved in from
    /// elsewhere keep their ids, and removed ones' ids are not handed out again).
    pub(crate) async fn number_from(&self, next: u64) -> Result<(), JobStoreError> {
        let mut change = json_change(COUNTER, |counter: &mut Counter| {
            counter.version += 1;
            counter.next = counter.next.max(next);
            true
        });
        self.state
            .update(COUNTER, &mut change)
            .await
            .map_err(self.fail())
    }

    /// Changes a run of `job` by `rule` in one step (the rule run again when another wrote
    /// first): the run as changed, or `None` when the rule changed nothing.
    async fn change_run(
        &self,
        job: &str,
        mut rule: impl FnMut(&mut [Run]) -> Option<Run> + Send,
    ) -> Result<Option<Run>, JobStoreError> {
        let key = runs_key(job);
        let mut changed = None;
        let mut change = json_change(&key, |kept: &mut Vec<Run>| {
            changed = rule(kept);
            changed.is_some()
        });
        self.state
            .update(&key, &mut change)
            .await
            .map_err(self.fail())?;
        drop(change);
        Ok(changed)
    }
}

fn job_key(id: &str) -> String {
    format!("scheduler/job/{}", segment(id))
}

fn runs_key(id: &str) -> String {
    format!("scheduler/runs/{}", segment(id))
}

#[async_trait]
impl JobStore for StateJobStore {
    async fn jobs(&self) -> Result<Vec<Job>, JobStoreError> {
        let found = self
            .state
            .scan("scheduler/job")
            .await
            .map_err(self.fail())?;
        Ok(found
            .into_iter()
            .filter_map(|(key, bytes)| match serde_json::from_slice::<Job>(&bytes) {
                Ok(job) => Some(job),
                Err(err) => {
                    tracing::warn!(%key, error = %err, "a job does not read; skipped");
                    None
                }
            })
            .collect())
    }

    async fn job(&self, id: &str) -> Result<Option<Job>, JobStoreError> {
        let stored = self.state.get(&job_key(id)).await.map_err(self.fail())?;
        Ok(stored.and_then(|stored| serde_json::from_slice(&stored.bytes).ok()))
    }

    async fn put(&self, job: &Job) -> Result<(), JobStoreError> {
        let bytes = serde_json::to_vec(job).map_err(|err| JobStoreError {
            place: self.state.place(),
            message: err.to_string(),
        })?;
        self.state
            .put(&job_key(&job.id), bytes)
            .await
            .map_err(self.fail())?;
        self.touched(Some(&job.id)).await
    }

    async fn update(&self, id: &str, mut change: JobChange) -> Result<Option<Job>, JobStoreError> {
        let mut written = None;
        let mut changer = |bytes: Option<&[u8]>| {
            written = None;
            let Some(mut job) = bytes.and_then(|bytes| serde_json::from_slice::<Job>(bytes).ok())
            else {
                return Change::Keep;
            };
            if !change(&mut job) {
                return Change::Keep;
            }
            match serde_json::to_vec(&job) {
                Ok(bytes) => {
                    written = Some(job);
                    Change::Put(bytes)
                }
                Err(_) => Change::Keep,
            }
        };
        self.state
            .update(&job_key(id), &mut changer)
            .await
            .map_err(self.fail())?;
        if written.is_some() {
            self.touched(None).await?;
        }
        Ok(written)
    }

    async fn remove(&self, id: &str) -> Result<bool, JobStoreError> {
        let mut was = false;
        let mut changer = |bytes: Option<&[u8]>| {
            was = bytes.is_some();
            if was { Change::Delete } else { Change::Keep }
        };
        self.state
            .update(&job_key(id), &mut changer)
            .await
            .map_err(self.fail())?;
        if was {
            self.touched(None).await?;
        }
        Ok(was)
    }

    async fn record(&self, run: &Run) -> Result<(), JobStoreError> {
        let key = runs_key(&run.job);
        let mut change = json_change(&key, |kept: &mut Vec<Run>| {
            runs::record(kept, run.clone());
            true
        });
        self.state
            .update(&key, &mut change)
            .await
            .map_err(self.fail())
    }

    async fn claim(&self, run: &Run) -> Result<Option<Run>, JobStoreError> {
        let key = runs_key(&run.job);
        let mut taken = None;
        let mut change = json_change(&key, |kept: &mut Vec<Run>| {
            // Run again when another wrote first: only the last call's verdict counts.
            taken = runs::claim(kept, run);
            taken.is_none()
        });
        self.state
            .update(&key, &mut change)
            .await
            .map_err(self.fail())?;
        drop(change);
        Ok(taken)
    }

    async fn adopt(
        &self,
        job: &str,
        due: jiff::Timestamp,
        attempt: u32,
        epoch: u64,
    ) -> Result<Option<Run>, JobStoreError> {
        self.change_run(job, |kept| runs::adopt(kept, due, attempt, epoch))
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
        self.change_run(job, |kept| {
            runs::settle(kept, due, attempt, outcome, finished)
        })
        .await
    }

    async fn runs(&self, job: &str, limit: usize) -> Result<Vec<Run>, JobStoreError> {
        let stored = self.state.get(&runs_key(job)).await.map_err(self.fail())?;
        let runs: Vec<Run> = stored
            .and_then(|stored| serde_json::from_slice(&stored.bytes).ok())
            .unwrap_or_default();
        Ok(runs.into_iter().take(limit).collect())
    }

    async fn new_id(&self) -> Result<String, JobStoreError> {
        let mut id = String::new();
        let mut change = json_change(COUNTER, |counter: &mut Counter| {
            let next = counter.next.max(1);
            id = format!("j{next}");
            counter.next = next + 1;
            true
        });
        self.state
            .update(COUNTER, &mut change)
            .await
            .map_err(self.fail())?;
        drop(change);
        Ok(id)
    }

    async fn version(&self) -> u64 {
        match self.state.get(COUNTER).await {
            Ok(Some(stored)) => serde_json::from_slice::<Counter>(&stored.bytes)
                .map_or(0, |counter| counter.version),
            Ok(None) => 0,
            // Unknown: a number no state has, so the jobs are read again.
            Err(_) => u64::MAX,
        }
    }
}

#[cfg(test)]
#[path = "state_store_tests.rs"]
mod tests;
