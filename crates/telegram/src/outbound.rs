//! Telegram as a [`Surface`] for the shared [`Replies`](switchboard_adapter::Replies): the
//! final reply's parts rendered as Telegram HTML (plain text if Telegram refuses it), drafts
//! and notices as plain text, a reply to the person's message where asked, "typing…" in
//! the chat's topic.

use std::time::Duration;

use async_trait::async_trait;
use switchboard_adapter::{Form, Measure, Said, Surface, Upload, telegram_html};
use switchboard_core::{ChatId, CoreError, MediaLimits};
use teloxide::Bot;
use teloxide::payloads::SendChatActionSetters;
use teloxide::prelude::Requester;
use teloxide::types::{ChatAction, ChatId as TgChatId, MessageId, ThreadId};

use crate::api::{self, CHANNEL_NAME, MESSAGE_LIMIT};
use crate::convert::destination;

/// "typing…" lasts about five seconds on Telegram; it is renewed a little sooner.
const TYPING_EVERY: Duration = Duration::from_millis(4500);

/// The Bot API calls replies are made of.
pub(crate) struct Telegram {
    pub(crate) bot: Bot,
}

#[async_trait]
impl Surface for Telegram {
    type Place = (TgChatId, Option<ThreadId>);
    const CHANNEL: &'static str = CHANNEL_NAME;
    const PLATFORM: &'static str = "Telegram";

    fn place(&self, chat: &ChatId) -> Result<Self::Place, CoreError> {
        destination(chat.as_str()).ok_or_else(|| CoreError::Channel {
            channel: CHANNEL_NAME.into(),
            message: format!("`{chat}` is not a Telegram chat"),
        })
    }

    fn limit(&self) -> (usize, Measure) {
        (MESSAGE_LIMIT, Measure::Utf16)
    }

    fn typing_every(&self) -> Duration {
        TYPING_EVERY
    }

    async fn send(
        &self,
        &(chat, topic): &Self::Place,
        said: Said<'_>,
    ) -> Result<String, CoreError> {
        let reply_to = said
            .answering
            .filter(|_| said.as_reply)
            .and_then(|id| id.as_str().parse::<i32>().ok());
        let html = (said.form == Form::Reply).then(|| telegram_html(said.text));
        api::send(&self.bot, chat, topic, html.as_deref(), said.text, reply_to)
            .await
            .map(|id| id.0.to_string())
    }

    async fn edit(
        &self,
        &(chat, _topic): &Self::Place,
        message: &str,
        said: Said<'_>,
    ) -> Result<(), CoreError> {
        let id = MessageId(message.parse().unwrap_or_default());
        let html = (said.form == Form::Reply).then(|| telegram_html(said.text));
        api::edit(&self.bot, chat, id, html.as_deref(), said.text).await
    }

    fn media(&self) -> MediaLimits {
        api::MEDIA
    }

    async fn send_file(
        &self,
        &(chat, topic): &Self::Place,
        upload: Upload<'_>,
    ) -> Result<String, CoreError> {
        let reply_to = upload
            .answering
            .filter(|_| upload.as_reply)
            .and_then(|id| id.as_str().parse::<i32>().ok());
        let file = api::FileOut {
            path: upload.path,
            name: &upload.file.name,
            mime: &upload.file.mime,
            kind: upload.file.kind,
            caption: upload.caption,
        };
        api::send_file(&self.bot, chat, topic, file, reply_to)
            .await
            .map(|id| id.0.to_string())
    }

    async fn typing(&self, &(chat, topic): &Self::Place) -> Result<(), CoreError> {
        let mut request = self.bot.send_chat_action(chat, ChatAction::Typing);
        if let Some(topic) = topic {
            request = request.message_thread_id(topic);
        }
        match tokio::time::timeout(api::CALL_TIMEOUT, request.into_future()).await {
            Ok(result) => result.map(drop).map_err(api::core_error),
            Err(_) => Err(CoreError::Unavailable {
                channel: CHANNEL_NAME.into(),
                message: "sendChatAction did not answer in time".into(),
            }),
        }
    }
}
