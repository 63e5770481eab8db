//! The rooms the bot writes in, as the channel's [`Surface`] ([`Rooms`]): messages sent
//! with the SDK (encrypted in encrypted rooms), a thread's chat answered in its thread,
//! streaming answers edited in place (`m.replace`), files uploaded (encrypted where the room
//! is); and [`Files`], the files people send, fetched and decrypted when admitted.
//!
//! Errors are mapped for delivery: a rate limit (`M_LIMIT_EXCEEDED`) is `RateLimited` with
//! the homeserver's wait, so the chat waits; the homeserver unreachable or failing (5xx) is
//! `Unavailable`; the rest are final, with the homeserver's reason.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use matrix_sdk::media::{MediaFormat, MediaRequestParameters};
use matrix_sdk::ruma::api::client::error::{ErrorKind, RetryAfter};
use matrix_sdk::ruma::api::client::receipt::create_receipt::v3::ReceiptType;
use matrix_sdk::ruma::events::receipt::ReceiptThread;
use matrix_sdk::ruma::events::room::MediaSource;
use matrix_sdk::ruma::{EventId, OwnedEventId, OwnedRoomId, RoomId};
use matrix_sdk::{Client, Room};
use serde_json::{Value, json};
use switchboard_adapter::{
    Arrival, Chunks, Fetch, FileRef, Form, Measure, Said, Surface, Upload, telegram_html,
};
use switchboard_core::{ChatId, CoreError, MediaKind, MediaLimits};
use tokio::sync::OnceCell;

use crate::convert::place_of;

/// The channel's name: the prefix of its session keys.
pub const CHANNEL_NAME: &str = "matrix";

/// The longest message part sent, in characters: its text and its HTML, encrypted, stay well
/// inside the 65,536 bytes an event may take.
pub const MESSAGE_LIMIT: usize = 8_000;

/// What the bot sends of files (Synapse takes 50 MiB by default; `max_upload_size`).
pub(crate) const MEDIA: MediaLimits = MediaLimits {
    image: 50 * 1024 * 1024,
    voice: 50 * 1024 * 1024,
    document: 50 * 1024 * 1024,
    caption: MESSAGE_LIMIT,
};

/// Where a chat's messages go: its room, and the thread's root when it is a thread.
#[derive(Clone, Debug)]
pub(crate) struct Place {
    room: OwnedRoomId,
    thread: Option<OwnedEventId>,
}

/// The bot's client, once the channel logged in.
pub(crate) type Login = Arc<OnceCell<Client>>;

fn logged_in(client: &Login) -> Result<&Client, CoreError> {
    client
        .get()
        .ok_or_else(|| unavailable("the channel has not logged in yet".into()))
}

/// The bot's rooms.
pub(crate) struct Rooms {
    pub(crate) client: Login,
}

impl Rooms {
    fn room(&self, place: &Place) -> Result<Room, CoreError> {
        logged_in(&self.client)?
            .get_room(&place.room)
            .ok_or_else(|| {
                channel_error(format!(
                    "the bot is not in {} (it was never invited, or it left)",
                    place.room
                ))
            })
    }

    /// `content` placed: in its thread, or as a reply to `answering`.
    fn placed(place: &Place, mut content: Value, answering: Option<&str>, as_reply: bool) -> Value {
        let answering = answering.filter(|_| as_reply);
        match (&place.thread, answering) {
            (Some(root), answering) => {
                content["m.relates_to"] = json!({
                    "rel_type": "m.thread",
                    "event_id": root,
                    // Clients without threads see it as a reply: to the message it answers,
                    // else to the thread's root.
                    "is_falling_back": answering.is_none(),
                    "m.in_reply_to": {"event_id": answering.unwrap_or(root.as_str())},
                });
            }
            (None, Some(answering)) => {
                content["m.relates_to"] = json!({"m.in_reply_to": {"event_id": answering}});
            }
            (None, None) => {}
        }
        content
    }

    async fn post(&self, place: &Place, content: Value, doing: &str) -> Result<String, CoreError> {
        let room = self.room(place)?;
        let sent = room
            .send_raw("m.room.message", content)
            .await
            .map_err(|err| mapped(&err, doing))?;
        Ok(sent.event_id.to_string())
    }
}

/// A text as a message's content: the final reply's Markdown rendered (its source the
/// plain body), drafts and notices as they are.
fn text_content(said: &Said<'_>) -> Value {
    match said.form {
        Form::Reply => {
            let html = telegram_html(said.text);
            json!({"msgtype": "m.text", "body": said.text,
                   "format": "org.matrix.custom.html", "formatted_body": html})
        }
        Form::Draft => json!({"msgtype": "m.text", "body": said.text}),
        Form::Notice => json!({"msgtype": "m.notice", "body": said.text}),
    }
}

