//! The `cron` tool: the agent schedules work in the chat it answers — a reminder, a job that
//! repeats — and lists, removes, pauses, resumes or runs that chat's jobs. A chat never sees
//! or touches another chat's jobs; the scheduler's limits (jobs per chat, the shortest
//! interval) come back as errors the model reads.

use async_trait::async_trait;
use serde::Deserialize;
use serde_json::json;
use switchboard_tools::{Tool, ToolContext, ToolError, ToolOutput};

use super::due::When;
use super::isolated::CHANNEL as ISOLATED_CHANNEL;
use super::job::SessionMode;
use super::jobs::{Asker, JobAction, Jobs, NewJob, owner_of};

/// The agent's way to the scheduler.
pub struct CronTool {
    jobs: Jobs,
}

impl CronTool {
    /// The tool over `jobs`.
    pub fn new(jobs: Jobs) -> Self {
        Self { jobs }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Args {
    action: String,
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    message: Option<String>,
    #[serde(default, rename = "in")]
    after: Option<String>,
    #[serde(default)]
    at: Option<String>,
    #[serde(default)]
    every: Option<String>,
    #[serde(default)]
    cron: Option<String>,
    #[serde(default)]
    tz: Option<String>,
    #[serde(default)]
    session: Option<String>,
}

#[async_trait]
impl Tool for CronTool {
    fn name(&self) -> &str {
        "cron"
    }

    fn description(&self) -> &str {
        "Schedule work in this chat, and manage this chat's jobs. `add` with a `message` (what \
         you will be told when it runs) and one of: `in` (\"10m\", \"2h 30m\"), `at` (an \
         RFC 3339 time, or \"2026-12-24 18:00\" in `tz`), `every` (\"30m\", \"1 day\"), `cron` \
         (\"0 9 * * 1-5\", read in `tz`). When it runs you get its message as a scheduled \
         task (not from the person) and your answer goes to this chat. `list` shows the jobs; \
         `remove`, `pause`, `resume` and `run` (now, once) take an `id`."
    }

    fn parameters(&self) -> serde_json::Value {
        json!({
            "type": "object",
            "properties": {
                "action": {"type": "string", "enum": ["add", "list", "remove", "pause", "resume", "run"]},
                "id": {"type": "string", "description": "the job, for remove, pause, resume, run"},
                "name": {"type": "string", "description": "a short name for the job"},
                "message": {"type": "string", "description": "what you are told when it runs"},
                "in": {"type": "string", "description": "once, after this long: 10m, 2h 30m"},
                "at": {"type": "string", "description": "once, at this time"},
                "every": {"type": "string", "description": "repeatedly, this often: 30m, 1 day"},
                "cron": {"type": "string", "description": "a cron expression: minute hour day month weekday"},
                "tz": {"type": "string", "description": "IANA time zone for `at` and `cron` (default: the daemon's)"},
                "session": {"type": "string", "enum": ["chat", "isolated"], "description": "chat (default): it runs in this conversation; isolated: in a conversation of its own, and only its answer is posted here (an answer of just HEARTBEAT_OK posts nothing: for checks that speak only when something is wrong)"}
            },
            "required": ["action"]
        })
    }

    fn exclusive(&self) -> bool {
        true
    }

    async fn call(
        &self,
        value: serde_json::Value,
        ctx: &ToolContext,
    ) -> Result<ToolOutput, ToolError> {
        let args: Args = serde_json::from_value(value)
            .map_err(|err| ToolError::InvalidArguments(err.to_string()))?;
        let (channel, chat) = ctx.session.split().ok_or_else(|| {
            ToolError::Failed("jobs belong to a chat, and this turn has none".into())
        })?;
        if channel.as_str() == ISOLATED_CHANNEL {
            return Err(ToolError::Failed(
                "a scheduled run in its own session cannot manage jobs".into(),
            ));
        }
        let asker = Asker::Chat(channel.clone(), chat.clone());
        let id = || {
            args.id
                .clone()
                .filter(|id| !id.trim().is_empty())
                .ok_or_else(|| {
                    ToolError::InvalidArguments(format!("`{}` needs an `id`", args.action))
                })
        };
        let failed = ToolError::Failed;
        match args.action.as_str() {
            "add" => {
                let session = match args.session.as_deref() {
                    None => SessionMode::Chat,
                    Some(text) => SessionMode::parse(text).ok_or_else(|| {
                        ToolError::InvalidArguments("`session` is chat or isolated".into())
                    })?,
                };
                let owner = owner_of(&channel, ctx.sender.as_ref());
                let tz = args.tz.clone().unwrap_or_else(|| self.jobs.timezone());
                let now = self.jobs.now();
                let schedule = When::one_of(
                    args.after.as_deref(),
                    args.at.as_deref(),
                    args.every.as_deref(),
                    args.cron.as_deref(),
                )
                .and_then(|when| when.schedule(&tz, now))
                .map_err(ToolError::InvalidArguments)?;
                let job = self
                    .jobs
                    .add(NewJob {
                        name: args.name.clone(),
                        message: args.message.clone().unwrap_or_default(),
                        schedule,
                        chat: (channel, chat),
                        session,
                        catch_up: None,
                        created_by: None,
                        owner: Some(owner),
                        agent: Some(ctx.agent.clone()),
                    })
                    .await
                    .map_err(failed)?;
                Ok(format!("Added {}", self.jobs.describe(&job)).into())
            }
            "list" => self.act(&asker, JobAction::List).await,
            "remove" => self.act(&asker, JobAction::Remove(id()?)).await,
            "pause" => self.act(&asker, JobAction::Pause(id()?)).await,
            "resume" => self.act(&asker, JobAction::Resume(id()?)).await,
            "run" => self.act(&asker, JobAction::Run(id()?)).await,
            other => Err(ToolError::InvalidArguments(format!(
                "`{other}` is not an action: add, list, remove, pause, resume or run"
            ))),
        }
    }
}

impl CronTool {
    async fn act(&self, asker: &Asker, action: JobAction) -> Result<ToolOutput, ToolError> {
        self.jobs
            .act(asker, &action)
            .await
            .map(ToolOutput::from)
            .map_err(ToolError::Failed)
    }
}
