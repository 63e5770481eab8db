//! What a scheduled job is, and what one of its runs came to: the records the job store
//! keeps (serde, one JSON object each, fields with defaults so older records load).

use jiff::Timestamp;
use serde::{Deserialize, Serialize};

use super::due::Schedule;

/// One scheduled job: a message for the agent, on a schedule, in a chat.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Job {
    /// Its id, unique in the store (`j` and a number).
    pub id: String,
    /// A name for people ("morning summary").
    pub name: String,
    /// What the agent is told when it runs.
    pub message: String,
    /// When it runs.
    pub schedule: Schedule,
    /// The channel of the chat it belongs to and runs in.
    pub channel: String,
    /// The chat it belongs to and runs in.
    pub chat_id: String,
    /// Whether it runs as a turn of the chat's session, or in a session of its own whose
    /// answer is posted to the chat.
    #[serde(default)]
    pub session: SessionMode,
    /// Paused jobs keep their schedule but do not run.
    #[serde(default = "enabled")]
    pub enabled: bool,
    /// Who made it: `chat websocket_c` (the agent, in that chat), `operator`, `config`.
    pub created_by: String,
    /// How late a run may still start after the daemon was down (seconds); an older due
    /// run is skipped, and the chat told.
    pub catch_up_secs: u64,
    /// When it was made.
    pub created_at: Timestamp,
    /// When it runs next; `None` when it never will again (a one-shot that ran).
    pub next_due: Option<Timestamp>,
    /// Its last run, if it had one.
    #[serde(default)]
    pub last: Option<Run>,
    /// For a job the config declares (`[[scheduler.jobs]]`, `[heartbeat]`): its
    /// definition as written there, to tell at the next start or reload whether it changed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub declared: Option<String>,
    /// A task (its message) or the heartbeat (the instructions of a file).
    #[serde(default, skip_serializing_if = "JobKind::is_task")]
    pub kind: JobKind,
    /// The hours of the day it may run in; a due time outside them moves to the next time
    /// they begin.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub active_hours: Option<ActiveHours>,
    /// Its last run failed and is tried again then.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry: Option<Retry>,
    /// The agent that scheduled it, whose turn its runs are; `None` (the CLI's, the
    /// config's): the agent the chat is bound to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent: Option<String>,
    /// The person it counts against (`scheduler.max_jobs_per_person`), when a person asked
    /// for it (see `jobs::owner_of`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
}

impl Job {
    /// Its first due time strictly after `after`, within its active hours; `None` when it
    /// has none (a one-shot whose time has come).
    pub fn next_after(&self, after: Timestamp) -> Result<Option<Timestamp>, String> {
        let Some(hours) = &self.active_hours else {
            return self.schedule.next_after(after);
        };
        let mut from = after;
        let mut next = None;
        // A due time outside the hours moves on to the first one after they open; a few
        // rounds settle any schedule (an interval longer than the hours' gap needs one).
        for _ in 0..8 {
            let Some(due) = self.schedule.next_after(from)? else {
                return Ok(next);
            };
            if hours.contains(due)? {
                return Ok(Some(due));
            }
            next = Some(due);
            let opens = hours.next_opening(due)?;
            from = opens
                .checked_sub(jiff::SignedDuration::from_nanos(1))
                .unwrap_or(opens);
        }
        Ok(next)
    }

    /// The session of its chat: where its answers go, and what its runs' spending counts
    /// against (a run in a session of its own too).
    pub fn chat(&self) -> switchboard_core::SessionKey {
        switchboard_core::SessionKey::of(
            &switchboard_core::ChannelName::from(self.channel.as_str()),
            &switchboard_core::ChatId::from(self.chat_id.as_str()),
        )
    }

    /// The origin of its runs' messages.
    pub fn origin(&self) -> switchboard_core::Origin {
        match self.kind {
            JobKind::Task => switchboard_core::Origin::Schedule {
                job: self.id.clone(),
                name: self.name.clone(),
            },
            JobKind::Heartbeat { .. } => switchboard_core::Origin::Heartbeat,
        }
    }
}

/// What a job gives the agent.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum JobKind {
    /// Its message.
    #[default]
    Task,
    /// The heartbeat: the instructions in a file of the workspace (HEARTBEAT.md), read
    /// through it (a link out of the workspace is not followed) at each beat.
    Heartbeat {
        /// The file, relative to the workspace.
        instructions: String,
    },
}

impl JobKind {
    fn is_task(&self) -> bool {
        matches!(self, Self::Task)
    }
}

