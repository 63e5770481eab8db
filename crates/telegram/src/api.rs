//! Calls to the Bot API as the channel makes them: errors mapped to what delivery acts on
//! (a 429 is `RateLimited` with Telegram's wait, a network failure `Unavailable`, the rest
//! final), and sending HTML with a fall back to plain text when Telegram refuses it.

use std::time::Duration;

use switchboard_core::{CoreError, MediaKind, MediaLimits, error_chain, plain_cause};
use teloxide::payloads::{
    EditMessageTextSetters, SendAudioSetters, SendDocumentSetters, SendMessageSetters,
    SendPhotoSetters, SendVoiceSetters,
};
use teloxide::prelude::Requester;
use teloxide::types::{
    ChatId, InputFile, LinkPreviewOptions, MessageId, ParseMode, ReplyParameters, ThreadId,
};
use teloxide::{ApiError, Bot, RequestError};

/// The channel's name, and the prefix of its session keys.
pub const CHANNEL_NAME: &str = "telegram";

/// Telegram's longest message, in UTF-16 code units.
pub const MESSAGE_LIMIT: usize = 4096;

/// How long one Bot API call (other than a long poll or an upload) may take.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(30);

/// How long an upload may take.
pub const UPLOAD_TIMEOUT: Duration = Duration::from_secs(300);

/// What the Bot API takes of files: photos up to 10 MB, other files up to 50 MB, captions
/// of 1024 characters.
pub const MEDIA: MediaLimits = MediaLimits {
    image: 10 * 1000 * 1000,
    voice: 50 * 1000 * 1000,
    document: 50 * 1000 * 1000,
    caption: 1024,
};

/// A request error as delivery sees it.
pub fn core_error(err: RequestError) -> CoreError {
    match err {
        RequestError::RetryAfter(wait) => CoreError::RateLimited {
            retry_after: Some(wait.duration()),
        },
        RequestError::Network(err) => {
            tracing::debug!(error = %error_chain(&*err), "Telegram: the Bot API call failed");
            CoreError::Unavailable {
                channel: CHANNEL_NAME.into(),
                message: format!("the Bot API cannot be reached: {}", plain_cause(&*err)),
            }
        }
        RequestError::InvalidJson { source, .. } => CoreError::Unavailable {
            channel: CHANNEL_NAME.into(),
            message: format!("the Bot API answered something unreadable: {source}"),
        },
        RequestError::Io(err) => CoreError::Unavailable {
            channel: CHANNEL_NAME.into(),
            message: err.to_string(),
        },
        other => CoreError::Channel {
            channel: CHANNEL_NAME.into(),
            message: other.to_string(),
        },
    }
}

fn timed_out() -> CoreError {
    CoreError::Unavailable {
        channel: CHANNEL_NAME.into(),
        message: format!("the Bot API did not answer within {CALL_TIMEOUT:?}"),
    }
}

/// Sends a message: as HTML when `html` is given (falling back to `plain` if Telegram cannot
/// parse it), else as plain text. Returns its id.
pub async fn send(
    bot: &Bot,
    chat: ChatId,
    topic: Option<ThreadId>,
    html: Option<&str>,
    plain: &str,
    reply_to: Option<i32>,
) -> Result<MessageId, CoreError> {
    let request = |text: &str, parse: bool| {
        let mut request = bot
            .send_message(chat, text)
            .link_preview_options(no_preview());
        if parse {
            request = request.parse_mode(ParseMode::Html);
        }
        if let Some(topic) = topic {
            request = request.message_thread_id(topic);
        }
        if let Some(id) = reply_to {
            request = request.reply_parameters(
                ReplyParameters::new(MessageId(id)).allow_sending_without_reply(),
            );
        }
        request
    };
    if let Some(html) = html.filter(|h| !h.trim().is_empty()) {
        match call(request(html, true)).await {
            Err(Err(RequestError::Api(ApiError::CantParseEntities(why)))) => {
                tracing::warn!(error = %why, "Telegram refused the HTML; sending plain text");
            }
            other => return other.map(|m| m.id).map_err(flatten),
        }
    }
    call(request(plain, false))
        .await
        .map(|m| m.id)
        .map_err(flatten)
}

