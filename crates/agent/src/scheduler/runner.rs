//! [`Scheduler`]: the one task that knows what is due when, and hands each due run to the
//! agent as an inbound message on the hub — the same path a person's message takes (same
//! ordering per chat, same journal, same `/stop`), with [`Origin::Schedule`] and the id
//! `sched:<job>:<due>`.
//!
//! # Exactly once
//! A run is recorded `pending` (and the job's next due time moved past it) *before* its
//! message is published; its message's ack reports what became of it, and the run is
//! recorded again with its outcome (`outcome.rs`). After a crash, a run still `pending` is published again
//! with the same id, and the chat's session journal decides: not seen → it runs; received →
//! its turn runs on; answered or delivered → it is not answered twice. A due time that was
//! never recorded runs when the daemon is back, if it is at most its job's `catch_up` late;
//! otherwise it is recorded skipped, with why, and the chat is told — never silently.
//!
//! # Time
//! Due times are instants; "now" is a [`Clock`] (the system's, or tokio's paused clock in
//! tests). The loop sleeps until the soonest due time but never longer than `poll`, so a wall
//! clock that jumps forward is noticed, and so are jobs the operator's CLI changed.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use jiff::{SignedDuration, Timestamp};
use switchboard_core::{
    Ack, AgentName, Bus, ChannelName, ChatId, Fate, InboundMessage, LaneOptions, MessageId,
    OutboundKind, SenderId, SessionKey,
};
use switchboard_tools::Workspace;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::clock::Clock;
use super::isolated;
use super::job::{Job, JobKind, Outcome, Retry, Run, SessionMode};
use super::jobs::Jobs;
use super::message::message_of;
use super::outcome::{Outcomes, count};
use super::store::JobStore;
use crate::hooks::Hook;
use crate::usage::Spending;

/// How the scheduler behaves (the daemon fills it from `[scheduler]`).
#[derive(Clone, Debug)]
pub struct SchedulerConfig {
    /// The zone cron expressions are read in when a job names none; `None`: the system's,
    /// looked up when a job first needs it (not at start: a daemon without jobs never
    /// touches the time zone database).
    pub timezone: Option<String>,
    /// How late a run may start after the daemon was down, for jobs that say nothing.
    pub catch_up: Duration,
    /// Jobs one chat may have.
    pub max_jobs_per_chat: usize,
    /// The shortest time allowed between two runs of a job.
    pub min_interval: Duration,
    /// The longest the loop sleeps before looking again (for jobs another process changed,
    /// and a wall clock that jumped).
    pub poll: Duration,
}

impl Default for SchedulerConfig {
    fn default() -> Self {
        Self {
            timezone: None,
            catch_up: Duration::from_secs(3600),
            max_jobs_per_chat: 50,
            min_interval: Duration::from_secs(60),
            poll: Duration::from_secs(2),
        }
    }
}

/// A run with the agent.
#[derive(Clone, Debug)]
pub(super) struct InFlight {
    pub(super) job: String,
    pub(super) due: Timestamp,
    pub(super) attempt: u32,
}

/// The scheduler. Cloning shares it.
#[derive(Clone)]
pub struct Scheduler {
    pub(super) inner: Arc<Inner>,
}

pub(super) struct Inner {
    /// The jobs, their store, clock and config; its `changed` wakes the loop.
    pub(super) jobs: Jobs,
    pub(super) hub: Arc<dyn Bus>,
    /// Runs handed to the agent and not settled yet, by their message id. Written by the
    /// loop; read by its pile-up check.
    pub(super) in_flight: Mutex<HashMap<String, InFlight>>,
    /// Runs of this process whose turn's end the hook recorded, by message id, until the
    /// run's ack.
    pub(super) ended: Mutex<std::collections::HashSet<String>>,
    /// Acks of runs: (message id, fate). Sent from whichever task settles the message;
    /// received by the loop, which records the outcome.
    settled: mpsc::UnboundedSender<(String, Fate)>,
    /// The loop's end of `settled`, taken when it starts.
    settled_rx: Mutex<Option<mpsc::UnboundedReceiver<(String, Fate)>>>,
    /// The workspace the heartbeat's instructions are read in (set by the daemon once it
    /// opened it).
    workspace: std::sync::OnceLock<Arc<Workspace>>,
    /// Set once the `cron` channel of isolated runs is registered on the hub (at the
    /// first such run: a daemon without one never has it).
    isolated: std::sync::OnceLock<()>,
    /// When each enabled job is next due, as last read, with the store's version then:
    /// read again only when the version moved (anyone's change) — the idle loop costs one
    /// `stat`, and keeps a few words per job, not the jobs.
    timings: Mutex<Option<(u64, Arc<[Timing]>)>>,
    /// The daily cost caps: a run due while one is reached is skipped (set by the daemon).
    spending: std::sync::OnceLock<Arc<Spending>>,
}

