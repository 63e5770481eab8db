//! Who may talk on a channel ([`Gate`]): the allow list, then pairing codes in private
//! chats and silence in group chats, where a code must not be posted.

use std::sync::Arc;
use std::time::SystemTime;

use crate::pairing::{AllowList, Pairing, Verdict};

/// Who may talk to the agent on one channel.
#[derive(Debug)]
pub struct Gate {
    channel: &'static str,
    allow: AllowList,
    pairing: Arc<Pairing>,
}

/// Who wrote, as a [`Gate`] sees it.
#[derive(Clone, Copy, Debug)]
pub struct Sender<'a> {
    /// The platform's id of the person.
    pub id: &'a str,
    /// Their username, where the allow list may name people by it.
    pub username: Option<&'a str>,
    /// How they are shown to the operator approving a code.
    pub name: &'a str,
    /// Whether they wrote in a private chat (a code may be sent there).
    pub private: bool,
}

impl Gate {
    /// The gate of `channel`: `allow` (from its config section), then `pairing`.
    pub fn new(channel: &'static str, allow: AllowList, pairing: Arc<Pairing>) -> Self {
        Self {
            channel,
            allow,
            pairing,
        }
    }

    /// What to do with a message from `sender`: let it in, send a pairing code (private
    /// chats), or drop it.
    pub async fn verdict(&self, sender: Sender<'_>) -> Verdict {
        if self.allow.allows(sender.id, sender.username) {
            Verdict::Allowed
        } else if sender.private {
            let name = match sender.username {
                Some(username) if username != sender.name => {
                    format!("{} (@{username})", sender.name)
                }
                _ => sender.name.to_owned(),
            };
            self.pairing
                .check(
                    self.channel,
                    sender.id,
                    Some(&name),
                    &AllowList::default(),
                    SystemTime::now(),
                )
                .await
        } else if self.pairing.approved(self.channel, sender.id).await {
            Verdict::Allowed
        } else {
            Verdict::Ignore
        }
    }

    /// Whether the person `id` (last seen as `username`) may talk: on the allow list or
    /// approved.
    pub async fn allows(&self, id: &str, username: Option<&str>) -> bool {
        self.allow.allows(id, username) || self.pairing.approved(self.channel, id).await
    }
}
