//! Matrix's events in switchboard's terms (pure): a room message as an [`Arrival`] — its chat
//! (the room, or the thread it is in), its text without the quote of the message it
//! answers, its file — or why it is not for the agent.
//!
//! Chats: a room is `!room:server`; a thread in it (with `threads = true`) is
//! `!room:server/$root` — the root's id after the room's, so the replies of a thread reach
//! one session and the room's other messages another.

use serde_json::Value;
use switchboard_adapter::{Arrival, FileRef, Incoming};

/// What is known of the room an event came in.
#[derive(Clone, Copy, Debug)]
pub(crate) struct RoomFacts<'a> {
    pub room: &'a str,
    /// Whether the room is the bot and one person (a pairing code may be sent there).
    pub private: bool,
    /// Threads are chats of their own.
    pub threads: bool,
}

/// Separates a thread's root from its room in a chat id (no room or event id holds it).
pub(crate) const THREAD_MARK: char = '/';

/// The chat of `room`, in the thread of `root` when there is one.
pub(crate) fn chat_of(room: &str, root: Option<&str>) -> String {
    match root {
        Some(root) => format!("{room}{THREAD_MARK}{root}"),
        None => room.to_owned(),
    }
}

/// The room and thread root of `chat`. Room ids are `!opaque:server`, or `!hash` since
/// room version 12; a thread's root is an event id, `$…`, after the last `/`.
pub(crate) fn place_of(chat: &str) -> Option<(&str, Option<&str>)> {
    let (room, root) = match chat.rsplit_once(THREAD_MARK) {
        Some((room, root)) if root.starts_with('$') => (room, Some(root)),
        Some(_) if !chat.starts_with('!') => return None,
        _ => (chat, None),
    };
    let valid_room = room.starts_with('!') && room.len() > 1;
    let valid_root = root.is_none_or(|root| root.len() > 1);
    (valid_room && valid_root).then_some((room, root))
}

/// `event` (a room event as the sync gave it, decrypted) read for the agent; `me` is the
/// bot's own id.
pub(crate) fn read(event: &Value, me: &str, room: RoomFacts<'_>) -> Incoming {
    if event["type"] != "m.room.message" {
        return Incoming::Ignore("not a message");
    }
    let Some(sender) = event["sender"].as_str() else {
        return Incoming::Ignore("a message without a sender");
    };
    if sender == me {
        return Incoming::Ignore("the bot's own message");
    }
    let Some(id) = event["event_id"].as_str() else {
        return Incoming::Ignore("a message without an id");
    };
    let content = &event["content"];
    let relation = &content["m.relates_to"];
    if relation["rel_type"] == "m.replace" {
        return Incoming::Ignore("an edit of an earlier message");
    }
    let reply_to = relation["m.in_reply_to"]["event_id"]
        .as_str()
        .map(str::to_owned);
    let root = (room.threads && relation["rel_type"] == "m.thread")
        .then(|| relation["event_id"].as_str())
        .flatten();
    // A thread's own fallback reply names its latest event, not a message answered.
    let reply_to = if relation["is_falling_back"] == true {
        None
    } else {
        reply_to
    };
    let body = content["body"].as_str().unwrap_or_default();
    let mut files = Vec::new();
    let text = match content["msgtype"].as_str() {
        Some("m.text") => without_reply_fallback(body, reply_to.is_some()).to_owned(),
        Some("m.emote") => format!("* {}", body.trim()),
        Some("m.notice") => return Incoming::Ignore("a notice (what bots write)"),
        Some("m.image" | "m.file" | "m.audio" | "m.video") => {
            let Some(file) = file_of(content) else {
                return Incoming::Ignore("a file without its source");
            };
            // `body` is the file's name, or its caption when `filename` names the file.
            let caption = match content["filename"].as_str() {
                Some(name) if name != body => body.to_owned(),
                _ => String::new(),
            };
            files.push(file);
            caption
        }
        _ => return Incoming::Ignore("a kind of message the agent does not read"),
    };
    if text.trim().is_empty() && files.is_empty() {
        return Incoming::Ignore("an empty message");
    }
    Incoming::Message(Box::new(Arrival {
        chat: chat_of(room.room, root),
        private: room.private && root.is_none(),
        sender: sender.to_owned(),
        // A Matrix id is an `@name`: the allow list matches it as one.
        username: Some(sender.to_owned()),
        name: sender.to_owned(),
        message: id.to_owned(),
        text,
        reply_to,
        files,
    }))
}

