//! [`Agent`]: what every turn shares — the LLM, the tools, the store and the config.

use std::sync::Arc;

use switchboard_core::{AgentName, ChatMessage, MessageId, Origin, SessionKey};
use switchboard_llm::LlmProvider;
use switchboard_sessions::{Batch, InboundState, Session, SessionStore, StoreError};
use switchboard_tools::{SubAgents, ToolFilter, ToolRegistry, ToolSources, TurnSlot};
use tokio_util::sync::CancellationToken;

use crate::choices::{ChoiceStore, MemoryChoices};
use crate::config::AgentConfig;
use crate::context::ContextCache;
use crate::events::EventSink;
use crate::hooks::{Hook, Hooks};
use crate::input::TurnInput;
use crate::models::Models;
use crate::recall::AgentMemory;
use crate::slots::TurnSlots;
use crate::turn;
use crate::voice::Voice;
use switchboard_scheduler::Jobs;
use switchboard_spawn::{self as spawn, Spawner, TreeLimits, TurnChildren};
use switchboard_usage::Spending;

/// One agent: what all its sessions share. Built by the daemon (one per `[agent]` and
/// `[agents.NAME]`) or the CLI.
pub struct Agent {
    /// Its name (`default` for `[agent]`).
    name: AgentName,
    /// The model chains (its own, and those chats may choose); replaced whole when the
    /// config is reloaded.
    models: std::sync::RwLock<Arc<Models>>,
    /// What each chat chose (`/model`).
    choices: Arc<dyn ChoiceStore>,
    /// The tools, by source: each replaced on its own (a reload, an MCP server coming and
    /// going); a turn keeps the snapshot it started with. Shared by a daemon's agents.
    tools: Arc<ToolSources>,
    /// Which of those tools this agent offers.
    filter: ToolFilter,
    pub(crate) store: Arc<dyn SessionStore>,
    pub(crate) config: AgentConfig,
    /// The system prompt built from the workspace files, reused for a moment.
    pub(crate) context: ContextCache,
    /// Policies attached to every turn.
    pub(crate) hooks: Hooks,
    /// Scheduled jobs, for `/jobs` and `/status`; `None` when the scheduler is off.
    jobs: Option<Jobs>,
    /// The slots of turns that may run at once; shared with the daemon's other agents.
    slots: Arc<TurnSlots>,
    /// What calls cost and the daily caps; shared with the daemon's other agents. `None`
    /// (the terminal, tests): nothing is recorded or capped.
    spending: Option<Arc<Spending>>,
    /// The daemon's sub-agents; `None` (the terminal): turns start none.
    spawner: Option<Spawner>,
    /// The tools a sub-agent's turn is offered, of the agent's (`[agent.spawn]`).
    child_tools: ToolFilter,
    /// Every tool but `spawn`: for turns that may not start sub-agents.
    no_spawn: ToolFilter,
    /// Voice notes heard, answers spoken (shared with the daemon's other agents).
    pub(crate) voice: Voice,
    /// Its memory (`[memory]`), for recall and `/memory`; `None` when off.
    memory: Option<AgentMemory>,
}

/// What one turn may spend: time and tokens.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Budget {
    pub turn_timeout: Option<std::time::Duration>,
    pub max_turn_tokens: Option<u64>,
}

impl Agent {
    /// An agent over these parts.
    /// An agent named `default` over these parts, offering every tool of `tools`.
    pub fn new(
        llm: Arc<dyn LlmProvider>,
        tools: impl Into<Arc<ToolSources>>,
        store: Arc<dyn SessionStore>,
        config: AgentConfig,
    ) -> Self {
        let child_tools = ToolFilter::new(
            config.spawn.tools.clone(),
            config.spawn.exclude_tools.clone(),
        );
        Self {
            name: AgentName::default(),
            models: std::sync::RwLock::new(Arc::new(Models::single(llm))),
            choices: Arc::new(MemoryChoices::default()),
            tools: tools.into(),
            filter: ToolFilter::default(),
            store,
            slots: TurnSlots::new(config.max_concurrent_turns),
            config,
            context: ContextCache::default(),
            hooks: Hooks::default(),
            jobs: None,
            spending: None,
            spawner: None,
            child_tools,
            no_spawn: ToolFilter::new(None, vec!["spawn".into()]),
            voice: Voice::default(),
            memory: None,
        }
    }

