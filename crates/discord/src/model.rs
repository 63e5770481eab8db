//! The parts of Discord's payloads the channel reads, and nothing else: a message (who,
//! where, what, files, what it replies to) and the gateway intents. Fields Discord adds or
//! leaves out do not break reading; ids (snowflakes, sent as strings) are numbers here.
//!
//! Why not serenity's model: deserializing its `Message` compiles readers for every nested
//! type (embeds, components, polls, members, …) — megabytes of binary the daemon keeps
//! mapped, against the footprint target — and refuses a message that lacks a field it
//! requires.

use serde::{Deserialize, Deserializer};

/// Gateway intents: server messages.
pub const GUILD_MESSAGES: u64 = 1 << 9;
/// Gateway intents: direct messages.
pub const DIRECT_MESSAGES: u64 = 1 << 12;
/// Gateway intents: the text of messages (privileged: enabled on the developer portal).
pub const MESSAGE_CONTENT: u64 = 1 << 15;

/// A user (or bot).
#[derive(Clone, Debug, Default, Deserialize)]
pub(crate) struct User {
    #[serde(deserialize_with = "snowflake")]
    pub(crate) id: u64,
    #[serde(default)]
    pub(crate) username: String,
    #[serde(default)]
    pub(crate) global_name: Option<String>,
    #[serde(default)]
    pub(crate) bot: bool,
}

/// A file that came with a message.
#[derive(Clone, Debug, Deserialize)]
pub(crate) struct Attachment {
    #[serde(default)]
    pub(crate) filename: String,
    #[serde(default)]
    pub(crate) size: u64,
    #[serde(default)]
    pub(crate) url: String,
    #[serde(default)]
    pub(crate) content_type: Option<String>,
    /// A voice message's length.
    #[serde(default)]
    pub(crate) duration_secs: Option<f64>,
}

/// What a message replies to.
#[derive(Clone, Debug, Default, Deserialize)]
pub(crate) struct Reference {
    #[serde(default, deserialize_with = "maybe_snowflake")]
    pub(crate) message_id: Option<u64>,
}

/// The message replied to (only its author is read).
#[derive(Clone, Debug, Default, Deserialize)]
pub(crate) struct Replied {
    #[serde(default)]
    pub(crate) author: User,
}

/// A message (`MESSAGE_CREATE`).
#[derive(Clone, Debug, Deserialize)]
pub(crate) struct Message {
    #[serde(deserialize_with = "snowflake")]
    pub(crate) id: u64,
    #[serde(deserialize_with = "snowflake")]
    pub(crate) channel_id: u64,
    #[serde(default, deserialize_with = "maybe_snowflake")]
    pub(crate) guild_id: Option<u64>,
    pub(crate) author: User,
    #[serde(default)]
    pub(crate) content: String,
    #[serde(default)]
    pub(crate) mentions: Vec<User>,
    #[serde(default)]
    pub(crate) attachments: Vec<Attachment>,
    #[serde(default)]
    pub(crate) message_reference: Option<Reference>,
    #[serde(default)]
    pub(crate) referenced_message: Option<Box<Replied>>,
    #[serde(default, deserialize_with = "maybe_snowflake")]
    pub(crate) webhook_id: Option<u64>,
    /// Its flags (a voice message has `1 << 13`).
    #[serde(default)]
    pub(crate) flags: u64,
    /// 0: a message someone wrote; 19: a reply. The rest are system messages.
    #[serde(rename = "type", default)]
    pub(crate) kind: u8,
}

/// A snowflake: a string of digits (or, leniently, a number).
#[derive(Deserialize)]
#[serde(untagged)]
enum Id {
    Text(String),
    Number(u64),
}

fn snowflake<'de, D: Deserializer<'de>>(deserializer: D) -> Result<u64, D::Error> {
    match Id::deserialize(deserializer)? {
        Id::Number(n) => Ok(n),
        Id::Text(text) => text
            .parse()
            .map_err(|_| serde::de::Error::custom(format!("`{text}` is not an id"))),
    }
}

fn maybe_snowflake<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<u64>, D::Error> {
    match Option::<Id>::deserialize(deserializer)? {
        None => Ok(None),
        Some(Id::Number(n)) => Ok(Some(n)),
        Some(Id::Text(text)) => text
            .parse()
            .map(Some)
            .map_err(|_| serde::de::Error::custom(format!("`{text}` is not an id"))),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_message_reads_with_what_it_has_and_ignores_the_rest() {
        let message: Message = serde_json::from_value(json!({
            "id": "5001", "channel_id": "77", "guild_id": null,
            "author": {"id": "42", "username": "ada"},
            "content": "hi", "embeds": [{"title": "ignored"}], "poll": {"anything": 1},
            "message_reference": {"message_id": "4000"},
        }))
        .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            (message.id, message.channel_id, message.author.id),
            (5001, 77, 42)
        );
        assert_eq!(message.guild_id, None);
        assert_eq!(
            message.message_reference.and_then(|r| r.message_id),
            Some(4000)
        );
        assert!(!message.author.bot);
        let broken = serde_json::from_value::<Message>(
            json!({"id": "x", "channel_id": "1", "author": {"id": "2"}}),
        );
        assert!(broken.is_err());
    }
}
