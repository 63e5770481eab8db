//! WhatsApp's webhook in switchboard's terms, pure: whether a request is signed with the
//! app's secret ([`signed`]), and what a notification holds ([`read`]) — the messages for
//! the agent, each an [`Arrival`] (a person's number is their chat), and the sends WhatsApp
//! reports failed afterwards, for the operator.

use serde::Deserialize;
use switchboard_adapter::{Arrival, FileRef, Incoming};

/// The header WhatsApp signs a webhook request's body in.
pub const SIGNATURE_HEADER: &str = "x-hub-signature-256";

/// Whether `header` (`sha256=<hex>`) is the HMAC-SHA256 of `body` under `secret`, compared
/// in constant time.
pub fn signed(secret: &str, header: Option<&[u8]>, body: &[u8]) -> bool {
    let Some(hex) = header.and_then(|header| header.strip_prefix(b"sha256=")) else {
        return false;
    };
    let Some(tag) = unhex(hex) else {
        return false;
    };
    let key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, secret.as_bytes());
    ring::hmac::verify(&key, body, &tag).is_ok()
}

fn unhex(hex: &[u8]) -> Option<Vec<u8>> {
    if hex.len() != 64 {
        return None;
    }
    let digit = |b: u8| (b as char).to_digit(16);
    hex.chunks(2)
        .map(|pair| Some((digit(pair[0])? * 16 + digit(pair[1])?) as u8))
        .collect()
}

/// What one webhook notification holds for the channel.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Notification {
    /// Each message, with when the person sent it (Unix seconds).
    pub messages: Vec<(Incoming, u64)>,
    /// Sends WhatsApp reports failed (to whom, and why), in its words.
    pub failed: Vec<(String, String)>,
}

/// Reads a notification's body for the business number `phone_number_id` (an app may serve
/// several numbers: the others' are not this channel's).
pub fn read(body: &[u8], phone_number_id: &str) -> Result<Notification, serde_json::Error> {
    let payload: Payload = serde_json::from_slice(body)?;
    let mut notification = Notification::default();
    for change in payload.entry.into_iter().flat_map(|entry| entry.changes) {
        let value = change.value;
        if change.field != "messages"
            || value.metadata.as_ref().map(|m| m.phone_number_id.as_str()) != Some(phone_number_id)
        {
            continue;
        }
        for message in &value.messages {
            let name = value
                .contacts
                .iter()
                .find(|contact| contact.wa_id == message.from)
                .and_then(|contact| contact.profile.as_ref())
                .map(|profile| profile.name.clone());
            let at = message.timestamp.parse().unwrap_or_default();
            notification.messages.push((incoming(message, name), at));
        }
        for status in &value.statuses {
            if status.status == "failed" {
                let why = status
                    .errors
                    .iter()
                    .map(Problem::said)
                    .collect::<Vec<_>>()
                    .join("; ");
                notification.failed.push((status.recipient_id.clone(), why));
            }
        }
    }
    Ok(notification)
}

fn incoming(message: &Message, name: Option<String>) -> Incoming {
    let mut files = Vec::new();
    let text = match message.kind.as_str() {
        "text" => message
            .text
            .as_ref()
            .map(|t| t.body.clone())
            .unwrap_or_default(),
        "image" | "audio" | "video" | "document" | "sticker" => {
            let media = match message.kind.as_str() {
                "image" => &message.image,
                "audio" => &message.audio,
                "video" => &message.video,
                "document" => &message.document,
                _ => &message.sticker,
            };
            let Some(media) = media else {
                return Incoming::Ignore("a file message without its file");
            };
            files.push(file(&message.kind, &message.id, media));
            media.caption.clone().unwrap_or_default()
        }
        "button" => message
            .button
            .as_ref()
            .map(|b| b.text.clone())
            .unwrap_or_default(),
        "interactive" => message
            .interactive
            .as_ref()
            .and_then(|r| r.button_reply.as_ref().or(r.list_reply.as_ref()))
            .map(|reply| reply.title.clone())
            .unwrap_or_default(),
        "reaction" => return Incoming::Ignore("a reaction"),
        "system" | "ephemeral" | "request_welcome" => {
            return Incoming::Ignore("not a message someone wrote");
        }
        // A location, a contact card, a poll, what comes next: said, not dropped.
        other => format!("[the person sent a {other} message, which cannot be shown here]"),
    };
    if text.trim().is_empty() && files.is_empty() {
        return Incoming::Ignore("nothing to read");
    }
    Incoming::Message(Box::new(Arrival {
        chat: message.from.clone(),
        private: true,
        sender: message.from.clone(),
        username: None,
        name: name.unwrap_or_else(|| format!("+{}", message.from)),
        message: message.id.clone(),
        text,
        reply_to: message.context.as_ref().map(|context| context.id.clone()),
        files,
    }))
}

