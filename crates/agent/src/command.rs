//! Chat commands, handled before the agent loop: read by the one table of them
//! ([`COMMANDS`](switchboard_core::COMMANDS), in core), which `/help` and the platforms' menus
//! are made from too, and answered here ([`Command::answer`]) from what the agent holds.

use switchboard_core::{ChannelName, ChatId, CommandSpec, SessionKey, command_named};
use switchboard_sessions::Session;

use crate::agent::Agent;
use crate::choices::Choices;
use switchboard_scheduler::{Asker, JobAction};

/// A command a person can type in any chat.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Command {
    /// `/new`: forget this chat's history and start afresh.
    New,
    /// `/stop`: cancel the running turn.
    Stop,
    /// `/help`: list the commands.
    Help,
    /// `/status`: what the session holds and whether a turn runs.
    Status,
    /// `/approve`: consent to the tool call the turn waits on.
    Approve,
    /// `/deny`: refuse the tool call the turn waits on.
    Deny,
    /// `/usage`: what this chat spent today and this month.
    Usage,
    /// `/model` (the models and the chat's), `/model NAME` (switch), `/model default`.
    Model(Option<String>),
    /// `/jobs`, `/jobs rm ID`, `/jobs pause ID`, `/jobs resume ID`, `/jobs run ID`: this
    /// chat's scheduled jobs. `None`: `/jobs` with words it does not know (answered with how
    /// to use it).
    Jobs(Option<JobAction>),
    /// `/memory QUERY`: what the agent's memory holds of it (`""`: how to use it).
    Memory(String),
}

impl Command {
    /// Parses a message that is exactly a command of [`COMMANDS`](switchboard_core::COMMANDS) (`/stop`, `/stop@MyBot`,
    /// ` /NEW `, an alias), with no more words after it than the command takes.
    pub fn parse(text: &str) -> Option<Self> {
        let text = text.trim().strip_prefix('/')?;
        let (word, rest) = text
            .split_once(char::is_whitespace)
            .map_or((text, ""), |(word, rest)| (word, rest.trim()));
        let word = word.split_once('@').map_or(word, |(command, _bot)| command);
        let spec = command_named(word)?;
        let words = rest.split_whitespace().count();
        match spec.name {
            // `/jobs` with words it does not know is answered with how to use it.
            "jobs" => return Some(Self::Jobs(jobs_action(rest))),
            _ if words > spec.takes.map_or(0, |takes| takes.words) => return None,
            _ => {}
        }
        Some(match spec.name {
            "new" => Self::New,
            "stop" => Self::Stop,
            "status" => Self::Status,
            "approve" => Self::Approve,
            "deny" => Self::Deny,
            "model" => Self::Model(rest.split_whitespace().next().map(str::to_owned)),
            "usage" => Self::Usage,
            "memory" => Self::Memory(rest.to_owned()),
            "help" => Self::Help,
            // A command of the table nothing here handles: a test fails first.
            _ => return None,
        })
    }

    /// Its entry in [`COMMANDS`](switchboard_core::COMMANDS).
    pub fn spec(&self) -> &'static CommandSpec {
        let name = match self {
            Self::New => "new",
            Self::Stop => "stop",
            Self::Help => "help",
            Self::Status => "status",
            Self::Approve => "approve",
            Self::Deny => "deny",
            Self::Usage => "usage",
            Self::Model(_) => "model",
            Self::Jobs(_) => "jobs",
            Self::Memory(_) => "memory",
        };
        match command_named(name) {
            Some(spec) => spec,
            None => unreachable!("every command is in the table (tested)"),
        }
    }
}

/// Where a command was typed: a chat of a channel (`/jobs` and `/status` look at its jobs), or
/// none (the terminal).
pub type Typed<'a> = Option<(&'a ChannelName, &'a ChatId)>;

