//! Slack's Web API as the channel calls it, through slack-morphism's client: [`Slack`] is the
//! channel's [`Surface`] — `chat.postMessage` (in the chat's thread, if it is one), and
//! `chat.update` for a streamed reply. A reply's first message carries, as message metadata
//! (invisible in Slack), the `ts` of the person's message it answers. Errors are mapped for
//! delivery: a 429 is `RateLimited` with Slack's `Retry-After`, a network failure or 5xx
//! `Unavailable`, the rest final.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use slack_morphism::errors::SlackClientError;
use slack_morphism::prelude::*;
use switchboard_adapter::{Form, Measure, Said, Surface, Upload, slack_mrkdwn};
use switchboard_core::{ChatId, CoreError, MediaLimits};

/// The channel's name: the prefix of its session keys.
pub const CHANNEL_NAME: &str = "slack";

/// The longest message part sent. Slack takes 40,000 characters but advises 4,000; a part
/// is split in Markdown and grows a little when rendered in mrkdwn.
pub const MESSAGE_LIMIT: usize = 3_900;

/// The metadata event type a reply's first message carries.
pub(crate) const REPLY_METADATA: &str = "switchboard_reply";

/// The Web API client (shared with the Socket Mode listener).
pub(crate) type Client = SlackClient<SlackClientHyperConnector<HttpsConnector>>;
pub(crate) type HttpsConnector =
    hyper_rustls::HttpsConnector<hyper_util::client::legacy::connect::HttpConnector>;

/// A chat's place: its channel, and the thread if the chat is one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Place {
    pub(crate) channel: SlackChannelId,
    pub(crate) thread: Option<SlackTs>,
}

impl Place {
    /// `C123` or `C123:1700000000.000100`.
    pub(crate) fn of(chat: &str) -> Option<Self> {
        let (channel, thread) = match chat.split_once(':') {
            Some((channel, thread)) => (channel, Some(SlackTs(thread.to_owned()))),
            None => (chat, None),
        };
        (!channel.is_empty() && channel.bytes().all(|b| b.is_ascii_alphanumeric())).then(|| Self {
            channel: SlackChannelId(channel.to_owned()),
            thread,
        })
    }
}

/// The channel's Surface.
pub(crate) struct Slack {
    pub(crate) client: Arc<Client>,
    pub(crate) token: SlackApiToken,
}

impl Slack {
    fn content(said: &Said<'_>) -> SlackMessageContent {
        let text = match said.form {
            Form::Reply => slack_mrkdwn(said.text),
            Form::Draft | Form::Notice => escape(said.text),
        };
        let mut content = SlackMessageContent::new().with_text(text);
        if let (true, Some(answering)) = (said.as_reply, said.answering) {
            let payload = HashMap::from([("reply_to".to_owned(), answering.to_string())]);
            content = content.with_metadata(
                SlackMessageMetadata::new(REPLY_METADATA.to_owned()).with_event_payload(payload),
            );
        }
        content
    }
}

#[async_trait]
impl Surface for Slack {
    type Place = Place;
    const CHANNEL: &'static str = CHANNEL_NAME;
    const PLATFORM: &'static str = "Slack";

    fn place(&self, chat: &ChatId) -> Result<Place, CoreError> {
        Place::of(chat.as_str()).ok_or_else(|| CoreError::Channel {
            channel: CHANNEL_NAME.into(),
            message: format!("`{chat}` is not a Slack channel"),
        })
    }

    fn limit(&self) -> (usize, Measure) {
        (MESSAGE_LIMIT, Measure::Chars)
    }

    fn typing_every(&self) -> Duration {
        // Slack shows bots no "typing…" outside its assistant threads.
        Duration::from_secs(3600)
    }

    async fn send(&self, place: &Place, said: Said<'_>) -> Result<String, CoreError> {
        let request =
            SlackApiChatPostMessageRequest::new(place.channel.clone(), Self::content(&said))
                .opt_thread_ts(place.thread.clone())
                .with_unfurl_links(false)
                .with_unfurl_media(false);
        let session = self.client.open_session(&self.token);
        let sent = session.chat_post_message(&request).await.map_err(mapped)?;
        Ok(sent.ts.0)
    }

