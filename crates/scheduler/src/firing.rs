//! What happens at a due time, under the firing duty's [`Tenure`]: its verdict (why it
//! does not run, if so), its claim, the due times it folds, a failed run's retry, and the
//! claims a scheduler that lost the duty left pending, taken over (see the module doc of
//! `runner` for the rules). On the [`Scheduler`] through its narrow inside: the job store,
//! the settler, the hand-over.

use jiff::{SignedDuration, Timestamp};
use switchboard_core::{OutboundKind, Tenure};

use super::job::{Job, JobKind, Outcome, Retry, Run};
use super::message::message_of;
use super::outcome::count;
use super::runner::Scheduler;

/// The most due times a catch-up records one by one as folded (the rest are counted in the
/// last record).
const FOLDED_SHOWN: usize = 10;

/// The most due times a catch-up counts (a minute's job down for years is not counted to
/// the end).
const FOLDED_COUNTED: usize = 100_000;

/// Why a due run does not run, or `None` when it does.
type Verdict = Option<String>;

impl Scheduler {
    /// Hands over again the runs whose scheduler lost the duty before they settled (a
    /// restart, a leader that died or was paused): pending under another epoch than
    /// `tenure`'s. Removes the jobs left done but not removed.
    pub(super) async fn take_over(&self, tenure: &Tenure) {
        let jobs = match self.store().jobs().await {
            Ok(jobs) => jobs,
            Err(err) => {
                tracing::error!(error = %err, "the scheduler cannot read its jobs");
                return;
            }
        };
        for job in jobs {
            self.settler().forget_if_done(&job).await;
            self.take_over_job(&job, tenure).await;
        }
    }

    /// Takes over the runs of `job` pending under another epoch than `tenure`'s — at taking
    /// the duty, and whenever the job's last run is seen so: a leader that lost the duty
    /// may claim a due time after the next one took over and looked (its store call was
    /// under way while the lease lapsed), and that run is not left waiting for the job's
    /// next due time, which may be a day away.
    pub(super) async fn take_over_job(&self, job: &Job, tenure: &Tenure) {
        let mut runs = match self.store().runs(&job.id, usize::MAX).await {
            Ok(runs) => runs,
            Err(err) => {
                tracing::error!(job = %job.id, error = %err, "the scheduler cannot read a job's runs");
                return;
            }
        };
        // A run left pending by a version that kept it on the job alone: claimed now, so
        // it can be settled.
        if let Some(last) = &job.last
            && last.outcome == Outcome::Pending
            && !runs.iter().any(|run| run.due == last.due)
            && let Ok(None) = self.store().claim(last).await
        {
            runs.push(last.clone());
        }
        for run in runs {
            if run.outcome == Outcome::Pending && run.epoch != Some(tenure.epoch()) {
                self.take_over_run(job, run, tenure).await;
            } else if job.last.as_ref().is_some_and(|last| {
                last.due == run.due && last.attempt == run.attempt && *last != run
            }) {
                // The job's note of its last run is behind its record (taken over here
                // before, or settled where noting it failed).
                self.note_last(&run).await;
            }
        }
    }

    /// Hands `run`, pending under an epoch that is over, to the agent again — adopted first,
    /// so this holding of the duty hands it over once — or, past its catch-up, settles it
    /// failed: its turn never said how it ended.
    async fn take_over_run(&self, job: &Job, run: Run, tenure: &Tenure) {
        if self.stuck(job, &run) {
            self.give_up(&run).await;
            return;
        }
        let adopted = match self
            .store()
            .adopt(&job.id, run.due, run.attempt, tenure.epoch())
            .await
        {
            Ok(Some(adopted)) => adopted,
            // It ended meanwhile, or this holding took it over already.
            Ok(None) => return,
            Err(err) => {
                tracing::error!(job = %job.id, error = %err, "a scheduled run left pending could not be taken over; it is looked at again");
                return;
            }
        };
        tracing::info!(job = %job.id, due = %run.due, "taking over a scheduled run its scheduler left pending");
        self.note_last(&adopted).await;
        match message_of(job, self.workspace()).await {
            Ok(message) => self.publish(job, &adopted, message, tenure).await,
            Err(why) => {
                self.settler()
                    .settle(&job.id, run.due, run.attempt, Outcome::Skipped { why })
                    .await;
            }
        }
    }

