//! From an update to the hub: is it for the agent (group policy, bots, stickers), may its
//! sender talk (the allow list; a pairing code in a private chat for anyone else; silence
//! in groups, where a code must not be posted), then its files are saved and the message
//! published with an [`Ack`], whose report settles the update.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::SystemTime;

use switchboard_adapter::{AllowList, Pairing, Verdict};
use switchboard_core::{
    Ack, ChatHub, Fate, InboundMessage, MessageId, OutboundKind, OutboundMessage, TurnEnd,
};
use teloxide::Bot;
use teloxide::types::Update;

use crate::api::CHANNEL_NAME;
use crate::config::GroupPolicy;
use crate::convert::{Incoming, Me, Received, incoming};
use crate::media;

/// What taking an update needs.
pub(crate) struct Intake {
    pub(crate) bot: Bot,
    pub(crate) hub: ChatHub,
    pub(crate) policy: GroupPolicy,
    pub(crate) allow: AllowList,
    pub(crate) pairing: Arc<Pairing>,
    pub(crate) workspace: PathBuf,
    pub(crate) max_attachment_bytes: u64,
    /// The usernames of senders seen, by id (at most [`MAX_KNOWN_USERNAMES`]): a person on
    /// the allow list by `@username` can be written to unasked once they have written.
    pub(crate) usernames: std::sync::Mutex<std::collections::HashMap<String, String>>,
}

/// Usernames remembered at most; beyond, the table starts over.
const MAX_KNOWN_USERNAMES: usize = 10_000;

impl Intake {
    /// Takes one update; `settle` learns its fate, once (when the agent is done with it).
    pub(crate) async fn take(
        &self,
        update: &Update,
        me: &Me,
        settle: impl FnOnce(Fate) + Send + 'static,
    ) {
        let received = match incoming(update, me, self.policy) {
            Incoming::Ignore(why) => {
                tracing::debug!(
                    update = update.id.0,
                    why,
                    "Telegram update not for the agent"
                );
                settle(Fate::Dropped);
                return;
            }
            Incoming::Message(received) => received,
        };
        let username = received.username.as_deref();
        if let Some(name) = username {
            let mut known = self.usernames.lock().unwrap_or_else(|e| e.into_inner());
            if known.len() >= MAX_KNOWN_USERNAMES {
                known.clear();
            }
            known.insert(received.sender.clone(), name.to_owned());
        }
        let verdict = if self.allow.allows(&received.sender, username) {
            Verdict::Allowed
        } else if received.private {
            let name = match username {
                Some(username) => format!("{} (@{username})", received.name),
                None => received.name.clone(),
            };
            self.pairing.check(
                CHANNEL_NAME,
                &received.sender,
                Some(&name),
                &AllowList::default(),
                SystemTime::now(),
            )
        } else if self.pairing.approved(CHANNEL_NAME, &received.sender) {
            Verdict::Allowed
        } else {
            Verdict::Ignore
        };
        match verdict {
            Verdict::Allowed => self.publish(*received, settle).await,
            Verdict::Pair(text) => {
                tracing::info!(sender = %received.sender, "Telegram: an unknown sender got a pairing code");
                self.reply(&received, text).await;
                settle(Fate::Dropped);
            }
            Verdict::Ignore => {
                tracing::debug!(sender = %received.sender, chat = %received.chat,
                    "Telegram: a message from a sender who may not talk");
                settle(Fate::Dropped);
            }
        }
    }

    /// Whether the person with this id may talk: on the allow list (by id, or by the
    /// username they last wrote with) or approved.
    pub(crate) fn allows(&self, sender: &str) -> bool {
        let username = self
            .usernames
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(sender)
            .cloned();
        self.allow.allows(sender, username.as_deref())
            || self.pairing.approved(CHANNEL_NAME, sender)
    }

    async fn publish(&self, received: Received, settle: impl FnOnce(Fate) + Send + 'static) {
        let mut content = received.text.clone();
        let mut attachments = Vec::new();
        for file in &received.files {
            match media::save(
                &self.bot,
                &self.workspace,
                &received.chat,
                received.message_id,
                file,
                self.max_attachment_bytes,
            )
            .await
            {
                Ok(attachment) => attachments.push(attachment),
                Err(why) => {
                    tracing::warn!(file = %file.name, %why, "Telegram attachment not saved");
                    if !content.is_empty() {
                        content.push('\n');
                    }
                    content.push_str(&format!("[attachment {} was not saved: {why}]", file.name));
                }
            }
        }
        let mut message = InboundMessage::text(
            CHANNEL_NAME.into(),
            received.chat.as_str().into(),
            received.sender.as_str().into(),
            content,
        );
        message.id = Some(MessageId::from(received.message_id.to_string()));
        message.reply_to = received.reply_to.map(|id| MessageId::from(id.to_string()));
        message.attachments = attachments;
        message.ack = Some(Ack::new(settle));
        if let Err(err) = self.hub.publish_inbound(message).await {
            // The ack went with the message: dropped unreported, it says "unprocessed".
            tracing::info!(error = %err, "a Telegram message was not taken");
        }
    }

    /// Answers outside a turn (a pairing code), through the chat's lane.
    async fn reply(&self, received: &Received, text: String) {
        for kind in [
            OutboundKind::Message(text),
            OutboundKind::Done(TurnEnd::NotATurn),
        ] {
            let message = OutboundMessage {
                channel: CHANNEL_NAME.into(),
                chat_id: received.chat.as_str().into(),
                reply_to: Some(MessageId::from(received.message_id.to_string())),
                kind,
            };
            if let Err(err) = self.hub.publish_outbound(message).await {
                tracing::warn!(error = %err, "could not send a pairing code");
            }
        }
    }
}
