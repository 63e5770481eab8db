//! Files going out to a chat: what one is ([`OutboundFile`], of a [`MediaKind`]), where its
//! bytes wait until its channel delivered it ([`MediaStore`]), and what a platform takes
//! ([`MediaLimits`]), known before an upload starts.
//!
//! A file travels on the bus like any outbound message, in its chat's lane — after the text
//! before it, before the text after it, held by the same 429s — but its bytes do not: the
//! message names them by a key of the daemon's media store (the state directory's
//! `media/out/` in one process, the cluster's object store across hosts), and the channel
//! that delivers it opens them there.

use std::path::PathBuf;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

/// What a file goes out as, where a platform tells them apart.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MediaKind {
    /// A picture, shown in the chat (Telegram's `sendPhoto`, an image upload on Discord and
    /// Slack, inline on the web page).
    Image,
    /// A voice message: a spoken reply (Telegram's `sendVoice`, OGG/Opus; an audio file on
    /// Discord and Slack; a player on the web page).
    Voice,
    /// Any other file, offered to download.
    Document,
}

impl MediaKind {
    /// Every kind.
    pub const ALL: [Self; 3] = [Self::Image, Self::Voice, Self::Document];

    /// The lowercase name used on the wire and in messages.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Image => "image",
            Self::Voice => "voice",
            Self::Document => "document",
        }
    }

    /// What a file of type `mime` goes out as when nothing else is asked: a picture the
    /// platforms show (PNG, JPEG, GIF, WebP) as an image, anything else as a document.
    pub fn of(mime: &str) -> Self {
        if crate::ImagePart::shown_type(mime) {
            Self::Image
        } else {
            Self::Document
        }
    }
}

/// A file for a chat: its bytes wait in the daemon's [`MediaStore`] under `key` until its
/// channel delivered it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct OutboundFile {
    /// Where its bytes are: a key of the media store.
    pub key: String,
    /// Its name, as the person sees it.
    pub name: String,
    /// Its MIME type.
    pub mime: String,
    /// Its size in bytes.
    pub bytes: u64,
    /// What it goes out as.
    pub kind: MediaKind,
    /// A few words shown with it (Markdown); what is longer than the platform's caption
    /// goes out as text right after it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub caption: Option<String>,
}

/// What a channel's platform takes of files, by kind: the largest of each, in bytes (0:
/// none of that kind), and the longest caption. A file over its limit is refused — with
/// the limit named — before an upload starts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MediaLimits {
    /// The largest picture.
    pub image: u64,
    /// The largest voice message.
    pub voice: u64,
    /// The largest document.
    pub document: u64,
    /// The longest caption, in characters (0: the caption goes out as text after the file).
    pub caption: usize,
}

impl MediaLimits {
    /// No files at all (a channel that sends only text).
    pub const NONE: Self = Self {
        image: 0,
        voice: 0,
        document: 0,
        caption: 0,
    };

    /// The largest file of `kind`.
    pub fn max(&self, kind: MediaKind) -> u64 {
        match kind {
            MediaKind::Image => self.image,
            MediaKind::Voice => self.voice,
            MediaKind::Document => self.document,
        }
    }

    /// Why a file of `bytes` and `kind` cannot go to this platform (`platform` names it),
    /// if it cannot.
    pub fn refusal(&self, platform: &str, kind: MediaKind, bytes: u64) -> Option<String> {
        let max = self.max(kind);
        if max == 0 {
            return Some(format!("{platform} takes no {} files", kind.as_str()));
        }
        (bytes > max).then(|| {
            format!(
                "the file is {}; {platform} takes {} files of at most {}",
                size(bytes),
                kind.as_str(),
                size(max)
            )
        })
    }
}

