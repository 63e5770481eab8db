//! The `spawn` tool: the model hands a task to a sub-agent.

use std::time::Duration;

use async_trait::async_trait;
use serde::Deserialize;
use serde_json::json;
use switchboard_tools::{Tool, ToolContext, ToolError, ToolOutput};

/// Starts sub-agents (see the module doc); the turn gives it what it needs
/// (`ToolContext::subagents`), so one tool serves every agent.
pub struct SpawnTool {
    timeout: Duration,
}

impl SpawnTool {
    /// The tool; a call waiting for a child gives up after `timeout` (longer than any
    /// agent's `spawn.timeout_secs`, which ends the child's turn first).
    pub fn new(timeout: Duration) -> Self {
        Self { timeout }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Args {
    task: String,
    #[serde(default)]
    label: Option<String>,
    #[serde(default)]
    wait: bool,
}

#[async_trait]
impl Tool for SpawnTool {
    fn name(&self) -> &str {
        "spawn"
    }

    fn description(&self) -> &str {
        "Hand a task to a sub-agent: another you, with your tools and workspace but a \
         conversation of its own, that works on it and answers. Start several at once to \
         work in parallel (\"research these three things\"). With wait = false (default) the \
         call returns at once and the answers of all the sub-agents you started come back \
         to you together, as one message, when they are done — then answer the person with \
         them. With wait = true the call returns the sub-agent's answer. Give each a \
         complete, self-contained task: it cannot see this conversation or ask anything."
    }

    fn parameters(&self) -> serde_json::Value {
        json!({
            "type": "object",
            "properties": {
                "task": {"type": "string", "description": "what the sub-agent should do and answer, in full"},
                "label": {"type": "string", "description": "a few words naming it (shown in /status and with its answer)"},
                "wait": {"type": "boolean", "description": "true: wait for its answer; false (default): go on, the answer comes later"}
            },
            "required": ["task"]
        })
    }

    fn timeout(&self) -> Option<Duration> {
        Some(self.timeout)
    }

    async fn call(
        &self,
        args: serde_json::Value,
        ctx: &ToolContext,
    ) -> Result<ToolOutput, ToolError> {
        let args: Args = serde_json::from_value(args)
            .map_err(|err| ToolError::InvalidArguments(err.to_string()))?;
        let Some(children) = &ctx.subagents else {
            return Err(ToolError::Denied(
                "sub-agents cannot be started here (a sub-agent at agent.spawn.max_depth, or a \
                 turn outside a chat)"
                    .into(),
            ));
        };
        Ok(children
            .spawn(args.task, args.label, args.wait)
            .await?
            .into())
    }
}
