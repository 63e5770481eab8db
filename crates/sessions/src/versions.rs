//! A document changed at every model call, kept as the versions it was written as: a file
//! that begins with [`MAGIC`] and holds each version as a frame — its length (4 bytes,
//! little-endian), its bytes, its length again — appended one `write` each. Its content is
//! the last whole frame. A change then costs an append, where replacing the file (a new
//! file renamed over it) costs ~90 µs on ext4; once the file holds [`COMPACT_AT`] bytes it is
//! written anew with the last version alone. (`FileState` keeps such a file open between
//! changes, with what it last wrote, while the file at its path is still that file.)
//!
//! Why it stays whole: an append is under the document's lock, so writers never interleave;
//! a process killed mid-append leaves a frame without its closing length, which a reader
//! skips (it takes the frame before, a whole version) and the next change writes the file
//! anew without; a reader that reads while a frame is appended sees the same — so reads take
//! no lock. Every other document is its bytes as they are, so one without the magic (never
//! the start of a JSON text or of the few plain ones, like a cursor's number) reads as
//! itself.

/// The first bytes of a file of versions.
pub(crate) const MAGIC: &[u8] = b"\0switchboard-versions\n";

/// The size past which the versions are written anew as the last one alone.
pub(crate) const COMPACT_AT: usize = 64 * 1024;

/// What a document's file holds.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Read<'f> {
    /// Its bytes as they are.
    Plain(&'f [u8]),
    /// Versions: the last whole one (none, if no frame is whole), and where the whole
    /// frames end (less than the file's length when a frame was cut).
    Versions {
        last: Option<&'f [u8]>,
        whole: usize,
    },
}

impl<'f> Read<'f> {
    /// The document's content.
    pub(crate) fn content(&self) -> Option<&'f [u8]> {
        match self {
            Self::Plain(bytes) => Some(bytes),
            Self::Versions { last, .. } => *last,
        }
    }
}

/// Reads a document's file.
pub(crate) fn read(file: &[u8]) -> Read<'_> {
    let Some(mut rest) = file.strip_prefix(MAGIC) else {
        return Read::Plain(file);
    };
    let mut last = None;
    let mut whole = MAGIC.len();
    while let Some((version, after)) = frame(rest) {
        last = Some(version);
        whole += rest.len() - after.len();
        rest = after;
    }
    Read::Versions { last, whole }
}

/// The first whole frame of `bytes`, and what follows it.
fn frame(bytes: &[u8]) -> Option<(&[u8], &[u8])> {
    let len = u32::from_le_bytes(bytes.get(..4)?.try_into().ok()?) as usize;
    let end = 4usize.checked_add(len)?;
    let version = bytes.get(4..end)?;
    let closing = u32::from_le_bytes(bytes.get(end..end + 4)?.try_into().ok()?) as usize;
    (closing == len).then(|| (version, &bytes[end + 4..]))
}

/// `version` as a frame.
pub(crate) fn framed(version: &[u8]) -> Vec<u8> {
    let len = u32::try_from(version.len())
        .unwrap_or(u32::MAX)
        .to_le_bytes();
    let mut out = Vec::with_capacity(version.len() + 8);
    out.extend_from_slice(&len);
    out.extend_from_slice(version);
    out.extend_from_slice(&len);
    out
}

/// A file of versions holding `version` alone.
pub(crate) fn alone(version: &[u8]) -> Vec<u8> {
    let mut out = MAGIC.to_vec();
    out.extend(framed(version));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_last_whole_version_is_the_content_and_a_cut_frame_is_skipped() {
        let mut file = alone(b"{\"n\":1}");
        file.extend(framed(b"{\"n\":2}"));
        let whole = file.len();
        assert_eq!(
            read(&file),
            Read::Versions {
                last: Some(b"{\"n\":2}".as_slice()),
                whole
            }
        );
        // Killed mid-append: every cut of the next frame reads as the version before.
        let next = framed(b"{\"n\":3, \"more\": true}");
        for cut in 0..next.len() {
            let mut torn = file.clone();
            torn.extend_from_slice(&next[..cut]);
            assert_eq!(
                read(&torn).content(),
                Some(b"{\"n\":2}".as_slice()),
                "cut at {cut}"
            );
            assert!(matches!(read(&torn), Read::Versions { whole: w, .. } if w == whole));
        }
        file.extend(next);
        assert_eq!(
            read(&file).content(),
            Some(b"{\"n\":3, \"more\": true}".as_slice())
        );
    }

    #[test]
    fn a_plain_document_reads_as_itself() {
        for plain in [b"{}".as_slice(), b"42", b"", b"\0not quite"] {
            assert_eq!(read(plain), Read::Plain(plain));
        }
        assert_eq!(read(MAGIC).content(), None);
    }
}
