//! `POST /upload`: a file a web client attaches to its next message, saved under the
//! workspace's `media/websocket/` by the same code that saves Telegram's and Discord's
//! files, within `max_attachment_bytes` and a time limit. The answer names the saved file;
//! the message frame names it back (`attachments`), and the server checks it is one of its
//! uploads before the agent sees it. Nothing is kept in memory between the two. An image's
//! type is read from its first bytes, as `read_file` reads it: no table of file name
//! extensions is linked (one costs ~70 KiB of relocated memory at every start).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use axum::Json;
use axum::body::Body;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use futures::TryStreamExt;
use serde::Deserialize;
use switchboard_adapter::media::{self, Incoming};
use switchboard_core::{Attachment, ImagePart};

use crate::config::CHANNEL_NAME;
use crate::protocol::AttachmentRef;
use crate::subscribers::Shared;

/// How long one upload may take.
const UPLOAD_TIMEOUT: Duration = Duration::from_secs(120);
/// The config key of the size cap (named when it is hit).
const CAP_KEY: &str = "channels.websocket.max_attachment_bytes";

#[derive(Deserialize)]
pub(crate) struct UploadQuery {
    chat_id: String,
    name: String,
    token: Option<String>,
}

/// Distinguishes uploads of the same name in the same millisecond.
static NEXT: AtomicU64 = AtomicU64::new(0);

pub(crate) async fn upload(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    Query(query): Query<UploadQuery>,
    body: Body,
) -> Response {
    if let Err(reason) = shared.config.auth.check(&headers, query.token.as_deref()) {
        return (StatusCode::UNAUTHORIZED, reason).into_response();
    }
    let max_bytes = shared.config.max_attachment_bytes;
    let Some(workspace) = shared.config.workspace.as_deref().filter(|_| max_bytes > 0) else {
        return (
            StatusCode::FORBIDDEN,
            format!("uploads are off ({CAP_KEY} = 0)"),
        )
            .into_response();
    };
    if let Err(problem) = crate::protocol::check_chat_id(&query.chat_id) {
        return (StatusCode::BAD_REQUEST, problem).into_response();
    }
    if query.name.is_empty() || query.name.len() > 255 {
        return (StatusCode::BAD_REQUEST, "`name` must be 1 to 255 bytes").into_response();
    }
    let announced = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    // As the browser says (what it guessed from the name); the server trusts only its own
    // look at the bytes (see `resolve`).
    let mime = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .filter(|v| !v.is_empty() && v.len() <= 100)
        .map(str::to_owned);
    let stamp = format!(
        "{}{}",
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis()),
        NEXT.fetch_add(1, Ordering::Relaxed) % 1000
    );
    let incoming = Incoming {
        channel: CHANNEL_NAME,
        chat: &query.chat_id,
        message: &stamp,
        name: &query.name,
        mime: mime.as_deref(),
        max_bytes,
        cap_key: CAP_KEY,
    };
    if announced.is_some_and(|bytes| bytes > max_bytes) {
        return too_large(&incoming);
    }
    let chunks = body.into_data_stream().map_err(|err| err.to_string());
    let saved = tokio::time::timeout(UPLOAD_TIMEOUT, media::save(workspace, incoming, chunks))
        .await
        .unwrap_or_else(|_| Err(format!("the upload took longer than {UPLOAD_TIMEOUT:?}")));
    answer(saved, &query.name, &incoming)
}

/// What the client is told of its upload: the file saved (its name in the chat's media),
/// or why not.
fn answer(saved: Result<Attachment, String>, name: &str, incoming: &Incoming<'_>) -> Response {
    match saved {
        Ok(attachment) => {
            let file = Path::new(&attachment.path)
                .file_name()
                .map(|name| name.to_string_lossy().into_owned())
                .unwrap_or_default();
            Json(serde_json::json!({
                "file": file,
                "name": name,
                "mime": attachment.mime,
                "bytes": attachment.bytes,
            }))
            .into_response()
        }
        Err(why) if why == incoming.too_large() => too_large(incoming),
        Err(why) => {
            tracing::warn!(error = %why, "an upload failed");
            (
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("the file was not saved: {why}"),
            )
                .into_response()
        }
    }
}

fn too_large(incoming: &Incoming<'_>) -> Response {
    (
        StatusCode::PAYLOAD_TOO_LARGE,
        format!("the file was not saved: {}", incoming.too_large()),
    )
        .into_response()
}

/// The type of a recording, by its first bytes: OGG, WebM (what browsers record), WAV,
/// MP4/M4A, MP3.
fn audio_type(head: &[u8]) -> Option<&'static str> {
    if head.starts_with(b"OggS") {
        Some("audio/ogg")
    } else if head.starts_with(b"\x1a\x45\xdf\xa3") {
        Some("audio/webm")
    } else if head.starts_with(b"RIFF") && head.get(8..12) == Some(b"WAVE") {
        Some("audio/wav")
    } else if head.get(4..8) == Some(b"ftyp") {
        Some("audio/mp4")
    } else if head.starts_with(b"ID3") || head.starts_with(&[0xff, 0xfb]) {
        Some("audio/mpeg")
    } else {
        None
    }
}

/// The attachment a message frame names: a file `POST /upload` saved for this chat.
pub(crate) async fn resolve(
    workspace: Option<&Path>,
    chat_id: &str,
    reference: &AttachmentRef,
) -> Result<Attachment, String> {
    let unknown = || {
        format!(
            "the attachment `{}` is not an upload of this chat; attach the file again",
            reference.file
        )
    };
    let Some(workspace) = workspace else {
        return Err("uploads are off on this server".into());
    };
    let file = reference.file.as_str();
    let expected = format!("{}-", media::safe(chat_id));
    if file.is_empty()
        || file.starts_with('.')
        || file.contains(['/', '\\'])
        || !file.starts_with(&expected)
    {
        return Err(unknown());
    }
    let relative = PathBuf::from("media").join(CHANNEL_NAME).join(file);
    let path = workspace.join(&relative);
    let meta = tokio::fs::symlink_metadata(&path)
        .await
        .map_err(|_| unknown())?;
    if !meta.is_file() {
        return Err(unknown());
    }
    // An image models take is told by its first bytes, not by what the client named it.
    let mut head = [0u8; 12];
    let read = match tokio::fs::File::open(&path).await {
        Ok(mut opened) => {
            use tokio::io::AsyncReadExt;
            opened.read(&mut head).await.unwrap_or(0)
        }
        Err(_) => return Err(unknown()),
    };
    let name = reference
        .name
        .clone()
        .filter(|name| !name.is_empty() && name.len() <= 255)
        .unwrap_or_else(|| file.to_owned());
    // A recording the page made says so; its type is the one the upload named, if audio.
    let mime = ImagePart::sniff(&head[..read])
        .or_else(|| audio_type(&head[..read]))
        .map(str::to_owned);
    Ok(Attachment {
        duration_ms: reference.duration_ms.filter(|_| reference.voice),
        voice: reference.voice && mime.as_deref().is_some_and(|m| m.starts_with("audio/")),
        ..Attachment::file(
            name,
            mime,
            relative.to_string_lossy().into_owned(),
            meta.len(),
        )
    })
}
