//! Telegram's types ⇄ switchboard's, without a network: what an update means to the agent
//! (who wrote it, in which chat or forum topic, the text with the bot's mention taken out,
//! the files it carries), and back from a chat id to where Telegram sends.

use teloxide::types::{ChatId as TgChatId, Message, MessageId, ThreadId, Update, UpdateKind};

use crate::config::GroupPolicy;

/// The bot itself, as `getMe` told.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Me {
    /// Its user id.
    pub id: u64,
    /// Its @username, without the `@`.
    pub username: String,
}

/// A file a message carries, to download.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FileRef {
    /// Telegram's id, for `getFile`.
    pub file_id: String,
    /// A name for it.
    pub name: String,
    /// Its MIME type, when Telegram says.
    pub mime: Option<String>,
    /// Its size, when Telegram says.
    pub size: Option<u64>,
    /// A recording's length in milliseconds, when Telegram says.
    pub duration_ms: Option<u64>,
    /// Whether it is a voice note (recorded in Telegram, not an audio file sent along).
    pub voice: bool,
}

/// A message for the agent.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Received {
    /// `"<chat id>"`, or `"<chat id>:<topic>"` for a forum topic.
    pub chat: String,
    /// Whether it is a private chat (pairing codes are sent only there).
    pub private: bool,
    /// The sender's user id.
    pub sender: String,
    /// The sender's @username, if they have one.
    pub username: Option<String>,
    /// The sender's name.
    pub name: String,
    /// The message's id in its chat.
    pub message_id: i32,
    /// The text (or caption), the bot's mention taken out.
    pub text: String,
    /// The message it replies to.
    pub reply_to: Option<i32>,
    /// Files it carries.
    pub files: Vec<FileRef>,
}

/// What an update means.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Incoming {
    /// Nothing for the agent; the reason is for logs.
    Ignore(&'static str),
    /// A message for the agent (if its sender may talk).
    Message(Box<Received>),
}

/// Reads an update.
pub fn incoming(update: &Update, me: &Me, policy: GroupPolicy) -> Incoming {
    let UpdateKind::Message(message) = &update.kind else {
        return Incoming::Ignore("not a new message");
    };
    let Some(from) = &message.from else {
        return Incoming::Ignore("no sender (a channel post)");
    };
    if from.is_bot {
        return Incoming::Ignore("written by a bot");
    }
    let private = message.chat.is_private();
    let raw = message.text().or(message.caption()).unwrap_or_default();
    if !private {
        match policy {
            GroupPolicy::Off => return Incoming::Ignore("group messages are off"),
            GroupPolicy::All => {}
            GroupPolicy::Mention if addressed(message, raw, me) => {}
            GroupPolicy::Mention => return Incoming::Ignore("a group message not for the bot"),
        }
    }
    let text = strip_mention(raw, &me.username);
    let files = files(message);
    if text.is_empty() && files.is_empty() {
        return Incoming::Ignore("nothing to answer (a sticker, a service message)");
    }
    Incoming::Message(Box::new(Received {
        chat: chat_key(message),
        private,
        sender: from.id.0.to_string(),
        username: from.username.clone(),
        name: from.full_name(),
        message_id: message.id.0,
        text,
        reply_to: message.reply_to_message().map(|m| m.id.0),
        files,
    }))
}

/// The chat's key: its id, and its forum topic if the message is in one.
fn chat_key(message: &Message) -> String {
    match message.thread_id {
        Some(ThreadId(MessageId(topic))) if message.is_topic_message => {
            format!("{}:{topic}", message.chat.id.0)
        }
        _ => message.chat.id.0.to_string(),
    }
}

/// Where to send for a chat key: the chat, and the forum topic.
pub fn destination(chat: &str) -> Option<(TgChatId, Option<ThreadId>)> {
    let (id, topic) = match chat.split_once(':') {
        Some((id, topic)) => (id, Some(topic.parse().ok()?)),
        None => (chat, None),
    };
    Some((
        TgChatId(id.parse().ok()?),
        topic.map(|topic| ThreadId(MessageId(topic))),
    ))
}