/// Edits a message's text, like [`send`]; "not modified" counts as done.
pub async fn edit(
    bot: &Bot,
    chat: ChatId,
    message: MessageId,
    html: Option<&str>,
    plain: &str,
) -> Result<(), CoreError> {
    let request = |text: &str, parse: bool| {
        let mut request = bot
            .edit_message_text(chat, message, text)
            .link_preview_options(no_preview());
        if parse {
            request = request.parse_mode(ParseMode::Html);
        }
        request
    };
    if let Some(html) = html.filter(|h| !h.trim().is_empty()) {
        match call(request(html, true)).await {
            Err(Err(RequestError::Api(ApiError::CantParseEntities(why)))) => {
                tracing::warn!(error = %why, "Telegram refused the HTML; editing in plain text");
            }
            Err(Err(RequestError::Api(ApiError::MessageNotModified))) => return Ok(()),
            other => return other.map(|_| ()).map_err(flatten),
        }
    }
    match call(request(plain, false)).await {
        Err(Err(RequestError::Api(ApiError::MessageNotModified))) => Ok(()),
        other => other.map(|_| ()).map_err(flatten),
    }
}

/// A file to send.
pub struct FileOut<'a> {
    /// Where its bytes are.
    pub path: &'a std::path::Path,
    /// Its name.
    pub name: &'a str,
    /// Its MIME type.
    pub mime: &'a str,
    /// What it goes out as.
    pub kind: MediaKind,
    /// Its caption (plain text, within [`MEDIA`]'s caption).
    pub caption: Option<&'a str>,
}

/// Sends a file as a photo, a voice message (OGG/Opus, MP3 or M4A, as `sendVoice` takes
/// them; other audio as `sendAudio`) or a document, within [`UPLOAD_TIMEOUT`]. Returns its
/// message's id.
pub async fn send_file(
    bot: &Bot,
    chat: ChatId,
    topic: Option<ThreadId>,
    file: FileOut<'_>,
    reply_to: Option<i32>,
) -> Result<MessageId, CoreError> {
    let input = InputFile::file(file.path).file_name(file.name.to_owned());
    let reply =
        reply_to.map(|id| ReplyParameters::new(MessageId(id)).allow_sending_without_reply());
    // Each method's request has setters of its own; the same four are set on each.
    macro_rules! upload {
        ($request:expr) => {{
            let mut request = $request;
            if let Some(caption) = file.caption {
                request = request.caption(caption);
            }
            if let Some(topic) = topic {
                request = request.message_thread_id(topic);
            }
            if let Some(reply) = reply {
                request = request.reply_parameters(reply);
            }
            within(UPLOAD_TIMEOUT, request).await
        }};
    }
    let voice_format = matches!(
        file.mime,
        "audio/ogg" | "audio/opus" | "audio/mpeg" | "audio/mp4"
    );
    let sent = match file.kind {
        MediaKind::Image => upload!(bot.send_photo(chat, input)),
        MediaKind::Voice if voice_format => upload!(bot.send_voice(chat, input)),
        MediaKind::Voice => upload!(bot.send_audio(chat, input)),
        MediaKind::Document => upload!(bot.send_document(chat, input)),
    };
    sent.map(|message| message.id).map_err(|err| match err {
        Ok(()) => CoreError::Unavailable {
            channel: CHANNEL_NAME.into(),
            message: format!("the upload did not finish within {UPLOAD_TIMEOUT:?}"),
        },
        Err(err) => core_error(err),
    })
}

/// A call within [`CALL_TIMEOUT`]: `Err(Ok(()))` when it timed out.
async fn call<R>(request: R) -> Result<teloxide::types::Message, Result<(), RequestError>>
where
    R: std::future::IntoFuture<Output = Result<teloxide::types::Message, RequestError>>,
{
    within(CALL_TIMEOUT, request).await
}

/// A call within `limit`: `Err(Ok(()))` when it timed out.
async fn within<R>(
    limit: Duration,
    request: R,
) -> Result<teloxide::types::Message, Result<(), RequestError>>
where
    R: std::future::IntoFuture<Output = Result<teloxide::types::Message, RequestError>>,
{
    match tokio::time::timeout(limit, request.into_future()).await {
        Ok(Ok(message)) => Ok(message),
        Ok(Err(err)) => Err(Err(err)),
        Err(_) => Err(Ok(())),
    }
}

fn flatten(err: Result<(), RequestError>) -> CoreError {
    match err {
        Ok(()) => timed_out(),
        Err(err) => core_error(err),
    }
}

fn no_preview() -> LinkPreviewOptions {
    LinkPreviewOptions {
        is_disabled: true,
        url: None,
        prefer_small_media: false,
        prefer_large_media: false,
        show_above_text: false,
    }
}
