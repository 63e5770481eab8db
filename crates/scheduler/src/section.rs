//! `[scheduler]`: scheduled work — whether it runs, the time zone cron expressions are read
//! in, the limits of what a chat may schedule, and the jobs the config declares
//! (`[[scheduler.jobs]]`); and `[heartbeat]`, a job of its own kind.

use std::time::Duration;

use serde::Deserialize;
use switchboard_core::{ChannelName, ChatId, ConfigError, ConfigSource as Source};
use toml::Spanned;

use crate::{
    ActiveHours, Declared, JobKind, Schedule, SchedulerConfig, SessionMode, When, default_zone,
    zone,
};

/// `[scheduler]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SchedulerSection {
    /// Whether jobs run (and the agent has its `cron` tool).
    pub enabled: bool,
    /// The IANA zone cron expressions and local times are read in; the system's when unset.
    pub timezone: Option<Spanned<String>>,
    /// How late a run may still start after the daemon was down (seconds).
    pub catch_up_secs: Spanned<u64>,
    /// Jobs one chat may have.
    pub max_jobs_per_chat: Spanned<usize>,
    /// Jobs one person may have across their chats (a WebSocket token's holder is one).
    pub max_jobs_per_person: Spanned<usize>,
    /// Jobs the daemon keeps in all (the config's own not counted).
    pub max_jobs: Spanned<usize>,
    /// The shortest time between two runs of a job (seconds).
    pub min_interval_secs: Spanned<u64>,
    /// `[[scheduler.jobs]]`: jobs the config declares.
    pub jobs: Vec<JobEntry>,
}

/// `[[scheduler.jobs]]`: a job the config declares. Its `name` is its id.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JobEntry {
    /// Its id and name: letters, digits, `-`, `_`.
    pub name: Spanned<String>,
    /// The chat it runs in: `telegram:123456`.
    pub chat: Spanned<String>,
    /// What the agent is told when it runs.
    pub message: Spanned<String>,
    /// Once, at this time.
    #[serde(default)]
    pub at: Option<Spanned<String>>,
    /// Repeatedly, this often.
    #[serde(default)]
    pub every: Option<Spanned<String>>,
    /// A cron expression.
    #[serde(default)]
    pub cron: Option<Spanned<String>>,
    /// The zone for `at` and `cron` (default: `scheduler.timezone`, else the system's).
    #[serde(default)]
    pub tz: Option<Spanned<String>>,
    /// `chat` or `isolated`.
    #[serde(default)]
    pub session: Option<Spanned<String>>,
    /// How late a run may still start after the daemon was down (default:
    /// `scheduler.catch_up_secs`).
    #[serde(default)]
    pub catch_up_secs: Option<u64>,
    /// Whether it runs.
    #[serde(default = "yes")]
    pub enabled: bool,
}

fn yes() -> bool {
    true
}

impl Default for SchedulerSection {
    fn default() -> Self {
        Self {
            enabled: true,
            timezone: None,
            catch_up_secs: Spanned::new(0..0, 3600),
            max_jobs_per_chat: Spanned::new(0..0, 50),
            max_jobs_per_person: Spanned::new(0..0, 200),
            max_jobs: Spanned::new(0..0, 1000),
            min_interval_secs: Spanned::new(0..0, 60),
            jobs: Vec::new(),
        }
    }
}

impl SchedulerSection {
    /// Checks the values; errors name `scheduler.<key>` at its line.
    /// `heartbeat` and the enabled `channels` are read with the jobs, to name a mistake in
    /// them at start (or refuse a reload), not at the first run.
    pub fn validate(
        &self,
        heartbeat: &HeartbeatSection,
        channels: &[&str],
        source: &Source,
    ) -> Result<(), ConfigError> {
        if let Some(tz) = &self.timezone {
            zone(tz.get_ref()).map_err(|why| {
                source.error_at(Some(tz.span()), "scheduler.timezone".into(), why)
            })?;
        }
        if *self.min_interval_secs.get_ref() == 0 {
            return Err(source.error_at(
                Some(self.min_interval_secs.span()),
                "scheduler.min_interval_secs".into(),
                "must be at least 1".into(),
            ));
        }
        for (value, key) in [
            (&self.max_jobs_per_chat, "scheduler.max_jobs_per_chat"),
            (&self.max_jobs_per_person, "scheduler.max_jobs_per_person"),
            (&self.max_jobs, "scheduler.max_jobs"),
        ] {
            if *value.get_ref() == 0 {
                return Err(source.error_at(
                    Some(value.span()),
                    key.into(),
                    "must be at least 1 (to turn scheduling off, set enabled = false)".into(),
                ));
            }
        }
        // Read now, to report a mistake at start (or refuse a reload), not at the first run.
        declared_jobs(self, heartbeat, channels, source, jiff::Timestamp::now())?;
        Ok(())
    }

