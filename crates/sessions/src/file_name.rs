//! Session file names: any chat id, however long or strange, becomes a name inside the
//! sessions directory that no other chat id shares.

use sha2::{Digest, Sha256};
use switchboard_core::SessionKey;

/// The longest file stem; with `.jsonl`, an archive's `.<millis>` and a `.tmp` a name stays
/// far below the 255 bytes file systems allow.
pub(crate) const MAX_STEM: usize = 165;
/// How much of a long key's encoding is kept in front of its hash, for people reading `ls`.
const LONG_PREFIX: usize = MAX_STEM - 1 - 64;

/// A file name for a key: ASCII letters, digits, `-` and `_` stay; every other byte
/// becomes `%XX`, so no chat id can name a path outside the directory. An encoding longer
/// than [`MAX_STEM`] becomes its first bytes, `~` and the SHA-256 of the whole key: a fixed
/// length whatever the chat id. `~` never appears in an encoding, so a long key's name
/// cannot be a short key's, and two long keys share a name only if SHA-256 collides.
/// The key a file stem encodes; `None` for a long key's hashed stem (or one this code did
/// not write).
pub(crate) fn key_of(stem: &str) -> Option<SessionKey> {
    if stem.contains('~') {
        return None;
    }
    let mut bytes = Vec::with_capacity(stem.len());
    let mut rest = stem.as_bytes();
    while let Some((&byte, tail)) = rest.split_first() {
        if byte == b'%' {
            let hex = std::str::from_utf8(tail.get(..2)?).ok()?;
            bytes.push(u8::from_str_radix(hex, 16).ok()?);
            rest = &tail[2..];
        } else {
            bytes.push(byte);
            rest = tail;
        }
    }
    String::from_utf8(bytes).ok().map(SessionKey::from)
}

pub(crate) fn file_stem(key: &SessionKey) -> String {
    let mut stem = String::with_capacity(key.as_str().len());
    for byte in key.as_str().bytes() {
        if byte.is_ascii_alphanumeric() || byte == b'-' || byte == b'_' {
            stem.push(char::from(byte));
        } else {
            stem.push_str(&format!("%{byte:02X}"));
        }
    }
    if stem.len() <= MAX_STEM {
        return stem;
    }
    // The encoding is ASCII, so any byte index is a char boundary.
    stem.truncate(LONG_PREFIX);
    stem.push('~');
    for byte in Sha256::digest(key.as_str().as_bytes()) {
        stem.push_str(&format!("{byte:02x}"));
    }
    stem
}
