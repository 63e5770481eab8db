//! The chat commands every channel takes, in one table ([`COMMANDS`]): the agent reads a
//! message as one of them by it and answers `/help` from it, and platforms that keep a menu of
//! commands (Discord's slash commands, Telegram's) register it from it — so a command added
//! here is parsed, listed and offered everywhere, and a test fails where it is not handled.

/// A chat command.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CommandSpec {
    /// Its name, typed after `/`.
    pub name: &'static str,
    /// Other names it answers to.
    pub aliases: &'static [&'static str],
    /// What it takes after its name, if anything.
    pub takes: Option<Takes>,
    /// Its line in `/help`, after `/name`.
    pub help: &'static str,
    /// What a platform's menu says of it (at most 100 characters: Discord's limit).
    pub summary: &'static str,
}

/// The words a command takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Takes {
    /// Their name, as a platform's menu asks for them.
    pub name: &'static str,
    /// What they are.
    pub about: &'static str,
    /// How many words at most.
    pub words: usize,
}

/// Every chat command, in the order `/help` lists them.
pub const COMMANDS: [CommandSpec; 10] = [
    CommandSpec {
        name: "new",
        aliases: &["reset"],
        takes: None,
        help: "forget this chat's history and start a new session",
        summary: "Start a new conversation",
    },
    CommandSpec {
        name: "stop",
        aliases: &[],
        takes: None,
        help: "stop the answer in progress",
        summary: "Stop the running turn",
    },
    CommandSpec {
        name: "status",
        aliases: &[],
        takes: None,
        help: "what this session holds",
        summary: "The session's state",
    },
    CommandSpec {
        name: "approve",
        aliases: &["yes"],
        takes: None,
        help: "let the agent run the tool it asked about",
        summary: "Let the agent run the tool it asked about",
    },
    CommandSpec {
        name: "deny",
        aliases: &["no"],
        takes: None,
        help: "refuse the tool the agent asked about",
        summary: "Refuse the tool the agent asked about",
    },
    CommandSpec {
        name: "jobs",
        aliases: &[],
        takes: Some(Takes {
            name: "action",
            about: "rm, pause, resume or run, and a job's id",
            words: 2,
        }),
        help: "this chat's scheduled jobs (/jobs rm|pause|resume|run ID)",
        summary: "This chat's scheduled jobs",
    },
    CommandSpec {
        name: "model",
        aliases: &["models"],
        takes: Some(Takes {
            name: "name",
            about: "the model to switch to, or default",
            words: 1,
        }),
        help: "the models this chat may use; /model NAME switches, /model default goes back",
        summary: "List the models, or switch this chat's",
    },
    CommandSpec {
        name: "usage",
        aliases: &["cost"],
        takes: None,
        help: "what this chat spent today and this month",
        summary: "What this chat cost today and this month",
    },
    CommandSpec {
        name: "memory",
        aliases: &["recall"],
        takes: Some(Takes {
            name: "query",
            about: "words or a \"phrase\" to find in what was said",
            words: 64,
        }),
        help: "find what was said before, in any chat of this agent (/memory QUERY)",
        summary: "Search what was said before",
    },
    CommandSpec {
        name: "help",
        aliases: &["start"],
        takes: None,
        help: "this list",
        summary: "What the agent understands",
    },
];

/// The command named `word` (its name or an alias, any case).
pub fn command_named(word: &str) -> Option<&'static CommandSpec> {
    COMMANDS.iter().find(|spec| {
        spec.name.eq_ignore_ascii_case(word)
            || spec
                .aliases
                .iter()
                .any(|alias| alias.eq_ignore_ascii_case(word))
    })
}

/// The answer to `/help`.
pub fn commands_help() -> String {
    let mut text = String::from("Commands:\n");
    for spec in &COMMANDS {
        text.push_str(&format!("/{} — {}\n", spec.name, spec.help));
    }
    text.push_str("Anything else goes to the agent.");
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_found_by_name_or_alias_and_fit_every_platforms_menu() {
        assert_eq!(command_named("NEW").map(|c| c.name), Some("new"));
        assert_eq!(command_named("reset").map(|c| c.name), Some("new"));
        assert_eq!(command_named("nothing"), None);
        for spec in &COMMANDS {
            // Telegram: 1–32 of a-z, 0-9, _; Discord: the same here, descriptions ≤ 100.
            assert!(
                (1..=32).contains(&spec.name.len())
                    && spec
                        .name
                        .bytes()
                        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_'),
                "{}",
                spec.name
            );
            assert!(
                (1..=100).contains(&spec.summary.chars().count()),
                "{}",
                spec.name
            );
            assert!(commands_help().contains(&format!("/{} — ", spec.name)));
        }
    }
}
