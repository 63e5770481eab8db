//! The scheduler as a component: where agents run and `[scheduler] enabled`, the jobs
//! `[[scheduler.jobs]]` and `[heartbeat]` declare are synced into the job store and the
//! scheduler runs until intake stops — a run it did not hand over stays due (or pending) for
//! the next start. A reload syncs the declared jobs again; the rest of `[scheduler]` needs a
//! restart.

use std::sync::Arc;

use switchboard_agent::scheduler::Scheduler;

use crate::component::{Assembly, Change, Component, change, under};
use crate::config::Config;
use crate::scheduler_config::sync_declared;

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