/// Hours of the day, on the clock of a zone: `08:00-22:00`; one that ends before it starts
/// (`22:00-06:00`) runs across midnight.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ActiveHours {
    /// When they begin.
    pub start: jiff::civil::Time,
    /// When they end (not included).
    pub end: jiff::civil::Time,
    /// The zone whose clock they are on.
    pub tz: String,
}

impl ActiveHours {
    /// Reads `08:00-22:00` on the clock of `tz`.
    pub fn parse(text: &str, tz: &str) -> Result<Self, String> {
        let bad = || format!("`{text}` is not a span of hours: write e.g. 08:00-22:00");
        let (start, end) = text.split_once('-').ok_or_else(bad)?;
        let time = |part: &str| part.trim().parse::<jiff::civil::Time>().map_err(|_| bad());
        let hours = Self {
            start: time(start)?,
            end: time(end)?,
            tz: tz.to_owned(),
        };
        if hours.start == hours.end {
            return Err(format!("`{text}` is empty: it begins when it ends"));
        }
        super::due::zone(tz)?;
        Ok(hours)
    }

    /// Whether `at` falls in them.
    pub fn contains(&self, at: Timestamp) -> Result<bool, String> {
        let time = at.to_zoned(super::due::zone(&self.tz)?).time();
        Ok(if self.start < self.end {
            self.start <= time && time < self.end
        } else {
            self.start <= time || time < self.end
        })
    }

    /// The first time they begin at or after `at`.
    pub fn next_opening(&self, at: Timestamp) -> Result<Timestamp, String> {
        let zoned = at.to_zoned(super::due::zone(&self.tz)?);
        let today = zoned
            .date()
            .to_datetime(self.start)
            .to_zoned(zoned.time_zone().clone())
            .map_err(|err| err.to_string())?;
        if today.timestamp() >= at {
            return Ok(today.timestamp());
        }
        let tomorrow = today
            .checked_add(jiff::Span::new().days(1))
            .map_err(|err| err.to_string())?;
        Ok(tomorrow.timestamp())
    }
}

fn enabled() -> bool {
    true
}

/// Where a job's turn runs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SessionMode {
    /// In the chat's own session: its history sees the run, and the answer is the turn's.
    #[default]
    Chat,
    /// In a session of its own (`cron_<job id>`); its final answer is posted to the chat.
    Isolated,
}

impl SessionMode {
    /// `chat` or `isolated`.
    pub fn parse(text: &str) -> Option<Self> {
        match text.trim() {
            "chat" => Some(Self::Chat),
            "isolated" => Some(Self::Isolated),
            _ => None,
        }
    }

    /// `chat` or `isolated`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Chat => "chat",
            Self::Isolated => "isolated",
        }
    }
}

/// One run of a job: when it was due, when it started and ended, and what came of it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Run {
    /// The job's id.
    pub job: String,
    /// The due time it ran for (with the job, it names the run: `sched:<job>:<due>`).
    pub due: Timestamp,
    /// When it was handed to the agent.
    #[serde(default)]
    pub started: Option<Timestamp>,
    /// When it ended.
    #[serde(default)]
    pub finished: Option<Timestamp>,
    /// What came of it.
    pub outcome: Outcome,
    /// Which try this is: 1, then 2 and 3 for a failed run tried again.
    #[serde(default = "first", skip_serializing_if = "is_first")]
    pub attempt: u32,
    /// The epoch of the scheduler that claimed it (its hold on the firing duty): a run still
    /// pending under an epoch that is over lost its scheduler, and the next takes it over.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub epoch: Option<u64>,
}

fn first() -> u32 {
    1
}

fn is_first(attempt: &u32) -> bool {
    *attempt <= 1
}

/// A failed run waiting to be tried again.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Retry {
    /// The due time of the run.
    pub due: Timestamp,
    /// The try it will be (2 or more).
    pub attempt: u32,
    /// When.
    pub at: Timestamp,
}

/// What came of a run.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Outcome {
    /// Handed to the agent, not ended yet (a crash here takes the run up again at start).
    Pending,
    /// The agent answered, and the answer went to the chat.
    Answered,
    /// The agent had nothing to say (the heartbeat's quiet answer): nothing was posted.
    Quiet,
    /// A person stopped its turn (`/stop`): ended, not tried again.
    Stopped,
    /// It failed.
    Failed {
        /// Why.
        why: String,
    },
    /// It did not run.
    Skipped {
        /// Why (too late after the daemon was down, the job before still running…).
        why: String,
    },
}

