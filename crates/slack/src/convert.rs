//! Slack's events in switchboard's terms, pure: which messages are for the agent, which chat
//! each belongs to (a DM, a channel, or a thread of its own), its text without the bot's
//! mention, its files.

use slack_morphism::prelude::*;
use switchboard_adapter::{Arrival, FileRef, Incoming};

use crate::config::ChannelPolicy;

/// Reads `event` for the bot `me` under `policy`.
pub(crate) fn incoming(
    event: &SlackPushEventCallback,
    me: &str,
    policy: ChannelPolicy,
) -> Incoming {
    match &event.event {
        SlackEventCallbackBody::Message(message) => {
            if message.sender.bot_id.is_some() {
                return Incoming::Ignore("a bot's message");
            }
            match &message.subtype {
                None | Some(SlackMessageEventType::FileShare) => {}
                Some(_) => return Incoming::Ignore("not a new message (an edit, a join, …)"),
            }
            let Some(user) = &message.sender.user else {
                return Incoming::Ignore("no author");
            };
            let Some(channel) = &message.origin.channel else {
                return Incoming::Ignore("no channel");
            };
            let private =
                matches!(message.origin.channel_type, Some(SlackChannelType(ref t)) if t == "im");
            if !private && policy != ChannelPolicy::All {
                // In channels, mentions come as `app_mention` (policy `mention`), or not at all.
                return Incoming::Ignore("a channel message without a mention");
            }
            received(
                channel,
                &message.origin,
                user,
                message.content.as_ref(),
                me,
                private,
            )
        }
        SlackEventCallbackBody::AppMention(mention) if policy == ChannelPolicy::Mention => {
            received(
                &mention.channel,
                &mention.origin,
                &mention.user,
                Some(&mention.content),
                me,
                false,
            )
        }
        _ => Incoming::Ignore("not a message"),
    }
}

fn received(
    channel: &SlackChannelId,
    origin: &SlackMessageOrigin,
    user: &SlackUserId,
    content: Option<&SlackMessageContent>,
    me: &str,
    private: bool,
) -> Incoming {
    if user.0 == me {
        return Incoming::Ignore("the bot's own message");
    }
    let chat = match &origin.thread_ts {
        Some(thread) => format!("{}:{}", channel.0, thread.0),
        None => channel.0.clone(),
    };
    let text = content
        .and_then(|content| content.text.as_deref())
        .unwrap_or_default()
        .replace(&format!("<@{me}>"), "")
        .trim()
        .to_owned();
    let files: Vec<FileRef> = content
        .and_then(|content| content.files.as_ref())
        .map(|files| {
            files
                .iter()
                .filter_map(|file| {
                    let url = file
                        .url_private_download
                        .as_ref()
                        .or(file.url_private.as_ref())?;
                    let mime = file.mimetype.as_ref().map(|mime| mime.0.clone());
                    Some(FileRef {
                        name: file.name.clone().unwrap_or_else(|| file.id.0.clone()),
                        url: url.to_string(),
                        // slack-morphism does not read a file's size: the download is
                        // capped instead.
                        size: 0,
                        // Recordings in Slack are its audio clips: heard, and answered in
                        // voice.
                        voice: mime
                            .as_deref()
                            .is_some_and(|mime| mime.starts_with("audio/")),
                        mime,
                        duration_ms: None,
                    })
                })
                .collect()
        })
        .unwrap_or_default();
    if text.is_empty() && files.is_empty() {
        return Incoming::Ignore("nothing to say");
    }
    Incoming::Message(Box::new(Arrival {
        chat,
        private,
        sender: user.0.clone(),
        username: None,
        name: user.0.clone(),
        message: origin.ts.0.clone(),
        text,
        reply_to: None,
        files,
    }))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    const ME: &str = "UBOT";

    fn event(event: serde_json::Value) -> SlackPushEventCallback {
        serde_json::from_value(json!({"team_id": "T1", "api_app_id": "A1", "event": event,
            "event_id": "Ev1", "event_time": 1_700_000_000}))
        .unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn dms_threads_and_mentions_are_chats_and_the_rest_is_ignored() {
        let dm = event(
            json!({"type": "message", "channel": "D1", "channel_type": "im",
            "user": "U1", "text": "hello", "ts": "1.1"}),
        );
        let Incoming::Message(received) = incoming(&dm, ME, ChannelPolicy::Mention) else {
            panic!("a DM is for the agent");
        };
        assert_eq!((received.chat.as_str(), received.private), ("D1", true));

        let mention = event(json!({"type": "app_mention", "channel": "C1", "user": "U1",
            "text": "<@UBOT> what now?", "ts": "2.2", "thread_ts": "1.0"}));
        let Incoming::Message(received) = incoming(&mention, ME, ChannelPolicy::Mention) else {
            panic!("a mention is for the agent");
        };
        assert_eq!(received.chat, "C1:1.0", "a thread is its own chat");
        assert_eq!(received.text, "what now?");

        let plain = event(
            json!({"type": "message", "channel": "C1", "channel_type": "channel",
            "user": "U1", "text": "chatter", "ts": "3.3"}),
        );
        assert!(matches!(
            incoming(&plain, ME, ChannelPolicy::Mention),
            Incoming::Ignore(_)
        ));
        assert!(matches!(
            incoming(&plain, ME, ChannelPolicy::All),
            Incoming::Message(_)
        ));
        assert!(matches!(
            incoming(&mention, ME, ChannelPolicy::Off),
            Incoming::Ignore(_)
        ));

        let bot = event(
            json!({"type": "message", "channel": "D1", "channel_type": "im",
            "bot_id": "B1", "text": "beep", "ts": "4.4"}),
        );
        assert!(matches!(
            incoming(&bot, ME, ChannelPolicy::All),
            Incoming::Ignore(_)
        ));
        let edit = event(
            json!({"type": "message", "subtype": "message_changed", "channel": "D1",
            "channel_type": "im", "user": "U1", "ts": "5.5"}),
        );
        assert!(matches!(
            incoming(&edit, ME, ChannelPolicy::All),
            Incoming::Ignore(_)
        ));
    }
}