    /// Notes `run` as it is on record on its job, when it is the job's last run: what the
    /// loop reads of the job (whose claim its last run is) agrees with the claim.
    async fn note_last(&self, run: &Run) {
        let run = run.clone();
        let noted = self
            .store()
            .update(
                &run.job.clone(),
                Box::new(move |job| {
                    let behind = job.last.as_ref().is_some_and(|last| {
                        last.due == run.due && last.attempt == run.attempt && *last != run
                    });
                    if behind {
                        job.last = Some(run.clone());
                    }
                    behind
                }),
            )
            .await;
        if let Err(err) = noted {
            tracing::warn!(error = %err, "a job's last run could not be noted");
        }
    }

    /// Whether a pending `run` has been pending longer than its job's catch-up: it holds
    /// nothing back any more, and is settled failed.
    fn stuck(&self, job: &Job, run: &Run) -> bool {
        let since = run.started.unwrap_or(run.due);
        let catch_up =
            SignedDuration::from_secs(i64::try_from(job.catch_up_secs).unwrap_or(i64::MAX));
        self.jobs().now().duration_since(since) > catch_up
    }

    /// Settles a run that never said how it ended.
    async fn give_up(&self, run: &Run) {
        tracing::warn!(job = %run.job, due = %run.due, "a scheduled run never reported its end; it is recorded failed");
        let why = "it never reported how it ended (lost with the worker that ran it?)".to_owned();
        self.settler()
            .settle(&run.job, run.due, run.attempt, Outcome::Failed { why })
            .await;
    }

    /// Tries a failed run again: claimed (and the retry taken off the job) before it is
    /// published, as a first try is.
    pub(super) async fn retry(&self, job: &Job, retry: Retry, now: Timestamp, tenure: &Tenure) {
        let message = match message_of(job, self.workspace()).await {
            Ok(message) => message,
            Err(why) => {
                tracing::warn!(job = %job.id, %why, "a failed run is not tried again");
                return;
            }
        };
        let run = Run {
            job: job.id.clone(),
            due: retry.due,
            started: Some(now),
            finished: None,
            outcome: Outcome::Pending,
            attempt: retry.attempt,
            epoch: Some(tenure.epoch()),
        };
        match self.store().claim(&run).await {
            Ok(None) => {}
            Ok(Some(_)) => return,
            Err(err) => {
                tracing::error!(job = %job.id, error = %err, "a retry could not be claimed; it waits");
                return;
            }
        }
        let written = {
            let (run, retry) = (run.clone(), retry.clone());
            self.store()
                .update(
                    &job.id,
                    Box::new(move |job| {
                        if !job.enabled || job.retry.as_ref() != Some(&retry) {
                            return false;
                        }
                        job.retry = None;
                        job.last = Some(run.clone());
                        true
                    }),
                )
                .await
        };
        match written {
            Ok(Some(updated)) => {
                tracing::info!(job = %job.id, due = %retry.due, attempt = retry.attempt,
                    "trying a failed scheduled run again");
                self.publish(&updated, &run, message, tenure).await;
            }
            Ok(None) => {
                let why = "the job changed before its retry (paused, or removed)".to_owned();
                self.settler()
                    .settle(&job.id, run.due, run.attempt, Outcome::Skipped { why })
                    .await;
            }
            Err(err) => {
                tracing::error!(job = %job.id, error = %err, "a retry could not be noted on its job; it is handed over now");
                self.publish(job, &run, message, tenure).await;
            }
        }
    }