    /// Its memory, when `[memory]` is on.
    pub fn memory(&self) -> Option<&AgentMemory> {
        self.memory.as_ref()
    }

    /// Searches `memory` for `/memory` and recalls from it before turns (as it says).
    pub fn with_memory(mut self, memory: AgentMemory) -> Self {
        self.memory = Some(memory);
        self
    }

    /// Its audio parts.
    pub fn voice(&self) -> &Voice {
        &self.voice
    }

    /// Hears voice notes and speaks answers with `voice`'s parts.
    pub fn with_voice(mut self, voice: Voice) -> Self {
        self.voice = voice;
        self
    }

    /// Lets its turns start sub-agents through `spawner` (shared by the daemon's agents).
    pub fn with_spawner(mut self, spawner: Spawner) -> Self {
        self.spawner = Some(spawner);
        self
    }

    /// Whether turns in `session` may start sub-agents: spawning is on, there is a spawner,
    /// and the session is less deep than `spawn.max_depth` (a child of a child of a person's
    /// chat is 2 deep).
    fn may_spawn(&self, session: &SessionKey) -> bool {
        let spawn = &self.config.spawn;
        spawn.enabled && self.spawner.is_some() && depth(session) < spawn.max_depth
    }

    /// The tools a turn in `session` answering a message of `origin` is offered: a
    /// sub-agent's those `[agent.spawn]` leaves it, and `spawn` only where it may be used.
    pub(crate) fn turn_tools(&self, session: &SessionKey, origin: &Origin) -> Arc<ToolRegistry> {
        let mut tools = self.tools();
        if matches!(origin, Origin::Delegated { .. }) {
            tools = self.child_tools.apply(&tools);
        }
        if !self.may_spawn(session) {
            tools = self.no_spawn.apply(&tools);
        }
        tools
    }

    /// What a turn answering a message of `origin` may spend (a sub-agent's: `[agent.spawn]`'s).
    pub(crate) fn budget(&self, origin: &Origin) -> Budget {
        match origin {
            Origin::Delegated { .. } => Budget {
                turn_timeout: Some(self.config.spawn.timeout),
                max_turn_tokens: self
                    .config
                    .spawn
                    .max_turn_tokens
                    .or(self.config.max_turn_tokens),
            },
            _ => Budget {
                turn_timeout: self.config.turn_timeout,
                max_turn_tokens: self.config.max_turn_tokens,
            },
        }
    }

    /// The sub-agents a turn in `session`, working for `chat` and answering a message of
    /// `origin`, may start; `None` where it may not.
    pub(crate) fn children_of_turn(
        &self,
        session: &SessionKey,
        chat: &SessionKey,
        origin: &Origin,
        cancel: &CancellationToken,
        slot: Option<Arc<dyn TurnSlot>>,
    ) -> Option<Arc<dyn SubAgents>> {
        if !self.may_spawn(session) {
            return None;
        }
        let spawner = self.spawner.clone()?;
        // A chat's own turn answering a new message begins its count; the turn that takes
        // its sub-agents' results, and theirs, count on.
        let begins = session == chat && !matches!(origin, Origin::SubAgents { .. });
        Some(Arc::new(TurnChildren {
            turn: begins.then(|| spawner.begin_turn()),
            spawner,
            agent: self.name.clone(),
            parent: session.clone(),
            chat: chat.clone(),
            limits: TreeLimits {
                running: self.config.spawn.max_children,
                per_turn: self.config.spawn.max_per_turn,
            },
            store: self.store.clone(),
            cancel: cancel.clone(),
            slot,
        }))
    }

    /// `/stop` in `session`: stops the sub-agents it started; how many were running.
    pub fn stop_children(&self, session: &SessionKey) -> usize {
        self.spawner
            .as_ref()
            .map_or(0, |spawner| spawner.stop(&self.name, session))
    }

    /// Records what its calls cost in `spending` and keeps to its caps.
    pub fn with_spending(mut self, spending: Arc<Spending>) -> Self {
        self.spending = Some(spending);
        self
    }