/// A size as a person reads it: `812 bytes`, `48.2 KB`, `10 MB`, `1.5 GB` (powers of 1000,
/// as the platforms state their limits).
pub fn size(bytes: u64) -> String {
    const UNITS: [(&str, f64); 3] = [("GB", 1e9), ("MB", 1e6), ("KB", 1e3)];
    for (unit, scale) in UNITS {
        let value = bytes as f64 / scale;
        if value >= 1.0 {
            let text = format!("{value:.1}");
            let text = text.strip_suffix(".0").unwrap_or(&text);
            return format!("{text} {unit}");
        }
    }
    format!("{bytes} bytes")
}

/// A file taken into the media store.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeptFile {
    /// Its key there.
    pub key: String,
    /// Its size.
    pub bytes: u64,
    /// The SHA-256 of its bytes (hex): what a file sent twice is known by.
    pub sha256: String,
}

/// What a media store could not do.
#[derive(Debug, thiserror::Error)]
pub enum MediaError {
    /// No file is kept under the key (never was, or its time is up).
    #[error("the file {0} is no longer kept (files wait for delivery a limited time)")]
    Gone(String),
    /// The file is larger than the store keeps.
    #[error("the file is larger than the {} the daemon keeps for delivery", size(*.max))]
    TooLarge {
        /// The limit.
        max: u64,
    },
    /// The store failed: the file system or the cluster's server.
    #[error("the media store ({place}) could not {what}: {why}")]
    Failed {
        /// The directory, or the bucket.
        place: String,
        /// What it was doing.
        what: String,
        /// Why.
        why: String,
    },
}

/// The largest file a media store keeps.
pub const MAX_MEDIA_BYTES: u64 = 100 * 1000 * 1000;

/// Where files wait for their channel: written where they are made (a tool's file copied
/// from the workspace, a spoken reply), read where they are delivered — the same process,
/// or on a cluster the gateway that holds the chat's platform connection.
#[async_trait]
pub trait MediaStore: Send + Sync + std::fmt::Debug + 'static {
    /// Keeps a copy of what `source` reads (a file of a workspace, opened through it), under
    /// a key naming `name`; at most [`MAX_MEDIA_BYTES`].
    async fn keep(&self, source: std::fs::File, name: &str) -> Result<KeptFile, MediaError>;

    /// Keeps `bytes` (a file the daemon made) under a key naming `name`.
    async fn keep_bytes(&self, bytes: Vec<u8>, name: &str) -> Result<KeptFile, MediaError>;

    /// A path on this host with the bytes of `key`, fetched first when they are kept
    /// elsewhere.
    async fn local(&self, key: &str) -> Result<PathBuf, MediaError>;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_read_as_the_platforms_state_their_limits() {
        assert_eq!(size(812), "812 bytes");
        assert_eq!(size(48_200), "48.2 KB");
        assert_eq!(size(10_000_000), "10 MB");
        assert_eq!(size(50 * 1000 * 1000 + 1), "50 MB");
        assert_eq!(size(1_500_000_000), "1.5 GB");
    }

    #[test]
    fn a_file_over_its_kinds_limit_is_refused_with_the_limit_named() {
        let telegram = MediaLimits {
            image: 10_000_000,
            voice: 50_000_000,
            document: 50_000_000,
            caption: 1024,
        };
        assert_eq!(
            telegram.refusal("Telegram", MediaKind::Image, 12_000_000),
            Some("the file is 12 MB; Telegram takes image files of at most 10 MB".into())
        );
        assert_eq!(
            telegram.refusal("Telegram", MediaKind::Document, 12_000_000),
            None
        );
        assert_eq!(
            MediaLimits::NONE.refusal("the terminal", MediaKind::Document, 1),
            Some("the terminal takes no document files".into())
        );
    }

    #[test]
    fn pictures_go_as_images_and_the_rest_as_documents() {
        assert_eq!(MediaKind::of("image/png"), MediaKind::Image);
        assert_eq!(MediaKind::of("image/svg+xml"), MediaKind::Document);
        assert_eq!(MediaKind::of("application/pdf"), MediaKind::Document);
    }
}
