//! [`Jobs`]: what may be done with jobs — add (within a chat's limits), list, remove, pause,
//! resume, run now, read runs — by a chat (the agent's `cron` tool, the person's `/jobs`),
//! which sees and touches only its own, or by the operator (`switchboard cron`), who sees
//! all. It works on the job store alone: the running daemon's scheduler sees every change
//! (at once when it was made in its own process, else at its next look).

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use switchboard_core::{AgentName, ChannelName, ChatId, SenderId, SessionKey};
use tokio::sync::Notify;

use super::clock::Clock;
use super::describe::{Reading, describe, reading};
use super::due::{Schedule, default_zone, zone};
use super::job::{ActiveHours, Job, JobKind, Run, SessionMode};
use super::store::JobStore;

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
    /// Jobs one person may have, in all their chats (see [`NewJob::owner`]).
    ///
    /// [`NewJob::owner`]: super::NewJob::owner
    pub max_jobs_per_person: usize,
    /// Jobs the daemon may have in all (the config's own not counted).
    pub max_jobs: usize,
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
            max_jobs_per_person: 200,
            max_jobs: 1000,
            min_interval: Duration::from_secs(60),
            poll: Duration::from_secs(2),
        }
    }
}

/// Who asks: a chat (the agent, or the person there) may see and change only that chat's
/// jobs; the operator may see and change all.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Asker {
    /// A chat: its channel and chat id.
    Chat(ChannelName, ChatId),
    /// The operator (the CLI).
    Operator,
}

impl Asker {
    pub(crate) fn may_touch(&self, job: &Job) -> bool {
        match self {
            Self::Operator => true,
            Self::Chat(channel, chat) => {
                job.channel == channel.as_str() && job.chat_id == chat.as_str()
            }
        }
    }
}

/// What may be done to a chat's jobs besides adding one — by the agent's `cron` tool and the
/// person's `/jobs` alike, so both answer the same way.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum JobAction {
    /// Every job, with its next run.
    List,
    /// Removes a job.
    Remove(String),
    /// Pauses a job.
    Pause(String),
    /// Resumes a paused job.
    Resume(String),
    /// Runs a job now, once, besides its schedule.
    Run(String),
}

/// A job to add, as asked.
#[derive(Clone, Debug)]
pub struct NewJob {
    /// Its name (the start of its message when none is given).
    pub name: Option<String>,
    /// What the agent is told when it runs.
    pub message: String,
    /// When it runs.
    pub schedule: Schedule,
    /// The chat it runs in: `(channel, chat id)`.
    pub chat: (ChannelName, ChatId),
    /// Where its turn runs.
    pub session: SessionMode,
    /// How late it may still start after the daemon was down; the config's by default.
    pub catch_up: Option<Duration>,
    /// Who made it: `chat <session>` when a chat asks, `operator`, `config`.
    pub created_by: Option<String>,
    /// The person it counts against (`scheduler.max_jobs_per_person`), when a person asked
    /// for it: see [`owner_of`].
    pub owner: Option<String>,
    /// The agent whose turns its runs are; `None`: the one the chat is bound to.
    pub agent: Option<AgentName>,
}

/// Who a job a chat's turn asks for counts against: the person who wrote the message
/// (`<channel>:<sender>`) — but on a channel whose senders are its connections (WebSocket's
/// `ws:<n>`, all holding its one token), the channel: however many connections and chat ids
/// it opens, it is one person.
pub fn owner_of(channel: &ChannelName, sender: Option<&SenderId>) -> String {
    match sender {
        Some(sender) if !sender.as_str().starts_with("ws:") => format!("{channel}:{sender}"),
        _ => channel.to_string(),
    }
}

/// The longest message a job may have (what the agent is told when it runs).
pub const MAX_MESSAGE_BYTES: usize = 16 * 1024;

/// The longest name a job may have.
pub const MAX_NAME_CHARS: usize = 100;

/// A job the config declares (`[[scheduler.jobs]]`): the config owns it — it is added,
/// changed and removed with the config, at start and on reload.
#[derive(Clone, Debug)]
pub struct Declared {
    /// Its id: the name the config gives it.
    pub id: String,
    /// What the agent is told when it runs.
    pub message: String,
    /// When it runs (read when the config was).
    pub schedule: Schedule,
    /// The chat it runs in.
    pub chat: (ChannelName, ChatId),
    /// Where its turn runs.
    pub session: SessionMode,
    /// How late it may still start after the daemon was down.
    pub catch_up: Duration,
    /// Whether it runs.
    pub enabled: bool,
    /// A task, or the heartbeat.
    pub kind: JobKind,
    /// The hours it may run in.
    pub active_hours: Option<ActiveHours>,
    /// Its definition as written: a job whose definition is unchanged is kept as it is
    /// (its next run, its last, a pause from a chat); a changed one starts afresh.
    pub spec: String,
}

