//! [`Scheduler`]: the one task that knows what is due when, and hands each due run to the
//! agent as an inbound message on the hub — the same path a person's message takes (same
//! ordering per chat, same journal, same `/stop`), with [`Origin::Schedule`] and the id
//! `sched:<job>:<due>`.
//!
//! # Each due time once
//! The scheduler fires while it leads the `scheduler` duty ([`Bus::lead`]), under a
//! [`Tenure`] of it: one process alone, one member at a time on a cluster. Nothing is
//! fired or handed over unless the tenure is confirmed, so a leader paused past its lease
//! wakes to learn it no longer leads before it acts.
//!
//! A due time is **claimed** in the job store before anything else (`runs::claim`: a run of
//! that due time, pending and carrying the tenure's epoch, added only if none is on record),
//! then the job's next due time is moved past it, then its message is published. A claim
//! somebody else holds is never handed over again by this scheduler — unless its epoch is
//! over (its scheduler lost the duty), when it is **taken over**: adopted under this
//! tenure's epoch (`runs::adopt`, once per holding) and published again with the same id —
//! on taking the duty, when the due time comes up, and as soon as the loop sees a job whose
//! last run is pending under another epoch (the claim of a leader whose store call was under
//! way while its lease lapsed lands after the next leader looked). The chat's session
//! journal answers one id once, so a run handed over twice is not answered twice.
//!
//! A run is settled once, wherever its turn ended (`outcome.rs`). A run that never settles
//! holds its job's later due times back ("the run before it was still going", recorded) only
//! until its catch-up has passed; then it is settled failed and the job goes on.
//!
//! Every due time runs or is recorded skipped, with why: too late after the daemon was down
//! (the chat is told), the run before still going, a cost cap reached, or folded — the due
//! times that passed while no scheduler fired (down, or changing leaders) are recorded as
//! folded into the one that caught up.
//!
//! # Time
//! Due times are instants; "now" is a [`Clock`] (the system's, or tokio's paused clock in
//! tests). The loop sleeps until the soonest due time but never longer than `poll`, so a wall
//! clock that jumps forward is noticed, and so are jobs the operator's CLI changed.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use jiff::Timestamp;
use switchboard_core::{
    Ack, AgentName, Bus, ChannelName, ChatId, Fate, InboundMessage, LaneOptions, MessageId,
    ScheduledRun, SenderId, Tenure,
};
use switchboard_tools::Workspace;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::clock::Clock;
use super::isolated;
use super::job::{Job, Outcome, Run, SessionMode};
use super::jobs::{Jobs, SchedulerConfig};
use super::outcome::{Outcomes, Settler};
use super::store::JobStore;

/// Whether a chat may spend on the models now: the daily cost caps (the agent's spending).
#[async_trait::async_trait]
pub trait Budget: Send + Sync {
    /// Why a new request of `chat` is refused now (a cap it, or the daemon, reached); `None`
    /// when it may go on.
    async fn refusal(&self, chat: &switchboard_core::SessionKey) -> Option<String>;
}

/// The scheduler. Cloning shares it.
#[derive(Clone)]
pub struct Scheduler {
    inner: Arc<Inner>,
}

struct Inner {
    /// The jobs, their store, clock and config; its `changed` wakes the loop.
    jobs: Jobs,
    hub: Arc<dyn Bus>,
    /// Settles runs (shared with the hook that the agent's turns call).
    settler: Settler,
    /// Acks of runs: (message id, fate). Sent from whichever task settles the message;
    /// received by the loop, which settles what they say.
    acks: mpsc::UnboundedSender<(ScheduledRun, Fate)>,
    /// The loop's end of `acks`, taken when it starts.
    acks_rx: Mutex<Option<mpsc::UnboundedReceiver<(ScheduledRun, Fate)>>>,
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
    spending: std::sync::OnceLock<Arc<dyn Budget>>,
}

/// What the loop keeps of a job between its runs: when it is next due, and under which
/// holding of the duty its last run was claimed while that is still going.
#[derive(Debug)]
struct Timing {
    id: String,
    next_due: Option<Timestamp>,
    retry_at: Option<Timestamp>,
    going_under: Option<Option<u64>>,
}

impl Timing {
    /// The timing of an enabled job; none for a paused one.
    fn of(job: &Job) -> Option<Self> {
        job.enabled.then(|| Self {
            id: job.id.clone(),
            next_due: job.next_due,
            retry_at: job.retry.as_ref().map(|retry| retry.at),
            going_under: job
                .last
                .as_ref()
                .filter(|last| last.outcome == Outcome::Pending)
                .map(|last| last.epoch),
        })
    }

    /// Whether its last run is still going under a claim of another holding than `tenure`:
    /// one to take over.
    fn claimed_elsewhere(&self, tenure: &Tenure) -> bool {
        self.going_under
            .is_some_and(|epoch| epoch != Some(tenure.epoch()))
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
        let (acks, acks_rx) = mpsc::unbounded_channel();
        let jobs = Jobs::new(store, clock, config);
        Self {
            inner: Arc::new(Inner {
                settler: Settler {
                    jobs: jobs.clone(),
                    hub: hub.clone(),
                },
                jobs,
                hub,
                acks,
                acks_rx: Mutex::new(Some(acks_rx)),
                timings: Mutex::new(None),
                isolated: std::sync::OnceLock::new(),
                workspace: std::sync::OnceLock::new(),
                spending: std::sync::OnceLock::new(),
            }),
        }
    }

    /// What settles its runs where their turns end (the agent's hook calls it).
    pub fn outcomes(&self) -> Outcomes {
        Outcomes(self.inner.settler.clone())
    }

