//! [`Approvals`]: the hook that asks the person before chosen tool calls run.
//!
//! The config names tools (every call needs consent) and command patterns (an `exec` call
//! whose command matches one needs consent). The turn pauses on such a call; the chat gets
//! "run `<tool>` with `<args>`? /approve or /deny"; the answer resumes the same turn.
//! Anything but `/approve` is a denial (the model reads what the person wrote instead), as
//! is silence until the timeout. Nothing runs before consent.

use std::time::Duration;

use async_trait::async_trait;
use regex::RegexSet;
use serde_json::Value;
use switchboard_core::{Awaiting, ToolCall};
use switchboard_tools::matches_name;

use crate::command::Command;
use crate::hooks::{Approval, Hook, TurnInfo};

/// How much of a call's arguments the question shows.
const SHOWN_ARGS: usize = 400;

/// Asks the person before the configured tool calls run.
pub struct Approvals {
    tools: Vec<String>,
    commands: RegexSet,
    timeout: Duration,
}

impl Approvals {
    /// Consent for every call of `tools`, and for `exec` calls whose command matches one
    /// of `command_patterns` (regular expressions, searched anywhere in the command);
    /// no answer within `timeout` is a denial.
    pub fn new(
        tools: Vec<String>,
        command_patterns: &[String],
        timeout: Duration,
    ) -> Result<Self, regex::Error> {
        Ok(Self {
            tools,
            commands: RegexSet::new(command_patterns)?,
            timeout,
        })
    }

    fn needs_consent(&self, call: &ToolCall, args: &Value) -> bool {
        self.tools
            .iter()
            .any(|pattern| matches_name(pattern, &call.name))
            || (call.name == "exec"
                && args["command"]
                    .as_str()
                    .is_some_and(|command| self.commands.is_match(command)))
    }
}

/// The call as the question shows it: `exec`'s command as it is, other arguments as
/// compact JSON, cut at a few hundred characters.
fn shown(call: &ToolCall, args: &Value) -> String {
    let text = match args["command"].as_str() {
        Some(command) if call.name == "exec" => command.to_owned(),
        _ => args.to_string(),
    };
    let mut cut: String = text.chars().take(SHOWN_ARGS).collect();
    if cut.len() < text.len() {
        cut.push('…');
    }
    cut.replace('`', "'")
}

#[async_trait]
impl Hook for Approvals {
    async fn approve_tool(&self, turn: TurnInfo<'_>, call: &ToolCall, args: &Value) -> Approval {
        if !self.needs_consent(call, args) {
            return Approval::Approve;
        }
        let Some(user) = turn.user else {
            return Approval::Deny(format!(
                "`{}` needs the user's approval and there is no chat to ask",
                call.name
            ));
        };
        let secs = self.timeout.as_secs();
        let question = format!(
            "Run `{}` with `{}`? Reply /approve or /deny (no answer within {secs} s counts as \
             /deny).",
            call.name,
            shown(call, args)
        );
        let answer = user
            .0
            .ask(&question, Awaiting::Approval, self.timeout)
            .await;
        let verdict = match answer.as_deref().map(|a| (a, Command::parse(a))) {
            Some((_, Some(Command::Approve))) => Approval::Approve,
            Some((_, Some(Command::Deny))) => Approval::Deny("the user denied it".into()),
            Some((text, _)) => Approval::Deny(format!(
                "the user did not approve it; they wrote: {}",
                text.chars().take(500).collect::<String>()
            )),
            None => Approval::Deny(format!(
                "the user did not approve it within {secs} s (counted as denied)"
            )),
        };
        tracing::info!(session = %turn.session, tool = %call.name,
            approved = verdict == Approval::Approve, "tool approval answered");
        verdict
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn call(name: &str) -> ToolCall {
        ToolCall {
            id: "c".into(),
            name: name.into(),
            arguments: String::new(),
            signature: None,
        }
    }

    #[test]
    fn tool_patterns_match_with_stars() {
        for (pattern, name, matches) in [
            ("write_file", "write_file", true),
            ("write_file", "write_files", false),
            ("github__*", "github__create_issue", true),
            ("github__*", "gitlab__create_issue", false),
            ("*__delete_*", "github__delete_repo", true),
            ("*__delete_*", "github__create", false),
            ("a*b*c", "abc", true),
            ("a*b*c", "aXbYc", true),
            ("a*b*c", "acb", false),
            ("ab*ba", "aba", false),
            ("*", "anything", true),
        ] {
            assert_eq!(matches_name(pattern, name), matches, "{pattern} ~ {name}");
        }
    }

    #[test]
    fn listed_tools_and_matching_commands_need_consent() {
        let approvals = Approvals::new(
            vec!["write_file".into()],
            &[r"\brm\b".into(), "^git push".into()],
            Duration::from_secs(60),
        )
        .expect("patterns");
        assert!(approvals.needs_consent(&call("write_file"), &json!({})));
        assert!(!approvals.needs_consent(&call("read_file"), &json!({})));
        for command in ["rm -rf build", "cd x && rm a", "git push origin"] {
            assert!(approvals.needs_consent(&call("exec"), &json!({ "command": command })));
        }
        for command in ["ls", "git status", "echo rmdir"] {
            assert!(!approvals.needs_consent(&call("exec"), &json!({ "command": command })));
        }
    }

    #[test]
    fn the_question_shows_the_command_or_short_arguments() {
        assert_eq!(
            shown(&call("exec"), &json!({"command": "rm `x`"})),
            "rm 'x'"
        );
        let long = "a".repeat(1000);
        let text = shown(&call("write_file"), &json!({ "content": long }));
        assert!(text.chars().count() <= SHOWN_ARGS + 1 && text.ends_with('…'));
    }
}