    /// A job whose time `due` has come, at `now`: its run claimed, then run or recorded
    /// skipped with why; the due times it caught up folded; the job moved past it. Returns
    /// its next due time.
    pub(super) async fn fire(
        &self,
        job: Job,
        due: Timestamp,
        now: Timestamp,
        tenure: &Tenure,
    ) -> Option<Timestamp> {
        let next = job.next_after(now.max(due)).unwrap_or_else(|err| {
            tracing::error!(job = %job.id, error = %err, "a job's schedule cannot be computed; it stops");
            None
        });
        let (skipped, message) = match self.verdict(&job, due, now).await {
            Some(why) => (Some(why), String::new()),
            None => match message_of(&job, self.workspace()).await {
                Ok(message) => (None, message),
                Err(why) => (Some(why), String::new()),
            },
        };
        let run = Run {
            job: job.id.clone(),
            due,
            started: skipped.is_none().then_some(now),
            finished: skipped.is_some().then_some(now),
            outcome: match &skipped {
                Some(why) => Outcome::Skipped { why: why.clone() },
                None => Outcome::Pending,
            },
            attempt: 1,
            epoch: Some(tenure.epoch()),
        };
        // Claimed before anything is published: a crash from here on leaves the claim for
        // the next scheduler to take over, or knows it was skipped.
        let Some(ours) = self.claim(&job, &run, tenure).await else {
            return Some(due);
        };
        let folded = self.fold(&job, due, next, now, tenure).await;
        let job = self.moved_past(job, &run, next, ours).await;
        if !ours {
            return next;
        }
        count(&run);
        if let Some(folded) = folded
            && job.kind == JobKind::Task
        {
            self.settler()
                .tell(&job, OutboundKind::Notice(folded.tell(&job, due)))
                .await;
        }
        match skipped {
            Some(why) => self.skipped(&job, due, now, why).await,
            None => self.publish(&job, &run, message, tenure).await,
        }
        next
    }

    /// Claims `run`'s due time: whether it is this scheduler's (`None`: the store did not
    /// answer; it waits). One another scheduler claimed was handed over already, or is
    /// taken over here when that scheduler lost the duty.
    async fn claim(&self, job: &Job, run: &Run, tenure: &Tenure) -> Option<bool> {
        match self.store().claim(run).await {
            Ok(None) => Some(true),
            Ok(Some(claimed)) => {
                if claimed.outcome == Outcome::Pending && claimed.epoch != Some(tenure.epoch()) {
                    self.take_over_run(job, claimed, tenure).await;
                }
                Some(false)
            }
            Err(err) => {
                tracing::error!(job = %job.id, error = %err, "a scheduled run could not be claimed; it waits");
                None
            }
        }
    }

    /// Moves `job` past its due time (to `next`), noting `run` as its last when it is ours —
    /// only if the job is still as it was read: removed, paused or moved meanwhile, it is
    /// left as it is now. The job as it is after.
    async fn moved_past(&self, job: Job, run: &Run, next: Option<Timestamp>, ours: bool) -> Job {
        let due = run.due;
        let run = run.clone();
        let noted = self
            .store()
            .update(
                &job.id,
                Box::new(move |now_job| {
                    if !now_job.enabled || now_job.next_due != Some(due) {
                        return false;
                    }
                    now_job.next_due = next;
                    // A skip does not hide a run still going: that stays the last run, which
                    // holds the next due times back until it settles.
                    let going = now_job
                        .last
                        .as_ref()
                        .is_some_and(|last| last.outcome == Outcome::Pending);
                    let starts = run.outcome == Outcome::Pending;
                    if ours && (starts || !going) {
                        now_job.last = Some(run.clone());
                    }
                    if ours && starts {
                        // A retry of the run before is overtaken by this one.
                        now_job.retry = None;
                    }
                    true
                }),
            )
            .await;
        match noted {
            Ok(Some(updated)) => updated,
            Ok(None) => job,
            Err(err) => {
                tracing::error!(job = %job.id, error = %err, "a job could not be moved past its due time; it is looked at again");
                job
            }
        }
    }

    /// A run skipped for `why`: a task's chat is told when it was too late (not of each beat
    /// of the heartbeat), and a one-shot is done.
    async fn skipped(&self, job: &Job, due: Timestamp, now: Timestamp, why: String) {
        tracing::warn!(job = %job.id, %due, %why, "a scheduled run was skipped");
        if too_late(job, due, now) && job.kind == JobKind::Task {
            let text = format!(
                "The scheduled task \"{}\" (job {}) did not run: {why}.",
                job.name, job.id
            );
            self.settler().tell(job, OutboundKind::Notice(text)).await;
        }
        self.settler().forget_if_done(job).await;
    }

