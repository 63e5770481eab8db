//! Building the daemon's agents from the config: one per `[agent]` and `[agents.NAME]`
//! (their sections are the agent crate's), each with its own workspace, session store, model chain, tool
//! filter, limits and approvals; one set of tools (by source: the built-in ones, an
//! embedder's, each MCP server's), one catalog of models and one set of turn slots shared by
//! them all; and the bindings between chats and them.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::Context;
use switchboard_agent::section::{AgentSection, AgentSpec, ApprovalsSection};
use switchboard_agent::{
    Agent, AgentConfig, AgentMemory, Agents, Approvals, AskUserTool, DEFAULT_JUDGE_PROMPT,
    DEFAULT_SYSTEM_PROMPT, Judge, RunOutcomes, StateChoices, TurnSlots, Verify, Voice,
    default_subagents,
};
use switchboard_core::{AgentName, Bus, ChannelName, MediaStore, StateStore};
use switchboard_llm::Observer;
use switchboard_llm::section::{LlmSection, ModelEntry};
use switchboard_memory::{IndexedStore, MemoryIndex};
use switchboard_scheduler::{CronTool, Scheduler};
use switchboard_sessions::{FileState, JsonlStore, SessionStore};
use switchboard_spawn::{SpawnTool, Spawner};
use switchboard_tools::builtin::{self, MemorySearch, SandboxHelper};
use switchboard_tools::sandbox::RunAs;
use switchboard_tools::{Outbox, ToolFilter, ToolRegistry, ToolSources, Workspace};
use switchboard_usage::Spending;

use crate::catalog::Catalog;
use crate::config::Config;
use crate::config_values::duration;
use crate::metrics::MetricsHook;
use crate::outbox::HubOutbox;

/// The source of the tools the config describes (replaced on reload).
pub(crate) const BUILTIN_SOURCE: &str = "builtin";

/// The source of the tools an embedder (or a test) adds beside them.
const EXTRA_SOURCE: &str = "extra";

/// What agents are built with besides the config.
#[derive(Default)]
pub(crate) struct AgentParts<'a> {
    /// What this process is: on a cluster, sessions are kept there (none in the terminal).
    pub place: Option<&'a crate::cluster::Place>,
    /// Tools beside the built-in ones (tests', embedders').
    pub extra_tools: ToolRegistry,
    /// The bus, for the `message` tool (none in the terminal).
    pub hub: Option<&'a Arc<dyn Bus>>,
    /// Told every model attempt's outcome.
    pub observer: Option<&'a Arc<dyn Observer>>,
    /// Told every audio server attempt's outcome.
    pub audio_observer: Option<&'a Arc<dyn switchboard_audio::Observer>>,
    /// Scheduled work, for the `cron` tool and the hook that learns how runs ended.
    pub scheduler: Option<Scheduler>,
    /// What calls cost, and the daily caps (none in the terminal).
    pub spending: Option<Arc<Spending>>,
    /// The daemon's sub-agents (none in the terminal).
    pub spawner: Option<Spawner>,
}

/// What building the tools again needs (a reload does when `[tools]` changed).
#[derive(Clone)]
pub struct ToolParts {
    /// Where the `message` tool sends.
    outbox: Option<Arc<dyn Outbox>>,
    /// Paths `exec`'s commands may not read.
    forbidden: Vec<PathBuf>,
    /// The scheduler the `cron` tool talks to.
    scheduler: Option<Scheduler>,
    /// How long a `spawn` call may wait for a sub-agent; `None`: there are no sub-agents.
    spawn_wait: Option<std::time::Duration>,
    /// The agents' memory index, for `memory_search` (`None`: `[memory]` is off).
    pub(crate) memory: Option<MemoryIndex>,
}

