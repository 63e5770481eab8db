//! From a platform's message to the hub, the steps every push platform shares — so a channel
//! writes only how its platform's payloads read ([`Arrival`]) and how its files are fetched
//! ([`Fetch`]).
//!
//! A message for the agent is first taken into the channel's [`Inbox`] ([`Intake::keep`]:
//! fsynced, before the platform is told it arrived where it waits for that), then admitted
//! in order within its chat ([`Intake::admit`], over [`PerChat`]: beside other chats' when it
//! has files to fetch). Admitting asks the [`Gate`] who may talk — a pairing code answered in
//! a private chat ([`say`]), silence in a group — then saves its files under the workspace
//! (each over its cap or off the platform told in the text instead) and publishes it, its
//! ack settling the inbox entry once its fate is known. What the inbox holds at a start is
//! what an earlier daemon took in and never saw through: [`Intake::open_inbox`] admits it
//! again, in order, before anything new.

use std::path::PathBuf;
use std::sync::Arc;

use async_trait::async_trait;
use axum::body::Bytes;
use futures::stream::BoxStream;
use serde::{Deserialize, Deserializer, Serialize};
use switchboard_core::{
    Attachment, Bus, ChatId, InboundMessage, MessageId, OutboundKind, OutboundMessage, TurnEnd,
};

use crate::gate::{Gate, Sender};
use crate::inbox::{Inbox, InboxEntry, InboxError};
use crate::media::{self, Incoming as IncomingFile};
use crate::pairing::Verdict;
use crate::per_chat::PerChat;
use crate::remembered::Remembered;

/// Chats remembered since the start (who the agent may write to unasked); beyond, the
/// table starts over.
pub const MAX_KNOWN_CHATS: usize = 10_000;

/// A message for the agent, as every intake reads it (and as the inbox keeps it).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Arrival {
    /// The chat, as the channel names it.
    pub chat: String,
    /// Whether it is a private chat with its author (pairing codes are sent only there).
    pub private: bool,
    /// The author's id on the platform.
    #[serde(deserialize_with = "id")]
    pub sender: String,
    /// Their username, where the allow list may name people by it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub username: Option<String>,
    /// How they are shown to the operator approving a code.
    #[serde(default)]
    pub name: String,
    /// The message's id.
    pub message: String,
    /// Its text, the bot's mentions taken out.
    pub text: String,
    /// The message it replies to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reply_to: Option<String>,
    /// Its files, fetched when it is admitted.
    #[serde(default)]
    pub files: Vec<FileRef>,
}

/// What a platform's event is.
#[derive(Debug, PartialEq, Eq)]
pub enum Incoming {
    /// Not for the agent, and why.
    Ignore(&'static str),
    /// For the agent.
    Message(Box<Arrival>),
}

/// A file a message came with, not yet fetched.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileRef {
    /// Its name as the sender gave it.
    pub name: String,
    /// Where the platform has it: an address, or the platform's id of it.
    pub url: String,
    /// Its size as the platform tells it (0 when it does not).
    pub size: u64,
    /// Its MIME type, if known.
    pub mime: Option<String>,
    /// A voice message (heard, and answered in voice).
    #[serde(default)]
    pub voice: bool,
    /// How long it plays, for audio.
    #[serde(default)]
    pub duration_ms: Option<u64>,
}

/// A file's bytes as they come.
pub type Chunks = BoxStream<'static, Result<Bytes, String>>;

/// What a channel's intake asks of its platform.
#[async_trait]
pub trait Fetch: Send + Sync + 'static {
    /// Starts fetching `file` (its size was checked against the cap, and the bytes are
    /// counted again as they come): only from the platform's own hosts, or why not.
    async fn fetch(&self, file: &FileRef) -> Result<Chunks, String>;

    /// Notes a message let in, before it is published (Discord remembers its author).
    fn admitted(&self, _arrival: &Arrival) {}
}