/// What a sync with the config did: ids added, changed, removed.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Synced {
    /// Jobs the config has that the store had not.
    pub added: Vec<String>,
    /// Jobs whose definition changed.
    pub changed: Vec<String>,
    /// Jobs the config no longer has.
    pub removed: Vec<String>,
}

/// Jobs, as a chat or the operator may handle them. Cloning shares it.
#[derive(Clone)]
pub struct Jobs {
    store: Arc<dyn JobStore>,
    clock: Arc<dyn Clock>,
    config: SchedulerConfig,
    /// Poked on every change, so that this process's scheduler looks again at once.
    changed: Arc<Notify>,
    /// The default zone, looked up at its first use.
    timezone: Arc<OnceLock<String>>,
}

impl Jobs {
    /// Jobs of `store`, on `clock`, within `config`'s limits.
    pub fn new(store: Arc<dyn JobStore>, clock: Arc<dyn Clock>, config: SchedulerConfig) -> Self {
        Self {
            store,
            clock,
            config,
            changed: Arc::new(Notify::new()),
            timezone: Arc::new(OnceLock::new()),
        }
    }

    /// The config it works within.
    pub fn config(&self) -> &SchedulerConfig {
        &self.config
    }

    /// Now, by its clock.
    pub fn now(&self) -> jiff::Timestamp {
        self.clock.now()
    }

    /// The zone jobs use when they name none: the configured one, else the system's.
    pub fn timezone(&self) -> String {
        self.timezone
            .get_or_init(|| default_zone(self.config.timezone.as_deref()))
            .clone()
    }

    /// How `job` reads in a list (see [`describe`]): its times in its cron's zone, else in
    /// the zone jobs use.
    pub fn describe(&self, job: &Job) -> String {
        describe(job, self.now(), &self.zone_of(job))
    }

    /// [`Jobs::describe`] in parts, for a table.
    pub fn reading(&self, job: &Job) -> Reading {
        reading(job, self.now(), &self.zone_of(job))
    }

    /// A time of `job` (a run's due, start or end) as a person reads it, in the job's zone.
    pub fn time_of(&self, job: &Job, at: jiff::Timestamp) -> String {
        crate::due::local(at, &self.zone_of(job), Some(self.now()))
    }

    /// The zone `job`'s times are shown in: its cron's, else the one jobs use.
    fn zone_of(&self, job: &Job) -> jiff::tz::TimeZone {
        let name = match &job.schedule {
            Schedule::Cron { tz, .. } => tz.clone(),
            _ => self.timezone(),
        };
        zone(&name).unwrap_or(jiff::tz::TimeZone::UTC)
    }

    /// Notified on every change made through this (and its clones).
    pub(crate) fn changed(&self) -> &Arc<Notify> {
        &self.changed
    }

    /// The store.
    pub(crate) fn store(&self) -> &Arc<dyn JobStore> {
        &self.store
    }

    /// Adds a job for the chat of `new`.
    pub async fn add(&self, new: NewJob) -> Result<Job, String> {
        let config = &self.config;
        let now = self.clock.now();
        let next_due = self.check(&new, now)?;
        let (channel, chat) = new.chat;
        self.within_caps(&channel, &chat, new.owner.as_deref())
            .await?;
        let id = self.store.new_id().await.map_err(|err| err.to_string())?;
        let name = new
            .name
            .filter(|name| !name.trim().is_empty())
            .unwrap_or_else(|| new.message.chars().take(40).collect());
        let job = Job {
            id,
            name,
            message: new.message,
            schedule: new.schedule,
            channel: channel.to_string(),
            chat_id: chat.to_string(),
            session: new.session,
            enabled: true,
            created_by: new
                .created_by
                .unwrap_or_else(|| format!("chat {}", SessionKey::of(&channel, &chat))),
            catch_up_secs: new.catch_up.unwrap_or(config.catch_up).as_secs(),
            created_at: now,
            next_due,
            last: None,
            declared: None,
            kind: JobKind::Task,
            active_hours: None,
            retry: None,
            agent: new.agent.map(|agent| agent.to_string()),
            owner: new.owner,
        };
        self.store.put(&job).await.map_err(|err| err.to_string())?;
        self.changed.notify_one();
        Ok(job)
    }