    /// The jobs `[[scheduler.jobs]]` declares, read at `now`; errors name
    /// `scheduler.jobs[i].<key>` at its line.
    pub fn declared(
        &self,
        channels: &[&str],
        source: &Source,
        now: jiff::Timestamp,
    ) -> Result<Vec<Declared>, ConfigError> {
        let settings = self.settings();
        let mut declared: Vec<Declared> = Vec::new();
        for (index, entry) in self.jobs.iter().enumerate() {
            let read = Reading {
                index,
                source,
                settings: &settings,
                now,
            };
            read.check_name(entry, &declared)?;
            declared.push(read.job(entry, channels)?);
        }
        Ok(declared)
    }

    /// The scheduler's settings.
    pub fn settings(&self) -> SchedulerConfig {
        SchedulerConfig {
            timezone: self.timezone.as_ref().map(|tz| tz.get_ref().clone()),
            catch_up: Duration::from_secs(*self.catch_up_secs.get_ref()),
            max_jobs_per_chat: *self.max_jobs_per_chat.get_ref(),
            max_jobs_per_person: *self.max_jobs_per_person.get_ref(),
            max_jobs: *self.max_jobs.get_ref(),
            min_interval: Duration::from_secs(*self.min_interval_secs.get_ref()),
            ..SchedulerConfig::default()
        }
    }
}

/// One `[[scheduler.jobs]]` entry being read: where it is, and what it is read with.
struct Reading<'a> {
    index: usize,
    source: &'a Source,
    settings: &'a SchedulerConfig,
    now: jiff::Timestamp,
}

