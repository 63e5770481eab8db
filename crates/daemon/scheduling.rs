//! The scheduler as a component: where agents run and `[scheduler] enabled`, the jobs
//! `[[scheduler.jobs]]` and `[heartbeat]` declare are synced into the job store and the
//! scheduler runs until intake stops — a run it did not hand over stays due (or pending) for
//! the next start. A reload syncs the declared jobs again; the rest of `[scheduler]` needs a
//! restart.

use std::sync::Arc;

use switchboard_scheduler::{Jobs, Scheduler, Synced};

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

/// The scheduler's sections as the config reads them: a job or heartbeat that does not
/// read is named at its line.
#[cfg(test)]
mod tests {
    use std::path::Path;

    use std::time::Duration;

    use switchboard_core::ConfigError;
    use switchboard_scheduler::SessionMode;

    use crate::config::Config;

    fn parse(jobs: &str) -> Result<Config, ConfigError> {
        let text = format!("[channels.websocket]\nauth = \"none\"\n\n{jobs}");
        Config::parse(&text, Path::new("/etc/switchboard/config.toml"))
    }

    #[test]
    fn a_declared_job_that_does_not_read_is_named_at_its_line() {
        let job = |rest: &str| {
            format!(
                "[[scheduler.jobs]]\nname = \"digest\"\nchat = \"websocket:c\"\nmessage = \"m\"\n{rest}"
            )
        };
        for (text, key, says, line) in [
            (
                job("cron = \"0 99 * * *\"\n"),
                "scheduler.jobs[0].cron",
                "0 99",
                8,
            ),
            (
                job("every = \"10s\"\n"),
                "scheduler.jobs[0].every",
                "min_interval_secs",
                8,
            ),
            (job(""), "scheduler.jobs[0]", "exactly one of", 5),
            (
                job("every = \"1h\"\ncron = \"0 9 * * *\"\n"),
                "scheduler.jobs[0]",
                "exactly one of",
                5,
            ),
            (
                job("every = \"1h\"\ntz = \"Mars/Olympus\"\n"),
                "scheduler.jobs[0].tz",
                "Mars/Olympus",
                9,
            ),
            (
                job("every = \"1h\"\nsession = \"own\"\n"),
                "scheduler.jobs[0].session",
                "isolated",
                9,
            ),
            (
                job("every = \"1h\"\n").replace("websocket:c", "telegram:1"),
                "scheduler.jobs[0].chat",
                "enables no channel `telegram`",
                6,
            ),
            (
                job("every = \"1h\"\n").replace("digest", "j7"),
                "scheduler.jobs[0].name",
                "kept for jobs made in chats",
                5,
            ),
        ] {
            let err = parse(&text).expect_err(&text);
            assert_eq!(err.key, key, "{text}");
            assert!(err.message.contains(says), "{err}");
            assert_eq!(err.line, Some(line), "{err}");
        }
        let twice = format!("{}\n{}", job("every = \"1h\"\n"), job("every = \"2h\"\n"));
        let err = parse(&twice).expect_err("twice");
        assert_eq!(err.key, "scheduler.jobs[1].name");
        assert!(err.message.contains("declared twice"), "{err}");
    }

    #[test]
    fn a_declared_job_reads_with_its_defaults_filled_in() {
        let config = parse(
            "[scheduler]\ntimezone = \"Europe/Berlin\"\ncatch_up_secs = 600\n\n[[scheduler.jobs]]\n\
             name = \"morning\"\nchat = \"websocket:c\"\nmessage = \"Good morning.\"\n\
             cron = \"0 8 * * 1-5\"\nsession = \"isolated\"\n",
        )
        .expect("reads");
        let declared = config
            .scheduler
            .declared(
                &config.channels.enabled(),
                &config.source,
                jiff::Timestamp::now(),
            )
            .expect("declared");
        assert_eq!(declared.len(), 1);
        let morning = &declared[0];
        assert_eq!(morning.id, "morning");
        assert_eq!(morning.session, SessionMode::Isolated);
        assert_eq!(morning.catch_up, Duration::from_secs(600));
        assert_eq!(
            morning.schedule,
            switchboard_scheduler::Schedule::Cron {
                expr: "0 8 * * 1-5".into(),
                tz: "Europe/Berlin".into()
            }
        );
        assert!(
            morning.spec.contains("\"tz\":\"Europe/Berlin\""),
            "{}",
            morning.spec
        );
    }

    #[test]
    fn a_heartbeat_that_cannot_beat_is_named_at_its_line() {
        for (text, key, says) in [
            (
                "[heartbeat]\nevery = \"30m\"\n",
                "heartbeat.chat",
                "where the heartbeat speaks",
            ),
            (
                "[heartbeat]\nchat = \"websocket:c\"\n",
                "heartbeat.every",
                "turn the heartbeat on",
            ),
            (
                "[heartbeat]\nevery = \"10s\"\nchat = \"websocket:c\"\n",
                "heartbeat.every",
                "scheduler.min_interval_secs",
            ),
            (
                "[scheduler]\nenabled = false\n[heartbeat]\nevery = \"1h\"\nchat = \"websocket:c\"\n",
                "heartbeat.every",
                "enabled = true",
            ),
            (
                "[heartbeat]\nevery = \"1h\"\nchat = \"websocket:c\"\nactive_hours = \"8 to 22\"\n",
                "heartbeat.active_hours",
                "08:00-22:00",
            ),
        ] {
            let err = parse(text).expect_err(text);
            assert_eq!(err.key, key, "{text}");
            assert!(err.message.contains(says), "{err}");
            assert!(err.line.is_some(), "{err}");
        }
        let config =
            parse("[heartbeat]\nevery = \"30m\"\nchat = \"websocket:c\"\n").expect("reads");
        let beat = config
            .heartbeat
            .declared(
                &config.scheduler,
                &config.channels.enabled(),
                &config.source,
                jiff::Timestamp::now(),
            )
            .expect("declared")
            .expect("on");
        assert_eq!(beat.id, "heartbeat");
        assert_eq!(beat.session, SessionMode::Isolated);
        assert_eq!(beat.catch_up, Duration::from_secs(1800));
    }
}