    /// Why `new` cannot be a job at `now` (an empty or long message or name, an interval
    /// under the shortest, a time that has passed); else its first due time.
    fn check(&self, new: &NewJob, now: jiff::Timestamp) -> Result<Option<jiff::Timestamp>, String> {
        if new.message.trim().is_empty() {
            return Err("the job needs a message: what the agent is told when it runs".into());
        }
        if new.message.len() > MAX_MESSAGE_BYTES {
            return Err(format!(
                "the job's message is {} bytes; at most {MAX_MESSAGE_BYTES} are kept — say it \
                 shorter, or keep the details in a workspace file the job reads",
                new.message.len()
            ));
        }
        if new
            .name
            .as_ref()
            .is_some_and(|name| name.chars().count() > MAX_NAME_CHARS)
        {
            return Err(format!(
                "the job's name is longer than {MAX_NAME_CHARS} characters"
            ));
        }
        if let Some(gap) = new.schedule.shortest_gap(now)
            && gap < self.config.min_interval
        {
            return Err(format!(
                "it would run every {} s; the shortest interval allowed is {} s \
                 (scheduler.min_interval_secs)",
                gap.as_secs(),
                self.config.min_interval.as_secs()
            ));
        }
        let next_due = new.schedule.next_after(now)?;
        if next_due.is_none() {
            return Err("that time has passed: the job would never run".into());
        }
        Ok(next_due)
    }

    /// Why one more job in `chat` of `channel`, for `owner`, is one too many: the chat's,
    /// the person's or the daemon's cap (the config's own jobs not counted).
    async fn within_caps(
        &self,
        channel: &ChannelName,
        chat: &ChatId,
        owner: Option<&str>,
    ) -> Result<(), String> {
        let config = &self.config;
        let asker = Asker::Chat(channel.clone(), chat.clone());
        let all: Vec<Job> = self
            .jobs()
            .await?
            .into_iter()
            .filter(|job| job.declared.is_none())
            .collect();
        let theirs = all.iter().filter(|job| asker.may_touch(job)).count();
        if theirs >= config.max_jobs_per_chat {
            return Err(format!(
                "this chat has {theirs} jobs, the most it may have (scheduler.max_jobs_per_chat); \
                 remove one first"
            ));
        }
        if let Some(owner) = owner {
            let owned = all
                .iter()
                .filter(|job| job.owner.as_deref() == Some(owner))
                .count();
            if owned >= config.max_jobs_per_person {
                return Err(format!(
                    "you have {owned} jobs across your chats, the most one person may have \
                     (scheduler.max_jobs_per_person); remove one first"
                ));
            }
        }
        if all.len() >= config.max_jobs {
            return Err(format!(
                "switchboard holds {} jobs, the most it keeps (scheduler.max_jobs); remove one \
                 first, or ask its operator",
                all.len()
            ));
        }
        Ok(())
    }

    /// Whether the store holds any job the config declared (without touching a store that
    /// holds nothing).
    pub async fn has_declared(&self) -> bool {
        self.jobs()
            .await
            .is_ok_and(|jobs| jobs.iter().any(|job| job.declared.is_some()))
    }

    /// Makes the store's config jobs what `declared` says (see [`Declared`]).
    pub async fn sync_declared(&self, declared: &[Declared]) -> Result<Synced, String> {
        let now = self.now();
        let stored = self.jobs().await?;
        let mut synced = Synced::default();
        for job in stored.iter().filter(|job| job.declared.is_some()) {
            if !declared.iter().any(|wanted| wanted.id == job.id) {
                self.store
                    .remove(&job.id)
                    .await
                    .map_err(|err| err.to_string())?;
                synced.removed.push(job.id.clone());
            }
        }
        for wanted in declared {
            let had = stored.iter().find(|job| job.id == wanted.id);
            if had.is_some_and(|job| job.declared.as_ref() == Some(&wanted.spec)) {
                continue;
            }
            let (channel, chat) = &wanted.chat;
            let mut job = Job {
                id: wanted.id.clone(),
                name: wanted.id.clone(),
                message: wanted.message.clone(),
                schedule: wanted.schedule.clone(),
                channel: channel.to_string(),
                chat_id: chat.to_string(),
                session: wanted.session,
                enabled: wanted.enabled,
                created_by: "config".into(),
                catch_up_secs: wanted.catch_up.as_secs(),
                created_at: had.map_or(now, |job| job.created_at),
                next_due: None,
                last: had.and_then(|job| job.last.clone()),
                declared: Some(wanted.spec.clone()),
                kind: wanted.kind.clone(),
                active_hours: wanted.active_hours.clone(),
                retry: None,
                agent: None,
                owner: None,
            };
            job.next_due = job.next_after(now)?;
            self.store.put(&job).await.map_err(|err| err.to_string())?;
            match had {
                Some(_) => synced.changed.push(job.id),
                None => synced.added.push(job.id),
            }
        }
        if synced != Synced::default() {
            self.changed.notify_one();
        }
        Ok(synced)
    }

