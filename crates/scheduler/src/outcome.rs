//! What becomes of a run once it is handed to the agent: the [`Settler`] settles it — from
//! the [`Outcomes`] hook where its turn ended (on a cluster, any worker), or from its
//! message's ack (dropped; or, in one process, handled without a turn) — and what follows a
//! settled run: a failed task is tried again with backoff while that is within its window, a
//! one-shot that ran is removed, a failure nobody saw (a job in a session of its own) is told
//! to its chat.
//!
//! A run is settled once, wherever that happens first (`runs::settle`: only while it is
//! pending), so the hook and the ack, or two workers, never record two ends of one run. The
//! settler keeps nothing in memory: whatever it needs is in the job store, which every
//! member shares.

use std::sync::Arc;
use std::time::Duration;

use jiff::{SignedDuration, Timestamp};
use switchboard_core::{
    Bus, ChannelName, ChatId, Fate, OutboundKind, OutboundMessage, ScheduledRun, TurnEnd, is_quiet,
};

use super::job::{Job, JobKind, Outcome, Retry, Run, SessionMode};
use super::jobs::Jobs;
use super::store::JobStore;

/// How often a failed run is tried in all.
pub const MAX_ATTEMPTS: u32 = 3;

/// How long a settle is tried while the store does not answer (NATS restarting): a run left
/// pending holds its job's later due times back until its catch-up has passed.
const SETTLE_TRIES: [Duration; 5] = [
    Duration::from_millis(200),
    Duration::from_millis(500),
    Duration::from_secs(1),
    Duration::from_secs(2),
    Duration::from_secs(5),
];

/// How long after failed try `attempt` the next one starts: 30 s, then 2 min.
fn backoff(attempt: u32) -> SignedDuration {
    SignedDuration::from_secs(30 * 4_i64.pow(attempt.saturating_sub(1).min(4)))
}

/// Settles runs and does what follows. Cloning shares it.
#[derive(Clone)]
pub(super) struct Settler {
    pub(super) jobs: Jobs,
    pub(super) hub: Arc<dyn Bus>,
}

impl Settler {
    fn store(&self) -> &Arc<dyn JobStore> {
        self.jobs.store()
    }

    /// Settles what a run's message came to, as its ack says: only what the ack alone
    /// knows — a run dropped, and (where `Handled` means the turn is over: one process) one
    /// handled without a turn, its answer already in the journal. How a turn ended is the
    /// hook's to settle, before the ack comes.
    pub(super) async fn on_ack(&self, run: &ScheduledRun, fate: Fate) {
        let outcome = match fate {
            // The daemon stops: it stays pending, and the next scheduler takes it over.
            Fate::Unprocessed => return,
            Fate::Dropped => Outcome::Skipped {
                why: "it was dropped (a /stop, or its chat had too many messages waiting)".into(),
            },
            Fate::Handled if self.hub.fates_are_turns() => Outcome::Answered,
            Fate::Handled => return,
        };
        self.settle_run(run, outcome).await;
    }

    /// Settles the run `run` with `outcome`.
    pub(super) async fn settle_run(&self, run: &ScheduledRun, outcome: Outcome) {
        let Ok(due) = Timestamp::from_millisecond(run.due_ms) else {
            tracing::warn!(job = %run.job, due_ms = run.due_ms, "a scheduled run names no time");
            return;
        };
        if !self.settle(&run.job, due, run.attempt, outcome).await {
            tracing::debug!(job = %run.job, %due, "a scheduled run ended that its job no longer waits for");
        }
    }

    /// Settles try `attempt` of `job`'s run due at `due` with `outcome`, if it is still
    /// pending, and does what follows (see the module doc). Whether it was settled here.
    pub(super) async fn settle(
        &self,
        job: &str,
        due: Timestamp,
        attempt: u32,
        outcome: Outcome,
    ) -> bool {
        let now = self.jobs.now();
        let mut tries = SETTLE_TRIES.iter();
        let settled = loop {
            match self.store().settle(job, due, attempt, &outcome, now).await {
                Ok(settled) => break settled,
                Err(err) => match tries.next() {
                    Some(wait) => {
                        tracing::warn!(job, error = %err, "a scheduled run's end could not be recorded; trying again");
                        tokio::time::sleep(*wait).await;
                    }
                    None => {
                        tracing::error!(job, error = %err, "a scheduled run's end could not be recorded; it stays pending until its catch-up has passed");
                        return false;
                    }
                },
            }
        };
        let Some(run) = settled else {
            return false;
        };
        tracing::info!(job, %due, outcome = run.outcome.as_str(), "a scheduled run ended");
        self.followed(run).await;
        true
    }

