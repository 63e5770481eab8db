//! Runs in sessions of their own: a job with `session = "isolated"` runs as a message of
//! the internal channel `cron`, chat `<job id>` — so its turn has its own session,
//! `cron_<job id>`, with the same journal, ordering and limits as any chat's — and
//! [`IsolatedRuns`], that channel, posts what the turn says to the job's chat: its answer
//! (unless it is quiet, see [`is_quiet`]), and what it sends with the `message` tool. The
//! rest of a turn (typing, deltas, tool progress) stays inside; a failed run is told by the
//! scheduler once it has given up on it. Nobody reads the `cron` channel, so a run there
//! cannot ask anything (questions and approvals are refused at once).

use async_trait::async_trait;
use std::sync::Arc;
use switchboard_core::{
    Bus, ChannelName, ChatId, CoreError, InternalChannel, OutboundKind, OutboundMessage, is_quiet,
};

use super::jobs::{Asker, Jobs};

/// The internal channel isolated runs are messages of.
pub const CHANNEL: &str = "cron";

/// The `cron` channel: posts isolated runs' answers to their jobs' chats.
pub(crate) struct IsolatedRuns {
    pub(crate) jobs: Jobs,
    pub(crate) hub: Arc<dyn Bus>,
}

#[async_trait]
impl InternalChannel for IsolatedRuns {
    fn name(&self) -> ChannelName {
        ChannelName::from(CHANNEL)
    }

    async fn send(&self, message: OutboundMessage) -> Result<(), CoreError> {
        let kind = match message.kind {
            OutboundKind::Message(text) if is_quiet(&text) => {
                tracing::debug!(job = %message.chat_id, "a scheduled run had nothing to say");
                return Ok(());
            }
            OutboundKind::Message(text) | OutboundKind::Post(text) => OutboundKind::Post(text),
            OutboundKind::Notice(text) => OutboundKind::Notice(text),
            _ => return Ok(()),
        };
        let id = message.chat_id.as_str();
        let job = self
            .jobs
            .list(&Asker::Operator)
            .await
            .map_err(|message| CoreError::Unavailable {
                channel: CHANNEL.into(),
                message,
            })?
            .into_iter()
            .find(|job| job.id == id);
        let Some(job) = job else {
            tracing::warn!(
                job = id,
                "a scheduled run's job is gone; its answer is dropped"
            );
            return Ok(());
        };
        let post = OutboundMessage {
            channel: ChannelName::from(job.channel.as_str()),
            chat_id: ChatId::from(job.chat_id.as_str()),
            reply_to: None,
            kind,
            cursor: None,
            turn: None,
        };
        // Delivered before this returns: the run's `done` (behind this in its lane) then
        // means its answer reached the chat.
        self.hub.deliver_outbound(post).await.map(drop)
    }
}
