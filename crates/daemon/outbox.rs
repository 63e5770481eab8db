//! [`HubOutbox`]: where the `message` and `send_file` tools send — the daemon's channels,
//! through the bus's lanes — who they may send to, and what a turn already sent.
//!
//! # Sent once, across a crash
//! A turn that a crash interrupted runs again from its saved history, and its model may ask
//! to send the same text or file again. So what a turn sends is recorded, once the platform
//! took it, in the state store (`outbox/<agent>/<session>`: the turn's inbound id, what was
//! sent — a hash of the text, or of the file's bytes —, where, and the platform's id; the
//! last [`KEPT`] of the session). A send the record already has is not made again: the tool
//! gets the first receipt. The window left is the one every platform leaves (no Bot API call
//! is idempotent): between the platform accepting it and the record being written.

use std::collections::BTreeMap;
use std::sync::Arc;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use switchboard_core::state::{json_change, segment};
use switchboard_core::{
    AgentName, Bus, ChannelName, CoreError, MediaLimits, MediaStore, OutboundKind, OutboundMessage,
    Sent, SessionKey, StateStore,
};
use switchboard_sessions::SessionStore;
use switchboard_tools::{Outbox, Outgoing, SendTo, SentBy, ToolError};

/// How many sends of a session are remembered: far more than one turn makes.
const KEPT: usize = 64;

/// Sends the agents' own messages. Another chat than the turn's own may be written to only
/// when its channel runs, the channel still allows its people
/// ([`switchboard_core::Channel::may_notify`]), and it has a conversation with the agent that
/// sends on record — so an agent can reach the people who talk to it, and no one else (not
/// another agent's people).
pub struct HubOutbox {
    hub: Arc<dyn Bus>,
    /// Each agent's sessions, by agent.
    stores: BTreeMap<AgentName, Arc<dyn SessionStore>>,
    /// What each configured channel's platform takes of files.
    limits: BTreeMap<ChannelName, MediaLimits>,
    /// Where files wait for their channel.
    media: Arc<dyn MediaStore>,
    /// Where what each session's turns sent is recorded.
    state: Arc<dyn StateStore>,
}

impl HubOutbox {
    /// An outbox over `hub`, judging an agent's chats by what its store holds.
    pub fn new(
        hub: Arc<dyn Bus>,
        stores: BTreeMap<AgentName, Arc<dyn SessionStore>>,
        limits: BTreeMap<ChannelName, MediaLimits>,
        media: Arc<dyn MediaStore>,
        state: Arc<dyn StateStore>,
    ) -> Self {
        Self {
            hub,
            stores,
            limits,
            media,
            state,
        }
    }

    /// Whether `from` may write to `to`, which is not the chat its turn answers in.
    async fn may_write(&self, from: &AgentName, to: &SendTo<'_>) -> Result<(), ToolError> {
        let (channel, chat) = (to.channel, to.chat);
        let allowed = match self.hub.may_notify(channel, chat).await {
            Err(CoreError::UnknownChannel(_)) => {
                return Err(ToolError::Denied(format!("no channel `{channel}` runs")));
            }
            Err(err) => return Err(ToolError::Failed(err.to_string())),
            Ok(allowed) => allowed,
        };
        let key = SessionKey::of(channel, chat);
        let Some(store) = self.stores.get(from).cloned() else {
            return Err(ToolError::Failed(format!("no agent is called `{from}`")));
        };
        if !store.has_history(&key).await {
            return Err(ToolError::Denied(format!(
                "{channel} chat {chat} has never talked to the agent; it can only be written to \
                 once it has"
            )));
        }
        if !allowed {
            return Err(ToolError::Denied(format!(
                "the people of {channel} chat {chat} are not allowed to talk to the agent"
            )));
        }
        Ok(())
    }

    /// The record of what `by`'s session sent.
    fn record_key(by: &SentBy<'_>) -> String {
        format!(
            "outbox/{}/{}",
            segment(by.agent.as_str()),
            segment(by.session.as_str())
        )
    }