/// What admitting a channel's messages needs.
pub struct IntakeParts {
    /// The channel's name (its sessions' prefix, its folder under `media/`).
    pub channel: &'static str,
    /// The platform's name, in logs.
    pub platform: &'static str,
    pub hub: Arc<dyn Bus>,
    pub gate: Arc<Gate>,
    /// Files go under the workspace's `media/<channel>/`.
    pub workspace: PathBuf,
    /// A file's cap, and the config key that sets it.
    pub max_attachment_bytes: u64,
    pub cap_key: &'static str,
}

/// Admitting a message: who may talk, its files, the hub. Shared by the channel (which asks
/// it who may be written to) and its intake's work in flight.
pub struct Admit {
    parts: IntakeParts,
    fetch: Arc<dyn Fetch>,
    /// Chats seen since the start, with the person of each private chat (`None` for a
    /// group): who the agent may write to unasked.
    chats: Remembered<String, Option<String>>,
}

impl Admit {
    /// Admits with `parts`, fetching files from `fetch`.
    pub fn new(parts: IntakeParts, fetch: Arc<dyn Fetch>) -> Self {
        Self {
            parts,
            fetch,
            chats: Remembered::new(MAX_KNOWN_CHATS),
        }
    }

    /// The channel's gate.
    pub fn gate(&self) -> &Gate {
        &self.parts.gate
    }

    /// Whether the agent may write to `chat` unasked: a private chat's person must still be
    /// allowed; a group was let in by an allowed member. A chat not seen since the daemon
    /// started is refused.
    pub async fn may_notify(&self, chat: &ChatId) -> bool {
        match self.chats.get(chat.as_str()) {
            None => false,
            Some(None) => true,
            Some(Some(person)) => self.parts.gate.allows(&person, None).await,
        }
    }

    /// Lets `arrival` in, or answers a pairing code, or drops it; an inbox entry not for
    /// the agent is settled here, one let in by its message's ack.
    pub async fn admit(&self, arrival: Arrival, entry: Option<InboxEntry>) {
        let parts = &self.parts;
        let verdict = parts
            .gate
            .verdict(Sender {
                id: &arrival.sender,
                username: arrival.username.as_deref(),
                name: if arrival.name.is_empty() {
                    &arrival.sender
                } else {
                    &arrival.name
                },
                private: arrival.private,
            })
            .await;
        let chat = ChatId::from(arrival.chat.as_str());
        match verdict {
            Verdict::Allowed => return self.publish(arrival, entry).await,
            Verdict::Pair(text) => {
                tracing::info!(platform = parts.platform, sender = %arrival.sender, "an unknown sender got a pairing code");
                let reply_to = Some(MessageId::from(arrival.message.as_str()));
                say(&parts.hub, parts.channel, &chat, reply_to, text).await;
            }
            Verdict::Ignore => {
                tracing::debug!(platform = parts.platform, sender = %arrival.sender, %chat, "a message from a sender who may not talk");
            }
        }
        // Not for the agent: nothing to take up again.
        if let Some(entry) = entry {
            entry.settle();
        }
    }

    async fn publish(&self, arrival: Arrival, entry: Option<InboxEntry>) {
        let parts = &self.parts;
        let mut content = arrival.text.clone();
        let mut attachments = Vec::new();
        for file in &arrival.files {
            match self.save(&arrival, file).await {
                Ok(attachment) => attachments.push(Attachment {
                    duration_ms: file.duration_ms,
                    voice: file.voice,
                    ..attachment
                }),
                Err(why) => media::not_saved(&mut content, parts.channel, &file.name, &why),
            }
        }
        self.fetch.admitted(&arrival);
        let person = arrival.private.then(|| arrival.sender.clone());
        self.chats.note(arrival.chat.clone(), person);
        let mut message = InboundMessage::text(
            parts.channel.into(),
            arrival.chat.as_str().into(),
            arrival.sender.as_str().into(),
            content,
        );
        message.id = Some(MessageId::from(arrival.message.as_str()));
        message.reply_to = arrival.reply_to.map(MessageId::from);
        message.attachments = attachments;
        // Settled once its fate is known; one left unprocessed (the daemon stopped first)
        // stays for the next start.
        message.ack = entry.map(InboxEntry::ack);
        if let Err(err) = parts.hub.publish_inbound(message).await {
            tracing::info!(platform = parts.platform, error = %err, "a message was not taken");
        }
    }