    /// Why the run of `job` due at `due` does not run at `now`: too late (the daemon was
    /// down past its catch-up), the run before it still going (one that has been going past
    /// its catch-up is given up instead), a cost cap reached.
    async fn verdict(&self, job: &Job, due: Timestamp, now: Timestamp) -> Verdict {
        if too_late(job, due, now) {
            let late = now.duration_since(due);
            return Some(format!(
                "it was due at {due}, and {:#} late is more than its catch-up of {:#} (was \
                 switchboard down?)",
                late.round(jiff::Unit::Second).unwrap_or(late),
                SignedDuration::from_secs(job.catch_up_secs as i64)
            ));
        }
        if let Some(last) = job
            .last
            .as_ref()
            .filter(|last| last.outcome == Outcome::Pending)
            && last.due < due
        {
            if !self.stuck(job, last) {
                return Some("the run before it was still going".to_owned());
            }
            self.give_up(last).await;
        }
        self.over_budget(job).await
    }

    /// Records the due times of `job` after `due` and up to `now` — which passed while no
    /// scheduler fired (down, or changing leaders), and are caught up by the run due at
    /// `due` — as skipped, folded into it. The first [`FOLDED_SHOWN`] each get a record;
    /// the last record counts the rest. What was folded, if anything.
    async fn fold(
        &self,
        job: &Job,
        due: Timestamp,
        next: Option<Timestamp>,
        now: Timestamp,
        tenure: &Tenure,
    ) -> Option<Folded> {
        let mut folded = Vec::new();
        let mut passed_count = 0usize;
        let mut at = due;
        while passed_count < FOLDED_COUNTED {
            match job.next_after(at) {
                Ok(Some(passed)) if passed <= now && Some(passed) != next => {
                    if folded.len() < FOLDED_SHOWN {
                        folded.push(passed);
                    }
                    passed_count += 1;
                    at = passed;
                }
                _ => break,
            }
        }
        let last = folded.last().copied()?;
        let more = passed_count - folded.len();
        let shown_last = last;
        for passed in folded {
            let mut why = format!(
                "it came due while no scheduler was firing jobs (switchboard down, or changing \
                 leaders); folded into the run due at {due}"
            );
            if passed == last && more > 0 {
                why.push_str(&format!(", as were {more} more due times after it"));
            }
            let run = Run {
                job: job.id.clone(),
                due: passed,
                started: None,
                finished: Some(now),
                outcome: Outcome::Skipped { why },
                attempt: 1,
                epoch: Some(tenure.epoch()),
            };
            match self.store().claim(&run).await {
                Ok(None) => count(&run),
                Ok(Some(_)) => {}
                Err(err) => {
                    tracing::warn!(job = %job.id, error = %err, "a folded due time could not be recorded")
                }
            }
        }
        tracing::warn!(job = %job.id, %due, folded = passed_count, "due times that passed unfired were folded into one run");
        Some(Folded {
            count: passed_count,
            last: shown_last,
        })
    }
}

/// Due times a catch-up run stands for besides its own.
struct Folded {
    /// How many (counted up to [`FOLDED_COUNTED`]).
    count: usize,
    /// The last of them recorded.
    last: Timestamp,
}

impl Folded {
    /// What the chat is told: its job caught up once for all of them.
    fn tell(&self, job: &Job, due: Timestamp) -> String {
        let times = if self.count == 1 {
            "1 more due time".to_owned()
        } else {
            format!("{} more due times", self.count)
        };
        format!(
            "The scheduled task \"{}\" (job {}) missed {times} after the one at {due} while \
             switchboard was not running jobs (the last at {}): one run now stands for all of \
             them (`switchboard cron runs {}` lists each).",
            job.name, job.id, self.last, job.id
        )
    }
}

/// Whether `job`'s run due at `due` is more than its catch-up late at `now`.
fn too_late(job: &Job, due: Timestamp, now: Timestamp) -> bool {
    let catch_up = SignedDuration::from_secs(i64::try_from(job.catch_up_secs).unwrap_or(i64::MAX));
    now.duration_since(due) > catch_up
}
