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
    /// For a job the config declares (`[[scheduler.jobs]]`): its definition as written
    /// there, to tell at the next start or reload whether it changed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub declared: Option<String>,
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
    /// One word for lists and metrics: `pending`, `answered`, `quiet`, `failed`, `skipped`.
    pub fn as_str(&self) -> &'static str {
        match self {
            Self::Pending => "pending",
            Self::Answered => "answered",
            Self::Quiet => "quiet",
            Self::Failed { .. } => "failed",
            Self::Skipped { .. } => "skipped",
        }
    }

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
    pub fn message_id(job: &str, due: Timestamp) -> String {
        format!("sched:{job}:{}", due.as_millisecond())
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
            }),
            declared: Some("{}".into()),
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
            Run::message_id("j7", Timestamp::from_second(60).expect("ts")),
            "sched:j7:60000"
        );
    }
}