    /// What the turn already sent there, if it did.
    async fn sent_before(&self, by: &SentBy<'_>, entry: &Record) -> Option<Sent> {
        let stored = match self.state.get(&Self::record_key(by)).await {
            Ok(stored) => stored?,
            Err(err) => {
                tracing::warn!(error = %err, "could not read what this session sent");
                return None;
            }
        };
        let records: Records = serde_json::from_slice(&stored.bytes).ok()?;
        records
            .sent
            .into_iter()
            .find(|kept| kept.same_as(entry))
            .map(|kept| Sent {
                id: kept.id,
                unconfirmed: kept.unconfirmed,
            })
    }

    /// Records that the turn sent `entry`.
    async fn note(&self, by: &SentBy<'_>, entry: Record) {
        let key = Self::record_key(by);
        let mut change = json_change(&key, |records: &mut Records| {
            records.sent.retain(|kept| !kept.same_as(&entry));
            records.sent.push(entry.clone());
            let over = records.sent.len().saturating_sub(KEPT);
            records.sent.drain(..over);
            true
        });
        if let Err(err) = self.state.update(&key, &mut change).await {
            // Sent all the same: only a repeat after a crash would not be recognised.
            tracing::warn!(error = %err, "could not record what was sent");
        }
    }
}

/// What a session's turns sent, newest last.
#[derive(Default, Serialize, Deserialize)]
struct Records {
    sent: Vec<Record>,
}

/// One send of a turn.
#[derive(Clone, Serialize, Deserialize)]
struct Record {
    /// The inbound id of the turn.
    turn: String,
    /// The SHA-256 of what was sent (the text, or the file's bytes and kind).
    what: String,
    /// Where: `<channel>:<chat>`.
    to: String,
    /// The platform's id of it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    id: Option<String>,
    /// Handed to the bus, no receipt yet.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    unconfirmed: bool,
    /// When (milliseconds since the Unix epoch).
    at: u64,
}

impl Record {
    fn same_as(&self, other: &Record) -> bool {
        self.turn == other.turn && self.what == other.what && self.to == other.to
    }
}

impl std::fmt::Debug for HubOutbox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("HubOutbox")
    }
}

#[async_trait]
impl Outbox for HubOutbox {
    async fn send(
        &self,
        by: SentBy<'_>,
        to: SendTo<'_>,
        what: Outgoing,
    ) -> Result<Sent, ToolError> {
        if !to.own {
            self.may_write(by.agent, &to).await?;
        }
        let (digest, kind) = match what {
            Outgoing::Text(text) => (
                hex(&Sha256::digest(text.as_bytes())),
                OutboundKind::Post(text),
            ),
            Outgoing::File(file, sha256) => (
                format!("{sha256}:{}", file.kind.as_str()),
                OutboundKind::File(file),
            ),
        };
        let entry = by.turn.map(|turn| Record {
            turn: turn.as_str().to_owned(),
            what: digest,
            to: format!("{}:{}", to.channel, to.chat),
            id: None,
            unconfirmed: false,
            at: now_ms(),
        });
        if let Some(entry) = &entry
            && let Some(sent) = self.sent_before(&by, entry).await
        {
            tracing::info!(session = %by.session, to = %entry.to,
                "a turn taken up again asked to send what it sent before; not sent twice");
            return Ok(sent);
        }
        let message = OutboundMessage {
            channel: to.channel.clone(),
            chat_id: to.chat.clone(),
            reply_to: to.answering.cloned(),
            kind,
            cursor: None,
            turn: by.turn.filter(|_| to.own).cloned(),
        };
        let sent = self
            .hub
            .deliver_outbound(message)
            .await
            .map_err(|err| ToolError::Failed(format!("it could not be delivered: {err}")))?;
        if let Some(mut entry) = entry {
            entry.id = sent.id.clone();
            entry.unconfirmed = sent.unconfirmed;
            self.note(&by, entry).await;
        }
        Ok(sent)
    }

    fn limits(&self, channel: &ChannelName) -> Result<MediaLimits, ToolError> {
        self.limits.get(channel).copied().ok_or_else(|| {
            ToolError::Denied(format!(
                "no channel `{channel}` is configured to send files to (this turn may run in a \
                 session of its own: name the chat with channel and chat_id)"
            ))
        })
    }

    fn media(&self) -> &Arc<dyn MediaStore> {
        &self.media
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|byte| format!("{byte:02x}")).collect()
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |since| {
            u64::try_from(since.as_millis()).unwrap_or(u64::MAX)
        })
}
