//! signal-cli's events in switchboard's terms, pure: which are messages for the agent
//! ([`read`]), each an [`Arrival`] — a person's number (its digits, or their Signal id
//! without one) is their chat, a group is `group.<id>` — with its files by their signal-cli
//! id.

use serde::Deserialize;
use switchboard_adapter::{Arrival, FileRef, Incoming};

/// The prefix of a group's chat id.
pub const GROUP_PREFIX: &str = "group.";

/// Reads one event of `/api/v1/events` (its data: a `receive` notification's params) for
/// the bot `me`; `groups`: whether group messages are for the agent.
pub fn read(data: &str, me: Option<&str>, groups: bool) -> Result<Incoming, serde_json::Error> {
    let event: Event = serde_json::from_str(data)?;
    if let (Some(me), Some(account)) = (me, event.account.as_deref())
        && me != account
    {
        return Ok(Incoming::Ignore("another account's message"));
    }
    let envelope = event.envelope;
    let Some(message) = envelope.data_message else {
        return Ok(Incoming::Ignore(
            "not a message (a receipt, typing, a sync)",
        ));
    };
    let Some(sender) = envelope
        .source_number
        .clone()
        .or(envelope.source_uuid.clone())
    else {
        return Ok(Incoming::Ignore("no sender"));
    };
    if me == Some(sender.as_str()) {
        return Ok(Incoming::Ignore("the bot's own message"));
    }
    let (chat, private) = match &message.group_info {
        Some(_) if !groups => {
            return Ok(Incoming::Ignore(
                "a group message (channels.signal.groups is off)",
            ));
        }
        Some(group) => (format!("{GROUP_PREFIX}{}", group.group_id), false),
        // A number without its `+`: a chat id that is a plain file name.
        None => (sender.trim_start_matches('+').to_owned(), true),
    };
    let timestamp = if message.timestamp != 0 {
        message.timestamp
    } else {
        envelope.timestamp
    };
    let files: Vec<FileRef> = message
        .attachments
        .iter()
        .map(|attachment| FileRef {
            name: attachment
                .filename
                .clone()
                .unwrap_or_else(|| format!("attachment-{}", attachment.id)),
            url: attachment.id.clone(),
            size: attachment.size.unwrap_or(0),
            mime: attachment.content_type.clone(),
            voice: attachment.voice_note,
            duration_ms: None,
        })
        .collect();
    let text = message.message.clone().unwrap_or_default();
    if text.trim().is_empty() && files.is_empty() {
        return Ok(Incoming::Ignore("nothing to read (a reaction, a deletion)"));
    }
    Ok(Incoming::Message(Box::new(Arrival {
        chat,
        private,
        sender: sender.clone(),
        username: None,
        name: envelope
            .source_name
            .filter(|name| !name.is_empty())
            .unwrap_or(sender),
        message: timestamp.to_string(),
        text,
        reply_to: message.quote.map(|quote| quote.id.to_string()),
        files,
    })))
}

#[derive(Deserialize)]
struct Event {
    envelope: Envelope,
    account: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Envelope {
    source_number: Option<String>,
    source_uuid: Option<String>,
    source_name: Option<String>,
    #[serde(default)]
    timestamp: u64,
    data_message: Option<DataMessage>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct DataMessage {
    #[serde(default)]
    timestamp: u64,
    message: Option<String>,
    group_info: Option<GroupInfo>,
    #[serde(default)]
    attachments: Vec<Attachment>,
    quote: Option<Quote>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct GroupInfo {
    group_id: String,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Attachment {
    id: String,
    content_type: Option<String>,
    filename: Option<String>,
    size: Option<u64>,
    #[serde(default)]
    voice_note: bool,
}

#[derive(Deserialize)]
struct Quote {
    id: u64,
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    const ME: &str = "+15550001111";

    fn event(envelope: serde_json::Value) -> String {
        json!({"envelope": envelope, "account": ME}).to_string()
    }

    #[test]
    fn direct_messages_quotes_and_files_are_for_the_agent() {
        let data = event(json!({"source": "+4915100", "sourceNumber": "+4915100",
            "sourceUuid": "u-1", "sourceName": "Ada", "sourceDevice": 1, "timestamp": 1700000000123u64,
            "dataMessage": {"timestamp": 1700000000123u64, "message": "hello",
                "quote": {"id": 1699999999000u64, "author": ME},
                "attachments": [{"contentType": "audio/aac", "id": "att1.aac", "size": 9,
                    "voiceNote": true}]}}));
        let Ok(Incoming::Message(arrival)) = read(&data, Some(ME), false) else {
            panic!("a message");
        };
        assert_eq!((arrival.chat.as_str(), arrival.private), ("4915100", true));
        assert_eq!(arrival.sender, "+4915100");
        assert_eq!(
            (arrival.message.as_str(), arrival.name.as_str()),
            ("1700000000123", "Ada")
        );
        assert_eq!(arrival.reply_to.as_deref(), Some("1699999999000"));
        assert_eq!(arrival.files[0].url, "att1.aac");
        assert!(arrival.files[0].voice);
    }

    #[test]
    fn groups_are_chats_only_when_on_and_the_rest_is_ignored() {
        let group = event(json!({"sourceNumber": "+4915100", "timestamp": 5,
            "dataMessage": {"timestamp": 5, "message": "hi all",
                "groupInfo": {"groupId": "abc+/=", "type": "DELIVER"}}}));
        assert!(matches!(
            read(&group, Some(ME), false),
            Ok(Incoming::Ignore(_))
        ));
        let Ok(Incoming::Message(arrival)) = read(&group, Some(ME), true) else {
            panic!("a group message");
        };
        assert_eq!(
            (arrival.chat.as_str(), arrival.private),
            ("group.abc+/=", false)
        );
        let receipt = event(json!({"sourceNumber": "+4915100", "timestamp": 6,
            "receiptMessage": {"when": 6, "isDelivery": true, "timestamps": [5]}}));
        assert!(matches!(
            read(&receipt, Some(ME), true),
            Ok(Incoming::Ignore(_))
        ));
        let other = json!({"envelope": {"sourceNumber": "+1", "dataMessage": {"message": "x"}},
            "account": "+1999"})
        .to_string();
        assert!(matches!(
            read(&other, Some(ME), true),
            Ok(Incoming::Ignore(_))
        ));
        assert!(read("not json", Some(ME), true).is_err());
    }
}
