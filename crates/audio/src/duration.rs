//! How long a recording lasts, read from its own bytes when the platform did not say: an
//! OGG file (Opus, as voice notes are, or Vorbis) by the granule position of its last page,
//! a WAV file by its data's size and byte rate. Pure: the caller reads the file's start and
//! end ([`HEAD_BYTES`], [`TAIL_BYTES`]). Other formats (WebM, MP3, M4A) are not read: their
//! length is not known, and only the size cap holds them.

use std::time::Duration;

/// How much of a file's start is looked at.
pub const HEAD_BYTES: usize = 4096;
/// How much of a file's end is looked at (an OGG page is at most 64 KiB).
pub const TAIL_BYTES: usize = 70 * 1024;

/// The length of the recording whose first bytes are `head` and last bytes `tail` (the
/// same slice for a small file), if its format says.
pub fn of(head: &[u8], tail: &[u8]) -> Option<Duration> {
    if head.starts_with(b"OggS") {
        ogg(head, tail)
    } else if head.starts_with(b"RIFF") && head.get(8..12) == Some(b"WAVE") {
        wav(head)
    } else {
        None
    }
}

/// An OGG stream: the first page's first packet says the codec (and Vorbis its sample rate;
/// Opus counts at 48 kHz, minus its pre-skip), the last page's granule position how many
/// samples there are.
fn ogg(head: &[u8], tail: &[u8]) -> Option<Duration> {
    let segments = usize::from(*head.get(26)?);
    let packet = head.get(27 + segments..)?;
    let (rate, skip) = if packet.starts_with(b"OpusHead") {
        let skip = u16::from_le_bytes([*packet.get(10)?, *packet.get(11)?]);
        (48_000u64, u64::from(skip))
    } else if packet.starts_with(b"\x01vorbis") {
        let rate = u32::from_le_bytes(packet.get(12..16)?.try_into().ok()?);
        (u64::from(rate), 0)
    } else {
        return None;
    };
    if rate == 0 {
        return None;
    }
    let last = tail.windows(4).rposition(|w| w == b"OggS")?;
    let granule = u64::from_le_bytes(tail.get(last + 6..last + 14)?.try_into().ok()?);
    if granule == u64::MAX {
        // A page on which no packet ends: no position to read.
        return None;
    }
    let samples = granule.saturating_sub(skip);
    Some(Duration::from_secs_f64(samples as f64 / rate as f64))
}

/// A WAV file: its `fmt ` chunk's byte rate and its `data` chunk's size.
fn wav(head: &[u8]) -> Option<Duration> {
    let mut at = 12;
    let mut byte_rate = None;
    while at + 8 <= head.len() {
        let id = &head[at..at + 4];
        let size = u32::from_le_bytes(head[at + 4..at + 8].try_into().ok()?) as usize;
        let body = at + 8;
        if id == b"fmt " {
            byte_rate = Some(u32::from_le_bytes(
                head.get(body + 8..body + 12)?.try_into().ok()?,
            ));
        } else if id == b"data" {
            let rate = u64::from(byte_rate.filter(|rate| *rate > 0)?);
            return Some(Duration::from_secs_f64(size as f64 / rate as f64));
        }
        at = body + size + (size % 2);
    }
    None
}

/// The start of an OGG page with `granule`, carrying `packet` (one segment).
#[cfg(test)]
fn ogg_page(granule: u64, packet: &[u8]) -> Vec<u8> {
    let mut page = b"OggS\0\0".to_vec();
    page.extend_from_slice(&granule.to_le_bytes());
    page.extend_from_slice(&[1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
    let length = u8::try_from(packet.len().min(255)).unwrap_or(255);
    page.push(1);
    page.push(length);
    page.extend_from_slice(&packet[..usize::from(length)]);
    page
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An Opus voice note of `seconds`, as Telegram's are: OpusHead (pre-skip 312), then
    /// audio pages, the last at the stream's end.
    fn opus(seconds: f64) -> Vec<u8> {
        let mut head = b"OpusHead\x01\x01".to_vec();
        head.extend_from_slice(&312u16.to_le_bytes());
        head.extend_from_slice(&48_000u32.to_le_bytes());
        head.extend_from_slice(&[0, 0, 0]);
        let mut file = ogg_page(0, &head);
        file.extend(ogg_page(0, b"OpusTags"));
        let samples = (seconds * 48_000.0) as u64 + 312;
        file.extend(ogg_page(samples / 2, &[0x55; 200]));
        file.extend(ogg_page(samples, &[0x66; 120]));
        file
    }

    #[test]
    fn an_opus_voice_notes_length_is_read_from_its_last_page() {
        let file = opus(30.0);
        let length = of(&file, &file).expect("a length");
        assert!((length.as_secs_f64() - 30.0).abs() < 0.01, "{length:?}");
        let tail = &file[file.len() - 150..];
        assert_eq!(of(&file, tail), Some(length), "from the file's end alone");
    }

    #[test]
    fn a_wavs_length_is_its_data_over_its_byte_rate() {
        let mut file = b"RIFF\0\0\0\0WAVEfmt ".to_vec();
        file.extend_from_slice(&16u32.to_le_bytes());
        file.extend_from_slice(&[1, 0, 1, 0]);
        file.extend_from_slice(&16_000u32.to_le_bytes());
        file.extend_from_slice(&32_000u32.to_le_bytes());
        file.extend_from_slice(&[2, 0, 16, 0]);
        file.extend_from_slice(b"data");
        file.extend_from_slice(&(32_000u32 * 5).to_le_bytes());
        assert_eq!(of(&file, &file), Some(Duration::from_secs(5)));
    }

    #[test]
    fn what_says_no_length_has_none() {
        assert_eq!(of(b"\x1aE\xdf\xa3 webm", b""), None);
        assert_eq!(of(b"OggS", b"OggS"), None, "cut short");
        assert_eq!(of(b"", b""), None);
        let mut theora = ogg_page(0, b"\x80theora");
        theora.extend(ogg_page(100, b"x"));
        assert_eq!(of(&theora, &theora), None, "not audio it knows");
    }
}
