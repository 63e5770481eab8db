//! Files people send (photos, documents, voice notes): asked of the Bot API and saved by
//! the shared [`media::save`] under the workspace's `media/telegram/`, within a size cap
//! and a time limit.

use std::path::Path;
use std::time::Duration;

use switchboard_adapter::media::{self, Incoming};
use switchboard_core::Attachment;
use teloxide::Bot;
use teloxide::net::Download;
use teloxide::prelude::Requester;
use teloxide::types::FileId;

use crate::api::CHANNEL_NAME;
use crate::convert::FileRef;

/// How long one download may take.
const DOWNLOAD_TIMEOUT: Duration = Duration::from_secs(120);

/// Saves `file` as `<workspace>/media/telegram/<chat>-<message>-<name>`.
pub(crate) async fn save(
    bot: &Bot,
    workspace: &Path,
    chat: &str,
    message_id: i32,
    file: &FileRef,
    max_bytes: u64,
) -> Result<Attachment, String> {
    let message = message_id.to_string();
    let incoming = Incoming {
        channel: CHANNEL_NAME,
        chat,
        message: &message,
        name: &file.name,
        mime: file.mime.as_deref(),
        max_bytes,
        cap_key: "channels.telegram.max_attachment_bytes",
    };
    if file.size.is_some_and(|size| size > max_bytes) {
        return Err(incoming.too_large());
    }
    let fetch = async {
        let meta = bot
            .get_file(FileId(file.file_id.clone()))
            .await
            .map_err(|err| format!("Telegram would not hand it over: {err}"))?;
        if u64::from(meta.meta.size) > max_bytes {
            return Err(incoming.too_large());
        }
        media::save(workspace, incoming, bot.download_file_stream(&meta.path)).await
    };
    tokio::time::timeout(DOWNLOAD_TIMEOUT, fetch)
        .await
        .unwrap_or_else(|_| {
            Err(format!(
                "the download took longer than {DOWNLOAD_TIMEOUT:?}"
            ))
        })
}