    /// Saves one file under the workspace: refused over the cap before it is fetched, and
    /// cut off when more bytes come than the platform said.
    async fn save(&self, arrival: &Arrival, file: &FileRef) -> Result<Attachment, String> {
        let parts = &self.parts;
        let incoming = IncomingFile {
            channel: parts.channel,
            chat: &arrival.chat,
            message: &arrival.message,
            name: &file.name,
            mime: file.mime.as_deref(),
            max_bytes: parts.max_attachment_bytes,
            cap_key: parts.cap_key,
        };
        if file.size > parts.max_attachment_bytes {
            return Err(incoming.too_large());
        }
        let chunks = self.fetch.fetch(file).await?;
        media::save(&parts.workspace, incoming, chunks).await
    }
}

/// A channel's intake: its inbox and its messages in order per chat. Held by the channel's
/// one running task (kept across its restarts, so the inbox is opened once).
pub struct Intake {
    admit: Arc<Admit>,
    per_chat: PerChat,
    inbox: Option<Inbox>,
    inbox_path: PathBuf,
}

impl Intake {
    /// An intake admitting through `admit`, its inbox at `inbox_path` (opened by the first
    /// run).
    pub fn new(admit: Arc<Admit>, inbox_path: PathBuf) -> Self {
        Self {
            admit,
            per_chat: PerChat::default(),
            inbox: None,
            inbox_path,
        }
    }

    /// Opens the inbox (once: a restarted run keeps it) and admits again what it holds from
    /// an earlier daemon, in order.
    pub async fn open_inbox(&mut self) -> Result<Inbox, InboxError> {
        if let Some(inbox) = &self.inbox {
            return Ok(inbox.clone());
        }
        let (inbox, taken) = Inbox::opened(&self.inbox_path).await?;
        let platform = self.admit.parts.platform;
        if !taken.is_empty() {
            tracing::info!(
                platform,
                messages = taken.len(),
                "taking up messages a previous run did not handle"
            );
        }
        for waiting in taken {
            match Stored::deserialize(waiting.body) {
                Ok(stored) => self.admit(stored.arrival(), Some(waiting.entry)).await,
                Err(err) => {
                    tracing::warn!(platform, error = %err, "an inbox message that cannot be read was skipped");
                    waiting.entry.settle();
                }
            }
        }
        self.inbox = Some(inbox.clone());
        Ok(inbox)
    }

    /// Takes `arrival` into the inbox and admits it. One the inbox refuses (full, too large,
    /// a disk error) is still admitted, without a place to be taken up from after a crash.
    pub async fn take(&mut self, arrival: Arrival) {
        let entry = match &self.inbox {
            Some(inbox) => keep(inbox, &arrival, self.admit.parts.platform)
                .await
                .unwrap_or_default(),
            None => None,
        };
        self.admit(arrival, entry).await;
    }

    /// Admits `arrival`, in order within its chat (beside other chats' when it has files).
    pub async fn admit(&mut self, arrival: Arrival, entry: Option<InboxEntry>) {
        let chat = arrival.chat.clone();
        let quick = arrival.files.is_empty();
        let admit = self.admit.clone();
        let work = async move { admit.admit(arrival, entry).await };
        self.per_chat.run(&chat, quick, work).await;
    }
}

/// Takes `arrival` into `inbox` (off the runtime's threads: it is fsynced). A full inbox is
/// an error — a platform that delivers again is told to, later; any other failure is
/// logged, and the message goes on without its place (`Ok(None)`).
pub async fn keep(
    inbox: &Inbox,
    arrival: &Arrival,
    platform: &str,
) -> Result<Option<InboxEntry>, InboxError> {
    let body = match serde_json::to_value(arrival) {
        Ok(body) => body,
        Err(err) => {
            tracing::warn!(platform, error = %err, "a message that cannot be written down was not kept in the inbox");
            return Ok(None);
        }
    };
    match inbox.keep(body).await {
        Ok(entry) => Ok(Some(entry)),
        Err(InboxError::Full) => Err(InboxError::Full),
        Err(err) => {
            tracing::warn!(platform, error = %err, "a message not kept in the inbox (it is handled, but not taken up again after a crash)");
            Ok(None)
        }
    }
}