/// A message's file: fetched later by its media id.
fn file(kind: &str, message: &str, media: &Media) -> FileRef {
    // `audio/ogg; codecs=opus`: the type without its parameters.
    let mime = media
        .mime_type
        .as_deref()
        .map(|mime| mime.split(';').next().unwrap_or(mime).trim().to_owned());
    let name = media.filename.clone().unwrap_or_else(|| {
        let extension = mime
            .as_deref()
            .and_then(|mime| mime.split('/').nth(1))
            .unwrap_or("bin");
        let tail: String = message
            .chars()
            .rev()
            .take(8)
            .collect::<Vec<_>>()
            .into_iter()
            .rev()
            .collect();
        format!("{kind}-{tail}.{extension}")
    });
    FileRef {
        name,
        url: media.id.clone(),
        size: 0,
        mime,
        voice: media.voice,
        duration_ms: None,
    }
}

#[derive(Deserialize)]
struct Payload {
    #[serde(default)]
    entry: Vec<Entry>,
}

#[derive(Deserialize)]
struct Entry {
    #[serde(default)]
    changes: Vec<Change>,
}

#[derive(Deserialize)]
struct Change {
    #[serde(default)]
    field: String,
    #[serde(default)]
    value: Value,
}

#[derive(Default, Deserialize)]
struct Value {
    metadata: Option<Metadata>,
    #[serde(default)]
    contacts: Vec<Contact>,
    #[serde(default)]
    messages: Vec<Message>,
    #[serde(default)]
    statuses: Vec<Status>,
}

#[derive(Deserialize)]
struct Metadata {
    #[serde(default)]
    phone_number_id: String,
}

#[derive(Deserialize)]
struct Contact {
    #[serde(default)]
    wa_id: String,
    profile: Option<Profile>,
}

#[derive(Deserialize)]
struct Profile {
    #[serde(default)]
    name: String,
}

#[derive(Deserialize)]
struct Message {
    from: String,
    id: String,
    #[serde(default)]
    timestamp: String,
    #[serde(rename = "type", default)]
    kind: String,
    text: Option<Text>,
    image: Option<Media>,
    audio: Option<Media>,
    video: Option<Media>,
    document: Option<Media>,
    sticker: Option<Media>,
    button: Option<Button>,
    interactive: Option<Interactive>,
    context: Option<Context>,
}

#[derive(Deserialize)]
struct Text {
    #[serde(default)]
    body: String,
}

#[derive(Deserialize)]
struct Media {
    id: String,
    mime_type: Option<String>,
    caption: Option<String>,
    filename: Option<String>,
    #[serde(default)]
    voice: bool,
}

#[derive(Deserialize)]
struct Button {
    #[serde(default)]
    text: String,
}

#[derive(Deserialize)]
struct Interactive {
    button_reply: Option<Reply>,
    list_reply: Option<Reply>,
}

#[derive(Deserialize)]
struct Reply {
    #[serde(default)]
    title: String,
}

#[derive(Deserialize)]
struct Context {
    id: String,
}

#[derive(Deserialize)]
struct Status {
    #[serde(default)]
    status: String,
    #[serde(default)]
    recipient_id: String,
    #[serde(default)]
    errors: Vec<Problem>,
}

/// An error as the Graph API and the webhook's statuses report one.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct Problem {
    #[serde(default)]
    pub(crate) code: u64,
    #[serde(default)]
    pub(crate) message: String,
    #[serde(default)]
    pub(crate) title: String,
    #[serde(default)]
    pub(crate) error_data: Option<Details>,
}

#[derive(Debug, Default, Deserialize)]
pub(crate) struct Details {
    #[serde(default)]
    pub(crate) details: String,
}

