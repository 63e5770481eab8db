//! The scheduler as a component: where agents run and `[scheduler] enabled`, the jobs
//! `[[scheduler.jobs]]` and `[heartbeat]` declare are synced into the job store and the
//! scheduler runs until intake stops — a run it did not hand over stays due (or pending) for
//! the next start. A reload syncs the declared jobs again; the rest of `[scheduler]` needs a
//! restart.

use std::sync::Arc;

use switchboard_agent::scheduler::{Jobs, Scheduler, Synced};

use crate::component::{Assembly, Change, Component, change, under};
use crate::config::Config;

/// The running scheduler.
pub(crate) struct Scheduling(Scheduler);

impl Component for Scheduling {
    async fn build(daemon: &mut Assembly<'_>) -> anyhow::Result<Option<Self>> {
        // The core made one only where it runs (enabled, and agents run here).
        let Some(scheduler) = daemon.core.scheduler.clone() else {
            return Ok(None);
        };
        sync_declared(scheduler.jobs(), daemon.config).await;
        let (running, intake) = (scheduler.clone(), daemon.shutdown.intake().clone());
        daemon
            .shutdown
            .tracker()
            .spawn(async move { running.run(intake).await });
        Ok(Some(Self(scheduler)))
    }

    fn prepare(&self, config: &Arc<Config>, changed: &[String]) -> Result<Option<Change>, String> {
        let (scheduler, config) = (self.0.clone(), config.clone());
        Ok(change(
            changed,
            |key| under(key, "scheduler.jobs") || under(key, "heartbeat"),
            async move {
                sync_declared(scheduler.jobs(), &config).await;
                Ok(())
            },
        ))
    }
}

/// Makes the job store's config jobs what `config` declares; logs what changed. A store that
/// cannot be written is logged, not fatal: the jobs already stored go on.
pub(crate) async fn sync_declared(jobs: &Jobs, config: &Config) {
    let declared = match config.declared_jobs(jiff::Timestamp::now()) {
        Ok(declared) => declared,
        Err(err) => {
            tracing::error!(error = %err, "the config's jobs do not read");
            return;
        }
    };
    if declared.is_empty() && !jobs.has_declared().await {
        return;
    }
    match jobs.sync_declared(&declared).await {
        Ok(synced) if synced == Synced::default() => {}
        Ok(synced) => tracing::info!(added = ?synced.added, changed = ?synced.changed,
            removed = ?synced.removed, "the config's jobs are in the job store"),
        Err(err) => tracing::error!(error = %err, "the config's jobs could not be stored"),
    }
}