/// The tools the config describes: the built-in ones, `cron`, `ask_user` (the source
/// [`BUILTIN_SOURCE`]).
pub(crate) fn build_tools(config: &Config, parts: &ToolParts) -> anyhow::Result<ToolRegistry> {
    let helper = sandbox_helper(config, parts.forbidden.clone());
    let mut tools = builtin::registry(&config.tools, helper, parts.outbox.clone())
        .map_err(|err| anyhow::anyhow!("cannot build the tools: {err}"))?;
    if let Some(scheduler) = &parts.scheduler {
        tools.register(Arc::new(CronTool::new(scheduler.jobs().clone())));
    }
    if let Some(wait) = parts.spawn_wait {
        tools.register(Arc::new(SpawnTool::new(wait)));
    }
    if let Some(memory) = &parts.memory {
        let results = *config.memory.max_results.get_ref();
        tools.register(Arc::new(MemorySearch::new(
            Arc::new(memory.clone()),
            results,
        )));
    }
    // The tools enabled channels give (email's `email`).
    for (_, section) in config.channels.all() {
        if section.enabled() {
            for tool in section.tools() {
                tools.register(tool);
            }
        }
    }
    add_ask_user(&config.agent, &mut tools);
    Ok(tools)
}

/// The default agent alone (the terminal's), with `extra_tools` beside the built-in ones
/// and the `message` tool when there is a `hub` to send through. Fails when its state
/// directory cannot be written (a read-only or full file system): better to refuse to start
/// than to answer messages that are then lost.
pub fn build_agent(
    config: &Config,
    extra_tools: ToolRegistry,
    hub: Option<&Arc<dyn Bus>>,
) -> anyhow::Result<Arc<Agent>> {
    let parts = AgentParts {
        extra_tools,
        hub,
        ..AgentParts::default()
    };
    Ok(build_agents(config, parts)?.0.default_agent().clone())
}

/// Every agent of the config and the bindings to them, and what building their tools again
/// needs.
pub(crate) fn build_agents(
    config: &Config,
    parts: AgentParts<'_>,
) -> anyhow::Result<(Agents, ToolParts)> {
    let AgentParts {
        place,
        extra_tools,
        hub,
        observer,
        audio_observer,
        scheduler,
        spending,
        spawner,
    } = parts;
    let state_dir = config.path(&config.agent.state_dir);
    create_dir(&state_dir, "agent.state_dir")?;
    let specs = config.agent_specs();
    // As root, commands run as `[tools.exec] user`: the workspaces are theirs to work in.
    let exec_user = config
        .tools
        .exec_user()
        .map_err(|problem| config.source.problem("tools", problem))?;
    let forbidden = forbidden_paths(config, &state_dir);
    let mut homes = Vec::with_capacity(specs.len());
    for spec in &specs {
        homes.push(Home::open(
            config,
            spec,
            &forbidden,
            exec_user.as_ref(),
            place,
        )?);
    }
    let memory = memory_of(config, &specs, &mut homes, place)?;
    let stores: BTreeMap<AgentName, Arc<dyn SessionStore>> = homes
        .iter()
        .map(|home| (home.name.clone(), home.store.clone()))
        .collect();
    let outbox = hub.map(|hub| outbox_of(config, hub, stores, place, &state_dir));
    // Voice notes heard and answers spoken only where messages come in (not the terminal).
    let voice = match hub {
        Some(_) => voice_of(config, place, &state_dir, audio_observer)?,
        None => Voice::default(),
    };
    let spawn_wait = spawner.as_ref().and_then(|_| spawn_wait(&specs));
    let tool_parts = ToolParts {
        outbox,
        forbidden: homes[0].workspace.forbidden().to_vec(),
        scheduler: scheduler.clone(),
        spawn_wait,
        memory: memory.clone(),
    };
    let tools = Arc::new(ToolSources::of([
        (BUILTIN_SOURCE.to_owned(), build_tools(config, &tool_parts)?),
        (EXTRA_SOURCE.to_owned(), extra_tools),
    ])?);
    let catalog = Catalog::build(config, observer)?;
    if let Some(scheduler) = &scheduler {
        scheduler.read_instructions_in(homes[0].workspace.clone());
    }
    let shared = Shared {
        catalog,
        tools,
        slots: slots_of(config),
        metrics: config.http.metrics.then(MetricsHook::new),
        spending,
        spawner,
        scheduler,
        place,
        voice,
        memory: memory.map(|index| AgentMemory {
            memory: Arc::new(index),
            recall: *config.memory.recall.get_ref(),
            recall_max_tokens: *config.memory.recall_max_tokens.get_ref(),
            max_results: *config.memory.max_results.get_ref(),
        }),
    };
    let mut agents = Vec::with_capacity(homes.len());
    for (spec, home) in specs.iter().zip(homes) {
        agents.push(Arc::new(agent_of(config, spec, home, &shared)?));
    }
    let mut agents = agents.into_iter();
    let default = agents.next().context("no default agent")?;
    let agents = Agents::new(
        default,
        agents,
        switchboard_agent::section::bindings(&config.bindings),
    )?;
    Ok((agents, tool_parts))
}

