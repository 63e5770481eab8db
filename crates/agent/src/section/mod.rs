//! An agent's section — `[agent]`, the default agent's, and `[agents.NAME]` — and
//! `[[bindings]]`: several agents on one daemon.
//!
//! `[agent]` is the default agent. An `[agents.NAME]` table describes another with the keys
//! of `[agent]`, and takes from `[agent]` every key it does not set itself (a sub-table such
//! as `[agent.approvals]` whole) — except `workspace`, which is its own
//! (`~/.switchboard/agents/NAME` when not given), and the keys that are the daemon's, which
//! it may not set ([`DAEMON_KEYS`]). Its sessions are kept in
//! `agent.state_dir/agents/NAME/`. `[[bindings]]` route chats to agents: the first whose
//! every condition holds wins; chats no binding matches go to the default agent.
//!
//! The inheritance is done on the parsed document ([`inherit`]), before the sections are
//! read, so every value keeps its place in the file for the errors that name it.

use std::collections::BTreeMap;
use std::path::{Component, Path, PathBuf};

use serde::Deserialize;
use switchboard_core::{
    AgentName, ChannelName, ChatId, ConfigError, ConfigSource as Source, SenderId, positive_seconds,
};
use toml::Spanned;
use toml::de::{DeTable, DeValue};

pub use turn::{ApprovalsSection, JudgeSection, SpawnSection, VerifySection};

use crate::Binding;

mod turn;

/// A located problem with one value: its span, dotted key and message.
pub type ValueProblem = (std::ops::Range<usize>, String, String);

/// Keys of `[agent]` that belong to the daemon, not to one agent: an `[agents.NAME]` may not
/// set them, and does not take them. Each with why.
pub const DAEMON_KEYS: &[(&str, &str)] = &[
    (
        "state_dir",
        "every agent keeps its sessions under agent.state_dir (in agents/NAME/); set it in [agent]",
    ),
    (
        "max_concurrent_turns",
        "the turn limit is shared by all agents; set it in [agent]",
    ),
    (
        "max_subagent_turns",
        "the turn limit is shared by all agents; set it in [agent]",
    ),
    (
        "ask_timeout_secs",
        "the ask_user tool is shared by all agents; set it in [agent]",
    ),
];

/// The most characters of an agent's name.
const MAX_NAME: usize = 32;

/// `[agent]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AgentSection {
    /// Files the agent may touch; context files are read from it.
    pub workspace: String,
    /// Sessions, cursors, pairing; never reachable by tools.
    pub state_dir: String,
    /// Rounds of LLM → tools per turn.
    pub max_iterations: Spanned<usize>,
    /// Messages of history kept per session.
    pub history_limit: Spanned<usize>,
    /// Turns running at once across all sessions.
    pub max_concurrent_turns: Spanned<usize>,
    /// Of those, sub-agents' turns running at once; half when absent (at least one).
    pub max_subagent_turns: Option<Spanned<usize>>,
    /// Seconds one tool call may run.
    pub tool_timeout_secs: Spanned<f64>,
    /// Bytes of each context file (SOUL.md …) put in the prompt.
    pub context_file_max_bytes: usize,
    /// Seconds before an idle session leaves memory.
    pub idle_timeout_secs: Spanned<f64>,
    /// Stream replies as they are generated.
    pub stream: bool,
    /// Replaces the opening of the system prompt.
    pub system_prompt: Option<String>,
    /// Messages one chat may have waiting behind its running turn.
    pub max_queued_messages: Spanned<usize>,
    /// Tokens a turn may spend (in + out over its LLM calls) before it stops calling tools.
    pub max_turn_tokens: Option<u64>,
    /// Seconds a turn may take in all.
    pub turn_timeout_secs: Option<Spanned<f64>>,
    /// Seconds the `ask_user` tool waits for the person's answer.
    pub ask_timeout_secs: Spanned<f64>,
    /// `[agent.verify]`.
    pub verify: VerifySection,
    /// `[agent.approvals]`.
    pub approvals: ApprovalsSection,
    /// `[agent.spawn]`.
    pub spawn: SpawnSection,
    /// The model its turns use, first; the rest of `[llm]`'s chain after it. `[llm] model`
    /// when absent.
    pub model: Option<Spanned<String>>,
    /// The tools it offers (names, `*` for any run of characters); every tool when absent.
    pub tools: Option<Vec<String>>,
    /// Tools it does not offer, of those.
    pub exclude_tools: Vec<String>,
}

