//! switchboard-agent: the agent loop and the dispatcher that runs one loop per chat.
//!
//! The [`Dispatcher`] takes inbound messages off the hub and hands each to the worker of
//! its session (one per `<channel>_<chat_id>`, started on demand, gone when idle), so a
//! session's messages are answered in order while sessions run side by side, bounded by a
//! global limit of concurrent turns. A worker runs one *turn* per message: context
//! (workspace files, history, the message) → LLM → tool calls, all at once → … until the
//! model answers without tool calls. What the turn does is reported as [`AgentEvent`]s,
//! which the worker turns into outbound messages for the chat.
//!
//! # Layout
//! - `config`: [`AgentConfig`], the knobs of the loop.
//! - `models`: [`Models`], an agent's model chains: its own and those a chat may choose.
//! - `choices`: [`ChoiceStore`], what a chat chose (`/model`), kept across restarts.
//! - `agent`: [`Agent`], the shared parts (LLM, tools, store, context) and one turn's entry point.
//! - `agents`: [`Agents`], a daemon's agents and the [`Binding`]s that route chats to them.
//! - `input`: [`TurnInput`], what a turn answers (the whole inbound message, images).
//! - `voice`: [`Voice`], an agent's audio parts; `hearing`: voice notes transcribed before
//!   the turn; `speaking`: an answer spoken back as a voice message.
//! - `turn`: the loop of one turn; `end`: how a turn ends, and what each ending leaves.
//! - `call`: one call of the model within a turn (hooks, its stream shown, stopped, ids).
//! - `batch`: running the tool calls of one response concurrently.
//! - `verify`: checks of a final reply (leaked markup always; rules and a judge by config).
//! - `ask`: pausing a turn on the person (the waiting slot) and the `ask_user` tool.
//! - `approval`: [`Approvals`], the hook that asks before chosen tool calls run.
//! - `context`: the system prompt built from the workspace files.
//! - `command`: the chat commands (`/new`, `/stop`, `/help`, `/status`).
//! - `events`: [`AgentEvent`], its sink, and what a chat is shown of each event.
//! - `hooks`: [`Hook`], where policies attach to a turn (LLM calls, tool calls, its end).
//! - `slots`: [`TurnSlots`], how many turns run at once, lent by a turn that waits on others.
//! - `dispatcher`: [`Dispatcher`]: routing to per-session workers, `/stop`.
//! - `worker`: a session's worker: commands, turns, the exactly-once journal, and fencing
//!   (a session read again under a new tenure, a stale write decided anew).
//! - `replies`: what a chat is told outside a turn's stream (shutting down, dropped messages).
//! - `recall`: [`AgentMemory`]; what the memory holds of a new message, put before it in
//!   the request.
//! - `summary`: the running summary of what leaves the window (`[memory] summarize`).
//! - `scheduled`: [`RunOutcomes`], the hook that tells the scheduler how a run's turn ended.
//! - `section`: `[agent]`, `[agents.NAME]` (inherited from `[agent]`) and `[[bindings]]`, and
//!   the loop's policies in them (`verify`, `approvals`, `spawn`).
//!
//! Scheduled work, sub-agents and what calls cost are crates of their own
//! (`switchboard-scheduler`, `-spawn`, `-usage`): none of them knows the agent.

mod agent;
mod agents;
mod approval;
mod ask;
mod batch;
mod call;
mod choices;
mod command;
mod config;
mod context;
mod dispatcher;
mod end;
mod events;
mod hearing;
mod hooks;
mod input;
mod models;
mod recall;
mod replies;
mod scheduled;
pub mod section;
mod slots;
mod speaking;
mod summary;
mod turn;
mod verify;
mod voice;
mod worker;

pub use agent::Agent;
pub use agents::{Agents, Binding, UnknownAgent};
pub use approval::Approvals;
pub use ask::AskUserTool;
pub use choices::{
    ChoiceStore, ChoiceStoreError, Choices, MemoryChoices, StateChoices, migrate_choices,
};
pub use command::Command;
pub use config::{AgentConfig, DEFAULT_SYSTEM_PROMPT};
pub use context::CONTEXT_FILES;
pub use dispatcher::Dispatcher;
pub use events::{AgentEvent, EventSink};
pub use hooks::{Approval, BeforeTool, Hook, Hooks, ToolOutcome, TurnInfo, TurnSummary};
pub use input::TurnInput;
pub use models::Models;
pub use recall::AgentMemory;
pub use scheduled::RunOutcomes;
pub use slots::{HeldSlot, Taker, TurnSlots, default_subagents};
pub use turn::{MAX_LLM_FAILURES, TAKING_OVER};
pub use verify::{DEFAULT_JUDGE_PROMPT, Judge, Verify};
pub use voice::Voice;
