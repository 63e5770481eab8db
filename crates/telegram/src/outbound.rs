//! What a chat is sent while a turn runs: "typing…" kept alive, the reply streamed into a
//! draft edited in place (best effort: a failed edit is skipped, the final message makes up
//! for it), and the final reply split at Telegram's limit and rendered as HTML — its first
//! part edited into the draft, the rest sent after it, replying to the person's message.
//!
//! A chat's messages come from its delivery lane one at a time, so its state needs no
//! more than an uncontended lock. A final reply that failed part-way (a 429 on its third
//! part) is delivered again by the retry wrapper; the parts that went out are counted, so
//! it resumes instead of repeating them.

use std::sync::Arc;
use std::time::Duration;

use dashmap::DashMap;
use switchboard_adapter::{Draft, Measure, Step, split, telegram_html};
use switchboard_core::{ChatId, CoreError, OutboundKind, OutboundMessage};
use teloxide::Bot;
use teloxide::payloads::SendChatActionSetters;
use teloxide::prelude::Requester;
use teloxide::types::{ChatAction, ChatId as TgChatId, MessageId, ThreadId};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::api::{self, CHANNEL_NAME, MESSAGE_LIMIT};
use crate::convert::destination;

/// "typing…" lasts about five seconds on Telegram; it is renewed a little sooner.
const TYPING_EVERY: Duration = Duration::from_millis(4500);
/// A turn that never ends stops showing "typing…" after this.
const TYPING_AT_MOST: Duration = Duration::from_secs(600);

/// One chat's state while a turn runs.
struct ChatOut {
    /// The draft of the reply streaming in, once text came.
    draft: Option<Draft>,
    /// The draft's clock starts with the turn.
    started: Instant,
    /// Parts of the final reply already delivered.
    delivered_parts: usize,
    /// Draft edits wait until then (Telegram asked to slow down).
    cooldown: Option<Instant>,
    /// Cancels the turn's "typing…" keepalive.
    typing: Option<CancellationToken>,
}

impl ChatOut {
    fn new() -> Self {
        Self {
            draft: None,
            started: Instant::now(),
            delivered_parts: 0,
            cooldown: None,
            typing: None,
        }
    }
}

impl Drop for ChatOut {
    fn drop(&mut self) {
        if let Some(typing) = self.typing.take() {
            typing.cancel();
        }
    }
}

/// Sends a channel's outbound messages.
pub(crate) struct Outbound {
    bot: Bot,
    stream: bool,
    edit_interval: Duration,
    /// Chats with a turn running. An entry is made by the turn's first message and removed
    /// by its `Done`; the lock is uncontended (one lane per chat).
    chats: DashMap<ChatId, Arc<tokio::sync::Mutex<ChatOut>>>,
}

impl Outbound {
    pub(crate) fn new(bot: Bot, stream: bool, edit_interval: Duration) -> Self {
        Self {
            bot,
            stream,
            edit_interval,
            chats: DashMap::new(),
        }
    }

    pub(crate) async fn send(&self, message: OutboundMessage) -> Result<(), CoreError> {
        let Some((chat, topic)) = destination(message.chat_id.as_str()) else {
            return Err(CoreError::Channel {
                channel: CHANNEL_NAME.into(),
                message: format!("`{}` is not a Telegram chat", message.chat_id),
            });
        };
        let reply_to = message
            .reply_to
            .as_ref()
            .and_then(|id| id.as_str().parse::<i32>().ok());
        match &message.kind {
            OutboundKind::Done(_) => {
                // The turn is over: drop its state (and stop "typing…").
                self.chats.remove(&message.chat_id);
                return Ok(());
            }
            OutboundKind::Error(text) => {
                let text = format!("⚠️ {text}");
                return api::send(&self.bot, chat, topic, None, &text, reply_to)
                    .await
                    .map(|_| ());
            }
            OutboundKind::Notice(text) => {
                let text = format!("ℹ️ {text}");
                return api::send(&self.bot, chat, topic, None, &text, None)
                    .await
                    .map(|_| ());
            }
            OutboundKind::Post(text) => {
                // Outside any turn: its own parts, never the chat's draft.
                let mut own = ChatOut::new();
                return self.deliver_reply(&mut own, chat, topic, None, text).await;
            }
            OutboundKind::Status(_) | OutboundKind::Tool { .. } => return Ok(()),
            OutboundKind::Delta(_) if !self.stream => return Ok(()),
            _ => {}
        }
        let state = self
            .chats
            .entry(message.chat_id.clone())
            .or_insert_with(|| Arc::new(tokio::sync::Mutex::new(ChatOut::new())))
            .clone();
        let mut out = state.lock().await;
        match message.kind {
            OutboundKind::TurnStarted => {
                *out = ChatOut::new();
                out.typing = Some(self.typing(chat, topic));
                Ok(())
            }
            OutboundKind::Delta(piece) => {
                let now = out.started.elapsed();
                let draft = out.draft.get_or_insert_with(|| {
                    Draft::new(self.edit_interval, MESSAGE_LIMIT, Measure::Utf16)
                });
                let step = draft.push(&piece, now);
                self.draft_step(&mut out, step, chat, topic, reply_to).await;
                Ok(())
            }
            OutboundKind::DraftReset => {
                if let Some(draft) = &mut out.draft {
                    draft.reset();
                }
                Ok(())
            }
            OutboundKind::Message(text) => {
                self.deliver_reply(&mut out, chat, topic, reply_to, &text)
                    .await
            }
            OutboundKind::Error(_)
            | OutboundKind::Notice(_)
            | OutboundKind::Post(_)
            | OutboundKind::Status(_)
            | OutboundKind::Tool { .. }
            | OutboundKind::Done(_) => Ok(()),
        }
    }