/// What the loop keeps of a job between its runs: when it is next due.
#[derive(Debug)]
struct Timing {
    id: String,
    next_due: Option<Timestamp>,
    retry_at: Option<Timestamp>,
}

impl Timing {
    /// The timing of an enabled job; none for a paused one.
    fn of(job: &Job) -> Option<Self> {
        job.enabled.then(|| Self {
            id: job.id.clone(),
            next_due: job.next_due,
            retry_at: job.retry.as_ref().map(|retry| retry.at),
        })
    }
}

/// The sender of scheduled messages, as their `sender` field says.
const SENDER: &str = "scheduler";

/// The duty of firing jobs: one process at a time does it (see [`Bus::lead`]).
pub const DUTY: &str = "scheduler";

impl Scheduler {
    /// A scheduler publishing due runs on `hub`, keeping jobs in `store`.
    pub fn new(
        store: Arc<dyn JobStore>,
        hub: Arc<dyn Bus>,
        clock: Arc<dyn Clock>,
        config: SchedulerConfig,
    ) -> Self {
        let (settled, settled_rx) = mpsc::unbounded_channel();
        Self {
            inner: Arc::new(Inner {
                jobs: Jobs::new(store, clock, config),
                hub,
                in_flight: Mutex::new(HashMap::new()),
                ended: Mutex::new(std::collections::HashSet::new()),
                settled,
                settled_rx: Mutex::new(Some(settled_rx)),
                timings: Mutex::new(None),
                isolated: std::sync::OnceLock::new(),
                workspace: std::sync::OnceLock::new(),
                spending: std::sync::OnceLock::new(),
            }),
        }
    }

    /// The hook that tells the scheduler how its runs' turns ended (add it to the agent).
    pub fn hook(&self) -> Arc<dyn Hook> {
        Arc::new(Outcomes(self.inner.clone()))
    }

    /// Skips a run that comes due while a daily cost cap of `spending` is reached (set once;
    /// later calls are ignored).
    pub fn keep_to(&self, spending: Arc<Spending>) {
        let _ = self.inner.spending.set(spending);
    }

    /// Why a run of `job` may not start now for its cost: a cap its chat (or the daemon)
    /// reached.
    async fn over_budget(&self, job: &Job) -> Option<String> {
        let spending = self.inner.spending.get()?;
        let session = match job.session {
            SessionMode::Chat => SessionKey::of(
                &ChannelName::from(job.channel.as_str()),
                &ChatId::from(job.chat_id.as_str()),
            ),
            SessionMode::Isolated => SessionKey::of(
                &ChannelName::from(isolated::CHANNEL),
                &ChatId::from(job.id.as_str()),
            ),
        };
        spending.refusal(&session).await
    }

    /// Reads the heartbeat's instructions in `workspace` (set once; later calls are
    /// ignored).
    pub fn read_instructions_in(&self, workspace: Arc<Workspace>) {
        let _ = self.inner.workspace.set(workspace);
    }

    fn workspace(&self) -> Option<Arc<Workspace>> {
        self.inner.workspace.get().cloned()
    }

    /// Its jobs, to add, list and change (a change wakes the loop at once).
    pub fn jobs(&self) -> &Jobs {
        &self.inner.jobs
    }

    pub(super) fn store(&self) -> &Arc<dyn JobStore> {
        self.inner.jobs.store()
    }

    /// Runs until `stop` is cancelled: hands every due run to the agent, while this process
    /// leads the `scheduler` duty (always, alone; one member at a time on a cluster, the
    /// others standing by). Runs left pending (by a restart, or a leader that died) are
    /// handed over again first.
    pub async fn run(&self, stop: CancellationToken) {
        let Some(mut settled) = self
            .inner
            .settled_rx
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
        else {
            tracing::error!("the scheduler runs once");
            return;
        };
        loop {
            let lead = tokio::select! {
                () = stop.cancelled() => return,
                lead = self.inner.hub.lead(DUTY) => lead,
            };
            self.lead(&stop, &lead, &mut settled).await;
            if stop.is_cancelled() {
                return;
            }
            tracing::warn!("another member fires the scheduled jobs now; standing by");
        }
    }

    /// Hands due runs over until `stop`, or until `lead` says another process does.
    async fn lead(
        &self,
        stop: &CancellationToken,
        lead: &CancellationToken,
        settled: &mut mpsc::UnboundedReceiver<(String, Fate)>,
    ) {
        self.resume_pending().await;
        loop {
            let wait = self.tick().await;
            tokio::select! {
                () = stop.cancelled() => return,
                () = lead.cancelled() => return,
                () = tokio::time::sleep(wait) => {}
                () = self.inner.jobs.changed().notified() => {}
                Some((id, fate)) = settled.recv() => self.settle(&id, fate).await,
            }
            // Settle whatever else arrived meanwhile before looking at what is due.
            while let Ok((id, fate)) = settled.try_recv() {
                self.settle(&id, fate).await;
            }
        }
    }

