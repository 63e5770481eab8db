//! `switchboard cron list | add | rm | pause | resume | run | runs`: the operator's view of
//! scheduled jobs, on the state directory of the config's daemon. It works on the job store
//! alone (the same [`Jobs`] the chats use, as the operator, who sees every chat's jobs); a
//! running daemon's scheduler sees each change at its next look, within two seconds.

use std::io::Write;
use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context;
use switchboard_scheduler::{
    Asker, Job, JobAction, JobStore, Jobs, NewJob, Run, SystemClock, When, duration,
};

use crate::cli::{CronAction, resolve_config};
use crate::config::{Config, Secrets};
use switchboard_scheduler::chat_target;

/// Runs a cron command.
pub async fn run(config: Option<&Path>, action: &CronAction) -> anyhow::Result<ExitCode> {
    let path = resolve_config(config)?;
    // Only the state directory and `[scheduler]` are needed: no secret is resolved.
    let config = Config::load_with(&path, Secrets::Skip)?;
    let store: Arc<dyn JobStore> = crate::cluster::Stores::open(&config).await?.jobs();
    let jobs = Jobs::new(
        store.clone(),
        Arc::new(SystemClock),
        config.scheduler.settings(),
    );
    let asker = Asker::Operator;
    let mut out = std::io::stdout().lock();
    let done = match action {
        CronAction::List => {
            let all = jobs.list(&asker).await.map_err(anyhow::Error::msg)?;
            if all.is_empty() {
                writeln!(out, "There are no scheduled jobs.")?;
            }
            for job in &all {
                writeln!(out, "{}", jobs.describe(job))?;
                writeln!(
                    out,
                    "    {}",
                    whereabouts(job, &jobs.time_of(job, job.created_at))
                )?;
            }
            return Ok(ExitCode::SUCCESS);
        }
        CronAction::Add { .. } => add(&config, &jobs, action).await?,
        CronAction::Rm { id } => act(&jobs, JobAction::Remove(id.clone())).await?,
        CronAction::Pause { id } => act(&jobs, JobAction::Pause(id.clone())).await?,
        CronAction::Resume { id } => act(&jobs, JobAction::Resume(id.clone())).await?,
        CronAction::Run { id } => {
            let said = act(&jobs, JobAction::Run(id.clone())).await?;
            format!("{said} (the running daemon starts it within two seconds)")
        }
        CronAction::Runs { id, limit } => {
            let runs = jobs
                .runs(&asker, id, *limit)
                .await
                .map_err(anyhow::Error::msg)?;
            if runs.is_empty() {
                writeln!(out, "Job {id} has no runs recorded.")?;
                return Ok(ExitCode::SUCCESS);
            }
            // Due times exact, in UTC: each names its run (`sched:<job>:<due>`), and scripts
            // read them.
            writeln!(out, "{:<22} {:>9} {:>9}  outcome", "due", "started", "took")?;
            for run in &runs {
                let due = run.due.round(jiff::Unit::Second).unwrap_or(run.due);
                writeln!(out, "{}", run_line(run, &due.to_string()))?;
            }
            return Ok(ExitCode::SUCCESS);
        }
    };
    writeln!(out, "{done}").context("cannot write to stdout")?;
    Ok(ExitCode::SUCCESS)
}

/// `switchboard cron add`: the job the operator describes, in its chat.
async fn add(config: &Config, jobs: &Jobs, action: &CronAction) -> anyhow::Result<String> {
    let CronAction::Add {
        chat,
        message,
        name,
        after,
        at,
        every,
        cron,
        tz,
        session,
        catch_up,
    } = action
    else {
        anyhow::bail!("not an add");
    };
    let chat = chat_target(&config.channels.enabled(), chat).map_err(anyhow::Error::msg)?;
    let tz = tz.clone().unwrap_or_else(|| jobs.timezone());
    let schedule = When::one_of(
        after.as_deref(),
        at.as_deref(),
        every.as_deref(),
        cron.as_deref(),
    )
    .and_then(|when| when.schedule(&tz, jobs.now()))
    .map_err(anyhow::Error::msg)?;
    let catch_up = catch_up
        .as_deref()
        .map(duration)
        .transpose()
        .map_err(anyhow::Error::msg)?
        .map(|wait| std::time::Duration::try_from(wait).unwrap_or_default());
    let job = jobs
        .add(NewJob {
            name: name.clone(),
            message: message.clone(),
            schedule,
            chat,
            session: *session,
            catch_up,
            created_by: Some("operator".into()),
            agent: None,
            owner: None,
        })
        .await
        .map_err(anyhow::Error::msg)?;
    Ok(format!("Added {}", jobs.describe(&job)))
}

async fn act(jobs: &Jobs, action: JobAction) -> anyhow::Result<String> {
    jobs.act(&Asker::Operator, &action)
        .await
        .map_err(anyhow::Error::msg)
}

/// Where a job runs, how, and who made it (`made`: when, as the person reads it).
fn whereabouts(job: &Job, made: &str) -> String {
    format!(
        "in {}:{} ({} session), made by {} at {made}",
        job.channel,
        job.chat_id,
        job.session.as_str(),
        job.created_by,
    )
}

/// One run: when it was due (`due`, as the person reads it), how late it started, how long
/// it took, what came of it.
fn run_line(run: &Run, due: &str) -> String {
    let seconds = |d: jiff::SignedDuration| format!("{:.1}s", d.as_secs_f64());
    let started = run
        .started
        .map(|started| format!("+{}", seconds(started.duration_since(run.due))))
        .unwrap_or_else(|| "-".into());
    let took = match (run.started, run.finished) {
        (Some(started), Some(finished)) => seconds(finished.duration_since(started)),
        (Some(_), None) => "running".into(),
        _ => "-".into(),
    };
    let tries = if run.attempt > 1 {
        format!(" (try {})", run.attempt)
    } else {
        String::new()
    };
    format!(
        "{due:<22} {started:>9} {took:>9}  {}{tries}",
        run.outcome.describe()
    )
}

#[cfg(test)]
mod tests {
    use std::str::FromStr;

    use jiff::Timestamp;
    use switchboard_scheduler::Outcome;

    use super::*;

    #[test]
    fn a_run_reads_as_due_started_took_outcome() {
        let due = Timestamp::from_str("2026-11-25T09:00:00Z").expect("ts");
        let run = Run {
            job: "j1".into(),
            due,
            started: Some(Timestamp::from_str("2026-11-25T09:00:00.4Z").expect("ts")),
            finished: Some(Timestamp::from_str("2026-11-25T09:00:12.7Z").expect("ts")),
            outcome: Outcome::Failed {
                why: "the model was unreachable".into(),
            },
            attempt: 1,
            epoch: Some(7),
        };
        let shown = "2026-11-25T09:00:00Z";
        assert_eq!(
            run_line(&run, shown),
            "2026-11-25T09:00:00Z       +0.4s     12.3s  failed: the model was unreachable"
        );
        let skipped = Run {
            started: None,
            finished: Some(due),
            outcome: Outcome::Skipped {
                why: "the run before it was still going".into(),
            },
            ..run
        };
        assert_eq!(
            run_line(&skipped, shown),
            "2026-11-25T09:00:00Z           -         -  skipped: the run before it was still going"
        );
    }
}
