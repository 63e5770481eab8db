//! Discord's messages as switchboard sees them, without a network: whether one is for the
//! agent (the bot's own and other bots' are not; in servers, the guild policy and the
//! allow lists of servers and channels decide), with the bot's mentions taken out of the
//! text.

use switchboard_adapter::{Arrival, FileRef, Incoming};

use crate::model::Message;

use crate::config::GuildPolicy;

/// The commands a message may be, understood in servers without a mention.
const COMMANDS: [&str; 4] = ["/new", "/stop", "/help", "/status"];

/// Who the bot is, and where it answers.
#[derive(Clone, Debug, Default)]
pub(crate) struct Scope {
    /// The bot's user id (from READY).
    pub(crate) me: u64,
    /// Which server messages are answered.
    pub(crate) policy: Option<GuildPolicy>,
    /// Servers answered in (empty: any).
    pub(crate) guilds: Vec<u64>,
    /// Server channels answered in (empty: any).
    pub(crate) channels: Vec<u64>,
}

/// The message flag of a voice message.
const IS_VOICE_MESSAGE: u64 = 1 << 13;

/// Reads `message` for the bot `scope.me`.
pub(crate) fn incoming(message: &Message, scope: &Scope) -> Incoming {
    if message.author.id == scope.me {
        return Incoming::Ignore("the bot's own message");
    }
    if message.author.bot || message.webhook_id.is_some() {
        return Incoming::Ignore("a bot's message");
    }
    // 0: written; 19: a reply. The rest are system messages (joins, pins, …).
    if !matches!(message.kind, 0 | 19) {
        return Incoming::Ignore("not a message someone wrote");
    }
    let text = strip_mentions(&message.content, scope.me);
    let private = message.guild_id.is_none();
    if let Some(guild) = message.guild_id {
        if !scope.guilds.is_empty() && !scope.guilds.contains(&guild) {
            return Incoming::Ignore("a server not in channels.discord.guilds");
        }
        let channel = message.channel_id;
        if !scope.channels.is_empty() && !scope.channels.contains(&channel) {
            return Incoming::Ignore("a channel not in channels.discord.channels");
        }
        match scope.policy.unwrap_or(GuildPolicy::Mention) {
            GuildPolicy::Off => return Incoming::Ignore("server messages are off"),
            GuildPolicy::All => {}
            GuildPolicy::Mention => {
                let mentioned = message.mentions.iter().any(|u| u.id == scope.me)
                    || message
                        .referenced_message
                        .as_ref()
                        .is_some_and(|r| r.author.id == scope.me);
                let command = COMMANDS
                    .iter()
                    .any(|c| text == *c || text.starts_with(&format!("{c} ")));
                if !mentioned && !command {
                    return Incoming::Ignore("a server message that does not mention the bot");
                }
            }
        }
    }
    let files: Vec<FileRef> = message
        .attachments
        .iter()
        .map(|a| FileRef {
            name: a.filename.clone(),
            url: a.url.clone(),
            size: a.size,
            mime: a.content_type.clone(),
            duration_ms: a
                .duration_secs
                .filter(|secs| secs.is_finite() && *secs >= 0.0)
                .map(|secs| (secs * 1000.0) as u64),
            voice: message.flags & IS_VOICE_MESSAGE != 0,
        })
        .collect();
    if text.is_empty() && files.is_empty() {
        return Incoming::Ignore("nothing to read");
    }
    Incoming::Message(Box::new(Arrival {
        chat: message.channel_id.to_string(),
        private,
        sender: message.author.id.to_string(),
        username: Some(message.author.username.clone()),
        name: message
            .author
            .global_name
            .clone()
            .unwrap_or_else(|| message.author.username.clone()),
        message: message.id.to_string(),
        text,
        reply_to: message
            .message_reference
            .as_ref()
            .and_then(|r| r.message_id)
            .map(|id| id.to_string()),
        files,
    }))
}