/// An inbox entry: an [`Arrival`], or as the versions before it kept one (`{"received":
/// …}`, Discord's author's username beside it).
#[derive(Deserialize)]
#[serde(untagged)]
enum Stored {
    Before {
        received: Arrival,
        #[serde(default)]
        username: Option<String>,
    },
    Now(Arrival),
}

impl Stored {
    fn arrival(self) -> Arrival {
        match self {
            Stored::Now(arrival) => arrival,
            Stored::Before { received, username } => Arrival {
                username: username.or(received.username),
                ..received
            },
        }
    }
}

/// A platform's id, as a string or (Discord's, before) a number.
fn id<'de, D: Deserializer<'de>>(deserializer: D) -> Result<String, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Id {
        Text(String),
        Number(u64),
    }
    Ok(match Id::deserialize(deserializer)? {
        Id::Text(text) => text,
        Id::Number(number) => number.to_string(),
    })
}

/// Answers `text` in `chat` outside a turn (a pairing code), through the chat's delivery
/// lane, as a reply to `reply_to`.
pub async fn say(
    hub: &Arc<dyn Bus>,
    channel: &str,
    chat: &ChatId,
    reply_to: Option<MessageId>,
    text: String,
) {
    for kind in [
        OutboundKind::Message(text),
        OutboundKind::Done(TurnEnd::NotATurn),
    ] {
        let message = OutboundMessage {
            channel: channel.into(),
            chat_id: chat.clone(),
            reply_to: reply_to.clone(),
            kind,
            cursor: None,
            turn: None,
        };
        if let Err(err) = hub.publish_outbound(message).await {
            tracing::warn!(channel, error = %err, "could not answer outside a turn");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_inbox_entry_of_the_versions_before_reads_as_an_arrival() {
        let discord = serde_json::json!({"received": {"chat": "9", "private": true,
            "sender": 42, "name": "Ada", "message": "m1", "text": "hi", "reply_to": null,
            "files": [{"name": "a.ogg", "url": "https://cdn.discordapp.com/a.ogg", "size": 3,
                "mime": "audio/ogg", "duration_ms": 1200, "voice": true}]},
            "username": "ada"});
        let arrival = Stored::deserialize(discord).expect("Discord's").arrival();
        assert_eq!(arrival.sender, "42");
        assert_eq!(arrival.username.as_deref(), Some("ada"));
        assert!(arrival.files[0].voice);
        assert_eq!(arrival.files[0].duration_ms, Some(1200));

        let slack = serde_json::json!({"received": {"chat": "C1:171.2", "private": false,
            "sender": "U7", "message": "171.3", "text": "hi",
            "files": [{"name": "n.txt", "url": "https://files.slack.com/n", "size": 5,
                "mime": null}]}});
        let arrival = Stored::deserialize(slack).expect("Slack's").arrival();
        assert_eq!(arrival.sender, "U7");
        assert_eq!(arrival.name, "");
        assert!(!arrival.files[0].voice);
    }

    #[test]
    fn an_arrival_reads_back_as_it_was_kept() {
        let arrival = Arrival {
            chat: "c".into(),
            private: true,
            sender: "+4917".into(),
            username: Some("ada".into()),
            name: "Ada".into(),
            message: "wamid.1".into(),
            text: "hi".into(),
            reply_to: Some("wamid.0".into()),
            files: vec![FileRef {
                name: "v.ogg".into(),
                url: "77".into(),
                size: 0,
                mime: Some("audio/ogg".into()),
                voice: true,
                duration_ms: None,
            }],
        };
        let body = serde_json::to_value(&arrival).expect("written");
        assert_eq!(Stored::deserialize(body).expect("read").arrival(), arrival);
    }
}
