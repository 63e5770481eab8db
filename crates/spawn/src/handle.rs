//! [`TurnChildren`]: the sub-agents one turn may start — what the `spawn` tool calls,
//! made by the turn with what it knows: its agent, session, cancellation and slot.

use std::sync::Arc;

use async_trait::async_trait;
use switchboard_core::{AgentName, SessionKey};
use switchboard_sessions::SessionStore;
use switchboard_tools::{SubAgents, ToolError, TurnSlot};
use tokio_util::sync::CancellationToken;

use super::spawner::{Request, Spawner};
use super::tree::TreeLimits;

/// The longest task a child may be given.
pub const MAX_TASK_BYTES: usize = 16 * 1024;

/// The most characters of a child's label.
const MAX_LABEL_CHARS: usize = 80;

/// One turn's way to start sub-agents.
pub struct TurnChildren {
    pub spawner: Spawner,
    pub agent: AgentName,
    /// The turn's session: the children's parent.
    pub parent: SessionKey,
    /// The chat the turn works for: its children are counted against its limits.
    pub chat: SessionKey,
    /// The turn, when it begins the chat's count of sub-agents (see `tree.rs`).
    pub turn: Option<u64>,
    /// `spawn.max_children` and `spawn.max_per_turn`.
    pub limits: TreeLimits,
    /// The agent's sessions, to skip a child number that holds history.
    pub store: Arc<dyn SessionStore>,
    /// The turn's: a child it waits for is stopped with it.
    pub cancel: CancellationToken,
    /// The turn's slot, let go of while it waits for a child.
    pub slot: Option<Arc<dyn TurnSlot>>,
}

impl std::fmt::Debug for TurnChildren {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TurnChildren")
            .field("agent", &self.agent)
            .field("parent", &self.parent)
            .finish_non_exhaustive()
    }
}

#[async_trait]
impl SubAgents for TurnChildren {
    async fn spawn(
        &self,
        task: String,
        label: Option<String>,
        wait: bool,
    ) -> Result<String, ToolError> {
        let task = task.trim().to_owned();
        if task.is_empty() {
            return Err(ToolError::InvalidArguments("the task is empty".into()));
        }
        if task.len() > MAX_TASK_BYTES {
            return Err(ToolError::InvalidArguments(format!(
                "the task is {} bytes; at most {MAX_TASK_BYTES}",
                task.len()
            )));
        }
        let label: String = label
            .filter(|label| !label.trim().is_empty())
            .unwrap_or_else(|| task.lines().next().unwrap_or_default().to_owned())
            .chars()
            .take(MAX_LABEL_CHARS)
            .collect();
        let request = Request {
            agent: self.agent.clone(),
            parent: self.parent.clone(),
            chat: self.chat.clone(),
            turn: self.turn,
            task,
            label: label.clone(),
            wait,
            limits: self.limits,
        };
        let store = self.store.clone();
        let started = self
            .spawner
            .start(request, |key| {
                let store = store.clone();
                async move { store.has_history(&key).await }
            })
            .await
            .map_err(ToolError::Denied)?;
        let child = started.child;
        let Some(answer) = started.answer else {
            return Ok(format!(
                "Started sub-agent {child} (\"{label}\"). It works on its own; its answer comes \
                 back to you as a message once it (and any others you started) are done. Do not \
                 wait for it: answer the person now, saying what you started."
            ));
        };
        // Waiting on a child: the turn's slot is the child's to take meanwhile.
        if let Some(slot) = &self.slot {
            slot.release();
        }
        let answered = tokio::select! {
            answer = answer => answer.map_err(|_| ToolError::Failed(
                "the sub-agent was stopped before it answered".into(),
            )),
            () = self.cancel.cancelled() => {
                started.token.cancel();
                Err(ToolError::Cancelled)
            }
        };
        if let Some(slot) = &self.slot {
            slot.retake().await;
        }
        Ok(format!(
            "Sub-agent {child} (\"{label}\") answered:\n{}",
            answered?
        ))
    }
}