    /// What calls cost, when it is recorded.
    pub fn spending(&self) -> Option<&Arc<Spending>> {
        self.spending.as_ref()
    }

    /// The scheduled jobs chats may see and change, when the scheduler runs.
    pub(crate) fn jobs(&self) -> Option<&Jobs> {
        self.jobs.as_ref()
    }

    /// Where chats' choices (`/model`) are kept.
    pub(crate) fn choices(&self) -> &Arc<dyn ChoiceStore> {
        &self.choices
    }

    /// The sub-agents of every session, when turns may start them.
    pub(crate) fn spawner(&self) -> Option<&Spawner> {
        self.spawner.as_ref()
    }

    /// Names the agent.
    pub fn with_name(mut self, name: AgentName) -> Self {
        self.name = name;
        self
    }

    /// Offers only the tools `filter` passes.
    pub fn with_tool_filter(mut self, filter: ToolFilter) -> Self {
        self.filter = filter;
        self
    }

    /// Its name.
    pub fn name(&self) -> &AgentName {
        &self.name
    }

    /// Takes its turn slots from `slots`, shared with other agents, instead of its own
    /// (`max_concurrent_turns` is then theirs).
    pub fn with_slots(mut self, slots: Arc<TurnSlots>) -> Self {
        self.slots = slots;
        self
    }

    /// The slots of turns that may run at once.
    pub fn slots(&self) -> &Arc<TurnSlots> {
        &self.slots
    }

    /// Lets chats see and change their scheduled jobs (`/jobs`, `/status`).
    pub fn with_jobs(mut self, jobs: Jobs) -> Self {
        self.jobs = Some(jobs);
        self
    }

    /// Adds a hook, run after those added before it, in every turn.
    pub fn with_hook(mut self, hook: Arc<dyn Hook>) -> Self {
        self.hooks.push(hook);
        self
    }

    /// Keeps what chats choose in `store` (across restarts) instead of memory.
    pub fn with_choices(mut self, store: Arc<dyn ChoiceStore>) -> Self {
        self.choices = store;
        self
    }

    /// The agent's own model (chain), which turns call unless their chat chose another.
    pub fn llm(&self) -> Arc<dyn LlmProvider> {
        self.models().default_chain().clone()
    }

