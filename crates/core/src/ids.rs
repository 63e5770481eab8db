//! Identity newtypes, so a chat id is never passed where a sender id belongs.

use std::fmt;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

macro_rules! string_id {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
        #[serde(transparent)]
        pub struct $name(Arc<str>);

        impl $name {
            /// Wraps a string as this id.
            pub fn new(value: impl Into<Arc<str>>) -> Self {
                Self(value.into())
            }

            /// The id as text.
            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl From<&str> for $name {
            fn from(value: &str) -> Self {
                Self::new(value)
            }
        }

        impl From<String> for $name {
            fn from(value: String) -> Self {
                Self::new(value)
            }
        }
    };
}

string_id!(
    /// The name of a channel adapter: `websocket`, `telegram`, `discord`, `cli`.
    ChannelName
);
string_id!(
    /// A chat within a channel, as the platform names it (a Telegram chat id, a Discord
    /// channel id, a WebSocket client's `chat_id`).
    ChatId
);
string_id!(
    /// Who wrote a message, as the platform names them; checked against allow lists.
    SenderId
);
string_id!(
    /// The key of a session: `<channel>_<chat_id>`. One agent worker runs per key.
    SessionKey
);
string_id!(
    /// The name of an agent of the daemon: `default` for `[agent]`, else the `NAME` of its
    /// `[agents.NAME]`. Each has its own workspace, sessions and memory.
    AgentName
);

impl AgentName {
    /// The name of the agent `[agent]` describes, which answers every chat no binding
    /// sends elsewhere.
    pub const DEFAULT: &'static str = "default";

    /// Whether this is the default agent.
    pub fn is_default(&self) -> bool {
        self.as_str() == Self::DEFAULT
    }
}

impl Default for AgentName {
    fn default() -> Self {
        Self::from(Self::DEFAULT)
    }
}

string_id!(
    /// A message's id on its platform, unique within its chat (a Telegram message id, a
    /// Discord message id, the id a WebSocket client gave its message).
    MessageId
);

impl SessionKey {
    /// The key of the session that a chat of a channel belongs to.
    pub fn of(channel: &ChannelName, chat_id: &ChatId) -> Self {
        Self::new(format!("{channel}_{chat_id}"))
    }

    /// The channel and chat of this key (channel names hold no `_`; chat ids may).
    pub fn split(&self) -> Option<(ChannelName, ChatId)> {
        let (channel, chat) = self.as_str().split_once('_')?;
        (!channel.is_empty() && !chat.is_empty())
            .then(|| (ChannelName::from(channel), ChatId::from(chat)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn session_key_joins_channel_and_chat() {
        let key = SessionKey::of(&ChannelName::from("websocket"), &ChatId::from("c1"));
        assert_eq!(key.as_str(), "websocket_c1");
        let odd = SessionKey::of(&ChannelName::from("telegram"), &ChatId::from("-100_42"));
        assert_eq!(
            odd.split(),
            Some((ChannelName::from("telegram"), ChatId::from("-100_42")))
        );
        assert_eq!(SessionKey::from("nounderscore").split(), None);
    }

    #[test]
    fn ids_serialize_as_plain_strings() {
        let json = serde_json::to_string(&ChatId::from("42")).expect("serialize");
        assert_eq!(json, "\"42\"");
    }
}