impl Reading<'_> {
    fn key(&self, name: &str) -> String {
        format!("scheduler.jobs[{}].{name}", self.index)
    }

    fn at(&self, spanned: &Spanned<String>, name: &str, why: String) -> ConfigError {
        self.source
            .error_at(Some(spanned.span()), self.key(name), why)
    }

    /// Its name is an id: well formed, not one kept for chats' jobs and the heartbeat, and
    /// not one of `declared` already.
    fn check_name(&self, entry: &JobEntry, declared: &[Declared]) -> Result<(), ConfigError> {
        let id = entry.name.get_ref();
        let well_formed = !id.is_empty()
            && id.len() <= 64
            && id
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
        if !well_formed {
            return Err(self.at(
                &entry.name,
                "name",
                "must be 1-64 letters, digits, `-` or `_` (it is the job's id)".into(),
            ));
        }
        let generated = id
            .strip_prefix('j')
            .is_some_and(|n| !n.is_empty() && n.chars().all(|c| c.is_ascii_digit()));
        if generated || id == "heartbeat" {
            return Err(self.at(
                &entry.name,
                "name",
                format!("`{id}` is kept for jobs made in chats and the heartbeat; pick another"),
            ));
        }
        if declared.iter().any(|job| job.id == *id) {
            return Err(self.at(&entry.name, "name", format!("`{id}` is declared twice")));
        }
        Ok(())
    }

    /// The job it declares (its name checked already).
    fn job(&self, entry: &JobEntry, channels: &[&str]) -> Result<Declared, ConfigError> {
        let chat = chat_target(channels, entry.chat.get_ref())
            .map_err(|why| self.at(&entry.chat, "chat", why))?;
        if entry.message.get_ref().trim().is_empty() {
            return Err(self.at(&entry.message, "message", "must not be empty".into()));
        }
        let tz = match &entry.tz {
            Some(tz) => {
                zone(tz.get_ref()).map_err(|why| self.at(tz, "tz", why))?;
                tz.get_ref().clone()
            }
            None => default_zone(self.settings.timezone.as_deref()),
        };
        let (which, value, schedule) = self.schedule(entry, &tz)?;
        let session = match &entry.session {
            Some(session) => SessionMode::parse(session.get_ref()).ok_or_else(|| {
                self.at(
                    session,
                    "session",
                    "must be \"chat\" or \"isolated\"".into(),
                )
            })?,
            None => SessionMode::Chat,
        };
        let catch_up = entry
            .catch_up_secs
            .map_or(self.settings.catch_up, Duration::from_secs);
        // The definition as written, with what it defaults to filled in.
        let spec = serde_json::json!({
            "chat": entry.chat.get_ref(),
            "message": entry.message.get_ref(),
            "when": [which, value],
            "tz": tz,
            "session": session.as_str(),
            "catch_up_secs": catch_up.as_secs(),
            "enabled": entry.enabled,
        })
        .to_string();
        Ok(Declared {
            id: entry.name.get_ref().clone(),
            message: entry.message.get_ref().clone(),
            schedule,
            chat,
            session,
            catch_up,
            enabled: entry.enabled,
            kind: JobKind::Task,
            active_hours: None,
            spec,
        })
    }

    /// Its schedule: exactly one of `at`, `every`, `cron`, in zone `tz`, no more often than
    /// `scheduler.min_interval_secs`.
    fn schedule<'e>(
        &self,
        entry: &'e JobEntry,
        tz: &str,
    ) -> Result<(&'static str, &'e str, Schedule), ConfigError> {
        let given = [
            ("at", &entry.at),
            ("every", &entry.every),
            ("cron", &entry.cron),
        ];
        let mut set = given
            .iter()
            .filter_map(|(name, value)| Some((*name, (*value).as_ref()?)));
        let (Some((which, value)), None) = (set.next(), set.next()) else {
            return Err(self.source.error_at(
                Some(entry.name.span()),
                format!("scheduler.jobs[{}]", self.index),
                "give exactly one of `at`, `every`, `cron`".into(),
            ));
        };
        let when = match which {
            "at" => When::At(value.get_ref()),
            "every" => When::Every(value.get_ref()),
            _ => When::Cron(value.get_ref()),
        };
        let schedule = when
            .schedule(tz, self.now)
            .map_err(|why| self.at(value, which, why))?;
        if let Some(gap) = schedule.shortest_gap(self.now)
            && gap < self.settings.min_interval
        {
            return Err(self.at(
                value,
                which,
                format!(
                    "it would run every {} s; the shortest interval allowed is {} s \
                     (scheduler.min_interval_secs)",
                    gap.as_secs(),
                    self.settings.min_interval.as_secs()
                ),
            ));
        }
        Ok((which, value.get_ref(), schedule))
    }
}

/// The chat `text` names, `channel:chat_id` (`telegram:123456`), checked against the
/// channels the config enables (`enabled`).
pub fn chat_target(enabled: &[&str], text: &str) -> Result<(ChannelName, ChatId), String> {
    let Some((channel, chat)) = text
        .split_once(':')
        .map(|(channel, chat)| (channel.trim(), chat.trim()))
        .filter(|(channel, chat)| !channel.is_empty() && !chat.is_empty())
    else {
        return Err(format!(
            "`{text}` is not a chat: write channel:chat_id, e.g. telegram:123456"
        ));
    };
    if !enabled.contains(&channel) {
        return Err(format!(
            "`{text}`: the config enables no channel `{channel}` (enabled: {})",
            if enabled.is_empty() {
                "none".to_owned()
            } else {
                enabled.join(", ")
            }
        ));
    }
    Ok((ChannelName::from(channel), ChatId::from(chat)))
}

/// `[heartbeat]`: a regular turn, in a session of its own, with the workspace's HEARTBEAT.md
/// as its instructions; its answer is posted to `chat` unless it is the quiet token. Off
/// unless `every` is set.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HeartbeatSection {
    /// How often: `30m` (at least `scheduler.min_interval_secs`).
    pub every: Option<Spanned<String>>,
    /// Where to speak: `telegram:123456`.
    pub chat: Option<Spanned<String>>,
    /// When it may beat: `08:00-22:00`, on the clock of `scheduler.timezone`.
    pub active_hours: Option<Spanned<String>>,
}