impl Outcome {
    /// One word for lists and metrics: `pending`, `answered`, `quiet`, `stopped`, `failed`,
    /// `skipped`.
    pub fn as_str(&self) -> &'static str {
        match self {
            Self::Pending => "pending",
            Self::Answered => "answered",
            Self::Quiet => "quiet",
            Self::Stopped => "stopped",
            Self::Failed { .. } => "failed",
            Self::Skipped { .. } => "skipped",
        }
    }

    /// The outcomes a run ends with (not `pending`), as [`Outcome::as_str`] names them.
    pub const ENDED: [&'static str; 5] = ["answered", "quiet", "stopped", "failed", "skipped"];

    /// The outcome with its reason: `answered`, `failed: the model was unreachable`.
    pub fn describe(&self) -> String {
        match self {
            Self::Failed { why } | Self::Skipped { why } => format!("{}: {why}", self.as_str()),
            other => other.as_str().to_owned(),
        }
    }
}

impl Run {
    /// The id of the inbound message a run is: the session's journal answers one id once,
    /// so a run handed over again after a crash is taken up, never answered twice.
    /// A try after the first is a message of its own: the first's answer (a failure) is
    /// in the journal.
    pub fn message_id(job: &str, due: Timestamp, attempt: u32) -> String {
        let prefix = switchboard_core::SCHEDULED_RUN_PREFIX;
        match attempt {
            0 | 1 => format!("{prefix}{job}:{}", due.as_millisecond()),
            n => format!("{prefix}{job}:{}:{n}", due.as_millisecond()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_job_round_trips_and_an_old_record_gets_the_defaults() {
        let job = Job {
            id: "j1".into(),
            name: "tea".into(),
            message: "Remind me to drink tea.".into(),
            schedule: Schedule::Every {
                every_secs: 60,
                from: Timestamp::UNIX_EPOCH,
            },
            channel: "websocket".into(),
            chat_id: "c".into(),
            session: SessionMode::Isolated,
            enabled: false,
            created_by: "operator".into(),
            catch_up_secs: 3600,
            created_at: Timestamp::UNIX_EPOCH,
            next_due: Some(Timestamp::UNIX_EPOCH),
            last: Some(Run {
                job: "j1".into(),
                due: Timestamp::UNIX_EPOCH,
                started: None,
                finished: None,
                outcome: Outcome::Failed {
                    why: "LLM down".into(),
                },
                attempt: 1,
                epoch: Some(3),
            }),
            declared: Some("{}".into()),
            kind: JobKind::Task,
            active_hours: None,
            retry: None,
            agent: None,
            owner: None,
        };
        let text = serde_json::to_string(&job).expect("json");
        assert_eq!(serde_json::from_str::<Job>(&text).expect("back"), job);
        let old = r#"{"id":"j2","name":"n","message":"m","schedule":{"kind":"at","at":"2026-01-01T00:00:00Z"},
            "channel":"telegram","chat_id":"1","created_by":"config","catch_up_secs":60,
            "created_at":"2026-01-01T00:00:00Z","next_due":null}"#;
        let old: Job = serde_json::from_str(old).expect("an older record");
        assert!(old.enabled);
        assert_eq!(old.session, SessionMode::Chat);
        assert_eq!(old.last, None);
        assert_eq!(
            Run::message_id("j7", Timestamp::from_second(60).expect("ts"), 1),
            "sched:j7:60000"
        );
    }

    #[test]
    fn hours_across_midnight_and_in_a_zone_hold_what_they_say() {
        use std::str::FromStr;
        let at = |text: &str| Timestamp::from_str(text).expect("ts");
        let night = ActiveHours::parse("22:00-06:00", "Europe/Berlin").expect("hours");
        // 22:30 and 05:59 in Berlin (UTC+1 in November) are in; noon is not.
        assert!(night.contains(at("2026-11-25T21:30:00Z")).expect("in"));
        assert!(night.contains(at("2026-11-26T04:59:00Z")).expect("in"));
        assert!(!night.contains(at("2026-11-25T11:00:00Z")).expect("out"));
        assert_eq!(
            night
                .next_opening(at("2026-11-25T11:00:00Z"))
                .expect("opens"),
            at("2026-11-25T21:00:00Z")
        );
        assert!(ActiveHours::parse("8-22", "UTC").is_err());
        assert!(ActiveHours::parse("08:00-08:00", "UTC").is_err());
        assert!(ActiveHours::parse("08:00-22:00", "Nowhere/Else").is_err());
    }
}