/// The agents' memory index when `[memory]` is on — started, its first pass under way — with
/// every agent's store telling it what is written (alone), or every agent's chats followed
/// in the cluster's stream (on a cluster); `None` (nothing started) when off.
fn memory_of(
    config: &Config,
    specs: &[AgentSpec<'_>],
    homes: &mut [Home],
    place: Option<&crate::cluster::Place>,
) -> anyhow::Result<Option<MemoryIndex>> {
    if !config.memory.enabled {
        return Ok(None);
    }
    let shared = place.is_some_and(crate::cluster::Place::is_cluster);
    let places: Vec<switchboard_memory::Home> = specs
        .iter()
        .zip(homes.iter())
        .map(|(spec, home)| switchboard_memory::Home {
            agent: spec.name.clone(),
            state_dir: spec.state_dir.clone(),
            workspace: home.workspace.root().to_path_buf(),
            shared,
        })
        .collect();
    let index = MemoryIndex::start(&places)
        .context("cannot open the memory index (memory.enabled; `switchboard memory reindex` builds it afresh)")?;
    if let Some(place) = place {
        let agents: Vec<AgentName> = specs.iter().map(|spec| spec.name.clone()).collect();
        if place.follow_said(&index, &agents) {
            return Ok(Some(index));
        }
    }
    for home in homes {
        home.store = Arc::new(IndexedStore::new(
            home.store.clone(),
            home.name.clone(),
            index.clone(),
        ));
    }
    Ok(Some(index))
}

/// Where the agents' `message` and `send_file` send: the bus, judged by their stores, with
/// what each configured channel takes of files; the place's media and state stores (the
/// state directory's, without one).
fn outbox_of(
    config: &Config,
    hub: &Arc<dyn Bus>,
    stores: BTreeMap<AgentName, Arc<dyn SessionStore>>,
    place: Option<&crate::cluster::Place>,
    state_dir: &std::path::Path,
) -> Arc<dyn Outbox> {
    let limits = config
        .channels
        .all()
        .into_iter()
        .filter(|(_, section)| section.enabled())
        .map(|(name, section)| (ChannelName::from(name), section.media()))
        .collect();
    let (media, state): (Arc<dyn MediaStore>, Arc<dyn StateStore>) = match place {
        Some(place) => (
            place.stores().media().clone(),
            place.stores().state().clone(),
        ),
        None => (
            Arc::new(switchboard_adapter::FileMedia::new(state_dir)),
            Arc::new(FileState::new(state_dir)),
        ),
    };
    Arc::new(HubOutbox::new(hub.clone(), stores, limits, media, state))
}

/// `[transcription]` and `[speech]` built (nothing when both are off), with the place's media
/// store (the state directory's, without one) for spoken answers.
fn voice_of(
    config: &Config,
    place: Option<&crate::cluster::Place>,
    state_dir: &std::path::Path,
    observer: Option<&Arc<dyn switchboard_audio::Observer>>,
) -> anyhow::Result<Voice> {
    let transcription = config
        .transcription
        .build(observer.cloned())
        .context("cannot start [transcription]")?;
    let speech = config
        .speech
        .build(observer.cloned())
        .context("cannot start [speech]")?;
    if transcription.is_none() && speech.is_none() {
        return Ok(Voice::default());
    }
    let media: Arc<dyn MediaStore> = match place {
        Some(place) => place.stores().media().clone(),
        None => Arc::new(switchboard_adapter::FileMedia::new(state_dir)),
    };
    Ok(Voice {
        transcription: transcription.map(Arc::new),
        speech: speech.map(Arc::new),
        media: Some(media),
    })
}

/// What no tool may reach, whatever the workspace: the state directory, the config file and
/// systemd's copies of the service's credentials (`LoadCredential=`).
fn forbidden_paths(config: &Config, state_dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut forbidden = vec![state_dir.to_path_buf(), config.source.path.clone()];
    if let Some(credentials) = std::env::var_os("CREDENTIALS_DIRECTORY") {
        forbidden.push(credentials.into());
    }
    forbidden
}

/// How long a `spawn` call waits at most: a little longer than the longest sub-agent of the
/// agents that may start them may run.
fn spawn_wait(specs: &[AgentSpec<'_>]) -> Option<std::time::Duration> {
    specs
        .iter()
        .filter(|spec| spec.section.spawn.enabled)
        .map(|spec| spec.section.spawn.config().timeout)
        .max()
        .map(|longest| longest + std::time::Duration::from_secs(30))
}

/// What every agent of the daemon is built with.
struct Shared<'a> {
    catalog: Catalog,
    tools: Arc<ToolSources>,
    slots: Arc<TurnSlots>,
    metrics: Option<Arc<MetricsHook>>,
    spending: Option<Arc<Spending>>,
    spawner: Option<Spawner>,
    scheduler: Option<Scheduler>,
    place: Option<&'a crate::cluster::Place>,
    /// Voice notes heard, answers spoken: every agent's.
    voice: Voice,
    /// Every agent's memory (`[memory]`; `None`: off).
    memory: Option<AgentMemory>,
}

/// The turn slots every agent shares: `[agent] max_concurrent_turns`, of which sub-agents
/// may hold `max_subagent_turns` (half by default).
fn slots_of(config: &Config) -> Arc<TurnSlots> {
    let max_turns = *config.agent.max_concurrent_turns.get_ref();
    TurnSlots::with_subagents(
        max_turns,
        config
            .agent
            .max_subagent_turns
            .as_ref()
            .map_or_else(|| default_subagents(max_turns), |n| *n.get_ref()),
    )
}

/// The agent `spec` describes, at `home`, with what every agent shares.
fn agent_of(
    config: &Config,
    spec: &AgentSpec<'_>,
    home: Home,
    shared: &Shared<'_>,
) -> anyhow::Result<Agent> {
    let section = spec.section;
    let agent_config = AgentConfig {
        workspace: home.workspace,
        max_tool_result_bytes: *config.tools.max_result_bytes.get_ref(),
        max_iterations: *section.max_iterations.get_ref(),
        history_limit: *section.history_limit.get_ref(),
        max_concurrent_turns: shared.slots.max(),
        tool_timeout: duration(&section.tool_timeout_secs),
        context_file_max_bytes: section.context_file_max_bytes,
        idle_timeout: duration(&section.idle_timeout_secs),
        stream: section.stream,
        system_prompt: section
            .system_prompt
            .clone()
            .unwrap_or_else(|| DEFAULT_SYSTEM_PROMPT.to_owned()),
        max_queued_messages: *section.max_queued_messages.get_ref(),
        max_turn_tokens: section.max_turn_tokens,
        turn_timeout: section.turn_timeout_secs.as_ref().map(duration),
        verify: verify(&config.llm, section, &spec.key)?,
        spawn: section.spawn.config(),
        summarize: config.memory.summarize,
    };
    let model = section.model.as_ref().map(|m| m.get_ref().as_str());
    let filter = ToolFilter::new(section.tools.clone(), section.exclude_tools.clone());
    let mut agent = Agent::new(
        shared.catalog.chain(model),
        shared.tools.clone(),
        home.store,
        agent_config,
    )
    .with_name(spec.name.clone())
    .with_slots(shared.slots.clone())
    .with_tool_filter(filter)
    .with_choices(match shared.place {
        Some(place) => place.stores().choices(&spec.name),
        // The terminal agent: the daemon's choices, in its state directory.
        None => Arc::new(StateChoices::new(
            Arc::new(FileState::new(&config.path(&config.agent.state_dir))),
            spec.name.as_str(),
        )),
    });
    agent.set_models(shared.catalog.models_for(model));
    if let Some(metrics) = &shared.metrics {
        agent = agent.with_hook(metrics.clone());
    }
    if let Some(spending) = &shared.spending {
        agent = agent.with_spending(spending.clone());
    }
    if let Some(spawner) = &shared.spawner {
        agent = agent.with_spawner(spawner.clone());
    }
    if shared.voice.is_on() {
        agent = agent.with_voice(shared.voice.clone());
    }
    if let Some(memory) = &shared.memory {
        agent = agent.with_memory(memory.clone());
    }
    if let Some(scheduler) = &shared.scheduler {
        agent = agent
            .with_hook(Arc::new(RunOutcomes(scheduler.outcomes())))
            .with_jobs(scheduler.jobs().clone());
    }
    let agent = with_approvals(&section.approvals, agent)?;
    warn_unmatched_tools(spec, &agent);
    Ok(agent)
}

/// Where one agent keeps what it has: its workspace and its session store.
struct Home {
    name: AgentName,
    workspace: Arc<Workspace>,
    store: Arc<dyn SessionStore>,
}

impl Home {
    /// Creates what is missing of the agent's directories and opens them.
    fn open(
        config: &Config,
        spec: &AgentSpec<'_>,
        forbidden: &[PathBuf],
        exec_user: Option<&RunAs>,
        place: Option<&crate::cluster::Place>,
    ) -> anyhow::Result<Self> {
        let workspace_key = format!("{}.workspace", spec.key);
        let new_workspace = !spec.workspace.exists();
        // On a cluster the workspace is shared (a volume every worker mounts) or the agent is
        // pinned to the hosts that have it: one missing here is a volume not mounted, not a
        // directory to make afresh.
        if new_workspace && place.is_some_and(|place| place.is_cluster() && place.runs_agents()) {
            anyhow::bail!(
                "the workspace {} ({workspace_key}) is missing on this worker: on a cluster \
                 every worker needs the agent's workspace — mount the shared volume before \
                 switchboard starts, or bind the agent to hosts that have it \
                 (docs/deployment.md, \"A cluster\")",
                spec.workspace.display()
            );
        }
        create_dir(&spec.workspace, &workspace_key)?;
        if let Some(user) = exec_user {
            give_workspace(&spec.workspace, user, new_workspace)?;
        }
        let restrict = config.tools.restrict_to_workspace;
        let workspace = Workspace::new(&spec.workspace, forbidden, restrict)
            .with_context(|| {
                format!(
                    "cannot open the workspace {} ({workspace_key})",
                    spec.workspace.display()
                )
            })?
            .with_owner(exec_user.cloned());
        let state_dir = config.path(&config.agent.state_dir);
        if state_dir
            .canonicalize()
            .is_ok_and(|state| state.starts_with(workspace.root()))
        {
            tracing::warn!(state_dir = %state_dir.display(), workspace = %workspace.root().display(),
                "the state directory is inside the workspace: file tools refuse it, but commands \
                 run by `exec` can write there; keep it outside (the default)");
        }
        create_dir(&spec.state_dir, "agent.state_dir")?;
        let store = match place.and_then(|place| place.session_store(&spec.name)) {
            Some(store) => store,
            None => Arc::new(JsonlStore::open(&spec.state_dir).with_context(|| {
                format!(
                    "cannot keep sessions in {} (agent.state_dir)",
                    spec.state_dir.display()
                )
            })?),
        };
        Ok(Self {
            name: spec.name.clone(),
            workspace: Arc::new(workspace),
            store,
        })
    }
}

/// Logs the patterns of an agent's `tools` / `exclude_tools` that name no tool it has now
/// (a typo, or the tools of an MCP server that is not up yet).
fn warn_unmatched_tools(spec: &AgentSpec<'_>, agent: &Agent) {
    let section = spec.section;
    if section.tools.is_none() && section.exclude_tools.is_empty() {
        return;
    }
    let all = agent.tool_sources().snapshot();
    let names: Vec<&str> = all.names().collect();
    let filter = ToolFilter::new(section.tools.clone(), section.exclude_tools.clone());
    let unmatched = filter.unmatched(&names);
    if !unmatched.is_empty() {
        tracing::warn!(agent = %spec.name, patterns = ?unmatched,
            "these tools of {}.tools / exclude_tools name no tool (yet): a typo, or an MCP \
             server's tools that come once it is up", spec.key);
    }
}

/// How `exec` confines commands: through `tools.exec.sandbox_helper`, else this binary
/// when it is `switchboard` (`switchboard sandbox-exec`); `None` when neither is known (a
/// test binary running the daemon in-process), and commands then say they run unconfined.
fn sandbox_helper(config: &Config, forbidden: Vec<PathBuf>) -> Option<SandboxHelper> {
    if !config.tools.exec.enabled {
        return None;
    }
    let program = match &config.tools.exec.sandbox_helper {
        Some(path) => config.path(path),
        None => std::env::current_exe()
            .ok()
            .filter(|exe| exe.file_name().is_some_and(|name| name == "switchboard"))?,
    };
    Some(SandboxHelper {
        program,
        args: vec!["sandbox-exec".into()],
        forbidden,
    })
}

/// When the daemon is root: a workspace it just created is given to the commands' user
/// (made 0700 by [`create_dir`], it would be closed to them); an existing one they cannot
/// write is only reported, with what to do — the operator's files are not changed.
fn give_workspace(path: &Path, user: &RunAs, created: bool) -> anyhow::Result<()> {
    use std::os::unix::fs::MetadataExt;
    if created {
        return std::os::unix::fs::chown(path, Some(user.uid), Some(user.gid)).with_context(|| {
            format!(
                "cannot give the new workspace {} to uid {}",
                path.display(),
                user.uid
            )
        });
    }
    let meta = std::fs::metadata(path)
        .with_context(|| format!("cannot read the workspace {}", path.display()))?;
    let writable = meta.uid() == user.uid
        || (meta.gid() == user.gid && meta.mode() & 0o030 == 0o030)
        || meta.mode() & 0o003 == 0o003;
    if !writable {
        tracing::warn!(workspace = %path.display(), uid = user.uid, gid = user.gid,
            "the daemon runs as root, so commands run by `exec` run as [tools.exec] user, \
             who cannot write in the workspace: give it to them (chown -R {}:{} {}) or name its \
             owner in [tools.exec] user", user.uid, user.gid, path.display());
    }
    Ok(())
}

pub(crate) fn create_dir(path: &Path, key: &str) -> anyhow::Result<()> {
    let mut builder = std::fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::DirBuilderExt;
        builder.mode(0o700);
    }
    builder
        .create(path)
        .with_context(|| format!("cannot create {} ({key})", path.display()))
}

