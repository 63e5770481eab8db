//! [`KeptChats`]: what a gateway keeps, in the state every gateway of a cluster shares, of
//! its delivery to each chat of a platform channel — so that the standby that takes the
//! channel's connection over goes on from there instead of starting again beside it:
//!
//! - the running turn's **draft** message: the standby edits that one on to the final reply,
//!   rather than sending a new draft and leaving the dead gateway's fragment behind;
//! - how many **parts** of the turn's final reply went out: the standby sends only the rest
//!   (none, when the dead gateway had finished the draft but not said so to the stream);
//! - the **cursor** of the last frame of the chat kept: frames up to it that the stream
//!   offers again (the last holder took them and did not acknowledge them) are skipped;
//! - whether the turn is **done**: a turn run again after its reply went out (its worker was
//!   paused and another took it up) streams nothing more into the chat.
//!
//! It is written at three points of a turn — its draft sent, its final reply out, its end —
//! not at each draft edit: what comes again between them is a draft edit, which does no
//! harm. It is read when a turn's first frame arrives. In one process nothing takes a
//! connection over, and nothing is kept.

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use switchboard_core::state::segment;
use switchboard_core::{ChatId, StateStore};

/// What is kept of one chat.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Kept {
    /// The stream position of the last frame of the chat delivered and kept.
    pub cursor: u64,
    /// The turn these are of: the id of the inbound message whose turn it is (`None`: a
    /// turn of a message without an id).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub turn: Option<String>,
    /// The running turn's draft message, once sent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub draft: Option<String>,
    /// Parts of the turn's final reply that went out.
    #[serde(default)]
    pub delivered: usize,
    /// The turn ended here (its `done` went through): what comes of it later — the same turn
    /// run again by another worker, whose reply the bus drops as a repeat — is not shown.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub done: bool,
}

/// The kept delivery state of one channel's chats. Cloning shares it.
#[derive(Clone)]
pub struct KeptChats {
    state: Arc<dyn StateStore>,
    channel: String,
}

impl KeptChats {
    /// The kept state of `channel`'s chats, in `state` (a cluster's bucket).
    pub fn new(state: Arc<dyn StateStore>, channel: &str) -> Self {
        Self {
            state,
            channel: channel.to_owned(),
        }
    }

    fn key(&self, chat: &ChatId) -> String {
        format!(
            "delivery/{}/{}",
            segment(&self.channel),
            segment(chat.as_str())
        )
    }

    /// What is kept of `chat`; nothing when nothing is, or it cannot be read (logged: the
    /// delivery goes on as if this gateway had always had the chat).
    pub async fn get(&self, chat: &ChatId) -> Option<Kept> {
        match self.state.get(&self.key(chat)).await {
            Ok(stored) => stored.and_then(|stored| serde_json::from_slice(&stored.bytes).ok()),
            Err(err) => {
                tracing::warn!(%chat, error = %err, "could not read a chat's kept delivery");
                None
            }
        }
    }

    /// Keeps `kept` for `chat` (a failure is logged: a standby would start that turn anew).
    pub async fn put(&self, chat: &ChatId, kept: &Kept) {
        let Ok(bytes) = serde_json::to_vec(kept) else {
            return;
        };
        if let Err(err) = self.state.put(&self.key(chat), bytes).await {
            tracing::warn!(%chat, error = %err, "could not keep a chat's delivery");
        }
    }
}