impl Default for AgentSection {
    fn default() -> Self {
        Self {
            workspace: "~/.switchboard/workspace".into(),
            state_dir: "~/.switchboard/state".into(),
            max_iterations: Spanned::new(0..0, 40),
            history_limit: Spanned::new(0..0, 50),
            max_concurrent_turns: Spanned::new(0..0, 64),
            max_subagent_turns: None,
            tool_timeout_secs: Spanned::new(0..0, 60.0),
            context_file_max_bytes: 16 * 1024,
            idle_timeout_secs: Spanned::new(0..0, 300.0),
            stream: true,
            system_prompt: None,
            max_queued_messages: Spanned::new(0..0, 32),
            max_turn_tokens: None,
            turn_timeout_secs: None,
            ask_timeout_secs: Spanned::new(0..0, 600.0),
            verify: VerifySection::default(),
            approvals: ApprovalsSection::default(),
            spawn: Default::default(),
            model: None,
            tools: None,
            exclude_tools: Vec::new(),
        }
    }
}

/// One `[[bindings]]` entry.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BindingSection {
    /// The agent: `default` or the `NAME` of an `[agents.NAME]`.
    pub agent: Spanned<String>,
    /// The channel: `telegram`, `discord`, `websocket`.
    pub channel: Option<String>,
    /// The chat, within the channel (a Telegram chat id, a Discord channel id, a WebSocket
    /// client's `chat_id`).
    pub chat: Option<Id>,
    /// Who writes (a platform's user id).
    pub sender: Option<Id>,
}

/// A chat's or a person's id, written as a string or a number (`chat = 123` and
/// `chat = "123"` are the same).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Id(pub String);

impl<'de> Deserialize<'de> for Id {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Text(String),
            Number(i64),
        }
        match Raw::deserialize(deserializer) {
            Ok(Raw::Text(text)) => Ok(Self(text)),
            Ok(Raw::Number(number)) => Ok(Self(number.to_string())),
            Err(_) => Err(serde::de::Error::custom(
                "expected an id: a string or a whole number",
            )),
        }
    }
}

/// Gives each `[agents.NAME]` table the keys of `[agent]` it does not set (see the module
/// doc), in place; a daemon's key set in one is an error at its value.
pub fn inherit(document: &mut DeTable<'_>) -> Result<(), ValueProblem> {
    let base = match document.get("agent").map(|value| value.get_ref()) {
        Some(DeValue::Table(table)) => table.clone(),
        _ => DeTable::default(),
    };
    let Some(agents) = document.get_mut("agents") else {
        return Ok(());
    };
    let DeValue::Table(agents) = agents.get_mut() else {
        return Ok(());
    };
    for (name, agent) in agents.iter_mut() {
        let span = agent.span();
        let DeValue::Table(table) = agent.get_mut() else {
            continue;
        };
        if !table.contains_key("workspace") {
            let path = format!("~/.switchboard/agents/{}", name.get_ref());
            table.insert(
                Spanned::new(span.clone(), "workspace".into()),
                Spanned::new(span.clone(), DeValue::String(path.into())),
            );
        }
        for (key, why) in DAEMON_KEYS {
            if let Some(value) = table.get(*key) {
                return Err((
                    value.span(),
                    format!("agents.{}.{key}", name.get_ref()),
                    format!("an agent cannot set this: {why}"),
                ));
            }
        }
        for (key, value) in base.iter() {
            let key_text: &str = key.get_ref();
            let daemon = DAEMON_KEYS.iter().any(|(name, _)| *name == key_text);
            if key_text != "workspace" && !daemon && !table.contains_key(key_text) {
                table.insert(key.clone(), value.clone());
            }
        }
    }
    Ok(())
}