/// The heartbeat's `every` and `chat`, as written.
type EveryAndChat<'a> = (&'a Spanned<String>, &'a Spanned<String>);

impl HeartbeatSection {
    /// The heartbeat as a job, when `every` is set; errors name `heartbeat.<key>`.
    pub fn declared(
        &self,
        scheduler: &SchedulerSection,
        channels: &[&str],
        source: &Source,
        now: jiff::Timestamp,
    ) -> Result<Option<Declared>, ConfigError> {
        let at = |spanned: &Spanned<String>, key: &str, why: String| {
            source.error_at(Some(spanned.span()), format!("heartbeat.{key}"), why)
        };
        let Some((every, chat_text)) = self.turned_on(scheduler, source)? else {
            return Ok(None);
        };
        let chat =
            chat_target(channels, chat_text.get_ref()).map_err(|why| at(chat_text, "chat", why))?;
        let settings = scheduler.settings();
        let schedule =
            Schedule::every(every.get_ref(), now).map_err(|why| at(every, "every", why))?;
        let interval = schedule.shortest_gap(now).unwrap_or_default();
        if interval < settings.min_interval {
            return Err(at(
                every,
                "every",
                format!(
                    "{} s is shorter than scheduler.min_interval_secs ({} s)",
                    interval.as_secs(),
                    settings.min_interval.as_secs()
                ),
            ));
        }
        let tz = default_zone(settings.timezone.as_deref());
        let active_hours = self
            .active_hours
            .as_ref()
            .map(|hours| {
                ActiveHours::parse(hours.get_ref(), &tz)
                    .map_err(|why| at(hours, "active_hours", why))
            })
            .transpose()?;
        let instructions = "HEARTBEAT.md";
        let spec = serde_json::json!({
            "every": every.get_ref(),
            "chat": chat_text.get_ref(),
            "active_hours": self.active_hours.as_ref().map(|h| h.get_ref()),
            "tz": tz,
            "instructions": instructions,
        })
        .to_string();
        Ok(Some(Declared {
            id: "heartbeat".into(),
            message: String::new(),
            schedule,
            chat,
            session: SessionMode::Isolated,
            // A beat missed while the daemon was down runs if it is at most one beat late
            // (or a minute, for short beats on a busy machine).
            catch_up: interval.max(Duration::from_secs(60)),
            enabled: true,
            kind: JobKind::Heartbeat {
                instructions: instructions.into(),
            },
            active_hours,
            spec,
        }))
    }

    /// Its `every` and `chat` when it is on (`every` set), checked for what that needs: the
    /// scheduler on, a chat to speak in. `None`: off (nothing else set).
    fn turned_on(
        &self,
        scheduler: &SchedulerSection,
        source: &Source,
    ) -> Result<Option<EveryAndChat<'_>>, ConfigError> {
        let at = |spanned: &Spanned<String>, key: &str, why: &str| {
            source.error_at(
                Some(spanned.span()),
                format!("heartbeat.{key}"),
                why.to_owned(),
            )
        };
        let Some(every) = &self.every else {
            return match self.chat.as_ref().or(self.active_hours.as_ref()) {
                Some(set) => Err(at(
                    set,
                    "every",
                    "set it (e.g. \"30m\") to turn the heartbeat on",
                )),
                None => Ok(None),
            };
        };
        if !scheduler.enabled {
            return Err(at(
                every,
                "every",
                "the heartbeat runs on the scheduler: set [scheduler] enabled = true",
            ));
        }
        let Some(chat) = &self.chat else {
            return Err(at(
                every,
                "chat",
                "say where the heartbeat speaks: chat = \"telegram:123456\"",
            ));
        };
        Ok(Some((every, chat)))
    }
}

/// Every job the config declares: `[[scheduler.jobs]]` and the heartbeat.
pub fn declared_jobs(
    scheduler: &SchedulerSection,
    heartbeat: &HeartbeatSection,
    channels: &[&str],
    source: &Source,
    now: jiff::Timestamp,
) -> Result<Vec<Declared>, ConfigError> {
    let mut declared = scheduler.declared(channels, source, now)?;
    declared.extend(heartbeat.declared(scheduler, channels, source, now)?);
    Ok(declared)
}