#[async_trait]
impl Surface for Rooms {
    type Place = Place;
    const CHANNEL: &'static str = CHANNEL_NAME;
    const PLATFORM: &'static str = "Matrix";

    fn place(&self, chat: &ChatId) -> Result<Place, CoreError> {
        let parsed = place_of(chat.as_str()).and_then(|(room, thread)| {
            let room = RoomId::parse(room).ok()?;
            let thread = match thread {
                Some(root) => Some(EventId::parse(root).ok()?),
                None => None,
            };
            Some(Place { room, thread })
        });
        parsed.ok_or_else(|| {
            channel_error(format!(
                "`{chat}` is not a Matrix room (`!room:server`, or `!room:server/$thread`)"
            ))
        })
    }

    fn limit(&self) -> (usize, Measure) {
        (MESSAGE_LIMIT, Measure::Chars)
    }

    fn typing_every(&self) -> Duration {
        // The SDK's typing notice lasts 4 s.
        Duration::from_secs(3)
    }

    async fn send(&self, place: &Place, said: Said<'_>) -> Result<String, CoreError> {
        let answering = said.answering.map(|message| message.as_str());
        let content = Self::placed(place, text_content(&said), answering, said.as_reply);
        self.post(place, content, "sending").await
    }

    async fn edit(&self, place: &Place, message: &str, said: Said<'_>) -> Result<(), CoreError> {
        let new = text_content(&said);
        let mut content = new.clone();
        content["body"] = json!(format!("* {}", said.text));
        if let Some(html) = new["formatted_body"].as_str() {
            content["formatted_body"] = json!(format!("* {html}"));
        }
        content["m.new_content"] = new;
        content["m.relates_to"] = json!({"rel_type": "m.replace", "event_id": message});
        self.post(place, content, "editing").await.map(drop)
    }

    async fn typing(&self, place: &Place) -> Result<(), CoreError> {
        self.room(place)?
            .typing_notice(true)
            .await
            .map_err(|err| mapped(&err, "showing typing"))
    }

    fn media(&self) -> MediaLimits {
        MEDIA
    }

    async fn send_file(&self, place: &Place, upload: Upload<'_>) -> Result<String, CoreError> {
        let file = upload.file;
        let bytes = tokio::fs::read(upload.path)
            .await
            .map_err(|err| channel_error(format!("cannot read {}: {err}", file.name)))?;
        let mime: mime::Mime = file.mime.parse().unwrap_or(mime::APPLICATION_OCTET_STREAM);
        let room = self.room(place)?;
        let encrypted = room
            .latest_encryption_state()
            .await
            .map_err(|err| mapped(&err, "reading the room's encryption"))?
            .is_encrypted();
        let size = bytes.len();
        let source = if encrypted {
            let mut reader = std::io::Cursor::new(bytes);
            let file = logged_in(&self.client)?
                .upload_encrypted_file(&mut reader)
                .await
                .map_err(|err| mapped(&err, "uploading"))?;
            json!({"file": file})
        } else {
            let sent = logged_in(&self.client)?
                .media()
                .upload(&mime, bytes, None)
                .await
                .map_err(|err| mapped(&err, "uploading"))?;
            json!({"url": sent.content_uri})
        };
        let msgtype = match file.kind {
            MediaKind::Image => "m.image",
            MediaKind::Voice => "m.audio",
            MediaKind::Document => "m.file",
        };
        let mut content = json!({
            "msgtype": msgtype,
            "body": upload.caption.unwrap_or(&file.name),
            "filename": file.name,
            "info": {"mimetype": file.mime, "size": size},
        });
        if let Some(caption) = upload.caption {
            content["format"] = json!("org.matrix.custom.html");
            content["formatted_body"] = json!(telegram_html(caption));
        }
        if file.kind == MediaKind::Voice {
            content["org.matrix.msc3245.voice"] = json!({});
        }
        if let (Some(fields), Some(source)) = (content.as_object_mut(), source.as_object()) {
            fields.extend(source.clone());
        }
        let answering = upload.answering.map(|message| message.as_str());
        let content = Self::placed(place, content, answering, upload.as_reply);
        self.post(place, content, "sending a file").await
    }
}

/// The files people send, fetched (and decrypted) through the homeserver's media API.
pub(crate) struct Files {
    pub(crate) client: Login,
}

