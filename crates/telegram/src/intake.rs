//! From an update to the hub: is it for the agent (group policy, bots, stickers), may its
//! sender talk (the allow list; a pairing code in a private chat for anyone else; silence
//! in groups, where a code must not be posted), then its files are saved and the message
//! published with an [`Ack`], whose report settles the update.

use std::path::PathBuf;
use std::sync::Arc;

use switchboard_adapter::{Gate, Remembered, Sender, Verdict, say};
use switchboard_core::{Ack, Bus, Fate, InboundMessage, MessageId};
use teloxide::Bot;
use teloxide::types::Update;

use crate::api::CHANNEL_NAME;
use crate::config::GroupPolicy;
use crate::convert::{Incoming, Me, Received, incoming};
use crate::media;

/// What taking an update needs.
pub(crate) struct Intake {
    pub(crate) bot: Bot,
    pub(crate) hub: Arc<dyn Bus>,
    pub(crate) policy: GroupPolicy,
    pub(crate) gate: Gate,
    pub(crate) workspace: PathBuf,
    pub(crate) max_attachment_bytes: u64,
    /// The usernames of senders seen, by id (at most [`MAX_KNOWN_USERNAMES`]): a person on
    /// the allow list by `@username` can be written to unasked once they have written.
    pub(crate) usernames: Remembered<String, String>,
}

/// Usernames remembered at most; beyond, the table starts over.
pub(crate) const MAX_KNOWN_USERNAMES: usize = 10_000;

impl Intake {
    /// Takes one update; `settle` learns its fate, once (when the agent is done with it).
    pub(crate) async fn take(
        &self,
        update: &Update,
        me: &Me,
        settle: impl FnOnce(Fate) + Send + 'static,
    ) {
        match self.read(update, me) {
            Some(received) => self.admit(received, settle).await,
            None => settle(Fate::Dropped),
        }
    }

    /// The message for the agent in an update, or `None` when there is none.
    pub(crate) fn read(&self, update: &Update, me: &Me) -> Option<Box<Received>> {
        match incoming(update, me, self.policy) {
            Incoming::Ignore(why) => {
                tracing::debug!(
                    update = update.id.0,
                    why,
                    "Telegram update not for the agent"
                );
                None
            }
            Incoming::Message(received) => Some(received),
        }
    }

    /// Admits a message read from an update: who may talk, its files, the hub.
    pub(crate) async fn admit(
        &self,
        received: Box<Received>,
        settle: impl FnOnce(Fate) + Send + 'static,
    ) {
        let username = received.username.as_deref();
        if let Some(name) = username {
            self.usernames
                .note(received.sender.clone(), name.to_owned());
        }
        let verdict = self
            .gate
            .verdict(Sender {
                id: &received.sender,
                username,
                name: &received.name,
                private: received.private,
            })
            .await;
        match verdict {
            Verdict::Allowed => self.publish(*received, settle).await,
            Verdict::Pair(text) => {
                tracing::info!(sender = %received.sender, "Telegram: an unknown sender got a pairing code");
                let reply_to = Some(MessageId::from(received.message_id.to_string()));
                say(
                    &self.hub,
                    CHANNEL_NAME,
                    &received.chat.as_str().into(),
                    reply_to,
                    text,
                )
                .await;
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
    pub(crate) async fn allows(&self, sender: &str) -> bool {
        let username = self.usernames.get(sender);
        self.gate.allows(sender, username.as_deref()).await
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
                Ok(attachment) => attachments.push(switchboard_core::Attachment {
                    duration_ms: file.duration_ms,
                    voice: file.voice,
                    ..attachment
                }),
                Err(why) => switchboard_adapter::media::not_saved(
                    &mut content,
                    CHANNEL_NAME,
                    &file.name,
                    &why,
                ),
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
}
