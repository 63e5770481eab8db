//! `multipart/form-data` bodies as the fakes read them (uploads to the Bot API, Discord's
//! attachments, the transcription endpoint): each part's name, file name, type and bytes,
//! binary safe. And [`Uploaded`], a file a fake was sent, as every fake records it.

use tokio::time::Instant;

/// One part of a form.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Part {
    /// Its field name.
    pub name: String,
    /// The file name, for a file.
    pub filename: Option<String>,
    /// Its `Content-Type`, when given.
    pub content_type: Option<String>,
    /// Its bytes.
    pub bytes: Vec<u8>,
}

impl Part {
    /// Its bytes as text (lossy).
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.bytes).into_owned()
    }
}

/// The boundary of a `multipart/form-data` content type, if it is one.
pub fn boundary(content_type: &str) -> Option<String> {
    let rest = content_type.strip_prefix("multipart/form-data")?;
    let boundary = rest.split("boundary=").nth(1)?;
    let boundary = boundary.split(';').next().unwrap_or(boundary);
    Some(boundary.trim().trim_matches('"').to_owned())
}

/// The parts of `body`, split at `boundary`.
pub fn parts(body: &[u8], boundary: &str) -> Vec<Part> {
    let marker = format!("--{boundary}").into_bytes();
    let mut parts = Vec::new();
    let mut starts = find_all(body, &marker);
    starts.push(body.len());
    for pair in starts.windows(2) {
        let section = &body[pair[0] + marker.len()..pair[1]];
        if section.starts_with(b"--") {
            break;
        }
        let section = section.strip_prefix(b"\r\n").unwrap_or(section);
        let Some(split) = find(section, b"\r\n\r\n") else {
            continue;
        };
        let head = String::from_utf8_lossy(&section[..split]).into_owned();
        let mut bytes = &section[split + 4..];
        bytes = bytes.strip_suffix(b"\r\n").unwrap_or(bytes);
        let mut part = Part {
            name: String::new(),
            filename: None,
            content_type: None,
            bytes: bytes.to_vec(),
        };
        for line in head.split("\r\n") {
            let lower = line.to_ascii_lowercase();
            if lower.starts_with("content-disposition:") {
                part.name = quoted(line, "name=").unwrap_or_default();
                part.filename = quoted(line, "filename=");
            } else if lower.starts_with("content-type:") {
                part.content_type = line.split_once(':').map(|(_, v)| v.trim().to_owned());
            }
        }
        parts.push(part);
    }
    parts
}

/// The quoted value after `key` (`name="x"`), not the one of a longer key ending in it.
fn quoted(line: &str, key: &str) -> Option<String> {
    let mut from = 0;
    while let Some(at) = line[from..].find(key) {
        let start = from + at;
        let before = line[..start].chars().last();
        from = start + key.len();
        if before.is_some_and(|c| c.is_ascii_alphanumeric()) {
            continue;
        }
        let rest = line[from..].strip_prefix('"')?;
        return rest.split('"').next().map(str::to_owned);
    }
    None
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack
        .windows(needle.len())
        .position(|window| window == needle)
}

fn find_all(haystack: &[u8], needle: &[u8]) -> Vec<usize> {
    let mut found = Vec::new();
    let mut from = 0;
    while let Some(at) = find(&haystack[from..], needle) {
        found.push(from + at);
        from += at + needle.len();
    }
    found
}

/// A file a fake platform was sent.
#[derive(Clone)]
pub struct Uploaded {
    /// The chat it went to.
    pub chat: String,
    /// The message (or file) id the platform gave it.
    pub id: String,
    /// How it was sent: the platform's method or kind (`sendPhoto`, `image`, …).
    pub method: String,
    /// Its file name.
    pub name: String,
    /// Its type, as sent.
    pub mime: Option<String>,
    /// Its bytes.
    pub bytes: Vec<u8>,
    /// Its caption.
    pub caption: Option<String>,
    /// The message it replies to.
    pub reply_to: Option<String>,
    /// When it arrived.
    pub at: Instant,
}

/// Uploads a fake holds in flight, for a kill in the middle of one: how many arrived, whether
/// they are held, and what held ones do once let go (kept as sent, or dropped as if the
/// connection broke before the platform had the whole file).
#[derive(Debug, Default)]
pub(crate) struct Holding {
    /// Uploads that arrived, held ones and refused ones too.
    pub(crate) started: u64,
    /// Whether uploads wait for [`Holding::released`].
    pub(crate) hold: bool,
    /// What held uploads do once let go: kept (`true`) or dropped (`false`).
    pub(crate) released: Option<bool>,
}

impl Holding {
    /// Holds the uploads that arrive from now on.
    pub(crate) fn hold(&mut self) {
        self.hold = true;
        self.released = None;
    }

    /// Lets held uploads go (`keep`: as sent); later ones are not held.
    pub(crate) fn release(&mut self, keep: bool) {
        self.hold = false;
        self.released = Some(keep);
    }
}

/// Notes an upload's arrival and, while uploads are held, waits until they are let go;
/// whether it is kept (`false`: drop it, it never reached the platform). `holding` reads the
/// fake's state under its lock; `changed` is woken on every change of it.
pub(crate) async fn arrive(
    changed: &tokio::sync::Notify,
    mut holding: impl FnMut(&mut dyn FnMut(&mut Holding) -> Option<bool>) -> Option<bool>,
) -> bool {
    let held = holding(&mut |state| {
        state.started += 1;
        Some(state.hold)
    }) == Some(true);
    changed.notify_waiters();
    if !held {
        return true;
    }
    loop {
        let notified = changed.notified();
        if let Some(kept) = holding(&mut |state| state.released) {
            return kept;
        }
        notified.await;
    }
}

impl std::fmt::Debug for Uploaded {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Uploaded")
            .field("chat", &self.chat)
            .field("id", &self.id)
            .field("method", &self.method)
            .field("name", &self.name)
            .field("mime", &self.mime)
            .field("bytes", &self.bytes.len())
            .field("caption", &self.caption)
            .field("reply_to", &self.reply_to)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_forms_parts_keep_their_bytes() {
        let body = b"--XyZ\r\nContent-Disposition: form-data; name=\"chat_id\"\r\n\r\n42\r\n--XyZ\r\nContent-Disposition: form-data; name=\"photo\"; filename=\"a.png\"\r\nContent-Type: image/png\r\n\r\n\x89PNG\r\n\x00\xff\r\n--XyZ--\r\n";
        let parts = parts(body, "XyZ");
        assert_eq!(parts.len(), 2);
        assert_eq!(parts[0].name, "chat_id");
        assert_eq!(parts[0].text(), "42");
        assert_eq!(parts[1].name, "photo");
        assert_eq!(parts[1].filename.as_deref(), Some("a.png"));
        assert_eq!(parts[1].content_type.as_deref(), Some("image/png"));
        assert_eq!(parts[1].bytes, b"\x89PNG\r\n\x00\xff");
        assert_eq!(
            boundary("multipart/form-data; boundary=\"XyZ\"").as_deref(),
            Some("XyZ")
        );
    }
}