    /// What follows a settled run: noted on its job (its last run; a retry when a task failed
    /// within its window), counted, a job that is done removed, a failure told.
    async fn followed(&self, run: Run) {
        let Run {
            job: ref job_id,
            due,
            attempt,
            ..
        } = run;
        let now = self.jobs.now();
        let last = run.clone();
        let failed = matches!(run.outcome, Outcome::Failed { .. });
        let noted = self
            .store()
            .update(
                job_id,
                Box::new(move |job| {
                    let ours = job.last.as_ref().is_some_and(|last| last.due == due);
                    if ours {
                        job.last = Some(last.clone());
                        job.retry = retry_of(job, due, attempt, now).filter(|_| failed);
                    }
                    ours
                }),
            )
            .await;
        // A failed try that is tried again has not ended yet.
        if !matches!(&noted, Ok(Some(job)) if job.retry.is_some()) {
            count(&run);
        }
        match noted {
            Ok(Some(job)) => {
                if let Some(retry) = &job.retry {
                    tracing::info!(job = %job.id, %due, at = %retry.at, "a failed scheduled run will be tried again");
                } else if let Outcome::Failed { why } = &run.outcome
                    && job.kind == JobKind::Task
                    && job.session == SessionMode::Isolated
                {
                    let tries = if attempt > 1 {
                        format!(" ({attempt} tries)")
                    } else {
                        String::new()
                    };
                    let text = format!(
                        "The scheduled task \"{}\" (job {}) failed{tries}: {why}",
                        job.name, job.id
                    );
                    self.tell(&job, OutboundKind::Notice(text)).await;
                }
                self.forget_if_done(&job).await;
            }
            Ok(None) => {}
            Err(err) => {
                tracing::error!(job = %job_id, error = %err, "a scheduled run's outcome could not be noted on its job");
            }
        }
    }

    /// Removes a job that will never run again (a reminder that ran) once its last run is
    /// settled, so it no longer counts against its chat's jobs; its runs stay readable.
    pub(super) async fn forget_if_done(&self, job: &Job) {
        let settled = job
            .last
            .as_ref()
            .is_none_or(|run| run.outcome != Outcome::Pending);
        // One the config declares stays until the config drops it (else it would be
        // declared again at the next start, and run again).
        if job.next_due.is_some() || !settled || job.declared.is_some() || job.retry.is_some() {
            return;
        }
        if let Err(err) = self.store().remove(&job.id).await {
            tracing::warn!(job = %job.id, error = %err, "a finished job could not be removed");
        }
    }

    /// Sends `kind` to the job's chat, outside any turn.
    pub(super) async fn tell(&self, job: &Job, kind: OutboundKind) {
        let message = OutboundMessage {
            channel: ChannelName::from(job.channel.as_str()),
            chat_id: ChatId::from(job.chat_id.as_str()),
            reply_to: None,
            kind,
            cursor: None,
            turn: None,
        };
        if let Err(err) = self.hub.publish_outbound(message).await {
            tracing::warn!(job = %job.id, error = %err, "could not tell a chat about its job");
        }
    }
}

/// Counts a run in `/metrics`: how it ended, and — when it starts — how late.
pub(super) fn count(run: &Run) {
    match (&run.outcome, run.started) {
        (Outcome::Pending, Some(started)) if run.attempt <= 1 => {
            let late = started.duration_since(run.due).as_secs_f64().max(0.0);
            metrics::histogram!("switchboard_scheduled_run_lateness_seconds").record(late);
        }
        (Outcome::Pending, _) => {}
        (outcome, _) => {
            metrics::counter!("switchboard_scheduled_runs_total", "outcome" => outcome.as_str())
                .increment(1);
        }
    }
}

/// The retry of `job`'s run due at `due` after try `attempt` failed at `now`: `None` when
/// it had its tries, is not a task, or the next would fall outside its window — before its
/// next due time and within its catch-up of its due time.
fn retry_of(job: &Job, due: Timestamp, attempt: u32, now: Timestamp) -> Option<Retry> {
    if job.kind != JobKind::Task || attempt >= MAX_ATTEMPTS {
        return None;
    }
    let at = now.checked_add(backoff(attempt)).ok()?;
    let catch_up = SignedDuration::from_secs(i64::try_from(job.catch_up_secs).unwrap_or(i64::MAX));
    let window = due.checked_add(catch_up).unwrap_or(Timestamp::MAX);
    let window = job.next_due.map_or(window, |next| next.min(window));
    (at < window).then_some(Retry {
        due,
        attempt: attempt + 1,
        at,
    })
}

/// What settles a scheduled run where its turn ended (on a cluster, that may be another
/// member than the one that handed the run over): the agent's hook calls it.
#[derive(Clone)]
pub struct Outcomes(pub(super) Settler);

impl Outcomes {
    /// A run's turn ended (`end`: how; `None`: it failed, `text` saying why), with `text`
    /// its answer.
    pub async fn turn_ended(&self, run: &ScheduledRun, end: Option<TurnEnd>, text: &str) {
        let outcome = match end {
            Some(TurnEnd::Answered) if run.isolated && is_quiet(text) => Outcome::Quiet,
            None => Outcome::Failed {
                why: text.lines().next().unwrap_or_default().to_owned(),
            },
            Some(TurnEnd::Cancelled) => Outcome::Stopped,
            Some(_) => Outcome::Answered,
        };
        self.0.settle_run(run, outcome).await;
    }

    /// A run's message handled again without a turn: its turn ended, on another worker or
    /// before a crash, and may not have been settled there (it died first).
    pub async fn handled_again(&self, run: &ScheduledRun, end: Option<TurnEnd>) {
        let outcome = match end {
            Some(TurnEnd::Cancelled) => Outcome::Stopped,
            Some(TurnEnd::Failed) => Outcome::Failed {
                why: "its turn failed (the answer was sent again after a restart)".into(),
            },
            _ => Outcome::Answered,
        };
        self.0.settle_run(run, outcome).await;
    }
}

#[cfg(test)]
#[path = "outcome_tests.rs"]
mod tests;
