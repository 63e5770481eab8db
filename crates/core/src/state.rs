//! [`StateStore`]: the small documents a daemon keeps besides its sessions — who was
//! approved by pairing, a platform's cursor (Telegram's offset), the scheduler's jobs on a
//! cluster, what was spent — each a few bytes to a few hundred KiB under a key. In one
//! process they are files in the state directory (`switchboard_sessions::FileState`); on a
//! cluster, entries of a JetStream key-value bucket every member reads, so every host sees
//! one truth.
//!
//! A key is a path of segments (`pairing.json`, `scheduler/job/j3`): each segment is made of
//! ASCII letters, digits, `.`, `_`, `-` and `=`, and is neither `.` nor `..`; [`segment`]
//! makes one out of any text. A change is made with [`StateStore::update`], which reads,
//! changes and writes in one step against every other writer (a file lock in one process,
//! compare-and-set on a cluster), so two hosts never undo each other's changes; a document
//! changed at every model call is changed with [`StateStore::update_often`], which one
//! process does not fsync.

use std::time::SystemTime;

use async_trait::async_trait;

/// The largest document a store keeps: a cluster's server refuses larger messages.
pub const MAX_DOCUMENT_BYTES: usize = 512 * 1024;

/// The most documents one [`StateStore::scan`] returns.
pub const MAX_SCAN: usize = 100_000;

/// A document as stored.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Stored {
    /// Its bytes.
    pub bytes: Vec<u8>,
    /// When it was last written.
    pub written: SystemTime,
}

/// What an update does with the document it was shown.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Change {
    /// Leaves it as it is.
    Keep,
    /// Writes these bytes in its place.
    Put(Vec<u8>),
    /// Removes it.
    Delete,
}

/// A change to one document: it sees the bytes as stored (`None`: there are none) and says
/// what to write. It may be called more than once, when another writer changed the document
/// in between; only the last call's answer is written.
pub type Changer<'c> = &'c mut (dyn FnMut(Option<&[u8]>) -> Change + Send);

/// What a state store could not do.
#[derive(Debug, thiserror::Error)]
pub enum StateError {
    /// The key is not a path of valid segments.
    #[error("`{0}` is not a valid state key")]
    BadKey(String),
    /// The document is larger than [`MAX_DOCUMENT_BYTES`].
    #[error("the state document {key} would be {bytes} bytes, more than the {max} kept")]
    TooLarge {
        /// Its key.
        key: String,
        /// Its size.
        bytes: usize,
        /// The limit.
        max: usize,
    },
    /// The store failed: the file system or the cluster's server.
    #[error("the state store ({place}) could not {what}: {why}")]
    Failed {
        /// The directory, or the bucket.
        place: String,
        /// What it was doing, with the key.
        what: String,
        /// Why.
        why: String,
    },
}

/// Where a daemon keeps its small documents (see the module's text).
#[async_trait]
pub trait StateStore: Send + Sync + std::fmt::Debug + 'static {
    /// Where it keeps them, for messages: a directory, or a bucket.
    fn place(&self) -> String;

    /// The document under `key`, if there is one.
    async fn get(&self, key: &str) -> Result<Option<Stored>, StateError>;

    /// Writes `bytes` under `key`, whatever was there.
    async fn put(&self, key: &str, bytes: Vec<u8>) -> Result<(), StateError>;

    /// Reads, changes and writes the document under `key` in one step against every other
    /// writer (see [`Changer`]).
    async fn update(&self, key: &str, change: Changer<'_>) -> Result<(), StateError>;

    /// As [`update`](Self::update), for a document changed at every model call (what a chat
    /// spent): one process writes it as atomically, but without waiting for the disk — a
    /// killed process loses nothing, a power cut may lose the last changes, as it may the
    /// sessions' last appended records (docs/architecture.md, "Trade-offs"). A cluster's
    /// bucket writes it as any other change.
    async fn update_often(&self, key: &str, change: Changer<'_>) -> Result<(), StateError> {
        self.update(key, change).await
    }

    /// Every document whose key starts with the segments of `prefix` (`usage/2026-11-26`
    /// finds `usage/2026-11-26/telegram_1` and what lies deeper), with its key, in key
    /// order; at most [`MAX_SCAN`].
    async fn scan(&self, prefix: &str) -> Result<Vec<(String, Vec<u8>)>, StateError>;
}

/// Checks a key: segments of the allowed characters, separated by `/`.
pub fn check_key(key: &str) -> Result<(), StateError> {
    let fine = !key.is_empty()
        && key.split('/').all(|segment| {
            !segment.is_empty()
                && segment != "."
                && segment != ".."
                && segment.bytes().all(segment_byte)
        });
    if fine {
        Ok(())
    } else {
        Err(StateError::BadKey(key.to_owned()))
    }
}

