//! Chat commands, handled before the agent loop.

/// A command a person can type in any chat.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
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
}

impl Command {
    /// Parses a message that is exactly a command (`/stop`, `/stop@MyBot`, ` /NEW `).
    pub fn parse(text: &str) -> Option<Self> {
        let word = text.trim();
        let word = word.strip_prefix('/')?;
        let word = word.split_once('@').map_or(word, |(command, _bot)| command);
        match word.to_ascii_lowercase().as_str() {
            "new" | "reset" => Some(Self::New),
            "stop" => Some(Self::Stop),
            "help" | "start" => Some(Self::Help),
            "status" => Some(Self::Status),
            "approve" | "yes" => Some(Self::Approve),
            "deny" | "no" => Some(Self::Deny),
            _ => None,
        }
    }
}

/// The command a message is: only a person's text is read as one (a scheduled job whose
/// message is `/new` is a message to the model, not a command).
pub(crate) fn command_of(message: &switchboard_core::InboundMessage) -> Option<Command> {
    message
        .origin
        .is_person()
        .then(|| Command::parse(&message.content))
        .flatten()
}

/// The reply to `/help`.
pub const HELP: &str = "Commands:\n\
/new — forget this chat's history and start a new session\n\
/stop — stop the answer in progress\n\
/status — what this session holds\n\
/approve, /deny — answer a request to run a tool\n\
/help — this list\n\
Anything else goes to the agent.";

#[cfg(test)]
mod tests {
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
}
