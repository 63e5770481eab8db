//! [`Agents`]: the agents of one daemon, and the bindings that say which one answers a
//! chat.
//!
//! `[agent]` is the default agent; each `[agents.NAME]` is another, with a workspace, a
//! session store, a model and tools of its own. A message goes to the agent it names (a
//! scheduled run of a job an agent made, a sub-agent's task or result), else to the agent of
//! the first [`Binding`] that matches its channel, chat and sender, else to the default.
//! Sessions belong to their agent: two agents never share one, even in the same chat.

use std::collections::BTreeMap;
use std::sync::Arc;

use switchboard_core::{AgentName, ChannelName, ChatId, InboundMessage, SenderId};

use crate::agent::Agent;

/// Sends the chats it matches to an agent. Every condition it has must hold; one it does
/// not have holds always.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Binding {
    /// The agent the chats go to.
    pub agent: AgentName,
    /// The channel (`telegram`, `discord`, `websocket`).
    pub channel: Option<ChannelName>,
    /// The chat, within the channel.
    pub chat: Option<ChatId>,
    /// Who wrote the message (a platform's user id).
    pub sender: Option<SenderId>,
}

impl Binding {
    /// Whether a message of `sender` in `chat` of `channel` is bound by this. An unknown
    /// sender (a chat's history asked for without a message) matches no sender condition.
    pub fn matches(&self, channel: &ChannelName, chat: &ChatId, sender: Option<&SenderId>) -> bool {
        self.channel.as_ref().is_none_or(|want| want == channel)
            && self.chat.as_ref().is_none_or(|want| want == chat)
            && self
                .sender
                .as_ref()
                .is_none_or(|want| sender.is_some_and(|sender| sender == want))
    }
}

/// The daemon's agents by name, and how chats are bound to them. Cheap to clone.
#[derive(Clone)]
pub struct Agents {
    inner: Arc<Inner>,
}

struct Inner {
    /// `[agent]`: answers what no binding sends elsewhere.
    default: Arc<Agent>,
    /// Every agent by name, the default among them.
    by_name: BTreeMap<AgentName, Arc<Agent>>,
    /// In the config's order: the first that matches wins.
    bindings: Vec<Binding>,
}

/// A binding to an agent the daemon does not have.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("a binding names the agent `{agent}`, which is not defined (agents: {known})")]
pub struct UnknownAgent {
    /// The name bound to.
    pub agent: AgentName,
    /// The agents there are, comma-separated.
    pub known: String,
}

impl Agents {
    /// One agent, answering every chat.
    pub fn one(agent: Arc<Agent>) -> Self {
        Self::new(agent, [], Vec::new()).unwrap_or_else(|_| unreachable!("no bindings"))
    }

    /// The default agent, the others, and the bindings between chats and them; refused
    /// when a binding names an agent that is not among them.
    pub fn new(
        default: Arc<Agent>,
        others: impl IntoIterator<Item = Arc<Agent>>,
        bindings: Vec<Binding>,
    ) -> Result<Self, UnknownAgent> {
        let mut by_name = BTreeMap::new();
        by_name.insert(default.name().clone(), default.clone());
        for agent in others {
            by_name.insert(agent.name().clone(), agent);
        }
        if let Some(binding) = bindings.iter().find(|b| !by_name.contains_key(&b.agent)) {
            let known: Vec<&str> = by_name.keys().map(AgentName::as_str).collect();
            return Err(UnknownAgent {
                agent: binding.agent.clone(),
                known: known.join(", "),
            });
        }
        Ok(Self {
            inner: Arc::new(Inner {
                default,
                by_name,
                bindings,
            }),
        })
    }

    /// The agent that answers `message` (see the module doc).
    pub fn for_message(&self, message: &InboundMessage) -> &Arc<Agent> {
        if let Some(name) = &message.agent {
            match self.inner.by_name.get(name) {
                Some(agent) => return agent,
                None => tracing::warn!(agent = %name, channel = %message.channel,
                    chat = %message.chat_id, "a message for an agent that is gone; the bindings choose"),
            }
        }
        self.for_chat(&message.channel, &message.chat_id, Some(&message.sender))
    }

    /// The agent bound to `chat` of `channel` for `sender` (the default when no binding
    /// matches).
    pub fn for_chat(
        &self,
        channel: &ChannelName,
        chat: &ChatId,
        sender: Option<&SenderId>,
    ) -> &Arc<Agent> {
        self.inner
            .bindings
            .iter()
            .find(|binding| binding.matches(channel, chat, sender))
            .and_then(|binding| self.inner.by_name.get(&binding.agent))
            .unwrap_or(&self.inner.default)
    }

    /// The agent of that name.
    pub fn get(&self, name: &AgentName) -> Option<&Arc<Agent>> {
        self.inner.by_name.get(name)
    }

    /// The default agent (`[agent]`).
    pub fn default_agent(&self) -> &Arc<Agent> {
        &self.inner.default
    }

    /// Every agent, by name.
    pub fn iter(&self) -> impl Iterator<Item = &Arc<Agent>> {
        self.inner.by_name.values()
    }

    /// How many agents there are.
    pub fn len(&self) -> usize {
        self.inner.by_name.len()
    }

    /// Never: there is always the default agent.
    pub fn is_empty(&self) -> bool {
        false
    }
}

impl From<Arc<Agent>> for Agents {
    fn from(agent: Arc<Agent>) -> Self {
        Self::one(agent)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn binding(
        agent: &str,
        channel: Option<&str>,
        chat: Option<&str>,
        sender: Option<&str>,
    ) -> Binding {
        Binding {
            agent: agent.into(),
            channel: channel.map(ChannelName::from),
            chat: chat.map(ChatId::from),
            sender: sender.map(SenderId::from),
        }
    }

    #[test]
    fn every_condition_of_a_binding_must_hold() {
        let (telegram, chat, alice) = (
            ChannelName::from("telegram"),
            ChatId::from("123"),
            SenderId::from("42"),
        );
        assert!(binding("home", Some("telegram"), None, None).matches(&telegram, &chat, None));
        assert!(!binding("home", Some("discord"), None, None).matches(&telegram, &chat, None));
        assert!(
            binding("home", Some("telegram"), Some("123"), Some("42")).matches(
                &telegram,
                &chat,
                Some(&alice)
            )
        );
        assert!(
            !binding("home", Some("telegram"), Some("123"), Some("43")).matches(
                &telegram,
                &chat,
                Some(&alice)
            )
        );
        assert!(
            !binding("home", None, None, Some("42")).matches(&telegram, &chat, None),
            "an unknown sender matches no sender condition"
        );
        assert!(
            !binding("home", Some("telegram"), Some("124"), None).matches(&telegram, &chat, None)
        );
    }
}