    /// Hands over again the runs a crash (or a stop) left pending; removes the jobs it
    /// left done but not removed.
    async fn resume_pending(&self) {
        let jobs = match self.store().jobs().await {
            Ok(jobs) => jobs,
            Err(err) => {
                tracing::error!(error = %err, "the scheduler cannot read its jobs");
                return;
            }
        };
        for job in jobs {
            self.forget_if_done(&job).await;
            if let Some(run) = job
                .last
                .clone()
                .filter(|run| run.outcome == Outcome::Pending)
            {
                tracing::info!(job = %job.id, due = %run.due, "taking up a scheduled run left pending");
                let flight = InFlight {
                    job: job.id.clone(),
                    due: run.due,
                    attempt: run.attempt,
                };
                match message_of(&job, self.workspace()).await {
                    Ok(message) => self.publish(&job, flight, message).await,
                    Err(why) => {
                        self.record_end(flight, Outcome::Skipped { why }).await;
                    }
                }
            }
        }
    }

    /// When each enabled job is next due, read again only when the store changed since.
    async fn timings(&self) -> Result<Arc<[Timing]>, String> {
        let version = self.store().version().await;
        if let Some((seen, timings)) = &*self
            .inner
            .timings
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            && *seen == version
        {
            return Ok(timings.clone());
        }
        let jobs = self.store().jobs().await.map_err(|err| err.to_string())?;
        let timings: Arc<[Timing]> = jobs.iter().filter_map(Timing::of).collect();
        *self
            .inner
            .timings
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some((version, timings.clone()));
        Ok(timings)
    }

    /// Starts what is due; returns how long to wait before looking again.
    async fn tick(&self) -> Duration {
        let poll = self.inner.jobs.config().poll;
        let timings = match self.timings().await {
            Ok(timings) => timings,
            Err(err) => {
                tracing::error!(error = %err, "the scheduler cannot read its jobs");
                return poll;
            }
        };
        let now = self.inner.jobs.now();
        let mut soonest: Option<Timestamp> = None;
        for timing in timings.iter() {
            let retry_due = timing.retry_at.is_some_and(|at| at <= now);
            let run_due = timing.next_due.is_some_and(|due| due <= now);
            if !retry_due && !run_due {
                soonest = earliest(soonest, earliest(timing.retry_at, timing.next_due));
                continue;
            }
            // Due: the job as it is now (another process may have changed it meanwhile).
            let job = match self.store().job(&timing.id).await {
                Ok(Some(job)) if job.enabled => job,
                Ok(_) => continue,
                Err(err) => {
                    tracing::error!(job = %timing.id, error = %err, "the scheduler cannot read a due job");
                    soonest = earliest(soonest, Some(now.saturating_add(poll).unwrap_or(now)));
                    continue;
                }
            };
            if let Some(retry) = job.retry.clone() {
                if retry.at <= now {
                    self.retry(&job, retry, now).await;
                } else {
                    soonest = earliest(soonest, Some(retry.at));
                }
            }
            let Some(due) = job.next_due else {
                continue;
            };
            if due <= now {
                let next = self.fire(job, due, now).await;
                soonest = earliest(soonest, next);
            } else {
                soonest = earliest(soonest, Some(due));
            }
        }
        let until = soonest
            .map(|due| Duration::try_from(due.duration_since(now)).unwrap_or_default())
            .unwrap_or(poll);
        until.min(poll)
    }

