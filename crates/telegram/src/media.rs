//! Files people send (photos, documents, voice notes), saved under the workspace's
//! `media/telegram/` so the agent's tools can read them, each within a size cap and a time
//! limit. What could not be saved is named in the message's text instead.

use std::path::{Path, PathBuf};
use std::time::Duration;

use futures::StreamExt;
use switchboard_core::Attachment;
use teloxide::Bot;
use teloxide::net::Download;
use teloxide::prelude::Requester;
use teloxide::types::FileId;
use tokio::io::AsyncWriteExt;

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
    if file.size.is_some_and(|size| size > max_bytes) {
        return Err(too_large(max_bytes));
    }
    let fetch = async {
        let meta = bot
            .get_file(FileId(file.file_id.clone()))
            .await
            .map_err(|err| format!("Telegram would not hand it over: {err}"))?;
        if u64::from(meta.meta.size) > max_bytes {
            return Err(too_large(max_bytes));
        }
        let relative = PathBuf::from("media/telegram").join(format!(
            "{}-{message_id}-{}",
            safe(chat),
            safe(&file.name)
        ));
        let path = workspace.join(&relative);
        if let Some(dir) = path.parent() {
            tokio::fs::create_dir_all(dir)
                .await
                .map_err(|err| format!("cannot create {}: {err}", dir.display()))?;
        }
        let mut out = tokio::fs::File::create(&path)
            .await
            .map_err(|err| format!("cannot write it: {err}"))?;
        let mut stream = bot.download_file_stream(&meta.path);
        let mut bytes = 0u64;
        while let Some(chunk) = stream.next().await {
            let chunk = chunk.map_err(|err| format!("the download failed: {err}"))?;
            bytes += chunk.len() as u64;
            if bytes > max_bytes {
                drop(out);
                let _ = tokio::fs::remove_file(&path).await;
                return Err(too_large(max_bytes));
            }
            out.write_all(&chunk)
                .await
                .map_err(|err| format!("cannot write it: {err}"))?;
        }
        out.flush()
            .await
            .map_err(|err| format!("cannot write it: {err}"))?;
        Ok(Attachment {
            name: file.name.clone(),
            mime: file.mime.clone(),
            path: relative.to_string_lossy().into_owned(),
            bytes,
        })
    };
    tokio::time::timeout(DOWNLOAD_TIMEOUT, fetch)
        .await
        .unwrap_or_else(|_| {
            Err(format!(
                "the download took longer than {DOWNLOAD_TIMEOUT:?}"
            ))
        })
}

fn too_large(max: u64) -> String {
    format!("it is larger than {max} bytes (channels.telegram.max_attachment_bytes)")
}

/// A name safe to use as (part of) a file name.
fn safe(name: &str) -> String {
    let cleaned: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_') {
                c
            } else {
                '_'
            }
        })
        .take(80)
        .collect();
    cleaned.trim_start_matches('.').to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_names_cannot_leave_the_media_folder() {
        assert_eq!(safe("../../etc/passwd"), "_.._etc_passwd");
        assert_eq!(safe("report 2024.pdf"), "report_2024.pdf");
        assert_eq!(safe("-100123:15"), "-100123_15");
    }
}