impl Command {
    /// The answer to this command typed in `session` of `agent` (at `typed`). `/stop`,
    /// `/approve` and `/deny` that reach here have nothing to act on: a running turn or a
    /// waiting question takes them before (see the dispatcher).
    pub async fn answer(&self, agent: &Agent, session: &mut Session, typed: Typed<'_>) -> String {
        match self {
            Self::New => match agent.reset_session(session).await {
                Ok(()) => "Started a new session.".to_owned(),
                Err(err) => format!("Could not start a new session: {err}"),
            },
            Self::Help => switchboard_core::commands_help(),
            Self::Status => {
                let mut text = status(agent, session).await;
                if let Some((channel, chat)) = typed
                    && let Some(jobs) = jobs_status(agent, channel, chat).await
                {
                    text = format!("{text}\n{jobs}");
                }
                if let Some(children) = children_status(agent, session.key()) {
                    text = format!("{text}\n{children}");
                }
                text
            }
            Self::Usage => usage(agent, session.key()).await,
            Self::Model(wanted) => model(agent, session.key(), wanted.as_deref()).await,
            Self::Jobs(action) => match typed {
                Some((channel, chat)) => jobs(agent, channel, chat, action.as_ref()).await,
                None => "Scheduled jobs belong to the daemon's chats: `switchboard cron list` \
                         shows them."
                    .to_owned(),
            },
            Self::Memory(query) => memory(agent, query).await,
            Self::Stop => "Nothing to stop.".to_owned(),
            Self::Approve | Self::Deny => "Nothing is waiting for your approval.".to_owned(),
        }
    }
}

/// The answer to `/memory QUERY`: the hits, one a line, as the `memory_search` tool gives them.
async fn memory(agent: &Agent, query: &str) -> String {
    let Some(memory) = agent.memory() else {
        return "Memory search is off: set `[memory] enabled = true` in the config \
                (docs/configuration.md, \"Memory\")."
            .to_owned();
    };
    if query.trim().is_empty() {
        return "Say what to find: `/memory locker code`, `/memory \"exact phrase\"`.".to_owned();
    }
    let mut search = switchboard_core::MemoryQuery::new(query, switchboard_core::MemoryScope::All);
    search.limit = memory.max_results;
    match memory.memory.search(agent.name(), search).await {
        Ok(hits) => switchboard_core::memory_lines(query, &hits),
        Err(err) => format!("The search failed: {err}"),
    }
}

/// The answer to `/status`: what the session holds and has spent, and the model.
async fn status(agent: &Agent, session: &Session) -> String {
    let model = match agent.chosen_model(session.key()).await {
        Some(model) => model,
        None => agent.llm().model().to_owned(),
    };
    let usage = session.usage();
    let count = session.len();
    let plural = if count == 1 { "" } else { "s" };
    let name = if agent.name().is_default() {
        String::new()
    } else {
        format!("Agent {}. ", agent.name())
    };
    format!(
        "{name}Session {}: {count} message{plural} in history (limit {}); {} tokens in, \
         {} out; model {}.",
        session.key(),
        agent.config().history_limit,
        usage.input_tokens,
        usage.output_tokens,
        model,
    )
}

/// One line for `/status` about the sub-agents `session` started that run now.
fn children_status(agent: &Agent, session: &SessionKey) -> Option<String> {
    let running = agent.spawner()?.running(agent.name(), session);
    if running.is_empty() {
        return None;
    }
    let list: Vec<String> = running
        .iter()
        .map(|(child, label, took)| format!("{child} \"{label}\" ({} s)", took.as_secs()))
        .collect();
    let count = running.len();
    let plural = if count == 1 { "" } else { "s" };
    Some(format!(
        "{count} sub-agent{plural} running: {} (/stop stops them).",
        list.join(", ")
    ))
}