    /// Tries a failed run again: recorded pending (and the retry taken off the job) before
    /// it is published, as a first try is.
    async fn retry(&self, job: &Job, retry: Retry, now: Timestamp) {
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
        };
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
                if let Err(err) = self.store().record(&run).await {
                    tracing::error!(job = %job.id, error = %err, "a scheduled run could not be recorded");
                }
                tracing::info!(job = %job.id, due = %retry.due, attempt = retry.attempt,
                    "trying a failed scheduled run again");
                let flight = InFlight {
                    job: job.id.clone(),
                    due: retry.due,
                    attempt: retry.attempt,
                };
                self.publish(&updated, flight, message).await;
            }
            Ok(None) => {}
            Err(err) => {
                tracing::error!(job = %job.id, error = %err, "a retry could not be recorded; it waits");
            }
        }
    }

    /// A job whose time `due` has come, at `now`: runs it, or records why not. Returns its
    /// next due time.
    async fn fire(&self, mut job: Job, due: Timestamp, now: Timestamp) -> Option<Timestamp> {
        let next = job
            .next_after(now.max(due))
            .unwrap_or_else(|err| {
                tracing::error!(job = %job.id, error = %err, "a job's schedule cannot be computed; it stops");
                None
            });
        let late = now.duration_since(due);
        let catch_up = SignedDuration::from_secs(job.catch_up_secs as i64);
        let running = self.running(&job.id);
        let skipped = if late > catch_up {
            Some(format!(
                "it was due at {due}, and {:#} late is more than its catch-up of {:#} (was \
                 switchboard down?)",
                late.round(jiff::Unit::Second).unwrap_or(late),
                catch_up
            ))
        } else if running {
            Some("the run before it was still going".to_owned())
        } else {
            self.over_budget(&job).await
        };
        let (skipped, message) = match skipped {
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
        };
        // Recorded before anything is published: a crash from here on takes the run up
        // again (pending) or knows it was skipped. Only if the job is still as it was read:
        // removed, paused or moved meanwhile, it is left as it is now.
        let written = {
            let run = run.clone();
            self.store()
                .update(
                    &job.id,
                    Box::new(move |now_job| {
                        if !now_job.enabled || now_job.next_due != Some(due) {
                            return false;
                        }
                        now_job.next_due = next;
                        now_job.last = Some(run.clone());
                        // A retry of the run before is overtaken by this one.
                        now_job.retry = None;
                        true
                    }),
                )
                .await
        };
        match written {
            Ok(Some(updated)) => job = updated,
            Ok(None) => return None,
            Err(err) => {
                tracing::error!(job = %job.id, error = %err, "a scheduled run could not be recorded; it waits");
                return Some(due);
            }
        }
        if let Err(err) = self.store().record(&run).await {
            tracing::error!(job = %job.id, error = %err, "a scheduled run could not be recorded");
        }
        count(&run);
        match skipped {
            Some(why) => {
                tracing::warn!(job = %job.id, %due, %why, "a scheduled run was skipped");
                // The chat is told of a task it will miss; not of each beat of the heartbeat.
                if late > catch_up && job.kind == JobKind::Task {
                    let text = format!(
                        "The scheduled task \"{}\" (job {}) did not run: {why}.",
                        job.name, job.id
                    );
                    self.tell(&job, OutboundKind::Notice(text)).await;
                }
                self.forget_if_done(&job).await;
            }
            None => {
                let flight = InFlight {
                    job: job.id.clone(),
                    due,
                    attempt: 1,
                };
                self.publish(&job, flight, message).await;
            }
        }
        next
    }

    /// Whether a run of `job` is with the agent now.
    fn running(&self, job: &str) -> bool {
        self.inner
            .in_flight
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .values()
            .any(|flight| flight.job == job)
    }

    /// Hands the run of `job` due at `due` to the agent, as a message of its chat (or, for
    /// a job in a session of its own, of the `cron` channel).
    async fn publish(&self, job: &Job, flight: InFlight, text: String) {
        let id = Run::message_id(&job.id, flight.due, flight.attempt);
        self.inner
            .in_flight
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(id.clone(), flight);
        let settled = self.inner.settled.clone();
        let ack_id = id.clone();
        let (channel, chat) = match job.session {
            SessionMode::Chat => (job.channel.as_str(), job.chat_id.as_str()),
            SessionMode::Isolated => {
                self.register_isolated();
                (isolated::CHANNEL, job.id.as_str())
            }
        };
        let mut message = InboundMessage::text(
            ChannelName::from(channel),
            ChatId::from(chat),
            SenderId::from(SENDER),
            text,
        );
        message.id = Some(MessageId::from(id.as_str()));
        message.origin = job.origin();
        message.agent = job.agent.as_deref().map(AgentName::from);
        message.ack = Some(Ack::new(move |fate| {
            let _ = settled.send((ack_id, fate));
        }));
        if let Err(err) = self.inner.hub.publish_inbound(message).await {
            // The daemon is stopping: the run stays pending and is taken up at the next start.
            tracing::info!(job = %job.id, error = %err, "a scheduled run was not handed over");
        }
    }

    /// Registers the `cron` channel isolated runs answer through, once.
    fn register_isolated(&self) {
        self.inner.isolated.get_or_init(|| {
            let channel = isolated::IsolatedRuns {
                jobs: self.inner.jobs.clone(),
                hub: self.inner.hub.clone(),
            };
            self.inner
                .hub
                .register_channel(Arc::new(channel), LaneOptions::default());
        });
    }
}

fn earliest(a: Option<Timestamp>, b: Option<Timestamp>) -> Option<Timestamp> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

#[cfg(test)]
#[path = "runner_tests.rs"]
mod tests;