/// One agent as the config describes it: its name, its section and where it keeps what.
pub struct AgentSpec<'a> {
    /// `default` for `[agent]`.
    pub name: AgentName,
    /// Its section (the inherited keys filled in).
    pub section: &'a AgentSection,
    /// Its section's dotted key: `agent` or `agents.NAME`.
    pub key: String,
    /// Its workspace.
    pub workspace: PathBuf,
    /// Where its sessions are kept (`sessions/` in it).
    pub state_dir: PathBuf,
    /// Where its table is in the file (`None` for `[agent]`).
    pub span: Option<std::ops::Range<usize>>,
}

impl AgentSection {
    /// Checks an agent's section (`key`: `agent` or `agents.NAME`).
    pub fn validate(&self, key: &str, source: &Source) -> Result<(), ConfigError> {
        let agent = self;
        let at_least = |value: &Spanned<usize>, min: usize, name: &str| {
            if *value.get_ref() < min {
                Err(source.error_at(
                    Some(value.span()),
                    format!("{key}.{name}"),
                    format!("must be at least {min}, got {}", value.get_ref()),
                ))
            } else {
                Ok(())
            }
        };
        at_least(&agent.max_iterations, 1, "max_iterations")?;
        at_least(&agent.history_limit, 4, "history_limit")?;
        at_least(&agent.max_concurrent_turns, 1, "max_concurrent_turns")?;
        if let Some(subagents) = &agent.max_subagent_turns {
            let max = *agent.max_concurrent_turns.get_ref();
            // With two slots or more, one is always left to the chats' own turns.
            let most = if max > 1 { max - 1 } else { 1 };
            if !(1..=most).contains(subagents.get_ref()) {
                return Err(source.error_at(
                    Some(subagents.span()),
                    format!("{key}.max_subagent_turns"),
                    format!(
                        "must be from 1 to {most} (max_concurrent_turns {max}, less one for \
                         the chats' own turns), got {}",
                        subagents.get_ref()
                    ),
                ));
            }
        }
        at_least(&agent.max_queued_messages, 1, "max_queued_messages")?;
        let mut timeouts = vec![
            (&agent.tool_timeout_secs, "tool_timeout_secs"),
            (&agent.idle_timeout_secs, "idle_timeout_secs"),
            (&agent.approvals.timeout_secs, "approvals.timeout_secs"),
        ];
        if let Some(value) = &agent.turn_timeout_secs {
            timeouts.push((value, "turn_timeout_secs"));
        }
        for (value, name) in timeouts {
            positive_seconds(*value.get_ref()).map_err(|message| {
                source.error_at(Some(value.span()), format!("{key}.{name}"), message)
            })?;
        }
        turn::validate(agent, key, source)
    }
}

/// `[agent]` and each `[agents.NAME]`.
pub type AgentSections = BTreeMap<String, Spanned<AgentSection>>;

/// Every agent, the default first; `path` makes a path of the config whole.
pub fn specs<'a>(
    agent: &'a AgentSection,
    agents: &'a AgentSections,
    path: impl Fn(&str) -> PathBuf,
) -> Vec<AgentSpec<'a>> {
    let state_dir = path(&agent.state_dir);
    let mut specs = vec![AgentSpec {
        name: AgentName::default(),
        section: agent,
        key: "agent".into(),
        workspace: path(&agent.workspace),
        state_dir: state_dir.clone(),
        span: None,
    }];
    for (name, section) in agents {
        specs.push(AgentSpec {
            name: AgentName::from(name.as_str()),
            section: section.get_ref(),
            key: format!("agents.{name}"),
            workspace: path(&section.get_ref().workspace),
            state_dir: state_dir.join("agents").join(name),
            span: Some(section.span()),
        });
    }
    specs
}