    /// Does `action` for `asker`; the answer is one line per job touched (or listed), or why
    /// not.
    pub async fn act(&self, asker: &Asker, action: &JobAction) -> Result<String, String> {
        match action {
            JobAction::List => {
                let jobs = self.list(asker).await?;
                if jobs.is_empty() {
                    return Ok(match asker {
                        Asker::Chat(..) => "This chat has no scheduled jobs.".into(),
                        Asker::Operator => "There are no scheduled jobs.".into(),
                    });
                }
                Ok(jobs
                    .iter()
                    .map(|job| self.describe(job))
                    .collect::<Vec<_>>()
                    .join("\n"))
            }
            JobAction::Remove(id) => {
                let job = self.remove(asker, id).await?;
                Ok(format!("Removed job {} \"{}\".", job.id, job.name))
            }
            JobAction::Pause(id) => {
                let job = self.set_enabled(asker, id, false).await?;
                Ok(format!("Paused {}", self.describe(&job)))
            }
            JobAction::Resume(id) => {
                let job = self.set_enabled(asker, id, true).await?;
                Ok(format!("Resumed {}", self.describe(&job)))
            }
            JobAction::Run(id) => {
                let job = self.run_now(asker, id).await?;
                Ok(format!("Running job {} \"{}\" now.", job.id, job.name))
            }
        }
    }

    /// Every job, for whoever may see them: a chat sees its own.
    pub async fn list(&self, asker: &Asker) -> Result<Vec<Job>, String> {
        Ok(self
            .jobs()
            .await?
            .into_iter()
            .filter(|job| asker.may_touch(job))
            .collect())
    }

    /// Removes a job (not one the config declares: it would come back).
    pub async fn remove(&self, asker: &Asker, id: &str) -> Result<Job, String> {
        let job = self.find(asker, id).await?;
        if job.declared.is_some() {
            return Err(format!(
                "job {id} is declared in the config ([[scheduler.jobs]]): remove it there, or \
                 pause it"
            ));
        }
        self.store.remove(id).await.map_err(|err| err.to_string())?;
        self.changed.notify_one();
        Ok(job)
    }

    /// Pauses (`enabled = false`) or resumes a job. A resumed job runs at its next due time
    /// from now on (what it missed while paused is not made up).
    pub async fn set_enabled(&self, asker: &Asker, id: &str, enabled: bool) -> Result<Job, String> {
        let job = self.find(asker, id).await?;
        let next = if enabled {
            job.next_after(self.clock.now())?
        } else {
            job.next_due
        };
        let job = self
            .store
            .update(
                &job.id,
                Box::new(move |job| {
                    job.enabled = enabled;
                    job.next_due = next;
                    true
                }),
            )
            .await
            .map_err(|err| err.to_string())?
            .ok_or_else(|| format!("job {id} was removed meanwhile"))?;
        self.changed.notify_one();
        Ok(job)
    }

    /// Runs a job now, once, besides its schedule: it is made due now, and the scheduler
    /// (this process's, or the daemon's when the operator's CLI asks) runs it at its next
    /// look; its schedule goes on from there.
    pub async fn run_now(&self, asker: &Asker, id: &str) -> Result<Job, String> {
        let job = self.find(asker, id).await?;
        if !job.enabled {
            return Err(format!("job {id} is paused: resume it first"));
        }
        let now = self.clock.now();
        let job = self
            .store
            .update(
                &job.id,
                Box::new(move |job| {
                    job.next_due = Some(now);
                    true
                }),
            )
            .await
            .map_err(|err| err.to_string())?
            .ok_or_else(|| format!("job {id} was removed meanwhile"))?;
        self.changed.notify_one();
        Ok(job)
    }

    /// A job's last runs, newest first.
    pub async fn runs(&self, asker: &Asker, id: &str, limit: usize) -> Result<Vec<Run>, String> {
        let all = self.jobs().await?;
        if let Some(job) = all.iter().find(|job| job.id == id)
            && !asker.may_touch(job)
        {
            return Err(format!("there is no job {id} in this chat"));
        }
        self.store
            .runs(id, limit)
            .await
            .map_err(|err| err.to_string())
    }

    async fn jobs(&self) -> Result<Vec<Job>, String> {
        self.store.jobs().await.map_err(|err| err.to_string())
    }

    async fn find(&self, asker: &Asker, id: &str) -> Result<Job, String> {
        self.jobs()
            .await?
            .into_iter()
            .find(|job| job.id == id.trim() && asker.may_touch(job))
            .ok_or_else(|| match asker {
                Asker::Chat(..) => format!("there is no job {id} in this chat"),
                Asker::Operator => format!("there is no job {id}"),
            })
    }
}
