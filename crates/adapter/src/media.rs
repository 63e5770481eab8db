//! Files people send, saved under the workspace's `media/<channel>/` so the agent's tools
//! can read them, each within a size cap. The adapter fetches; [`save`] writes what it
//! streams, stops at the cap (removing the part written), and names the file so it cannot
//! leave the folder. What could not be saved is for the adapter to name in the message's
//! text instead.

use std::path::{Path, PathBuf};

use futures::{Stream, StreamExt};
use switchboard_core::Attachment;
use tokio::io::AsyncWriteExt;

/// One file to save.
#[derive(Clone, Copy, Debug)]
pub struct Incoming<'a> {
    /// The channel (the folder under `media/`).
    pub channel: &'a str,
    /// The chat and the message it came with (the start of the file's name).
    pub chat: &'a str,
    /// The message it came with.
    pub message: &'a str,
    /// Its name as the sender gave it.
    pub name: &'a str,
    /// Its MIME type, if known.
    pub mime: Option<&'a str>,
    /// The size cap, and the config key that sets it (named when it is hit).
    pub max_bytes: u64,
    /// The config key of the cap.
    pub cap_key: &'a str,
}

impl Incoming<'_> {
    /// Why a file larger than the cap was not saved.
    pub fn too_large(&self) -> String {
        format!(
            "it is larger than {} bytes ({})",
            self.max_bytes, self.cap_key
        )
    }
}

/// Writes `chunks` as `<workspace>/media/<channel>/<chat>-<message>-<name>`; returns the
/// attachment (its path relative to the workspace) or why it was not saved.
pub async fn save<S, B, E>(
    workspace: &Path,
    file: Incoming<'_>,
    chunks: S,
) -> Result<Attachment, String>
where
    S: Stream<Item = Result<B, E>>,
    B: AsRef<[u8]>,
    E: std::fmt::Display,
{
    let relative = PathBuf::from("media")
        .join(safe(file.channel))
        .join(format!(
            "{}-{}-{}",
            safe(file.chat),
            safe(file.message),
            safe(file.name)
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
    let written = async {
        let mut chunks = std::pin::pin!(chunks);
        let mut bytes = 0u64;
        while let Some(chunk) = chunks.next().await {
            let chunk = chunk.map_err(|err| format!("the download failed: {err}"))?;
            let chunk = chunk.as_ref();
            bytes += chunk.len() as u64;
            if bytes > file.max_bytes {
                return Err(file.too_large());
            }
            out.write_all(chunk)
                .await
                .map_err(|err| format!("cannot write it: {err}"))?;
        }
        out.flush()
            .await
            .map_err(|err| format!("cannot write it: {err}"))?;
        Ok(bytes)
    }
    .await;
    match written {
        Ok(bytes) => Ok(Attachment::file(
            file.name.to_owned(),
            file.mime.map(str::to_owned),
            relative.to_string_lossy().into_owned(),
            bytes,
        )),
        Err(why) => {
            drop(out);
            let _ = tokio::fs::remove_file(&path).await;
            Err(why)
        }
    }
}

/// A file's address, if it is one of the platform's file `hosts` (or the configured API's
/// host, for tests and proxies); else why not. Files are fetched only from there.
pub fn file_url(
    url: &str,
    hosts: &[&str],
    api_host: Option<&str>,
    platform: &str,
) -> Result<url::Url, String> {
    let url = url::Url::parse(url).map_err(|_| "its address cannot be read".to_owned())?;
    let host = url.host_str().unwrap_or_default();
    if hosts.contains(&host) || Some(host) == api_host {
        Ok(url)
    } else {
        Err(format!("it is not on {platform} ({host})"))
    }
}

/// Names a file that could not be saved in the message's text (the agent reads why), and
/// logs it.
pub fn not_saved(content: &mut String, channel: &str, name: &str, why: &str) {
    tracing::warn!(channel, file = %name, %why, "attachment not saved");
    if !content.is_empty() {
        content.push('\n');
    }
    content.push_str(&format!("[attachment {name} was not saved: {why}]"));
}

/// A name safe to use as (part of) a file name: ASCII letters, digits, `.`, `-`, `_` (others
/// become `_`), at most 80, not starting with a dot.
pub fn safe(name: &str) -> String {
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

    fn file(max_bytes: u64) -> Incoming<'static> {
        Incoming {
            channel: "test",
            chat: "-100:15",
            message: "7",
            name: "../../etc/passwd",
            mime: None,
            max_bytes,
            cap_key: "channels.test.max_attachment_bytes",
        }
    }

    #[test]
    fn file_names_cannot_leave_the_media_folder() {
        assert_eq!(safe("../../etc/passwd"), "_.._etc_passwd");
        assert_eq!(safe("report 2024.pdf"), "report_2024.pdf");
        assert_eq!(safe("-100123:15"), "-100123_15");
    }

    #[tokio::test]
    async fn a_file_is_saved_inside_the_workspace() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let chunks = futures::stream::iter([Ok::<_, String>(b"ab".to_vec()), Ok(b"c".to_vec())]);
        let saved = save(dir.path(), file(10), chunks).await;
        let saved = saved.unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(saved.path, "media/test/-100_15-7-_.._etc_passwd");
        assert_eq!(saved.bytes, 3);
        let on_disk = std::fs::read(dir.path().join(&saved.path)).unwrap_or_default();
        assert_eq!(on_disk, b"abc");
    }

    #[tokio::test]
    async fn a_file_over_the_cap_is_refused_and_leaves_nothing() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let chunks = futures::stream::iter([Ok::<_, String>(vec![0; 8]), Ok(vec![0; 8])]);
        let why = save(dir.path(), file(10), chunks)
            .await
            .err()
            .unwrap_or_default();
        assert!(
            why.contains("larger than 10 bytes (channels.test.max_attachment_bytes)"),
            "{why}"
        );
        let folder = dir.path().join("media/test");
        assert_eq!(std::fs::read_dir(folder).map(|d| d.count()).unwrap_or(0), 0);
    }
}