/// Whether a group message is for the bot: it mentions it, replies to it, or is a command
/// (not addressed to another bot).
fn addressed(message: &Message, text: &str, me: &Me) -> bool {
    let mention = format!("@{}", me.username.to_lowercase());
    if text.to_lowercase().contains(&mention) {
        return true;
    }
    if message
        .reply_to_message()
        .and_then(|m| m.from.as_ref())
        .is_some_and(|author| author.id.0 == me.id)
    {
        return true;
    }
    let word = text.split_whitespace().next().unwrap_or_default();
    match word.strip_prefix('/') {
        Some(command) => match command.split_once('@') {
            Some((_, bot)) => bot.eq_ignore_ascii_case(&me.username),
            None => !command.is_empty(),
        },
        None => false,
    }
}

/// The text with `@bot` taken out (any case), and trimmed.
fn strip_mention(text: &str, username: &str) -> String {
    let mention = format!("@{username}");
    let lower = text.to_lowercase();
    let mention_lower = mention.to_lowercase();
    match lower.find(&mention_lower) {
        // Lowercasing keeps byte offsets for ASCII usernames (bot names are ASCII).
        Some(at) if text.is_char_boundary(at) && text.is_char_boundary(at + mention.len()) => {
            let mut out = String::with_capacity(text.len());
            out.push_str(&text[..at]);
            out.push_str(&text[at + mention.len()..]);
            // `/cmd@bot` became `/cmd`; `@bot hello` became ` hello`.
            out.split_whitespace().collect::<Vec<_>>().join(" ")
        }
        _ => text.trim().to_owned(),
    }
}

