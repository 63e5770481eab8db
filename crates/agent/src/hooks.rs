//! [`Hook`]: where policies attach to a turn — before and after each LLM call, around each
//! tool call (approve, alter or skip it, alter its result) and at the turn's end. Every
//! method has a no-op default, so a hook implements only what it is about. Built-in
//! policies (approvals, verification, budgets) and metrics are meant to be hooks; the turn
//! itself knows none of them.
//!
//! Hooks run in the order they were added. For `approve_tool` the first denial wins; for
//! `before_tool` the first skip wins (later hooks are not asked); the others see what the
//! earlier ones changed. With no hooks, the turn does no hook work at all.

use std::borrow::Cow;
use std::sync::Arc;

use async_trait::async_trait;
use serde_json::Value;
use switchboard_core::{ImagePart, InboundMessage, SessionKey, ToolCall, TurnEnd, Usage};
use switchboard_llm::{ChatRequest, ChatResponse};
use switchboard_tools::User;

/// Where in which turn a hook is called.
#[derive(Clone, Copy, Debug)]
pub struct TurnInfo<'a> {
    /// The session.
    pub session: &'a SessionKey,
    /// The LLM → tools round, from 1.
    pub iteration: usize,
    /// The person the turn answers, to ask something of (approvals do); `None` when
    /// nobody can be asked.
    pub user: Option<&'a User>,
}

/// A hook's answer to "may this tool call run?".
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Approval {
    /// It may.
    Approve,
    /// It may not; the model reads this reason as the call's (error) result.
    Deny(String),
}

/// What to do with a tool call about to run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BeforeTool {
    /// Run it (with the arguments as the hooks left them).
    Run,
    /// Do not run it; this is its result.
    Skip(String),
}

/// A tool call's result, as hooks may change it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ToolOutcome {
    /// The text the model reads.
    pub content: String,
    /// Whether it is an error.
    pub is_error: bool,
    /// Images the tool returned (files of the workspace), shown to a model that takes them.
    pub images: Vec<ImagePart>,
}

impl ToolOutcome {
    /// A result of text only.
    pub fn text(content: impl Into<String>) -> Self {
        Self {
            content: content.into(),
            is_error: false,
            images: Vec::new(),
        }
    }

    /// An error result.
    pub fn error(content: impl Into<String>) -> Self {
        Self {
            is_error: true,
            ..Self::text(content)
        }
    }
}

/// How a turn ended, for `on_turn_end`.
#[derive(Clone, Copy, Debug)]
pub struct TurnSummary<'a> {
    /// How it ended (`None`: it failed).
    pub end: Option<TurnEnd>,
    /// The final reply, or the failure's message.
    pub text: &'a str,
    /// Tokens spent over the turn.
    pub usage: Usage,
    /// How long it took.
    pub duration: std::time::Duration,
    /// The id of the inbound message it answered, if it had one.
    pub inbound: Option<&'a switchboard_core::MessageId>,
    /// The scheduled run it answered, when it was one.
    pub run: Option<&'a switchboard_core::ScheduledRun>,
}

/// A policy attached to every turn. All methods default to doing nothing.
#[async_trait]
pub trait Hook: Send + Sync + 'static {
    /// Before an LLM call; may change the request for this call (`request.to_mut()` makes
    /// the copy — a hook that only looks costs none).
    async fn before_llm(&self, _turn: TurnInfo<'_>, _request: &mut Cow<'_, ChatRequest>) {}

    /// After an LLM call answered.
    async fn after_llm(&self, _turn: TurnInfo<'_>, _response: &ChatResponse) {}

    /// Whether a tool call may run (asked before `before_tool`).
    async fn approve_tool(&self, _turn: TurnInfo<'_>, _call: &ToolCall, _args: &Value) -> Approval {
        Approval::Approve
    }

    /// Before a tool call runs; may change its arguments, or skip it with a result.
    async fn before_tool(
        &self,
        _turn: TurnInfo<'_>,
        _call: &ToolCall,
        _args: &mut Value,
    ) -> BeforeTool {
        BeforeTool::Run
    }

    /// After a tool call (or its skip, denial or failure); may change the result.
    async fn after_tool(&self, _turn: TurnInfo<'_>, _call: &ToolCall, _outcome: &mut ToolOutcome) {}

    /// When the turn ended (after its last message was saved).
    async fn on_turn_end(&self, _turn: TurnInfo<'_>, _summary: TurnSummary<'_>) {}

    /// When a message delivered again was handled without a turn here: its answer was on
    /// record already (its turn ended elsewhere, or before a crash) and was sent again
    /// (`end` is how that turn ended) or had gone out (`None`).
    async fn on_handled_again(
        &self,
        _session: &SessionKey,
        _message: &InboundMessage,
        _end: Option<TurnEnd>,
    ) {
    }
}

/// The hooks of an agent, in order.
#[derive(Clone, Default)]
pub struct Hooks(Vec<Arc<dyn Hook>>);

impl std::fmt::Debug for Hooks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Hooks({})", self.0.len())
    }
}

impl Hooks {
    /// Adds a hook after the others.
    pub fn push(&mut self, hook: Arc<dyn Hook>) {
        self.0.push(hook);
    }

    /// Whether there are none (the turn then skips hook work entirely).
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub(crate) async fn before_llm(&self, turn: TurnInfo<'_>, request: &mut Cow<'_, ChatRequest>) {
        for hook in &self.0 {
            hook.before_llm(turn, request).await;
        }
    }

    pub(crate) async fn after_llm(&self, turn: TurnInfo<'_>, response: &ChatResponse) {
        for hook in &self.0 {
            hook.after_llm(turn, response).await;
        }
    }

    /// Approval, then `before_tool`: `Err(result)` when the call must not run.
    pub(crate) async fn before_tool(
        &self,
        turn: TurnInfo<'_>,
        call: &ToolCall,
        args: &mut Value,
    ) -> Result<(), ToolOutcome> {
        for hook in &self.0 {
            if let Approval::Deny(reason) = hook.approve_tool(turn, call, args).await {
                return Err(ToolOutcome::error(format!("error: not run — {reason}")));
            }
        }
        for hook in &self.0 {
            if let BeforeTool::Skip(result) = hook.before_tool(turn, call, args).await {
                return Err(ToolOutcome::text(result));
            }
        }
        Ok(())
    }

    pub(crate) async fn after_tool(
        &self,
        turn: TurnInfo<'_>,
        call: &ToolCall,
        outcome: &mut ToolOutcome,
    ) {
        for hook in &self.0 {
            hook.after_tool(turn, call, outcome).await;
        }
    }

    pub(crate) async fn on_handled_again(
        &self,
        session: &SessionKey,
        message: &InboundMessage,
        end: Option<TurnEnd>,
    ) {
        for hook in &self.0 {
            hook.on_handled_again(session, message, end).await;
        }
    }

    pub(crate) async fn on_turn_end(&self, turn: TurnInfo<'_>, summary: TurnSummary<'_>) {
        for hook in &self.0 {
            hook.on_turn_end(turn, summary).await;
        }
    }
}
