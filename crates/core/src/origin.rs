//! [`Origin`]: where a piece of work comes from — a person, a scheduled job, the heartbeat.
//! Every inbound message carries one, and so does the user message it becomes in history,
//! so that the model is never told "the user said" of something nobody typed just now, and
//! so that only a person's text is read as a command or as the answer to a question.

use serde::{Deserialize, Serialize};

/// The answer that means "nothing to say" to a heartbeat or a scheduled run in a session of
/// its own: such an answer (or an empty one) is not posted, and the run is recorded quiet.
pub const QUIET_TOKEN: &str = "HEARTBEAT_OK";

/// How the id of a scheduled run's message begins (`sched:<job>:<due>`): what a channel
/// knows a scheduled run's frames by, to mark them as such for the person.
pub const SCHEDULED_RUN_PREFIX: &str = "sched:";

/// Whether an answer says nothing: empty, or the [`QUIET_TOKEN`] (give or take space,
/// punctuation and markdown around it).
pub fn is_quiet(answer: &str) -> bool {
    let bare = answer.trim_matches(|c: char| !c.is_ascii_alphanumeric() && c != '_');
    bare.is_empty() || bare == QUIET_TOKEN
}

/// Where an inbound message (and the user message it becomes) comes from.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Origin {
    /// A person wrote it in the chat.
    #[default]
    Person,
    /// A scheduled job ran: its message, on its schedule.
    Schedule {
        /// The job's id.
        job: String,
        /// The job's name.
        name: String,
    },
    /// The heartbeat: a regular look at whether anything needs saying.
    Heartbeat,
    /// A task an agent handed one of its sub-agents (the `spawn` tool): what the child
    /// session is asked to do.
    Delegated {
        /// The session that handed it over.
        parent: String,
    },
    /// What the sub-agents a session started found: their results, back in that session.
    SubAgents {
        /// The child sessions whose results these are.
        children: Vec<String>,
    },
}

impl Origin {
    /// Whether a person wrote it (the default).
    pub fn is_person(&self) -> bool {
        matches!(self, Self::Person)
    }

    /// The line the model reads before such a message, saying what it is; `None` for a
    /// person's.
    pub fn preamble(&self) -> Option<String> {
        match self {
            Self::Person => None,
            Self::Schedule { job, name } => Some(format!(
                "[Scheduled task \"{name}\" (job {job}), run on its schedule: the person set it \
                 up earlier and did not type this now. Do what it asks; your answer is sent to \
                 them.]"
            )),
            Self::Heartbeat => Some(format!(
                "[Heartbeat: a regular check, not a message from the person. Follow the \
                 instructions below. If nothing needs their attention, answer exactly \
                 {QUIET_TOKEN} and nothing is sent.]"
            )),
            Self::Delegated { parent } => Some(format!(
                "[A task from the agent of session {parent}: you are its sub-agent. Do it with \
                 your tools and answer with what you found — your answer goes back to that \
                 agent, not to a person, and nobody can be asked anything.]"
            )),
            Self::SubAgents { children } => Some(format!(
                "[The results of the sub-agents you started with `spawn` ({}), not a message \
                 from the person. Answer the person with what they found.]",
                children.join(", ")
            )),
        }
    }

    /// A few words for logs, metrics and lists: `person`, `schedule`, `heartbeat`,
    /// `delegated`, `sub_agents`.
    pub fn as_str(&self) -> &'static str {
        match self {
            Self::Person => "person",
            Self::Schedule { .. } => "schedule",
            Self::Heartbeat => "heartbeat",
            Self::Delegated { .. } => "delegated",
            Self::SubAgents { .. } => "sub_agents",
        }
    }

    /// Serde's `skip_serializing_if` for fields that default to a person.
    pub fn is_default(origin: &Self) -> bool {
        origin.is_person()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_quiet_token_is_quiet_with_what_models_wrap_it_in_and_nothing_else_is() {
        for quiet in [
            "",
            "  ",
            "HEARTBEAT_OK",
            " HEARTBEAT_OK.\n",
            "**HEARTBEAT_OK**",
            "`HEARTBEAT_OK`",
        ] {
            assert!(is_quiet(quiet), "{quiet:?}");
        }
        for said in [
            "HEARTBEAT_OK but the build broke",
            "The build broke.",
            "heartbeat ok?",
        ] {
            assert!(!is_quiet(said), "{said:?}");
        }
    }

    #[test]
    fn a_person_says_nothing_more_and_the_others_say_what_they_are() {
        assert_eq!(Origin::Person.preamble(), None);
        let job = Origin::Schedule {
            job: "7".into(),
            name: "tea".into(),
        };
        let preamble = job.preamble().expect("a preamble");
        assert!(
            preamble.contains("Scheduled task \"tea\" (job 7)"),
            "{preamble}"
        );
        assert!(preamble.contains("did not type this now"), "{preamble}");
        assert!(
            Origin::Heartbeat
                .preamble()
                .is_some_and(|text| text.contains("answer exactly HEARTBEAT_OK"))
        );
        // Stored compactly, and a person's origin not at all (see ChatMessage).
        assert_eq!(
            serde_json::to_string(&job).expect("json"),
            r#"{"kind":"schedule","job":"7","name":"tea"}"#
        );
    }
}