    /// Carries out what the draft asks for. Best effort: a draft that could not be sent or
    /// edited is caught up by the next step or by the final reply.
    async fn draft_step(
        &self,
        out: &mut ChatOut,
        step: Step,
        chat: TgChatId,
        topic: Option<ThreadId>,
        reply_to: Option<i32>,
    ) {
        if out.cooldown.is_some_and(|until| Instant::now() < until) {
            return;
        }
        // A write counts from when Telegram answered it: the next one is sent an interval
        // after that, so writes are an interval apart as Telegram sees them, too.
        let result = match step {
            Step::Wait => return,
            Step::Send(text) => api::send(&self.bot, chat, topic, None, &text, reply_to)
                .await
                .map(|id| {
                    let done = out.started.elapsed();
                    if let Some(draft) = &mut out.draft {
                        draft.sent(id.0.to_string(), text, done);
                    }
                }),
            Step::Edit { message, text } => {
                let id = MessageId(message.parse().unwrap_or_default());
                api::edit(&self.bot, chat, id, None, &text).await.map(|()| {
                    let done = out.started.elapsed();
                    if let Some(draft) = &mut out.draft {
                        draft.edited(text, done);
                    }
                })
            }
        };
        match result {
            Ok(()) => {}
            Err(CoreError::RateLimited { retry_after }) => {
                let wait = retry_after.unwrap_or(Duration::from_secs(5));
                tracing::info!(chat = %chat.0, wait_ms = wait.as_millis() as u64,
                    "Telegram is rate limiting the draft; it waits");
                out.cooldown = Some(Instant::now() + wait);
            }
            Err(err) => tracing::debug!(chat = %chat.0, error = %err, "a draft update failed"),
        }
    }

    /// Delivers the final reply: split at the limit, each part as HTML (plain text if
    /// Telegram refuses it), the first edited into the draft if there is one.
    async fn deliver_reply(
        &self,
        out: &mut ChatOut,
        chat: TgChatId,
        topic: Option<ThreadId>,
        reply_to: Option<i32>,
        text: &str,
    ) -> Result<(), CoreError> {
        let mut parts = split(text, MESSAGE_LIMIT, Measure::Utf16);
        if parts.is_empty() {
            parts.push("…".into());
        }
        for (index, part) in parts.iter().enumerate().skip(out.delivered_parts) {
            let html = telegram_html(part);
            let draft_message = out
                .draft
                .as_ref()
                .and_then(|draft| draft.finish(out.started.elapsed()).0.map(str::to_owned));
            match (index, draft_message) {
                (0, Some(message)) => {
                    // Edits stay an interval apart, the last one too.
                    if let Some(draft) = &out.draft {
                        let (_, wait) = draft.finish(out.started.elapsed());
                        tokio::time::sleep(wait).await;
                    }
                    let id = MessageId(message.parse().unwrap_or_default());
                    api::edit(&self.bot, chat, id, Some(&html), part).await?;
                }
                (0, None) => {
                    api::send(&self.bot, chat, topic, Some(&html), part, reply_to).await?;
                }
                _ => {
                    api::send(&self.bot, chat, topic, Some(&html), part, None).await?;
                }
            }
            out.delivered_parts = index + 1;
        }
        Ok(())
    }

    /// Shows "typing…" until the token is cancelled (or [`TYPING_AT_MOST`] passed).
    fn typing(&self, chat: TgChatId, topic: Option<ThreadId>) -> CancellationToken {
        let stop = CancellationToken::new();
        let bot = self.bot.clone();
        let token = stop.clone();
        tokio::spawn(async move {
            let until = Instant::now() + TYPING_AT_MOST;
            while Instant::now() < until {
                let mut request = bot.send_chat_action(chat, ChatAction::Typing);
                if let Some(topic) = topic {
                    request = request.message_thread_id(topic);
                }
                let _ = tokio::time::timeout(api::CALL_TIMEOUT, request.into_future()).await;
                tokio::select! {
                    () = token.cancelled() => return,
                    () = tokio::time::sleep(TYPING_EVERY) => {}
                }
            }
        });
        stop
    }
}