/// An agent's `verify` policy (`key`: its section, for errors).
pub(crate) fn verify(llm: &LlmSection, agent: &AgentSection, key: &str) -> anyhow::Result<Verify> {
    let section = &agent.verify;
    let judge = match &section.judge {
        None => None,
        Some(judge) => Some(Judge {
            llm: llm.model(
                ModelEntry {
                    kind: *judge.provider.get_ref(),
                    base_url: judge.base_url.as_ref(),
                    api_key: judge.api_key.as_ref(),
                    model: &judge.model,
                    images: true,
                    key_name: &format!("{key}.verify.judge.api_key"),
                },
                None,
            )?,
            prompt: judge
                .prompt
                .clone()
                .unwrap_or_else(|| DEFAULT_JUDGE_PROMPT.to_owned()),
        }),
    };
    Ok(Verify {
        enabled: section.enabled,
        max_attempts: *section.max_attempts.get_ref(),
        min_chars: section.min_chars,
        max_chars: section.max_chars,
        judge,
    })
}

/// Adds the `ask_user` tool to `tools`.
fn add_ask_user(agent: &AgentSection, tools: &mut ToolRegistry) {
    let timeout = duration(&agent.ask_timeout_secs);
    tools.register(Arc::new(AskUserTool::new(timeout)));
}

/// Attaches an agent's `approvals` hook, when there is anything to approve: the tools it
/// lists, those that say they always need approval (`Tool::needs_approval`), and `exec`
/// commands matching its patterns.
fn with_approvals(section: &ApprovalsSection, agent: Agent) -> anyhow::Result<Agent> {
    let mut tools = section.tools.clone();
    let registry = agent.tools();
    let flagged = registry
        .names()
        .filter(|name| registry.get(name).is_some_and(|tool| tool.needs_approval()));
    tools.extend(flagged.map(str::to_owned).collect::<Vec<_>>());
    if tools.is_empty() && section.commands.get_ref().is_empty() {
        return Ok(agent);
    }
    let approvals = Approvals::new(
        tools,
        section.commands.get_ref(),
        duration(&section.timeout_secs),
    )?;
    Ok(agent.with_hook(Arc::new(approvals)))
}

#[cfg(test)]
#[path = "agents_tests.rs"]
mod tests;