    /// The agent's model chains: its own and those chats may choose.
    pub fn models(&self) -> Arc<Models> {
        self.models
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// Replaces the model chains: turns use them from their next call on (a running turn
    /// finishes its current call with the old ones).
    pub fn set_models(&self, models: Models) {
        *self
            .models
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Arc::new(models);
    }

    /// Replaces the model chain with `llm` alone (no choices).
    pub fn set_llm(&self, llm: Arc<dyn LlmProvider>) {
        self.set_models(Models::single(llm));
    }

    /// The model `session` chose with `/model`, if it is still offered.
    pub async fn chosen_model(&self, session: &SessionKey) -> Option<String> {
        let chosen = self.choices.get(session).await.model?;
        self.models().offers(&chosen).then_some(chosen)
    }

    /// The agent's config.
    pub fn config(&self) -> &AgentConfig {
        &self.config
    }

    /// The tools offered to the model now, every source's that this agent's filter
    /// passes: a turn takes this once.
    pub fn tools(&self) -> Arc<ToolRegistry> {
        self.filter.apply(&self.tools.snapshot())
    }

    /// The tools by source: replacing one changes the turns that start from then on.
    pub fn tool_sources(&self) -> &Arc<ToolSources> {
        &self.tools
    }

    /// The session store (the daemon reads its health).
    pub fn store(&self) -> Arc<dyn SessionStore> {
        self.store.clone()
    }

    /// Reads a session back from the store (repaired and trimmed).
    pub async fn load_session(&self, key: &SessionKey) -> Result<Session, StoreError> {
        let loaded = self.store.load(key).await?;
        let overflow = if self.config.summarize {
            crate::summary::OVERFLOW
        } else {
            0
        };
        Ok(Session::from_loaded_with(
            key.clone(),
            self.config.history_limit,
            overflow,
            loaded,
        ))
    }

    /// Lets the store drop what it keeps for a session that left memory.
    pub fn release_session(&self, key: &SessionKey) {
        self.store.release(key);
    }

    /// Archives the session's history and empties it (`/new`).
    pub async fn reset_session(&self, session: &mut Session) -> Result<(), StoreError> {
        if session.is_stale() {
            return Err(StoreError::Stale);
        }
        let archived = self.store.archive(session.key(), session.revision()).await;
        session.note_write(archived)?;
        session.clear();
        Ok(())
    }

    /// Writes `batch` to the session's record, after what the session last saw of it. A
    /// session found stale ([`Session::is_stale`]) is not written again: whoever holds it
    /// reads it afresh and decides anew.
    pub(crate) async fn save(
        &self,
        session: &mut Session,
        batch: &Batch<'_>,
    ) -> Result<(), StoreError> {
        if session.is_stale() {
            return Err(StoreError::Stale);
        }
        let written = self
            .store
            .append(session.key(), session.revision(), batch)
            .await;
        session.note_write(written)
    }

    /// Rewrites the session's record with its window, when it has grown enough. A failure
    /// is logged: the record stays as it was, only longer.
    pub(crate) async fn compact_if_due(&self, session: &mut Session) {
        if session.needs_compaction() {
            self.compact(session).await;
        }
    }

    /// Rewrites the session's record with its window (and its summary). A failure is logged:
    /// the record stays as it was, only longer.
    pub(crate) async fn compact(&self, session: &mut Session) {
        if session.is_stale() {
            return;
        }
        let messages: Vec<ChatMessage> = session.messages().iter().map(|m| (**m).clone()).collect();
        let written = self
            .store
            .compact(
                session.key(),
                session.revision(),
                &session.snapshot(&messages),
            )
            .await;
        match session.note_write(written) {
            Ok(()) => session.compacted(),
            Err(StoreError::Stale) => stale(session),
            Err(err) => tracing::error!(session = %session.key(), path = ?err.path(),
                error = %err, "could not compact session file"),
        }
    }

    /// Runs one turn answering `input`: every message is saved as it is produced, the
    /// session is extended and trimmed at the end, and everything that happens is sent to
    /// `events`, ending with `Finished` or `Failed`. Cancelling `cancel` ends it at once,
    /// with synthetic results for open tool calls saved.
    pub async fn run_turn(
        &self,
        session: &mut Session,
        input: TurnInput,
        cancel: &CancellationToken,
        events: &EventSink,
    ) {
        turn::run(self, session, input, cancel, events).await;
    }

    /// Notes in the session's file (and in memory) how far an inbound message got. A
    /// failure is logged: the worst it costs is answering the message again after a crash.
    /// A session found stale is left so ([`Session::is_stale`]) for its worker to read again.
    pub async fn journal(&self, session: &mut Session, id: &MessageId, state: InboundState) {
        let batch = Batch {
            inbound: Some((id, &state)),
            ..Batch::default()
        };
        match self.save(session, &batch).await {
            Ok(()) => session.note_inbound(id.clone(), state),
            Err(StoreError::Stale) => stale(session),
            Err(err) => tracing::error!(session = %session.key(), path = ?err.path(),
                error = %err, "could not note an inbound message's progress"),
        }
    }
}

/// Logs that a write found `session` out of date (another worker wrote it since it was
/// read): nothing more is written from it, and its message is decided anew.
pub(crate) fn stale(session: &Session) {
    tracing::warn!(session = %session.key(), "the session was written elsewhere since it was \
        read (its partition moved meanwhile); nothing more is written from it, it is read again");
}

/// How deep a session is among sub-agents: 0 for a chat, 1 for a child of a chat's turn, ….
fn depth(session: &SessionKey) -> usize {
    match session.split() {
        Some((channel, chat)) if channel.as_str() == spawn::CHANNEL => {
            chat.as_str().matches('~').count()
        }
        _ => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sessions_depth_counts_the_sub_agents_between_it_and_a_chat() {
        for (key, deep) in [
            ("telegram_123", 0),
            ("telegram_12~3", 0),
            ("spawn_telegram_123~1", 1),
            ("spawn_websocket_p~1~4", 2),
            ("cron_j1", 0),
        ] {
            assert_eq!(depth(&SessionKey::from(key)), deep, "{key}");
        }
    }
}