    async fn edit(&self, place: &Place, message: &str, said: Said<'_>) -> Result<(), CoreError> {
        let request = SlackApiChatUpdateRequest::new(
            place.channel.clone(),
            Self::content(&Said {
                as_reply: false,
                ..said
            }),
            SlackTs(message.to_owned()),
        );
        let session = self.client.open_session(&self.token);
        session
            .chat_update(&request)
            .await
            .map(drop)
            .map_err(mapped)
    }

    async fn typing(&self, _place: &Place) -> Result<(), CoreError> {
        Ok(())
    }

    fn media(&self) -> MediaLimits {
        MEDIA
    }

    /// Slack's external upload, in its three steps: an upload address for the file's name
    /// and length, the bytes posted there, then the upload completed into the chat (its
    /// thread, if it is one) with the caption as its comment. Slack shows pictures and plays
    /// audio itself. The id is the file's (Slack shares it in a message of its own making).
    async fn send_file(&self, place: &Place, upload: Upload<'_>) -> Result<String, CoreError> {
        let bytes = tokio::fs::read(upload.path)
            .await
            .map_err(|err| CoreError::Channel {
                channel: CHANNEL_NAME.into(),
                message: format!("cannot read {}: {err}", upload.file.name),
            })?;
        let session = self.client.open_session(&self.token);
        let asked =
            SlackApiFilesGetUploadUrlExternalRequest::new(upload.file.name.clone(), bytes.len());
        let address = session
            .get_upload_url_external(&asked)
            .await
            .map_err(mapped)?;
        let posted = SlackApiFilesUploadViaUrlRequest::new(
            address.upload_url,
            bytes,
            upload.file.mime.clone(),
        );
        session
            .files_upload_via_url(&posted)
            .await
            .map_err(mapped)?;
        let file = SlackApiFilesComplete::new(address.file_id.clone())
            .with_title(upload.file.name.clone());
        let complete = SlackApiFilesCompleteUploadExternalRequest::new(vec![file])
            .with_channel_id(place.channel.clone())
            .opt_thread_ts(place.thread.clone())
            .opt_initial_comment(upload.caption.map(slack_mrkdwn));
        session
            .files_complete_upload_external(&complete)
            .await
            .map_err(mapped)?;
        Ok(address.file_id.0)
    }
}

/// What a bot may upload here: the daemon's largest kept file (Slack itself takes up to
/// 1 GB), read whole into the upload; a caption of a message's length.
pub const MEDIA: MediaLimits = MediaLimits {
    image: switchboard_core::MAX_MEDIA_BYTES,
    voice: switchboard_core::MAX_MEDIA_BYTES,
    document: switchboard_core::MAX_MEDIA_BYTES,
    caption: MESSAGE_LIMIT,
};

/// Escapes `&`, `<`, `>` as Slack asks of plain text.
fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// A Web API failure, for delivery.
pub(crate) fn mapped(err: SlackClientError) -> CoreError {
    match err {
        SlackClientError::RateLimitError(limit) => CoreError::RateLimited {
            retry_after: limit.retry_after,
        },
        SlackClientError::HttpError(_) | SlackClientError::HttpProtocolError(_) => {
            CoreError::Unavailable {
                channel: CHANNEL_NAME.into(),
                message: err.to_string(),
            }
        }
        other => CoreError::Channel {
            channel: CHANNEL_NAME.into(),
            message: other.to_string(),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_chat_is_a_channel_or_a_thread_of_one() {
        let thread = Place::of("C123:1700000000.000100").expect("a thread");
        assert_eq!(thread.channel.0, "C123");
        assert_eq!(
            thread.thread.map(|t| t.0).as_deref(),
            Some("1700000000.000100")
        );
        assert_eq!(Place::of("D9").map(|p| p.thread), Some(None));
        assert!(Place::of("../etc").is_none());
    }
}