    /// Skips a run that comes due while a daily cost cap of `budget` is reached (set once;
    /// later calls are ignored).
    pub fn keep_to(&self, budget: Arc<dyn Budget>) {
        let _ = self.inner.spending.set(budget);
    }

    /// Why a run of `job` may not start now for its cost: a cap its chat (or the daemon)
    /// reached. A run in a session of its own counts against its job's chat too.
    pub(super) async fn over_budget(&self, job: &Job) -> Option<String> {
        let spending = self.inner.spending.get()?;
        spending.refusal(&job.chat()).await
    }

    /// Reads the heartbeat's instructions in `workspace` (set once; later calls are
    /// ignored).
    pub fn read_instructions_in(&self, workspace: Arc<Workspace>) {
        let _ = self.inner.workspace.set(workspace);
    }

    pub(super) fn workspace(&self) -> Option<Arc<Workspace>> {
        self.inner.workspace.get().cloned()
    }

    /// Its jobs, to add, list and change (a change wakes the loop at once).
    pub fn jobs(&self) -> &Jobs {
        &self.inner.jobs
    }

    pub(super) fn store(&self) -> &Arc<dyn JobStore> {
        self.inner.jobs.store()
    }

    /// What settles its runs.
    pub(super) fn settler(&self) -> &Settler {
        &self.inner.settler
    }

    /// Runs until `stop` is cancelled: hands every due run to the agent while this process
    /// leads the `scheduler` duty (always, alone; one member at a time on a cluster, the
    /// others standing by), and settles what its runs' acks say meanwhile.
    pub async fn run(&self, stop: CancellationToken) {
        let Some(mut acks) = self
            .inner
            .acks_rx
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
        else {
            tracing::error!("the scheduler runs once");
            return;
        };
        loop {
            let tenure = tokio::select! {
                () = stop.cancelled() => return,
                tenure = self.inner.hub.lead(DUTY) => tenure,
                Some((run, fate)) = acks.recv() => {
                    self.inner.settler.on_ack(&run, fate).await;
                    continue;
                }
            };
            self.lead(&stop, &tenure, &mut acks).await;
            if stop.is_cancelled() {
                return;
            }
            tracing::warn!("another member fires the scheduled jobs now; standing by");
        }
    }

    /// Hands due runs over until `stop`, or until the duty's `tenure` is lost.
    async fn lead(
        &self,
        stop: &CancellationToken,
        tenure: &Tenure,
        acks: &mut mpsc::UnboundedReceiver<(ScheduledRun, Fate)>,
    ) {
        tracing::info!(
            epoch = tenure.epoch(),
            "this member fires the scheduled jobs"
        );
        self.take_over(tenure).await;
        loop {
            // Paused past the lease, it learns from the next renewal whether it still leads
            // before it fires anything.
            if !tenure.confirmed().await {
                return;
            }
            let wait = self.tick(tenure).await;
            tokio::select! {
                () = stop.cancelled() => return,
                () = tenure.lost() => return,
                () = tokio::time::sleep(wait) => {}
                () = self.inner.jobs.changed().notified() => {}
                Some((run, fate)) = acks.recv() => self.inner.settler.on_ack(&run, fate).await,
            }
            // Settle whatever else arrived meanwhile before looking at what is due.
            while let Ok((run, fate)) = acks.try_recv() {
                self.inner.settler.on_ack(&run, fate).await;
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
    async fn tick(&self, tenure: &Tenure) -> Duration {
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
            if timing.claimed_elsewhere(tenure) {
                match self.store().job(&timing.id).await {
                    Ok(Some(job)) => self.take_over_job(&job, tenure).await,
                    Ok(None) => {}
                    Err(err) => {
                        tracing::error!(job = %timing.id, error = %err, "the scheduler cannot read a job");
                    }
                }
            }
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
                    self.retry(&job, retry, now, tenure).await;
                } else {
                    soonest = earliest(soonest, Some(retry.at));
                }
            }
            let Some(due) = job.next_due else {
                continue;
            };
            if due <= now {
                let next = self.fire(job, due, now, tenure).await;
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

    /// Hands `run` of `job` to the agent, as a message of its chat (or, for a job in a
    /// session of its own, of the `cron` channel) — unless the duty's `tenure` is lost
    /// meanwhile: then its claim is the next scheduler's to take over.
    pub(super) async fn publish(&self, job: &Job, run: &Run, text: String, tenure: &Tenure) {
        if !tenure.confirmed().await {
            tracing::warn!(job = %job.id, due = %run.due, "the duty was lost before the run was handed over; the next scheduler takes it over");
            return;
        }
        let id = Run::message_id(&job.id, run.due, run.attempt);
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
        let isolated = job.session == SessionMode::Isolated;
        if isolated {
            message.on_behalf_of = Some(job.chat());
        }
        let scheduled = ScheduledRun {
            job: job.id.clone(),
            due_ms: run.due.as_millisecond(),
            attempt: run.attempt,
            isolated,
        };
        message.run = Some(scheduled.clone());
        let acks = self.inner.acks.clone();
        message.ack = Some(Ack::new(move |fate| {
            let _ = acks.send((scheduled.clone(), fate));
        }));
        if let Err(err) = self.inner.hub.publish_inbound(message).await {
            // The daemon is stopping: the run stays pending and is taken over at the next start.
            tracing::info!(job = %job.id, error = %err, "a scheduled run was not handed over");
        }
    }

    /// Registers the `cron` channel isolated runs answer through, once.
    fn register_isolated(&self) {
        self.inner.isolated.get_or_init(|| {
            let channel = switchboard_core::Internal(isolated::IsolatedRuns {
                jobs: self.inner.jobs.clone(),
                hub: self.inner.hub.clone(),
            });
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
