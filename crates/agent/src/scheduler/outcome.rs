//! What becomes of a run once it is handed to the agent: its turn's end (noted by the
//! [`Outcomes`] hook) and its message's ack are recorded on its runs and its job; a failed
//! task is tried again with backoff while that is within its window; a one-shot that ran is
//! removed; a failure nobody saw (a job in a session of its own) is told to its chat.

use std::sync::{Arc, PoisonError};

use async_trait::async_trait;
use jiff::{SignedDuration, Timestamp};
use switchboard_core::{
    ChannelName, ChatId, Fate, MessageId, OutboundKind, OutboundMessage, TurnEnd, is_quiet,
};

use super::isolated;
use super::job::{Job, JobKind, Outcome, Retry, Run, SessionMode};
use super::runner::{InFlight, Inner, Scheduler};
use super::store::RUNS_KEPT;
use crate::hooks::{Hook, TurnInfo, TurnSummary};

/// How often a failed run is tried in all.
pub const MAX_ATTEMPTS: u32 = 3;

/// How long after failed try `attempt` the next one starts: 30 s, then 2 min.
fn backoff(attempt: u32) -> SignedDuration {
    SignedDuration::from_secs(30 * 4_i64.pow(attempt.saturating_sub(1).min(4)))
}

impl Scheduler {
    /// Records what became of the run whose message is `id`, as its ack says. How a turn
    /// ended is recorded by the [`Outcomes`] hook where the turn ran; here only what the
    /// ack alone knows: a run dropped, and — where `Handled` means the turn is over (one
    /// process) — a run handled without a turn (its answer was already in the journal).
    pub(super) async fn settle(&self, id: &str, fate: Fate) {
        let Some(flight) = self
            .inner
            .in_flight
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(id)
        else {
            return;
        };
        let recorded = self
            .inner
            .ended
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(id);
        let outcome = match fate {
            // Stopping: it stays pending, and the next start takes it up.
            Fate::Unprocessed => return,
            Fate::Dropped => Outcome::Skipped {
                why: "it was dropped (a /stop, or its chat had too many messages waiting)".into(),
            },
            Fate::Handled if recorded || !self.inner.hub.fates_are_turns() => return,
            Fate::Handled => Outcome::Answered,
        };
        self.record_end(flight, outcome).await;
    }

    /// The run whose message is `id`, as its job's runs say — its last, or (a run that
    /// outlasted its job's interval, on a cluster) one before (`None`: not a run of a job
    /// that is still there).
    async fn flight_of(&self, id: &str) -> Option<InFlight> {
        let rest = id.strip_prefix("sched:")?;
        // `sched:<job>:<due ms>` or `sched:<job>:<due ms>:<attempt>`; a job's id may hold
        // a `:`, so each reading is checked against the job's last run.
        let mut readings = Vec::new();
        if let Some((head, attempt)) = rest.rsplit_once(':')
            && attempt.parse::<u32>().is_ok()
            && let Some(reading) = head.rsplit_once(':')
        {
            readings.push(reading);
        }
        readings.extend(rest.rsplit_once(':'));
        for (job, due) in readings {
            let Ok(due) = due.parse::<i64>() else {
                continue;
            };
            let Ok(Some(stored)) = self.store().job(job).await else {
                continue;
            };
            let ours = |run: &Run| {
                run.due.as_millisecond() == due && Run::message_id(job, run.due, run.attempt) == id
            };
            let found = match stored.last.filter(ours) {
                Some(last) => Some(last),
                None => self
                    .store()
                    .runs(job, RUNS_KEPT)
                    .await
                    .ok()
                    .and_then(|runs| runs.into_iter().find(ours)),
            };
            if let Some(run) = found {
                return Some(InFlight {
                    job: job.to_owned(),
                    due: run.due,
                    attempt: run.attempt,
                });
            }
        }
        None
    }

    /// Records how a run ended, on its runs and its job; a failed task is tried again
    /// (see [`backoff`]) while that is within its window — before its next due time and
    /// within its catch-up of its due time — else the chat of a job in its own session is
    /// told (one in the chat's session showed each failure there).
    pub(super) async fn record_end(&self, flight: InFlight, outcome: Outcome) {
        let InFlight {
            job: job_id,
            due,
            attempt,
        } = flight;
        let now = self.inner.jobs.now();
        let started = self.store().runs(&job_id, 1).await.ok().and_then(|runs| {
            runs.into_iter()
                .find(|run| run.due == due)
                .and_then(|run| run.started)
        });
        let run = Run {
            job: job_id.clone(),
            due,
            started,
            finished: Some(now),
            outcome,
            attempt,
        };
        tracing::info!(job = %job_id, %due, outcome = run.outcome.as_str(), "a scheduled run ended");
        if let Err(err) = self.store().record(&run).await {
            tracing::error!(job = %job_id, error = %err, "a scheduled run's outcome could not be recorded");
        }
        let last = run.clone();
        let failed = matches!(run.outcome, Outcome::Failed { .. });
        let noted = self
            .store()
            .update(
                &job_id,
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
        };
        if let Err(err) = self.inner.hub.publish_outbound(message).await {
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
/// it had its tries, is not a task, or the next would fall outside its window (see
/// [`Scheduler::record_end`]).
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

/// The hook that records how a scheduled run's turn ended, where the turn ran (on a
/// cluster, that may be another member than the one that handed the run over).
pub(super) struct Outcomes(pub(super) Arc<Inner>);

#[async_trait]
impl Hook for Outcomes {
    async fn on_turn_end(&self, turn: TurnInfo<'_>, summary: TurnSummary<'_>) {
        let Some(id) = summary
            .inbound
            .map(MessageId::as_str)
            .filter(|id| id.starts_with("sched:"))
        else {
            return;
        };
        let alone = turn
            .session
            .as_str()
            .starts_with(&format!("{}_", isolated::CHANNEL));
        let outcome = match summary.end {
            Some(TurnEnd::Answered) if alone && is_quiet(summary.text) => Outcome::Quiet,
            None => Outcome::Failed {
                why: summary.text.lines().next().unwrap_or_default().to_owned(),
            },
            Some(TurnEnd::Cancelled) => Outcome::Stopped,
            Some(_) => Outcome::Answered,
        };
        let scheduler = Scheduler {
            inner: self.0.clone(),
        };
        let Some(flight) = scheduler.flight_of(id).await else {
            tracing::debug!(id, "a scheduled run ended that its job no longer waits for");
            return;
        };
        scheduler.record_end(flight, outcome).await;
        // Its ack, when it comes here, finds it recorded.
        let ours = self
            .0
            .in_flight
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .contains_key(id);
        if ours {
            self.0
                .ended
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .insert(id.to_owned());
        }
    }
}

#[cfg(test)]
#[path = "outcome_tests.rs"]
mod tests;
