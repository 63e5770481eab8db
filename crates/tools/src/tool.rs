//! The [`Tool`] trait and what a call gets to work with.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
pub use switchboard_core::ToolDefinition;
use switchboard_core::{Awaiting, SessionKey};
use tokio_util::sync::CancellationToken;

use crate::error::ToolError;
use crate::workspace::Workspace;

/// What a tool call may use.
#[derive(Clone, Debug)]
pub struct ToolContext {
    /// The directory the agent may touch; file tools open everything through it.
    pub workspace: Arc<Workspace>,
    /// The session the call belongs to.
    pub session: SessionKey,
    /// Cancelled when the turn is stopped (`/stop`, shutdown); long tools select on it.
    pub cancel: CancellationToken,
    /// The person the turn answers, to ask something of (`None`: nobody can be asked,
    /// e.g. a scheduled turn).
    pub user: Option<User>,
}

/// The person a turn answers, for tools and policies that must ask them something: the
/// turn pauses until their next message in the chat, which is the answer.
#[async_trait]
pub trait AskUser: Send + Sync + 'static {
    /// Shows `question` in the chat and waits for the person's next message. `None` when
    /// no answer came within `timeout`, or the turn was stopped meanwhile. Questions of
    /// one turn are asked one at a time.
    async fn ask(&self, question: &str, awaiting: Awaiting, timeout: Duration) -> Option<String>;
}

/// A shared [`AskUser`].
#[derive(Clone)]
pub struct User(pub Arc<dyn AskUser>);

impl std::fmt::Debug for User {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("User")
    }
}

/// Something the agent can run when the model asks.
#[async_trait]
pub trait Tool: Send + Sync + 'static {
    /// The name the model calls it by (`[a-zA-Z0-9_-]{1,64}`).
    fn name(&self) -> &str;

    /// What it does, for the model.
    fn description(&self) -> &str;

    /// JSON schema of the arguments object.
    fn parameters(&self) -> serde_json::Value;

    /// Whether the tool mutates shared state and so must not run beside other calls.
    fn exclusive(&self) -> bool {
        false
    }

    /// How long one call may run; `None` takes the agent's `tool_timeout_secs`.
    fn timeout(&self) -> Option<Duration> {
        None
    }

    /// Whether a call needs the user's consent before it runs (honoured by the agent loop's
    /// approval flow).
    fn needs_approval(&self) -> bool {
        false
    }

    /// Runs the tool. The text returned (or the error's message) goes back to the model.
    async fn call(&self, args: serde_json::Value, ctx: &ToolContext) -> Result<String, ToolError>;
}