/// One line for `/status` about the chat's scheduled jobs; `None` when it has none.
async fn jobs_status(agent: &Agent, channel: &ChannelName, chat: &ChatId) -> Option<String> {
    let jobs = agent.jobs()?;
    let asker = Asker::Chat(channel.clone(), chat.clone());
    let list = jobs.list(&asker).await.ok()?;
    let next = list
        .iter()
        .filter(|job| job.enabled)
        .filter_map(|job| job.next_due)
        .min();
    let count = list.len();
    (count > 0).then(|| {
        let plural = if count == 1 { "" } else { "s" };
        match next {
            Some(next) => {
                format!("{count} scheduled job{plural}; the next runs at {next} (/jobs).")
            }
            None => format!("{count} scheduled job{plural}, none due (/jobs)."),
        }
    })
}

/// The answer to `/usage` in `session`.
async fn usage(agent: &Agent, session: &SessionKey) -> String {
    match agent.spending() {
        Some(spending) => spending.report(session).await,
        None => "Usage is not recorded here.".to_owned(),
    }
}

/// The answer to `/jobs` in the chat `(channel, chat)`.
async fn jobs(
    agent: &Agent,
    channel: &ChannelName,
    chat: &ChatId,
    action: Option<&JobAction>,
) -> String {
    let (Some(jobs), Some(action)) = (agent.jobs(), action) else {
        return match agent.jobs() {
            None => "Scheduled jobs are off here (scheduler.enabled = false).".into(),
            Some(_) => JOBS_USAGE.into(),
        };
    };
    let asker = Asker::Chat(channel.clone(), chat.clone());
    jobs.act(&asker, action).await.unwrap_or_else(|why| why)
}

/// The answer to `/model` (`None`: the list), `/model NAME` and `/model default` in
/// `session`.
async fn model(agent: &Agent, session: &SessionKey, wanted: Option<&str>) -> String {
    let models = agent.models();
    let own = models.default_chain().model().to_owned();
    let list = || {
        let mut names: Vec<&str> = vec![own.as_str()];
        names.extend(models.names().filter(|name| *name != own));
        names.join(", ")
    };
    if models.names().next().is_none() {
        return format!(
            "This chat uses {own}, the only model here (more with [llm] models = [...])."
        );
    }
    let chosen = agent.chosen_model(session).await;
    let Some(wanted) = wanted else {
        let using = chosen.as_deref().unwrap_or(&own);
        return format!(
            "This chat uses {using}. Models: {} ({own} is the default). /model NAME \
             switches; /model default goes back.",
            list()
        );
    };
    let choice = match wanted {
        "default" => None,
        name if name == own => None,
        name if models.offers(name) => Some(name.to_owned()),
        name => {
            return format!(
                "There is no model `{name}` here. The models are: {}.",
                list()
            );
        }
    };
    let using = choice.clone().unwrap_or_else(|| own.clone());
    match agent
        .choices()
        .set(session, Choices { model: choice })
        .await
    {
        Ok(()) => format!("This chat now uses {using}."),
        Err(err) => {
            tracing::error!(session = %session, error = %err, "could not keep a chat's model");
            format!("Could not keep the choice: {err}")
        }
    }
}

/// The action of `/jobs <rest>`; `None` when `rest` is not one.
fn jobs_action(rest: &str) -> Option<JobAction> {
    let mut words = rest.split_whitespace();
    let verb = words.next().map(str::to_ascii_lowercase);
    let id = words.next().map(str::to_owned);
    if words.next().is_some() {
        return None;
    }
    match (verb.as_deref(), id) {
        (None | Some("list" | "ls"), None) => Some(JobAction::List),
        (Some("rm" | "remove" | "delete"), Some(id)) => Some(JobAction::Remove(id)),
        (Some("pause"), Some(id)) => Some(JobAction::Pause(id)),
        (Some("resume"), Some(id)) => Some(JobAction::Resume(id)),
        (Some("run"), Some(id)) => Some(JobAction::Run(id)),
        _ => None,
    }
}

/// The reply to `/jobs` with words it does not know.
pub const JOBS_USAGE: &str = "Usage: /jobs — this chat's scheduled jobs; /jobs rm ID, \
/jobs pause ID, /jobs resume ID, /jobs run ID (now, once). Ask the agent to schedule one.";