#[async_trait]
impl Fetch for Files {
    async fn fetch(&self, file: &FileRef) -> Result<Chunks, String> {
        let source: MediaSource = serde_json::from_str(&file.url)
            .map_err(|err| format!("its source cannot be read: {err}"))?;
        let request = MediaRequestParameters {
            source,
            format: MediaFormat::File,
        };
        let bytes = logged_in(&self.client)
            .map_err(|err| err.to_string())?
            .media()
            .get_media_content(&request, false)
            .await
            .map_err(|err| format!("the homeserver did not give it: {err}"))?;
        Ok(Box::pin(futures::stream::once(
            async move { Ok(bytes.into()) },
        )))
    }

    fn admitted(&self, arrival: &Arrival) {
        // The person sees their message read: the receipt names it.
        let (Some((room, _)), Ok(event)) = (
            place_of(&arrival.chat),
            EventId::parse(arrival.message.as_str()),
        ) else {
            return;
        };
        let Some(room) = RoomId::parse(room)
            .ok()
            .and_then(|room| self.client.get()?.get_room(&room))
        else {
            return;
        };
        tokio::spawn(async move {
            if let Err(err) = room
                .send_single_receipt(ReceiptType::Read, ReceiptThread::Unthreaded, event)
                .await
            {
                tracing::debug!(error = %err, "Matrix: a read receipt was not sent");
            }
        });
    }
}

/// `err`, met while `doing` something, as delivery takes it.
pub(crate) fn mapped(err: &matrix_sdk::Error, doing: &str) -> CoreError {
    if let Some(ErrorKind::LimitExceeded { retry_after }) = err.client_api_error_kind() {
        let wait = match retry_after {
            Some(RetryAfter::Delay(wait)) => *wait,
            Some(RetryAfter::DateTime(at)) => at
                .duration_since(SystemTime::now())
                .unwrap_or(Duration::ZERO),
            None => Duration::from_secs(5),
        };
        return CoreError::RateLimited {
            retry_after: Some(wait),
        };
    }
    match err.as_client_api_error() {
        Some(api) if api.status_code.is_server_error() => {
            unavailable(format!("the homeserver failed {doing}: {err}"))
        }
        Some(_) => channel_error(format!("the homeserver refused {doing}: {err}")),
        None => match err {
            matrix_sdk::Error::Http(_) => {
                unavailable(format!("the homeserver cannot be reached ({doing}): {err}"))
            }
            _ => channel_error(format!("{doing}: {err}")),
        },
    }
}

pub(crate) fn channel_error(message: String) -> CoreError {
    CoreError::Channel {
        channel: CHANNEL_NAME.into(),
        message,
    }
}

pub(crate) fn unavailable(message: String) -> CoreError {
    CoreError::Unavailable {
        channel: CHANNEL_NAME.into(),
        message,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn place(chat: &str) -> Place {
        let (room, thread) = place_of(chat).expect("a chat");
        Place {
            room: RoomId::parse(room).expect("room"),
            thread: thread.map(|root| EventId::parse(root).expect("event")),
        }
    }

    #[test]
    fn a_thread_is_answered_in_it_and_a_room_by_reply() {
        let body = json!({"msgtype": "m.text", "body": "hi"});
        let threaded = Rooms::placed(&place("!r:x/$root"), body.clone(), Some("$asked"), true);
        assert_eq!(threaded["m.relates_to"]["rel_type"], "m.thread");
        assert_eq!(threaded["m.relates_to"]["event_id"], "$root");
        assert_eq!(
            threaded["m.relates_to"]["m.in_reply_to"]["event_id"],
            "$asked"
        );
        assert_eq!(threaded["m.relates_to"]["is_falling_back"], false);
        let later = Rooms::placed(&place("!r:x/$root"), body.clone(), Some("$asked"), false);
        assert_eq!(later["m.relates_to"]["is_falling_back"], true);
        assert_eq!(later["m.relates_to"]["m.in_reply_to"]["event_id"], "$root");
        let reply = Rooms::placed(&place("!r:x"), body.clone(), Some("$asked"), true);
        assert_eq!(reply["m.relates_to"]["m.in_reply_to"]["event_id"], "$asked");
        let plain = Rooms::placed(&place("!r:x"), body, Some("$asked"), false);
        assert!(plain.get("m.relates_to").is_none());
    }

    #[test]
    fn a_reply_is_rendered_and_a_notice_is_not() {
        let said = |form| Said {
            text: "**done**",
            form,
            answering: None,
            as_reply: false,
        };
        let reply = text_content(&said(Form::Reply));
        assert_eq!(reply["formatted_body"], "<b>done</b>");
        assert_eq!(reply["body"], "**done**");
        assert_eq!(text_content(&said(Form::Notice))["msgtype"], "m.notice");
        assert!(
            text_content(&said(Form::Draft))
                .get("formatted_body")
                .is_none()
        );
    }
}