/// Checks a document's size.
pub fn check_size(key: &str, bytes: &[u8]) -> Result<(), StateError> {
    if bytes.len() > MAX_DOCUMENT_BYTES {
        return Err(StateError::TooLarge {
            key: key.to_owned(),
            bytes: bytes.len(),
            max: MAX_DOCUMENT_BYTES,
        });
    }
    Ok(())
}

fn segment_byte(byte: u8) -> bool {
    byte.is_ascii_alphanumeric() || matches!(byte, b'.' | b'_' | b'-' | b'=')
}

/// One key segment made of any text: letters, digits, `_` and `-` stay, every other byte is
/// written `=XX` (so `claude-3.5:latest` is `claude-3=2E5=3Alatest`, never `.` or `..`).
pub fn segment(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'_' | b'-') {
            out.push(char::from(byte));
        } else {
            out.push_str(&format!("={byte:02X}"));
        }
    }
    if out.is_empty() {
        out.push('=');
    }
    out
}

/// The text a [`segment`] was made of.
pub fn unsegment(segment: &str) -> String {
    let bytes = segment.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut at = 0;
    while at < bytes.len() {
        let hex = bytes
            .get(at + 1..at + 3)
            .and_then(|hex| std::str::from_utf8(hex).ok())
            .and_then(|hex| u8::from_str_radix(hex, 16).ok());
        match (bytes[at], hex) {
            (b'=', Some(byte)) => {
                out.push(byte);
                at += 3;
            }
            (b'=', None) => at += 1,
            (byte, _) => {
                out.push(byte);
                at += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Runs a changer that decodes JSON and encodes what it returns: `edit` sees the value (the
/// default when there is none, or when what is stored is not one — logged) and returns
/// whether to write it back. A helper for the stores' users, which all keep JSON; what it
/// writes is indented, for a person who opens the file.
pub fn json_change<'a, T, F>(
    key: &'a str,
    edit: F,
) -> impl FnMut(Option<&[u8]>) -> Change + Send + 'a
where
    T: serde::Serialize + serde::de::DeserializeOwned + Default,
    F: FnMut(&mut T) -> bool + Send + 'a,
{
    json_changer(key, true, edit)
}

/// As [`json_change`], written on one line: for a document changed at every model call
/// ([`StateStore::update_often`]), whose versions are kept, and no person reads.
pub fn json_change_compact<'a, T, F>(
    key: &'a str,
    edit: F,
) -> impl FnMut(Option<&[u8]>) -> Change + Send + 'a
where
    T: serde::Serialize + serde::de::DeserializeOwned + Default,
    F: FnMut(&mut T) -> bool + Send + 'a,
{
    json_changer(key, false, edit)
}

fn json_changer<'a, T, F>(
    key: &'a str,
    pretty: bool,
    mut edit: F,
) -> impl FnMut(Option<&[u8]>) -> Change + Send + 'a
where
    T: serde::Serialize + serde::de::DeserializeOwned + Default,
    F: FnMut(&mut T) -> bool + Send + 'a,
{
    move |bytes| {
        let mut value = match bytes.map(serde_json::from_slice::<T>) {
            Some(Ok(value)) => value,
            Some(Err(err)) => {
                tracing::warn!(key, error = %err, "a state document could not be read; it is taken as empty");
                T::default()
            }
            None => T::default(),
        };
        if !edit(&mut value) {
            return Change::Keep;
        }
        let written = if pretty {
            serde_json::to_vec_pretty(&value)
        } else {
            serde_json::to_vec(&value)
        };
        match written {
            Ok(bytes) => Change::Put(bytes),
            Err(err) => {
                tracing::error!(key, error = %err, "a state document could not be written");
                Change::Keep
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_paths_of_plain_segments() {
        for good in [
            "pairing.json",
            "scheduler/job/j3",
            "usage/2026-11-26/telegram_1",
        ] {
            assert!(check_key(good).is_ok(), "{good}");
        }
        for bad in ["", "/a", "a/", "a//b", "../x", "a/./b", "a b", "a:b", "ä"] {
            assert!(check_key(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn any_text_makes_a_segment_and_back() {
        for text in [
            "claude-3.5:latest",
            "..",
            ".",
            "",
            "telegram_-100",
            "a=b/c",
            "ünï",
        ] {
            let made = segment(text);
            assert!(check_key(&made).is_ok(), "{text} → {made}");
            assert!(!made.contains('.'), "{made}");
            assert_eq!(unsegment(&made), text);
        }
    }

    #[test]
    fn a_document_past_the_limit_is_refused_by_name() {
        let err = check_size("big", &vec![0; MAX_DOCUMENT_BYTES + 1]).expect_err("too large");
        assert!(err.to_string().contains("big"), "{err}");
        assert!(check_size("fine", &vec![0; MAX_DOCUMENT_BYTES]).is_ok());
    }
}