fn files(message: &Message) -> Vec<FileRef> {
    let mut files = Vec::new();
    if let Some(photo) = message.photo().and_then(|sizes| sizes.last()) {
        files.push(FileRef {
            file_id: photo.file.id.0.clone(),
            name: format!("photo-{}.jpg", message.id.0),
            mime: Some("image/jpeg".into()),
            size: Some(u64::from(photo.file.size)),
            duration_ms: None,
            voice: false,
        });
    }
    if let Some(document) = message.document() {
        files.push(FileRef {
            file_id: document.file.id.0.clone(),
            name: document
                .file_name
                .clone()
                .unwrap_or_else(|| format!("document-{}", message.id.0)),
            mime: document.mime_type.as_ref().map(ToString::to_string),
            size: Some(u64::from(document.file.size)),
            duration_ms: None,
            voice: false,
        });
    }
    if let Some(voice) = message.voice() {
        files.push(FileRef {
            file_id: voice.file.id.0.clone(),
            name: format!("voice-{}.ogg", message.id.0),
            mime: voice
                .mime_type
                .as_ref()
                .map_or_else(|| "audio/ogg".to_owned(), ToString::to_string)
                .into(),
            size: Some(u64::from(voice.file.size)),
            duration_ms: Some(u64::from(voice.duration.seconds()) * 1000),
            voice: true,
        });
    }
    if let Some(audio) = message.audio() {
        files.push(FileRef {
            file_id: audio.file.id.0.clone(),
            name: audio
                .file_name
                .clone()
                .unwrap_or_else(|| format!("audio-{}", message.id.0)),
            mime: audio.mime_type.as_ref().map(ToString::to_string),
            size: Some(u64::from(audio.file.size)),
            duration_ms: Some(u64::from(audio.duration.seconds()) * 1000),
            voice: false,
        });
    }
    files
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;

    fn me() -> Me {
        Me {
            id: 999,
            username: "switchboard_bot".into(),
        }
    }

    /// An update as Telegram sends it: JSON text (teloxide's update parser wants borrowed
    /// keys, which a `serde_json::Value` cannot lend).
    fn update(message: Value) -> Update {
        let text = json!({"update_id": 1, "message": message}).to_string();
        serde_json::from_str(&text).expect("update")
    }

    fn message(chat: Value, text: &str) -> Value {
        json!({
            "message_id": 7, "date": 1_700_000_000, "chat": chat, "text": text,
            "from": {"id": 42, "is_bot": false, "first_name": "Ada", "username": "ada"}
        })
    }

    fn private() -> Value {
        json!({"id": 42, "type": "private", "first_name": "Ada"})
    }

    fn group() -> Value {
        json!({"id": -100_123, "type": "supergroup", "title": "Team"})
    }

    fn text_of(incoming: Incoming) -> String {
        match incoming {
            Incoming::Message(received) => received.text,
            Incoming::Ignore(why) => panic!("ignored: {why}"),
        }
    }

    #[test]
    fn a_private_message_is_for_the_agent() {
        let incoming = incoming(
            &update(message(private(), "hello")),
            &me(),
            GroupPolicy::Mention,
        );
        let Incoming::Message(received) = incoming else {
            panic!("ignored");
        };
        assert_eq!(received.chat, "42");
        assert!(received.private);
        assert_eq!(received.sender, "42");
        assert_eq!(received.username.as_deref(), Some("ada"));
        assert_eq!(received.message_id, 7);
        assert_eq!(received.text, "hello");
    }

    #[test]
    fn group_messages_follow_the_policy() {
        let plain = update(message(group(), "hello all"));
        let mentioned = update(message(group(), "@Switchboard_Bot what is 2+2?"));
        let command = update(message(group(), "/status@switchboard_bot"));
        let other_bot = update(message(group(), "/status@other_bot"));
        let policy = GroupPolicy::Mention;
        assert!(matches!(
            incoming(&plain, &me(), policy),
            Incoming::Ignore(_)
        ));
        assert_eq!(text_of(incoming(&mentioned, &me(), policy)), "what is 2+2?");
        assert_eq!(text_of(incoming(&command, &me(), policy)), "/status");
        assert!(matches!(
            incoming(&other_bot, &me(), policy),
            Incoming::Ignore(_)
        ));
        assert_eq!(
            text_of(incoming(&plain, &me(), GroupPolicy::All)),
            "hello all"
        );
        assert!(matches!(
            incoming(&mentioned, &me(), GroupPolicy::Off),
            Incoming::Ignore(_)
        ));
    }

    #[test]
    fn a_reply_to_the_bot_counts_as_addressed() {
        let mut reply = message(group(), "and then?");
        reply["reply_to_message"] = json!({
            "message_id": 6, "date": 1_700_000_000, "chat": group(), "text": "once upon a time",
            "from": {"id": 999, "is_bot": true, "first_name": "Bot", "username": "switchboard_bot"}
        });
        let received = incoming(&update(reply), &me(), GroupPolicy::Mention);
        let Incoming::Message(received) = received else {
            panic!("ignored");
        };
        assert_eq!(received.reply_to, Some(6));
    }

    #[test]
    fn bots_channel_posts_and_stickers_are_ignored() {
        let mut from_bot = message(private(), "hi");
        from_bot["from"]["is_bot"] = json!(true);
        let mut sticker = message(private(), "");
        sticker.as_object_mut().expect("object").remove("text");
        for ignored in [from_bot, sticker] {
            assert!(matches!(
                incoming(&update(ignored), &me(), GroupPolicy::All),
                Incoming::Ignore(_)
            ));
        }
    }

    #[test]
    fn a_forum_topic_is_part_of_the_chat() {
        let mut in_topic = message(group(), "@switchboard_bot hi");
        in_topic["message_thread_id"] = json!(15);
        in_topic["is_topic_message"] = json!(true);
        let Incoming::Message(received) = incoming(&update(in_topic), &me(), GroupPolicy::Mention)
        else {
            panic!("ignored");
        };
        assert_eq!(received.chat, "-100123:15");
        let (chat, topic) = destination(&received.chat).expect("destination");
        assert_eq!(chat.0, -100_123);
        assert_eq!(topic, Some(ThreadId(MessageId(15))));
        assert_eq!(destination("42"), Some((TgChatId(42), None)));
        assert_eq!(destination("not a chat"), None);
    }

    #[test]
    fn photos_and_documents_are_files_to_fetch() {
        let mut photo = message(private(), "");
        photo.as_object_mut().expect("object").remove("text");
        photo["caption"] = json!("what is this?");
        photo["photo"] = json!([
            {"file_id": "small", "file_unique_id": "s", "width": 90, "height": 90, "file_size": 100},
            {"file_id": "large", "file_unique_id": "l", "width": 900, "height": 900, "file_size": 5000}
        ]);
        let Incoming::Message(received) = incoming(&update(photo), &me(), GroupPolicy::All) else {
            panic!("ignored");
        };
        assert_eq!(received.text, "what is this?");
        assert_eq!(received.files.len(), 1);
        assert_eq!(received.files[0].file_id, "large");
        assert_eq!(received.files[0].size, Some(5000));
    }
}