/// The bindings, as the dispatcher reads them.
pub fn bindings(sections: &[Spanned<BindingSection>]) -> Vec<Binding> {
    sections
        .iter()
        .map(|binding| {
            let binding = binding.get_ref();
            Binding {
                agent: AgentName::from(binding.agent.get_ref().as_str()),
                channel: binding.channel.as_deref().map(ChannelName::from),
                chat: binding.chat.as_ref().map(|id| ChatId::from(id.0.as_str())),
                sender: binding
                    .sender
                    .as_ref()
                    .map(|id| SenderId::from(id.0.as_str())),
            }
        })
        .collect()
}

/// Checks the agents' names and workspaces (`specs`) and the bindings.
pub fn validate_agents(
    specs: &[AgentSpec<'_>],
    bindings: &[Spanned<BindingSection>],
    source: &Source,
) -> Result<(), ConfigError> {
    for spec in &specs[1..] {
        let name = spec.key.strip_prefix("agents.").unwrap_or(&spec.key);
        let valid = name.len() <= MAX_NAME
            && name.starts_with(|c: char| c.is_ascii_lowercase() || c.is_ascii_digit())
            && name
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '_');
        if !valid || name == AgentName::DEFAULT {
            let why = if valid {
                "`default` is the agent of [agent]; give this one another name".to_owned()
            } else {
                format!(
                    "an agent's name is 1 to {MAX_NAME} lowercase letters, digits, `-` \
                         and `_`, starting with a letter or digit"
                )
            };
            return Err(source.error_at(spec.span.clone(), spec.key.clone(), why));
        }
    }
    for (index, spec) in specs.iter().enumerate() {
        for other in &specs[..index] {
            let (mine, theirs) = (lexical(&spec.workspace), lexical(&other.workspace));
            if mine.starts_with(&theirs) || theirs.starts_with(&mine) {
                let how = if mine == theirs { "is" } else { "overlaps" };
                return Err(source.error_at(
                    spec.span.clone(),
                    format!("{}.workspace", spec.key),
                    format!(
                        "{} {how} the workspace of the agent `{}` ({}): each agent needs a \
                             workspace of its own, not inside another's",
                        spec.workspace.display(),
                        other.name,
                        other.workspace.display()
                    ),
                ));
            }
        }
    }
    let known: Vec<&str> = specs.iter().map(|spec| spec.name.as_str()).collect();
    for (index, binding) in bindings.iter().enumerate() {
        let key = format!("bindings[{index}]");
        let section = binding.get_ref();
        let agent = section.agent.get_ref();
        if !known.contains(&agent.as_str()) {
            return Err(source.error_at(
                Some(section.agent.span()),
                format!("{key}.agent"),
                format!(
                    "no agent is called `{agent}`: the agents are {} (define others as \
                         [agents.NAME])",
                    known.join(", ")
                ),
            ));
        }
        let problem = match (&section.channel, &section.chat, &section.sender) {
            (None, None, None) => Some(
                "a binding needs a channel, a chat or a sender to match (the default agent \
                     already answers every other chat)",
            ),
            (None, Some(_), _) => {
                Some("a chat id means nothing without its channel: add channel = \"…\"")
            }
            _ => None,
        };
        if let Some(problem) = problem {
            return Err(source.error_at(Some(binding.span()), key, problem.into()));
        }
    }
    Ok(())
}

/// A path with `.` and `..` taken out, as written (the directories may not exist yet).
fn lexical(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for component in path.components() {
        match component {
            Component::CurDir => {}
            Component::ParentDir => {
                out.pop();
            }
            other => out.push(other),
        }
    }
    out
}