impl Problem {
    /// What it says, with its code.
    pub(crate) fn said(&self) -> String {
        let text = [self.message.as_str(), self.title.as_str()]
            .into_iter()
            .find(|text| !text.is_empty())
            .unwrap_or("no reason given");
        match self.error_data.as_ref().filter(|d| !d.details.is_empty()) {
            Some(data) => format!("{text} ({}; code {})", data.details, self.code),
            None => format!("{text} (code {})", self.code),
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    const PHONE: &str = "1065403";

    fn notification(value: serde_json::Value) -> Vec<u8> {
        json!({"object": "whatsapp_business_account", "entry": [{"id": "WABA", "changes": [
            {"field": "messages", "value": value}]}]})
        .to_string()
        .into_bytes()
    }

    fn metadata() -> serde_json::Value {
        json!({"display_phone_number": "15550001111", "phone_number_id": PHONE})
    }

    #[test]
    fn only_the_apps_signature_over_the_very_body_passes() {
        let body = br#"{"entry":[]}"#;
        let key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, b"s3cr3t");
        let tag = ring::hmac::sign(&key, body);
        let hex: String = tag.as_ref().iter().map(|b| format!("{b:02x}")).collect();
        let header = format!("sha256={hex}");
        assert!(signed("s3cr3t", Some(header.as_bytes()), body));
        assert!(!signed("other", Some(header.as_bytes()), body));
        assert!(!signed(
            "s3cr3t",
            Some(header.as_bytes()),
            br#"{"entry":[1]}"#
        ));
        assert!(
            !signed("s3cr3t", Some(hex.as_bytes()), body),
            "no sha256= prefix"
        );
        assert!(!signed("s3cr3t", Some(b"sha256=zz"), body));
        assert!(!signed("s3cr3t", None, body));
    }

    #[test]
    fn texts_files_and_replies_are_for_the_agent_and_reactions_are_not() {
        let body = notification(
            json!({"messaging_product": "whatsapp", "metadata": metadata(),
            "contacts": [{"profile": {"name": "Ada"}, "wa_id": "4915100"}],
            "messages": [
                {"from": "4915100", "id": "wamid.1", "timestamp": "1700000000", "type": "text",
                    "text": {"body": "hello"}, "context": {"from": "15550001111", "id": "wamid.0"}},
                {"from": "4915100", "id": "wamid.2", "timestamp": "1700000001", "type": "audio",
                    "audio": {"id": "m77", "mime_type": "audio/ogg; codecs=opus", "voice": true}},
                {"from": "4915100", "id": "wamid.3", "timestamp": "1700000002", "type": "reaction",
                    "reaction": {"message_id": "wamid.9", "emoji": "👍"}},
                {"from": "4915100", "id": "wamid.4", "timestamp": "1700000003", "type": "location",
                    "location": {"latitude": 52.5, "longitude": 13.4}}]}),
        );
        let read = read(&body, PHONE).expect("reads");
        let [(first, at), (voice, _), (reaction, _), (location, _)] = &read.messages[..] else {
            panic!("four messages: {read:?}");
        };
        let Incoming::Message(first) = first else {
            panic!("{first:?}")
        };
        assert_eq!(
            (first.chat.as_str(), first.name.as_str()),
            ("4915100", "Ada")
        );
        assert_eq!(
            (first.text.as_str(), first.reply_to.as_deref()),
            ("hello", Some("wamid.0"))
        );
        assert_eq!(*at, 1_700_000_000);
        let Incoming::Message(voice) = voice else {
            panic!("{voice:?}")
        };
        let file = &voice.files[0];
        assert_eq!(
            (file.url.as_str(), file.mime.as_deref(), file.voice),
            ("m77", Some("audio/ogg"), true)
        );
        assert_eq!(*reaction, Incoming::Ignore("a reaction"));
        let Incoming::Message(location) = location else {
            panic!("{location:?}")
        };
        assert!(location.text.contains("location"), "said, not dropped");
    }

    #[test]
    fn another_numbers_messages_are_not_this_channels_and_failures_are_read() {
        let other = notification(json!({"metadata": {"phone_number_id": "999"},
            "messages": [{"from": "1", "id": "w", "timestamp": "1", "type": "text", "text": {"body": "x"}}]}));
        assert!(read(&other, PHONE).expect("reads").messages.is_empty());
        let failed = notification(
            json!({"metadata": metadata(), "statuses": [{"id": "wamid.5",
            "status": "failed", "timestamp": "1", "recipient_id": "4915100",
            "errors": [{"code": 131047, "title": "Re-engagement message",
                "error_data": {"details": "More than 24 hours have passed"}}]}]}),
        );
        let read = read(&failed, PHONE).expect("reads");
        assert_eq!(read.failed.len(), 1);
        assert!(read.failed[0].1.contains("131047"), "{:?}", read.failed);
        assert!(super::read(b"not json", PHONE).is_err());
    }
}
