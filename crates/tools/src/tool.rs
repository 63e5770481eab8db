//! The [`Tool`] trait and what a call gets to work with.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
pub use switchboard_core::ToolDefinition;
use switchboard_core::{
    AgentName, Awaiting, ChannelName, ChatId, ImagePart, MessageId, SenderId, SessionKey,
};
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
    /// The agent whose turn it is (a daemon may run several).
    pub agent: AgentName,
    /// Cancelled when the turn is stopped (`/stop`, shutdown); long tools select on it.
    pub cancel: CancellationToken,
    /// The person the turn answers, to ask something of (`None`: nobody can be asked,
    /// e.g. a scheduled turn).
    pub user: Option<User>,
    /// Who wrote the message the turn answers, as its channel names them (`None`: nobody,
    /// or not known).
    pub sender: Option<SenderId>,
    /// The turn's slot among the turns that may run at once (`None` outside a daemon's
    /// turn): a tool that waits for other turns lets go of it meanwhile.
    pub slot: Option<Arc<dyn TurnSlot>>,
    /// Sub-agents this turn may start (`None`: it may not — the terminal, a sub-agent at
    /// the depth limit).
    pub subagents: Option<Arc<dyn SubAgents>>,
    /// The chat the turn answers in (`None`: none, as in the terminal): where a file a tool
    /// sends goes unless it names another.
    pub chat: Option<TurnChat>,
}

/// The chat a turn answers in, for tools that send to it.
#[derive(Clone, Debug)]
pub struct TurnChat {
    /// Its channel.
    pub channel: ChannelName,
    /// Its id there.
    pub chat: ChatId,
    /// The person's message the turn answers, when a person wrote one (what is sent to this
    /// chat threads under it).
    pub answering: Option<MessageId>,
    /// The id the turn's inbound message is journaled under: a turn taken up again after a
    /// crash has the same one, so what it sent before is known and not sent twice.
    pub turn: Option<MessageId>,
}

impl ToolContext {
    /// A context for a call of the default agent in `session` over `workspace`, with nothing
    /// else: no person to ask, no slot, never cancelled unless `cancel` is.
    pub fn new(workspace: Arc<Workspace>, session: SessionKey) -> Self {
        Self {
            workspace,
            session,
            agent: AgentName::default(),
            cancel: CancellationToken::new(),
            user: None,
            sender: None,
            slot: None,
            subagents: None,
            chat: None,
        }
    }

    /// Saves an image a tool received as bytes (an MCP server's screenshot) as
    /// `media/tools/<session>-<time>-<n>.<ext>` in the workspace, for the tool's
    /// [`ToolOutput`]. Refused, saving nothing, when models take no image of type `mime` or
    /// it is larger than [`ImagePart::MAX_BYTES`]: the tool then names it in its text instead.
    pub async fn save_image(&self, mime: &str, bytes: Vec<u8>) -> Result<ImagePart, ToolError> {
        if !ImagePart::shown_type(mime) {
            return Err(ToolError::Failed(format!(
                "an image of type {mime} is not shown to models (they take {})",
                ImagePart::TYPES.join(", ")
            )));
        }
        if bytes.len() as u64 > ImagePart::MAX_BYTES {
            return Err(ToolError::Failed(format!(
                "an image of {} bytes is larger than the {} bytes shown to models",
                bytes.len(),
                ImagePart::MAX_BYTES
            )));
        }
        let session: String = self
            .session
            .as_str()
            .chars()
            .take(64)
            .map(|c| match c {
                'a'..='z' | 'A'..='Z' | '0'..='9' | '_' | '-' => c,
                _ => '_',
            })
            .collect();
        let millis = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .as_millis();
        let path = format!(
            "media/tools/{session}-{millis}-{:04x}.{}",
            fastrand::u16(..),
            ImagePart::extension(mime)
        );
        let workspace = self.workspace.clone();
        let relative = path.clone();
        tokio::task::spawn_blocking(move || {
            let resolved = workspace.resolve(&relative)?;
            workspace.write(&resolved, &bytes)
        })
        .await
        .map_err(|err| ToolError::Failed(format!("saving an image stopped: {err}")))??;
        Ok(ImagePart {
            path,
            mime: mime.to_owned(),
        })
    }
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

/// A running turn's hold on its slot among the turns that may run at once. A tool that
/// waits for other turns — a parent for its sub-agents — lets go of it while it waits, so
/// they can run even when every slot is taken.
#[async_trait]
pub trait TurnSlot: Send + Sync + std::fmt::Debug + 'static {
    /// Lets go of the slot until the matching [`TurnSlot::retake`]; several waits of one
    /// turn may overlap (the slot comes back after the last).
    fn release(&self);

    /// Ends a wait begun by [`TurnSlot::release`]: after the last one, waits for a free slot
    /// and holds it again.
    async fn retake(&self);
}

/// Sub-agents of the turn a call belongs to: each a turn of its own, in a session of its own,
/// on a task this turn hands over (the `spawn` tool).
#[async_trait]
pub trait SubAgents: Send + Sync + std::fmt::Debug + 'static {
    /// Starts a sub-agent on `task` (`label`: a few words naming it). With `wait`, returns
    /// its answer once it is done (the turn lets go of its slot meanwhile); else at once a
    /// line saying it started — its result comes back to the session later, as a message.
    async fn spawn(
        &self,
        task: String,
        label: Option<String>,
        wait: bool,
    ) -> Result<String, crate::ToolError>;
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

    /// Runs the tool. What it returns (or the error's message) goes back to the model.
    async fn call(
        &self,
        args: serde_json::Value,
        ctx: &ToolContext,
    ) -> Result<ToolOutput, ToolError>;
}

/// What a tool call returns: the text the model reads, and images it may look at.
///
/// Most tools return text only (`Ok(text.into())`). An image is a file of the workspace
/// ([`ToolContext::save_image`] writes one a tool received as bytes); the agent names each in
/// the result's text and shows it to a model that takes images for the rest of the turn.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ToolOutput {
    /// The text of the result.
    pub text: String,
    /// Images the result carries, in order.
    pub images: Vec<ImagePart>,
}

impl From<String> for ToolOutput {
    fn from(text: String) -> Self {
        Self {
            text,
            images: Vec::new(),
        }
    }
}

impl From<&str> for ToolOutput {
    fn from(text: &str) -> Self {
        text.to_owned().into()
    }
}