/// `text` without the mentions of the bot (`<@id>`, `<@!id>`); where one stood between two
/// spaces, one space stays. The rest of the text is kept as written.
pub(crate) fn strip_mentions(text: &str, me: u64) -> String {
    let nick = format!("<@!{me}>");
    let plain = format!("<@{me}>");
    let unified = text.replace(&nick, &plain);
    let mut out = String::with_capacity(unified.len());
    for piece in unified.split(&plain) {
        let piece = if out.ends_with(' ') || out.is_empty() {
            piece.strip_prefix(' ').unwrap_or(piece)
        } else {
            piece
        };
        out.push_str(piece);
    }
    out.trim().to_owned()
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;

    const ME: u64 = 900;

    fn message(extra: Value) -> Message {
        let mut base = json!({
            "id": "5001", "channel_id": "77", "content": "hello",
            "author": {"id": "42", "username": "ada", "global_name": "Ada", "discriminator": "0", "avatar": null},
            "timestamp": "2026-11-24T10:00:00.000000+00:00", "edited_timestamp": null,
            "tts": false, "mention_everyone": false, "mentions": [], "mention_roles": [],
            "attachments": [], "embeds": [], "pinned": false, "type": 0,
        });
        if let (Some(base), Some(extra)) = (base.as_object_mut(), extra.as_object()) {
            for (key, value) in extra {
                base.insert(key.clone(), value.clone());
            }
        }
        serde_json::from_value(base).unwrap_or_else(|e| panic!("{e}"))
    }

    fn scope() -> Scope {
        Scope {
            me: ME,
            ..Scope::default()
        }
    }

    fn text_of(incoming: Incoming) -> String {
        match incoming {
            Incoming::Message(received) => received.text,
            Incoming::Ignore(why) => panic!("ignored: {why}"),
        }
    }

    #[test]
    fn a_direct_message_is_for_the_agent() {
        let Incoming::Message(received) = incoming(&message(json!({})), &scope()) else {
            panic!("ignored")
        };
        assert!(received.private);
        assert_eq!(
            (received.chat.as_str(), received.sender.as_str()),
            ("77", "42")
        );
        assert_eq!(received.name, "Ada");
    }

    #[test]
    fn bots_and_the_bot_itself_are_ignored() {
        let bot = json!({"author": {"id": "43", "username": "b", "discriminator": "0", "avatar": null, "bot": true}});
        assert_eq!(
            incoming(&message(bot), &scope()),
            Incoming::Ignore("a bot's message")
        );
        let me = json!({"author": {"id": ME.to_string(), "username": "me", "discriminator": "0", "avatar": null}});
        assert_eq!(
            incoming(&message(me), &scope()),
            Incoming::Ignore("the bot's own message")
        );
    }

    #[test]
    fn in_a_server_only_mentions_replies_and_commands_pass_by_default() {
        let plain = json!({"guild_id": "1"});
        assert!(matches!(
            incoming(&message(plain), &scope()),
            Incoming::Ignore(_)
        ));
        let mention = json!({"guild_id": "1", "content": format!("<@{ME}> what time is it?"),
            "mentions": [{"id": ME.to_string(), "username": "me", "discriminator": "0", "avatar": null}]});
        assert_eq!(
            text_of(incoming(&message(mention), &scope())),
            "what time is it?"
        );
        let command = json!({"guild_id": "1", "content": "/status"});
        assert_eq!(text_of(incoming(&message(command), &scope())), "/status");
        let everyone = Scope {
            policy: Some(GuildPolicy::All),
            ..scope()
        };
        assert_eq!(
            text_of(incoming(&message(json!({"guild_id": "1"})), &everyone)),
            "hello"
        );
        let off = Scope {
            policy: Some(GuildPolicy::Off),
            ..scope()
        };
        let mention = json!({"guild_id": "1", "mentions": [{"id": ME.to_string(), "username": "me", "discriminator": "0", "avatar": null}]});
        assert!(matches!(
            incoming(&message(mention), &off),
            Incoming::Ignore(_)
        ));
    }

    #[test]
    fn server_and_channel_allow_lists_apply_to_servers_only() {
        let limited = Scope {
            policy: Some(GuildPolicy::All),
            guilds: vec![1],
            channels: vec![77],
            ..scope()
        };
        assert!(matches!(
            incoming(&message(json!({"guild_id": "2"})), &limited),
            Incoming::Ignore(_)
        ));
        assert!(matches!(
            incoming(
                &message(json!({"guild_id": "1", "channel_id": "78"})),
                &limited
            ),
            Incoming::Ignore(_)
        ));
        assert_eq!(
            text_of(incoming(&message(json!({"guild_id": "1"})), &limited)),
            "hello"
        );
        // A direct message is not in a server.
        assert_eq!(
            text_of(incoming(&message(json!({"channel_id": "5"})), &limited)),
            "hello"
        );
    }

    #[test]
    fn mentions_of_the_bot_leave_the_text_tidy() {
        assert_eq!(strip_mentions(&format!("<@{ME}> hi"), ME), "hi");
        assert_eq!(
            strip_mentions(&format!("hi <@!{ME}> there"), ME),
            "hi there"
        );
        assert_eq!(strip_mentions(&format!("a  b <@{ME}>"), ME), "a  b");
        assert_eq!(strip_mentions("hi <@901>", ME), "hi <@901>");
    }
}