/// The file of a message: its source (an `mxc://` address, or the encrypted file with its
/// key) kept as JSON in the ref's `url`, to be fetched and decrypted when admitted.
fn file_of(content: &Value) -> Option<FileRef> {
    let source = if let Some(url) = content["url"].as_str() {
        serde_json::json!({ "url": url })
    } else if content["file"].is_object() {
        serde_json::json!({ "file": content["file"] })
    } else {
        return None;
    };
    let info = &content["info"];
    let name = content["filename"]
        .as_str()
        .or_else(|| content["body"].as_str())
        .filter(|name| !name.is_empty())
        .unwrap_or("file");
    let voice = content["msgtype"] == "m.audio"
        && (content.get("org.matrix.msc3245.voice").is_some() || content.get("m.voice").is_some());
    Some(FileRef {
        name: name.to_owned(),
        url: source.to_string(),
        size: info["size"].as_u64().unwrap_or(0),
        mime: info["mimetype"].as_str().map(str::to_owned),
        voice,
        duration_ms: info["duration"].as_u64(),
    })
}

/// `body` without the quote of the message it answers: clients that write replies the old
/// way put `> <@author> their words` lines and a blank line first.
fn without_reply_fallback(body: &str, is_reply: bool) -> &str {
    if !is_reply || !body.starts_with("> ") {
        return body;
    }
    let mut rest = body;
    while let Some(line_end) = rest.find('\n') {
        let line = &rest[..line_end];
        if line.starts_with('>') {
            rest = &rest[line_end + 1..];
        } else {
            break;
        }
    }
    rest.trim_start_matches('\n')
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    const ME: &str = "@bot:example.org";
    const ROOM: RoomFacts<'static> = RoomFacts {
        room: "!r:example.org",
        private: true,
        threads: true,
    };

    fn message(content: Value) -> Value {
        json!({"type": "m.room.message", "sender": "@ada:example.org", "event_id": "$e1",
               "content": content})
    }

    fn arrival(event: &Value, room: RoomFacts<'_>) -> Arrival {
        match read(event, ME, room) {
            Incoming::Message(arrival) => *arrival,
            Incoming::Ignore(why) => panic!("ignored: {why}"),
        }
    }

    #[test]
    fn a_text_reaches_its_room_and_a_thread_its_own_chat() {
        let plain = arrival(&message(json!({"msgtype": "m.text", "body": "hi"})), ROOM);
        assert_eq!(
            (plain.chat.as_str(), plain.text.as_str()),
            ("!r:example.org", "hi")
        );
        assert!(plain.private);
        assert_eq!(plain.message, "$e1");

        let threaded = message(json!({"msgtype": "m.text", "body": "more",
            "m.relates_to": {"rel_type": "m.thread", "event_id": "$root", "is_falling_back": true,
                             "m.in_reply_to": {"event_id": "$latest"}}}));
        let in_thread = arrival(&threaded, ROOM);
        assert_eq!(in_thread.chat, "!r:example.org/$root");
        assert_eq!(
            in_thread.reply_to, None,
            "the thread's fallback is no reply"
        );
        assert!(!in_thread.private, "no pairing code goes into a thread");
        assert_eq!(
            place_of(&in_thread.chat),
            Some(("!r:example.org", Some("$root")))
        );

        let rooms_only = RoomFacts {
            threads: false,
            ..ROOM
        };
        assert_eq!(arrival(&threaded, rooms_only).chat, "!r:example.org");
        assert_eq!(place_of("!r:example.org"), Some(("!r:example.org", None)));
        assert_eq!(place_of("general"), None);
        assert_eq!(place_of("!r:example.org/$"), None);
        // Room version 12: a room id is its create event's hash.
        assert_eq!(
            place_of("!czd4RbBB-O_x/$e"),
            Some(("!czd4RbBB-O_x", Some("$e")))
        );
    }

    #[test]
    fn a_reply_loses_its_quote_and_names_what_it_answers() {
        let reply = message(json!({"msgtype": "m.text",
            "body": "> <@bot:example.org> It is 3 pm.\n> Anything else?\n\nwhat about Berlin?",
            "m.relates_to": {"m.in_reply_to": {"event_id": "$answer"}}}));
        let answered = arrival(&reply, ROOM);
        assert_eq!(answered.text, "what about Berlin?");
        assert_eq!(answered.reply_to.as_deref(), Some("$answer"));
        let not_a_reply = message(json!({"msgtype": "m.text", "body": "> a quote\n\nmine"}));
        assert_eq!(arrival(&not_a_reply, ROOM).text, "> a quote\n\nmine");
    }

    #[test]
    fn files_keep_their_source_and_caption() {
        let image = message(
            json!({"msgtype": "m.image", "body": "what is this?", "filename": "cat.png",
            "file": {"url": "mxc://example.org/abc", "key": {"k": "secret"}, "iv": "x", "hashes": {}, "v": "v2"},
            "info": {"size": 1234, "mimetype": "image/png"}}),
        );
        let pictured = arrival(&image, ROOM);
        assert_eq!(pictured.text, "what is this?");
        let file = &pictured.files[0];
        assert_eq!((file.name.as_str(), file.size), ("cat.png", 1234));
        assert_eq!(file.mime.as_deref(), Some("image/png"));
        let source: Value = serde_json::from_str(&file.url).expect("json");
        assert_eq!(source["file"]["url"], "mxc://example.org/abc");

        let voice = message(
            json!({"msgtype": "m.audio", "body": "Voice message", "url": "mxc://example.org/v",
            "info": {"duration": 4000, "mimetype": "audio/ogg", "size": 10},
            "org.matrix.msc3245.voice": {}}),
        );
        let voice = arrival(&voice, ROOM);
        assert_eq!(voice.text, "", "a file's name is not its caption");
        assert!(voice.files[0].voice);
        assert_eq!(voice.files[0].duration_ms, Some(4000));
    }

    #[test]
    fn what_is_not_a_persons_message_is_ignored() {
        let ignored = |event: Value| matches!(read(&event, ME, ROOM), Incoming::Ignore(_));
        assert!(ignored(
            json!({"type": "m.reaction", "sender": "@ada:example.org", "event_id": "$r", "content": {}})
        ));
        assert!(ignored(
            json!({"type": "m.room.message", "sender": ME, "event_id": "$o",
            "content": {"msgtype": "m.text", "body": "mine"}})
        ));
        assert!(ignored(message(
            json!({"msgtype": "m.notice", "body": "a bot"})
        )));
        assert!(ignored(message(
            json!({"msgtype": "m.text", "body": "* fixed",
            "m.new_content": {"msgtype": "m.text", "body": "fixed"},
            "m.relates_to": {"rel_type": "m.replace", "event_id": "$e0"}})
        )));
        assert!(ignored(message(json!({"msgtype": "m.text", "body": "  "}))));
        assert!(ignored(message(json!({"msgtype": "m.image", "body": "x"}))));
        assert!(ignored(message(
            json!({"msgtype": "m.location", "body": "geo"})
        )));
        let emote = arrival(
            &message(json!({"msgtype": "m.emote", "body": "waves"})),
            ROOM,
        );
        assert_eq!(emote.text, "* waves");
    }
}
