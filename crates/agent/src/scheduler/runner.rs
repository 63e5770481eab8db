//! [`Scheduler`]: the one task that knows what is due when, and hands each due run to the
//! agent as an inbound message on the hub — the same path a person's message takes (same
//! ordering per chat, same journal, same `/stop`), with [`Origin::Schedule`] and the id
//! `sched:<job>:<due>`.
//!
//! # Exactly once
//! A run is recorded `pending` (and the job's next due time moved past it) *before* its
//! message is published; its message's ack reports what became of it, and the run is
//! recorded again with its outcome. After a crash, a run still `pending` is published again
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

use async_trait::async_trait;
use jiff::{SignedDuration, Timestamp};
use switchboard_core::{
    Ack, ChannelName, ChatHub, ChatId, Fate, InboundMessage, LaneOptions, MessageId, OutboundKind,
    OutboundMessage, SenderId, TurnEnd, is_quiet,
};
use switchboard_tools::Workspace;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::isolated;
use super::job::{Job, JobKind, Outcome, Retry, Run, SessionMode};
use super::jobs::Jobs;
use super::store::JobStore;
use crate::hooks::{Hook, TurnInfo, TurnSummary};

/// What "now" is.
pub trait Clock: Send + Sync {
    /// The current instant.
    fn now(&self) -> Timestamp;
}

/// The system's wall clock.
#[derive(Debug, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Timestamp {
        Timestamp::now()
    }
}

/// A clock that moves with tokio's (so `tokio::time::pause` and `advance` move it), from an
/// instant it was set to: for tests where time is the subject.
#[derive(Debug)]
pub struct TokioClock {
    start: Timestamp,
    at: tokio::time::Instant,
}

impl TokioClock {
    /// A clock reading `start` now.
    pub fn starting_at(start: Timestamp) -> Self {
        Self {
            start,
            at: tokio::time::Instant::now(),
        }
    }
}

impl Clock for TokioClock {
    fn now(&self) -> Timestamp {
        let elapsed = SignedDuration::try_from(self.at.elapsed()).unwrap_or(SignedDuration::MAX);
        self.start.saturating_add(elapsed).unwrap_or(self.start)
    }
}

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
struct InFlight {
    job: String,
    due: Timestamp,
    attempt: u32,
}

/// How often a failed run is tried in all.
pub const MAX_ATTEMPTS: u32 = 3;

/// How long after failed try `attempt` the next one starts: 30 s, then 2 min.
fn backoff(attempt: u32) -> SignedDuration {
    SignedDuration::from_secs(30 * 4_i64.pow(attempt.saturating_sub(1).min(4)))
}

/// The scheduler. Cloning shares it.
#[derive(Clone)]
pub struct Scheduler {
    inner: Arc<Inner>,
}

struct Inner {
    /// The jobs, their store, clock and config; its `changed` wakes the loop.
    jobs: Jobs,
    hub: ChatHub,
    /// Runs handed to the agent and not settled yet, by their message id. Written by the
    /// loop; read by its pile-up check.
    in_flight: Mutex<HashMap<String, InFlight>>,
    /// How the turns of runs ended (from the hook), by message id, until the run's ack.
    ended: Mutex<HashMap<String, Outcome>>,
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

impl Scheduler {
    /// A scheduler publishing due runs on `hub`, keeping jobs in `store`.
    pub fn new(
        store: Arc<dyn JobStore>,
        hub: ChatHub,
        clock: Arc<dyn Clock>,
        config: SchedulerConfig,
    ) -> Self {
        let (settled, settled_rx) = mpsc::unbounded_channel();
        Self {
            inner: Arc::new(Inner {
                jobs: Jobs::new(store, clock, config),
                hub,
                in_flight: Mutex::new(HashMap::new()),
                ended: Mutex::new(HashMap::new()),
                settled,
                settled_rx: Mutex::new(Some(settled_rx)),
                timings: Mutex::new(None),
                isolated: std::sync::OnceLock::new(),
                workspace: std::sync::OnceLock::new(),
            }),
        }
    }

