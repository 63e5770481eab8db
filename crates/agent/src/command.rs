//! Chat commands, handled before the agent loop: read by the one table of them
//! ([`COMMANDS`](switchboard_core::COMMANDS), in core), which `/help` and the platforms' menus are made from too.

use switchboard_core::{CommandSpec, command_named};

use crate::scheduler::JobAction;

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
        };
        match command_named(name) {
            Some(spec) => spec,
            None => unreachable!("every command is in the table (tested)"),
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
