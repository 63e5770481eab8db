//! What a run tells the agent: a task's message, or the heartbeat's instructions as they are
//! now (HEARTBEAT.md, read through the workspace, capped).

use std::sync::Arc;

use switchboard_tools::Workspace;

use super::job::{Job, JobKind};

/// The most of the heartbeat's instructions (HEARTBEAT.md) a beat reads.
pub const MAX_INSTRUCTIONS: usize = 64 * 1024;

/// What a run of `job` tells the agent: a task's message, or the heartbeat's instructions
/// as they are now, read through `workspace`; why not, when there are none to follow.
pub(super) async fn message_of(
    job: &Job,
    workspace: Option<Arc<Workspace>>,
) -> Result<String, String> {
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