    /// The hook that tells the scheduler how its runs' turns ended (add it to the agent).
    pub fn hook(&self) -> Arc<dyn Hook> {
        Arc::new(Outcomes(self.inner.clone()))
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

    fn store(&self) -> &Arc<dyn JobStore> {
        self.inner.jobs.store()
    }

    /// Runs until `stop` is cancelled: hands every due run to the agent. Runs pending from
    /// before a restart are handed over again first.
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
        self.resume_pending().await;
        loop {
            let wait = self.tick().await;
            tokio::select! {
                () = stop.cancelled() => return,
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
                        job.last = Some(run);
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
            None
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
                        now_job.last = Some(run);
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

    /// Records what became of the run whose message is `id`.
    async fn settle(&self, id: &str, fate: Fate) {
        let Some(flight) = self
            .inner
            .in_flight
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(id)
        else {
            return;
        };
        let ended = self
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
            Fate::Handled => ended.unwrap_or(Outcome::Answered),
        };
        self.record_end(flight, outcome).await;
    }

    /// Records how a run ended, on its runs and its job; a failed task is tried again
    /// (see [`backoff`]) while that is within its window — before its next due time and
    /// within its catch-up of its due time — else the chat of a job in its own session is
    /// told (one in the chat's session showed each failure there).
    async fn record_end(&self, flight: InFlight, outcome: Outcome) {
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
                        job.last = Some(last);
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
    async fn forget_if_done(&self, job: &Job) {
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
    async fn tell(&self, job: &Job, kind: OutboundKind) {
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
fn count(run: &Run) {
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

/// The most of the heartbeat's instructions (HEARTBEAT.md) a beat reads.
pub const MAX_INSTRUCTIONS: usize = 64 * 1024;

/// What a run of `job` tells the agent: a task's message, or the heartbeat's instructions
/// as they are now, read through `workspace`; why not, when there are none to follow.
async fn message_of(job: &Job, workspace: Option<Arc<Workspace>>) -> Result<String, String> {
    let JobKind::Heartbeat { instructions } = &job.kind else {
        return Ok(job.message.clone());
    };
    let workspace =
        workspace.ok_or("there is no workspace to read the heartbeat's instructions in")?;
    let name = instructions.clone();
    let read =
        tokio::task::spawn_blocking(move || workspace.read_text(&name, MAX_INSTRUCTIONS + 1))
            .await
            .map_err(|err| err.to_string())?;
    let (text, size) = read.map_err(|err| format!("{instructions}: {err}"))?;
    if size > MAX_INSTRUCTIONS as u64 {
        return Err(format!(
            "{instructions} is larger than {} KiB: keep the heartbeat's instructions short",
            MAX_INSTRUCTIONS / 1024
        ));
    }
    if text.trim().is_empty() {
        return Err(format!(
            "{instructions} is empty: the heartbeat has nothing to check"
        ));
    }
    Ok(text)
}

fn earliest(a: Option<Timestamp>, b: Option<Timestamp>) -> Option<Timestamp> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// The hook that notes how a scheduled run's turn ended, for its ack to record.
struct Outcomes(Arc<Inner>);

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
        self.0
            .ended
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(id.to_owned(), outcome);
    }
}

#[cfg(test)]
mod tests {
    use std::str::FromStr;

    use switchboard_core::{Channel, ChannelContext, CoreError, LaneOptions, Origin};
    use tokio::sync::mpsc::Receiver;

    use super::*;
    use crate::scheduler::due::Schedule;
    use crate::scheduler::job::{JobKind, SessionMode};
    use crate::scheduler::jobs::{Asker, NewJob};
    use crate::scheduler::store::FileJobStore;

    /// A channel that keeps what it is sent.
    struct Collect(Mutex<Vec<OutboundKind>>);

    #[async_trait]
    impl Channel for Collect {
        fn name(&self) -> ChannelName {
            ChannelName::from("websocket")
        }
        async fn run(&self, _ctx: ChannelContext) -> Result<(), CoreError> {
            Ok(())
        }
        async fn send(&self, message: OutboundMessage) -> Result<(), CoreError> {
            self.0
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push(message.kind);
            Ok(())
        }
    }

    struct Setup {
        _dir: tempfile::TempDir,
        scheduler: Scheduler,
        inbound: Receiver<InboundMessage>,
        sent: Arc<Collect>,
        stop: CancellationToken,
        store: FileJobStore,
    }

    fn start_at(now: &str, state: Option<tempfile::TempDir>) -> Setup {
        start_with(now, state, Duration::from_secs(1))
    }

    fn start_with(now: &str, state: Option<tempfile::TempDir>, min_interval: Duration) -> Setup {
        let clock = Arc::new(TokioClock::starting_at(
            Timestamp::from_str(now).expect("ts"),
        ));
        let config = SchedulerConfig {
            min_interval,
            ..SchedulerConfig::default()
        };
        start_on(clock, state, config)
    }

    fn start_on(
        clock: Arc<dyn Clock>,
        state: Option<tempfile::TempDir>,
        config: SchedulerConfig,
    ) -> Setup {
        let dir = state.unwrap_or_else(|| tempfile::tempdir().expect("tempdir"));
        let store = FileJobStore::new(dir.path());
        let hub = ChatHub::new(64, CancellationToken::new());
        let sent = Arc::new(Collect(Mutex::new(Vec::new())));
        hub.register_channel(sent.clone(), LaneOptions::default());
        let inbound = hub.take_inbound().expect("inbound");
        let scheduler = Scheduler::new(Arc::new(store.clone()), hub, clock, config);
        let stop = CancellationToken::new();
        let running = scheduler.clone();
        let until = stop.clone();
        tokio::spawn(async move { running.run(until).await });
        Setup {
            _dir: dir,
            scheduler,
            inbound,
            sent,
            stop,
            store,
        }
    }

    fn chat() -> (ChannelName, ChatId) {
        (ChannelName::from("websocket"), ChatId::from("c"))
    }

    fn new_job(schedule: Schedule) -> NewJob {
        NewJob {
            name: Some("tea".into()),
            message: "Remind me to drink tea.".into(),
            schedule,
            chat: chat(),
            session: SessionMode::Chat,
            catch_up: None,
            created_by: None,
        }
    }

    /// The next scheduled message, within `within` of (paused) time.
    async fn next(setup: &mut Setup, within: Duration) -> Option<InboundMessage> {
        tokio::time::timeout(within, setup.inbound.recv())
            .await
            .ok()
            .flatten()
    }

    #[tokio::test(start_paused = true)]
    async fn a_reminder_comes_once_at_its_time_as_scheduled_work() {
        let mut s = start_at("2026-11-25T10:00:00Z", None);
        let now = Timestamp::from_str("2026-11-25T10:00:00Z").expect("ts");
        let job = s
            .scheduler
            .jobs()
            .add(new_job(Schedule::after("2s", now).expect("in 2 s")))
            .await
            .expect("added");
        assert!(
            next(&mut s, Duration::from_millis(1900)).await.is_none(),
            "nothing before its time"
        );
        let message = next(&mut s, Duration::from_secs(1))
            .await
            .expect("at its time");
        assert_eq!(message.content, "Remind me to drink tea.");
        assert_eq!(
            message.origin,
            Origin::Schedule {
                job: job.id.clone(),
                name: "tea".into()
            }
        );
        assert_eq!(
            message.id.as_ref().map(MessageId::as_str),
            Some(format!("sched:{}:{}", job.id, now.as_millisecond() + 2000).as_str())
        );
        message.settle(Fate::Handled);
        // Never again, and the run is recorded answered.
        assert!(next(&mut s, Duration::from_secs(3600)).await.is_none());
        let runs = s.store.runs(&job.id, 5).await.expect("runs");
        assert_eq!(runs.len(), 1, "{runs:?}");
        assert_eq!(runs[0].outcome, Outcome::Answered);
        let jobs = s
            .scheduler
            .jobs()
            .list(&Asker::Operator)
            .await
            .expect("jobs");
        assert!(jobs.is_empty(), "a reminder that ran is gone: {jobs:?}");
        s.stop.cancel();
    }

    #[tokio::test(start_paused = true)]
    async fn an_interval_job_runs_each_interval_not_when_paused_never_once_removed() {
        let mut s = start_at("2026-11-25T10:00:00Z", None);
        let now = Timestamp::from_str("2026-11-25T10:00:00Z").expect("ts");
        let job = s
            .scheduler
            .jobs()
            .add(new_job(Schedule::every("10s", now).expect("every")))
            .await
            .expect("added");
        for _ in 0..3 {
            let message = next(&mut s, Duration::from_secs(11)).await.expect("a run");
            message.settle(Fate::Handled);
        }
        let asker = Asker::Chat(chat().0, chat().1);
        s.scheduler
            .jobs()
            .set_enabled(&asker, &job.id, false)
            .await
            .expect("paused");
        assert!(
            next(&mut s, Duration::from_secs(60)).await.is_none(),
            "paused"
        );
        s.scheduler
            .jobs()
            .set_enabled(&asker, &job.id, true)
            .await
            .expect("resumed");
        next(&mut s, Duration::from_secs(11))
            .await
            .expect("runs again")
            .settle(Fate::Handled);
        s.scheduler
            .jobs()
            .remove(&asker, &job.id)
            .await
            .expect("removed");
        assert!(
            next(&mut s, Duration::from_secs(120)).await.is_none(),
            "removed"
        );
        let runs = s.store.runs(&job.id, 20).await.expect("runs");
        assert_eq!(runs.len(), 4);
        assert!(
            runs.iter().all(|run| run.outcome == Outcome::Answered),
            "{runs:?}"
        );
        s.stop.cancel();
    }

    #[tokio::test(start_paused = true)]
    async fn a_chat_sees_and_changes_only_its_own_jobs_and_limits_are_told() {
        let clock = Arc::new(TokioClock::starting_at(
            Timestamp::from_str("2026-11-25T10:00:00Z").expect("ts"),
        ));
        let config = SchedulerConfig {
            max_jobs_per_chat: 2,
            ..SchedulerConfig::default()
        };
        let s = start_on(clock, None, config);
        let now = Timestamp::from_str("2026-11-25T10:00:00Z").expect("ts");
        let job = s
            .scheduler
            .jobs()
            .add(new_job(Schedule::every("1h", now).expect("every")))
            .await
            .expect("added");
        let other = Asker::Chat(ChannelName::from("websocket"), ChatId::from("d"));
        assert!(
            s.scheduler
                .jobs()
                .list(&other)
                .await
                .expect("list")
                .is_empty()
        );
        let err = s
            .scheduler
            .jobs()
            .remove(&other, &job.id)
            .await
            .expect_err("not theirs");
        assert!(err.contains("no job"), "{err}");
        let err = s
            .scheduler
            .jobs()
            .add(new_job(Schedule::every("30s", now).expect("every")))
            .await
            .expect_err("too often");
        assert!(err.contains("scheduler.min_interval_secs"), "{err}");
        let long = NewJob {
            message: "x".repeat(crate::scheduler::jobs::MAX_MESSAGE_BYTES + 1),
            ..new_job(Schedule::every("1h", now).expect("every"))
        };
        let err = s.scheduler.jobs().add(long).await.expect_err("too long");
        assert!(err.contains("at most 16384 are kept"), "{err}");
        // The cap counts this chat's jobs only.
        s.scheduler
            .jobs()
            .add(new_job(Schedule::every("2h", now).expect("every")))
            .await
            .expect("the second");
        let err = s
            .scheduler
            .jobs()
            .add(new_job(Schedule::every("3h", now).expect("every")))
            .await
            .expect_err("a third");
        assert_eq!(
            err,
            "this chat has 2 jobs, the most it may have (scheduler.max_jobs_per_chat); remove \
             one first"
        );
        let elsewhere = NewJob {
            chat: (ChannelName::from("websocket"), ChatId::from("d")),
            ..new_job(Schedule::every("3h", now).expect("every"))
        };
        s.scheduler
            .jobs()
            .add(elsewhere)
            .await
            .expect("another chat has room");
        s.stop.cancel();
    }

    #[tokio::test(start_paused = true)]
    async fn a_run_pending_at_a_crash_is_handed_over_again_and_a_late_one_is_skipped_and_told() {
        let dir = tempfile::tempdir().expect("tempdir");
        let base = Timestamp::from_str("2026-11-25T10:00:00Z").expect("ts");
        // The daemon before: one job started a run (pending) and crashed; another was due
        // two hours ago, past its catch-up of one.
        let store = FileJobStore::new(dir.path());
        let pending_due = base.checked_sub(SignedDuration::from_secs(30)).expect("ts");
        let mut pending = Job {
            id: "j1".into(),
            name: "pending".into(),
            message: "first".into(),
            schedule: Schedule::At { at: pending_due },
            channel: "websocket".into(),
            chat_id: "c".into(),
            session: SessionMode::Chat,
            enabled: true,
            created_by: "operator".into(),
            catch_up_secs: 3600,
            created_at: base,
            next_due: None,
            last: None,
            declared: None,
            kind: JobKind::Task,
            active_hours: None,
            retry: None,
        };
        pending.last = Some(Run {
            job: "j1".into(),
            due: pending_due,
            started: Some(pending_due),
            finished: None,
            outcome: Outcome::Pending,
            attempt: 1,
        });
        store.put(&pending).await.expect("put");
        let late_due = base.checked_sub(SignedDuration::from_hours(2)).expect("ts");
        let late = Job {
            id: "j2".into(),
            name: "late".into(),
            message: "second".into(),
            schedule: Schedule::At { at: late_due },
            next_due: Some(late_due),
            last: None,
            ..pending.clone()
        };
        store.put(&late).await.expect("put");

        let mut s = start_at("2026-11-25T10:00:00Z", Some(dir));
        let again = next(&mut s, Duration::from_secs(1))
            .await
            .expect("taken up");
        assert_eq!(again.content, "first");
        assert_eq!(
            again.id.as_ref().map(MessageId::as_str),
            Some(format!("sched:j1:{}", pending_due.as_millisecond()).as_str()),
            "the same id: the session journal answers it once"
        );
        again.settle(Fate::Handled);
        assert!(
            next(&mut s, Duration::from_secs(10)).await.is_none(),
            "the late one does not run"
        );
        let runs = s.store.runs("j2", 5).await.expect("runs");
        assert!(
            matches!(&runs[0].outcome, Outcome::Skipped { why } if why.contains("catch-up")),
            "{runs:?}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
        let told = s
            .sent
            .0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        assert!(
            matches!(told.as_slice(), [OutboundKind::Notice(text)] if text.contains("\"late\" (job j2) did not run")),
            "{told:?}"
        );
        s.stop.cancel();
    }

    /// The heartbeat as the daemon declares it: every 30 s, 08:00-22:00 UTC, its
    /// instructions in `dir/HEARTBEAT.md`.
    fn heartbeat(s: &Setup, dir: &std::path::Path) -> crate::scheduler::Declared {
        let workspace = Workspace::new(dir, &[], true).expect("workspace");
        s.scheduler.read_instructions_in(Arc::new(workspace));
        crate::scheduler::Declared {
            id: "heartbeat".into(),
            message: String::new(),
            schedule: Schedule::Every {
                every_secs: 30,
                from: Timestamp::from_str("2026-11-25T00:00:00Z").expect("ts"),
            },
            chat: chat(),
            session: SessionMode::Isolated,
            catch_up: Duration::from_secs(30),
            enabled: true,
            kind: JobKind::Heartbeat {
                instructions: "HEARTBEAT.md".into(),
            },
            active_hours: Some(
                crate::scheduler::ActiveHours::parse("08:00-22:00", "UTC").expect("hours"),
            ),
            spec: "heartbeat".into(),
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_slow_beat_makes_the_next_one_skip_not_stack_and_the_instructions_are_read_each_time()
    {
        let mut s = start_at("2026-11-25T10:00:00Z", None);
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(dir.path().join("HEARTBEAT.md"), "Check the build.").expect("file");
        s.scheduler
            .jobs()
            .sync_declared(&[heartbeat(&s, dir.path())])
            .await
            .expect("declared");
        let slow = next(&mut s, Duration::from_secs(31)).await.expect("a beat");
        assert_eq!(slow.content, "Check the build.");
        assert_eq!(slow.origin, Origin::Heartbeat);
        assert_eq!(slow.channel.as_str(), "cron", "in a session of its own");
        assert_eq!(slow.chat_id.as_str(), "heartbeat");
        // Still running when the next is due: that one is skipped, not stacked.
        assert!(next(&mut s, Duration::from_secs(40)).await.is_none());
        let runs = s.store.runs("heartbeat", 5).await.expect("runs");
        assert!(
            matches!(&runs[0].outcome, Outcome::Skipped { why } if why.contains("still going")),
            "{runs:?}"
        );
        slow.settle(Fate::Handled);
        std::fs::write(dir.path().join("HEARTBEAT.md"), "Check the mail.").expect("file");
        let after = next(&mut s, Duration::from_secs(31))
            .await
            .expect("beats again");
        assert_eq!(after.content, "Check the mail.", "read at each beat");
        after.settle(Fate::Handled);
        // No instructions, no beat: recorded why, nothing handed to the agent.
        std::fs::write(dir.path().join("HEARTBEAT.md"), "  \n").expect("file");
        assert!(next(&mut s, Duration::from_secs(31)).await.is_none());
        let runs = s.store.runs("heartbeat", 1).await.expect("runs");
        assert!(
            matches!(&runs[0].outcome, Outcome::Skipped { why } if why.contains("is empty")),
            "{runs:?}"
        );
        assert!(
            s.sent
                .0
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .is_empty(),
            "the chat is told nothing of it"
        );
        s.stop.cancel();
    }

    #[tokio::test(start_paused = true)]
    async fn no_beat_comes_outside_the_active_hours() {
        let mut s = start_at("2026-11-25T21:59:00Z", None);
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(dir.path().join("HEARTBEAT.md"), "Check.").expect("file");
        s.scheduler
            .jobs()
            .sync_declared(&[heartbeat(&s, dir.path())])
            .await
            .expect("declared");
        next(&mut s, Duration::from_secs(31))
            .await
            .expect("21:59:30, within the hours")
            .settle(Fate::Handled);
        // From 21:59:30 to a second before 08:00.
        let night = Duration::from_secs(10 * 3600 + 29);
        assert!(
            next(&mut s, night).await.is_none(),
            "none from 22:00 to 08:00"
        );
        let morning = next(&mut s, Duration::from_secs(2))
            .await
            .expect("08:00, the hours begin");
        let due = morning
            .id
            .as_ref()
            .map(MessageId::as_str)
            .and_then(|id| id.rsplit(':').next())
            .and_then(|ms| ms.parse::<i64>().ok())
            .expect("due in its id");
        assert_eq!(
            Timestamp::from_millisecond(due).expect("ts"),
            Timestamp::from_str("2026-11-26T08:00:00Z").expect("ts")
        );
        s.stop.cancel();
    }

    /// Ends the turn of `message` as the agent would for a model that is down: the hook
    /// hears it failed, then the message is settled handled.
    async fn fail(s: &Setup, message: InboundMessage) {
        let session = message.session_key();
        let summary = TurnSummary {
            end: None,
            text: "the model is unreachable",
            usage: Default::default(),
            duration: Duration::ZERO,
            inbound: message.id.as_ref(),
        };
        let turn = TurnInfo {
            session: &session,
            iteration: 1,
            user: None,
        };
        s.scheduler.hook().on_turn_end(turn, summary).await;
        message.settle(Fate::Handled);
    }

    #[tokio::test(start_paused = true)]
    async fn a_failed_run_is_tried_again_with_backoff_then_the_chat_is_told_once() {
        let mut s = start_at("2026-11-25T10:00:00Z", None);
        let now = Timestamp::from_str("2026-11-25T10:00:00Z").expect("ts");
        let job = s
            .scheduler
            .jobs()
            .add(NewJob {
                session: SessionMode::Isolated,
                ..new_job(Schedule::after("1s", now).expect("in 1 s"))
            })
            .await
            .expect("added");
        let first = next(&mut s, Duration::from_secs(2)).await.expect("the run");
        let due = now.as_millisecond() + 1000;
        assert_eq!(
            first.id.as_ref().map(MessageId::as_str),
            Some(format!("sched:{}:{due}", job.id).as_str())
        );
        fail(&s, first).await;
        // Tried again 30 s later, as a message of its own, then 2 min after that.
        assert!(next(&mut s, Duration::from_secs(29)).await.is_none());
        let second = next(&mut s, Duration::from_secs(2)).await.expect("try 2");
        assert_eq!(
            second.id.as_ref().map(MessageId::as_str),
            Some(format!("sched:{}:{due}:2", job.id).as_str())
        );
        assert_eq!(second.content, "Remind me to drink tea.");
        fail(&s, second).await;
        assert!(next(&mut s, Duration::from_secs(119)).await.is_none());
        let third = next(&mut s, Duration::from_secs(2)).await.expect("try 3");
        fail(&s, third).await;
        // Three tries: no more; recorded failed, the chat told once, the job gone.
        assert!(next(&mut s, Duration::from_secs(3600)).await.is_none());
        let runs = s.store.runs(&job.id, 5).await.expect("runs");
        assert_eq!(runs.len(), 1, "one run, tried three times: {runs:?}");
        assert_eq!(runs[0].attempt, 3);
        assert!(
            matches!(&runs[0].outcome, Outcome::Failed { why } if why == "the model is unreachable"),
            "{runs:?}"
        );
        let told = s
            .sent
            .0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        assert!(
            matches!(told.as_slice(), [OutboundKind::Notice(text)]
                if text == "The scheduled task \"tea\" (job j1) failed (3 tries): the model is unreachable"),
            "{told:?}"
        );
        let left = s
            .scheduler
            .jobs()
            .list(&Asker::Operator)
            .await
            .expect("jobs");
        assert!(left.is_empty(), "{left:?}");
        s.stop.cancel();
    }

    #[tokio::test(start_paused = true)]
    async fn a_failed_run_is_not_tried_again_past_its_next_due_time() {
        let mut s = start_at("2026-11-25T10:00:00Z", None);
        let now = Timestamp::from_str("2026-11-25T10:00:00Z").expect("ts");
        s.scheduler
            .jobs()
            .add(new_job(Schedule::every("20s", now).expect("every")))
            .await
            .expect("added");
        let first = next(&mut s, Duration::from_secs(21)).await.expect("a run");
        fail(&s, first).await;
        // The next try would be 30 s on, past the next run (20 s on): the next run it is.
        let again = next(&mut s, Duration::from_secs(21))
            .await
            .expect("next run");
        assert!(
            again
                .id
                .as_ref()
                .is_some_and(|id| id.as_str().matches(':').count() == 2),
            "a first try of the next due time: {:?}",
            again.id
        );
        s.stop.cancel();
    }

    /// The due time a scheduled message's id carries.
    fn due_of(message: &InboundMessage) -> Timestamp {
        let id = message.id.as_ref().expect("an id").as_str();
        let millis = id.rsplit(':').next().expect("due").parse().expect("millis");
        Timestamp::from_millisecond(millis).expect("ts")
    }

    /// The runs of a daily 02:30 job in Berlin, from `from`, as (due, when it arrived).
    async fn berlin_half_past_two(from: &str, count: usize) -> Vec<(String, String)> {
        let clock = Arc::new(TokioClock::starting_at(
            Timestamp::from_str(from).expect("ts"),
        ));
        // Polling once an hour: the loop sleeps to each due time, not in small steps.
        let config = SchedulerConfig {
            poll: Duration::from_secs(3600),
            ..SchedulerConfig::default()
        };
        let mut s = start_on(clock, None, config);
        s.scheduler
            .jobs()
            .add(new_job(
                Schedule::cron("30 2 * * *", "Europe/Berlin").expect("cron"),
            ))
            .await
            .expect("added");
        let mut runs = Vec::new();
        for _ in 0..count {
            let message = next(&mut s, Duration::from_secs(26 * 3600))
                .await
                .expect("a run a day");
            let arrived = s.scheduler.jobs().now();
            runs.push((due_of(&message).to_string(), arrived.to_string()));
            message.settle(Fate::Handled);
        }
        s.stop.cancel();
        runs
    }

    #[tokio::test(start_paused = true)]
    async fn a_daily_cron_runs_once_per_local_time_across_spring_forward_and_fall_back() {
        // 02:30 does not exist in Berlin on 2026-03-29: that day's run comes once, at 03:00
        // CEST, the gap's end.
        let spring = berlin_half_past_two("2026-03-27T12:00:00Z", 3).await;
        let times: Vec<&str> = spring.iter().map(|(due, _)| due.as_str()).collect();
        assert_eq!(
            times,
            [
                "2026-03-28T01:30:00Z",
                "2026-03-29T01:00:00Z",
                "2026-03-30T00:30:00Z"
            ]
        );
        // 02:30 happens twice on 2026-10-25: one run, at the first.
        let fall = berlin_half_past_two("2026-10-23T12:00:00Z", 3).await;
        let times: Vec<&str> = fall.iter().map(|(due, _)| due.as_str()).collect();
        assert_eq!(
            times,
            [
                "2026-10-24T00:30:00Z",
                "2026-10-25T00:30:00Z",
                "2026-10-26T01:30:00Z"
            ]
        );
        for (due, arrived) in spring.iter().chain(&fall) {
            assert_eq!(due, arrived, "each run arrives at its time");
        }
    }

    /// A wall clock that can be set (as NTP or an operator does) on top of tokio's.
    struct Settable {
        clock: TokioClock,
        shift: Mutex<SignedDuration>,
    }

    impl Clock for Settable {
        fn now(&self) -> Timestamp {
            let shift = *self.shift.lock().unwrap_or_else(PoisonError::into_inner);
            self.clock.now().saturating_add(shift).expect("in range")
        }
    }

    impl Settable {
        fn jump(&self, by: SignedDuration) {
            *self.shift.lock().unwrap_or_else(PoisonError::into_inner) += by;
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_wall_clock_jump_neither_doubles_nor_drops_a_run() {
        let clock = Arc::new(Settable {
            clock: TokioClock::starting_at(
                Timestamp::from_str("2026-11-25T10:00:30Z").expect("ts"),
            ),
            shift: Mutex::new(SignedDuration::ZERO),
        });
        let mut s = start_on(clock.clone(), None, SchedulerConfig::default());
        let job = s
            .scheduler
            .jobs()
            .add(new_job(Schedule::cron("0 * * * *", "UTC").expect("hourly")))
            .await
            .expect("added");
        let first = next(&mut s, Duration::from_secs(3600))
            .await
            .expect("11:00");
        assert_eq!(due_of(&first).to_string(), "2026-11-25T11:00:00Z");
        first.settle(Fate::Handled);
        // Set back by half an hour just after 11:00: 11:00 does not run again; 12:00 does,
        // when the clock says so (90 minutes on).
        clock.jump(SignedDuration::from_mins(-30));
        assert!(
            next(&mut s, Duration::from_secs(89 * 60)).await.is_none(),
            "not doubled"
        );
        let noon = next(&mut s, Duration::from_secs(2 * 60))
            .await
            .expect("12:00");
        assert_eq!(due_of(&noon).to_string(), "2026-11-25T12:00:00Z");
        noon.settle(Fate::Handled);
        // Set forward past 13:00 (within its catch-up): 13:00 runs at once, once.
        clock.jump(SignedDuration::from_mins(75));
        let late = next(&mut s, Duration::from_secs(5)).await.expect("13:00");
        assert_eq!(due_of(&late).to_string(), "2026-11-25T13:00:00Z");
        late.settle(Fate::Handled);
        let after = next(&mut s, Duration::from_secs(50 * 60))
            .await
            .expect("14:00");
        assert_eq!(due_of(&after).to_string(), "2026-11-25T14:00:00Z");
        after.settle(Fate::Handled);
        let runs = s.store.runs(&job.id, 10).await.expect("runs");
        assert_eq!(runs.len(), 4, "{runs:?}");
        s.stop.cancel();
    }
}