/// The command a message is: only a person's text is read as one (a scheduled job whose
/// message is `/new` is a message to the model, not a command).
pub(crate) fn command_of(message: &switchboard_core::InboundMessage) -> Option<Command> {
    message
        .origin
        .is_person()
        .then(|| Command::parse(&message.content))
        .flatten()
}

#[cfg(test)]
mod tests {
    use switchboard_core::COMMANDS;

    use super::*;

    #[test]
    fn commands_parse_with_case_space_and_bot_suffix() {
        assert_eq!(Command::parse("/new"), Some(Command::New));
        assert_eq!(Command::parse("  /STOP "), Some(Command::Stop));
        assert_eq!(Command::parse("/help@my_bot"), Some(Command::Help));
        assert_eq!(Command::parse("/status"), Some(Command::Status));
        assert_eq!(Command::parse("/approve"), Some(Command::Approve));
        assert_eq!(Command::parse("/Deny@my_bot"), Some(Command::Deny));
    }

    #[test]
    fn jobs_takes_an_action_and_an_id() {
        assert_eq!(
            Command::parse("/jobs"),
            Some(Command::Jobs(Some(JobAction::List)))
        );
        assert_eq!(
            Command::parse("/jobs@my_bot  rm  k3x"),
            Some(Command::Jobs(Some(JobAction::Remove("k3x".into()))))
        );
        assert_eq!(
            Command::parse("/JOBS Pause a1"),
            Some(Command::Jobs(Some(JobAction::Pause("a1".into()))))
        );
        assert_eq!(
            Command::parse("/jobs run a1"),
            Some(Command::Jobs(Some(JobAction::Run("a1".into()))))
        );
        assert_eq!(Command::parse("/jobs rm"), Some(Command::Jobs(None)));
        assert_eq!(Command::parse("/jobs dance now"), Some(Command::Jobs(None)));
    }

    #[test]
    fn model_takes_a_name_or_nothing() {
        assert_eq!(Command::parse("/model"), Some(Command::Model(None)));
        assert_eq!(
            Command::parse("/model@bot  gpt-4o "),
            Some(Command::Model(Some("gpt-4o".into())))
        );
        assert_eq!(Command::parse("/model a b"), None);
    }

    #[test]
    fn other_text_is_not_a_command() {
        assert_eq!(Command::parse("stop"), None);
        assert_eq!(Command::parse("/stop now please"), None);
        assert_eq!(Command::parse("/unknown"), None);
        assert_eq!(Command::parse(""), None);
    }

    #[test]
    fn only_a_persons_text_is_a_command() {
        use switchboard_core::{ChannelName, ChatId, InboundMessage, Origin, SenderId};
        let mut message = InboundMessage::text(
            ChannelName::from("websocket"),
            ChatId::from("c"),
            SenderId::from("u"),
            "/new",
        );
        assert_eq!(command_of(&message), Some(Command::New));
        message.origin = Origin::Schedule {
            job: "1".into(),
            name: "reset".into(),
        };
        assert_eq!(command_of(&message), None);
        message.origin = Origin::Heartbeat;
        assert_eq!(command_of(&message), None);
    }

    #[test]
    fn every_command_of_the_table_and_its_aliases_is_handled_here() {
        for spec in &COMMANDS {
            for name in std::iter::once(&spec.name).chain(spec.aliases) {
                let command = Command::parse(&format!("/{name}"))
                    .unwrap_or_else(|| panic!("/{name} is in the table but not handled"));
                assert_eq!(command.spec().name, spec.name);
            }
        }
        // And every command handled is in the table (`spec` names each variant).
        for command in [
            Command::New,
            Command::Stop,
            Command::Help,
            Command::Status,
            Command::Approve,
            Command::Deny,
            Command::Usage,
            Command::Model(None),
            Command::Jobs(None),
        ] {
            assert!(COMMANDS.contains(command.spec()));
        }
    }
}
