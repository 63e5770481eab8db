//! Capping what goes back to the model: [`cap_result`] for any tool's result, [`HeadTail`]
//! for output that streams in (a command's), keeping its beginning and its end.

/// The result of a tool call, cut to at most `max` bytes (plus a note) on a character
/// boundary. The note says how much was cut, so the model can ask for the rest.
pub fn cap_result(text: String, max: usize) -> String {
    if text.len() <= max {
        return text;
    }
    let kept = floor_char_boundary(&text, max);
    let mut out = String::with_capacity(kept + 96);
    out.push_str(&text[..kept]);
    out.push_str(&format!(
        "\n[… result cut: {} of {} bytes shown; ask for less, or for the rest]",
        kept,
        text.len()
    ));
    out
}

/// The largest index ≤ `index` that is a char boundary of `text`.
pub(crate) fn floor_char_boundary(text: &str, index: usize) -> usize {
    let mut end = index.min(text.len());
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    end
}

/// Keeps the first and the last `half` bytes of a byte stream of any length, and counts
/// what fell out between them.
#[derive(Debug)]
pub struct HeadTail {
    half: usize,
    head: Vec<u8>,
    /// A ring of the last `half` bytes once the head is full; `tail_start` is its oldest.
    tail: Vec<u8>,
    tail_start: usize,
    total: u64,
}

impl HeadTail {
    /// Keeps up to `max` bytes: half from the start, half from the end.
    pub fn new(max: usize) -> Self {
        let half = (max / 2).max(1);
        Self {
            half,
            head: Vec::new(),
            tail: Vec::new(),
            tail_start: 0,
            total: 0,
        }
    }

    /// Takes in more bytes.
    pub fn push(&mut self, mut bytes: &[u8]) {
        self.total += bytes.len() as u64;
        let room = self.half - self.head.len();
        if room > 0 {
            let take = room.min(bytes.len());
            self.head.extend_from_slice(&bytes[..take]);
            bytes = &bytes[take..];
        }
        if bytes.len() >= self.half {
            self.tail.clear();
            self.tail
                .extend_from_slice(&bytes[bytes.len() - self.half..]);
            self.tail_start = 0;
            return;
        }
        for &byte in bytes {
            if self.tail.len() < self.half {
                self.tail.push(byte);
            } else {
                self.tail[self.tail_start] = byte;
                self.tail_start = (self.tail_start + 1) % self.half;
            }
        }
    }

    /// How many bytes were taken in.
    pub fn total(&self) -> u64 {
        self.total
    }

    /// The text kept, with a note where the middle was left out.
    pub fn finish(self) -> String {
        let mut tail = Vec::with_capacity(self.tail.len());
        tail.extend_from_slice(&self.tail[self.tail_start..]);
        tail.extend_from_slice(&self.tail[..self.tail_start]);
        let kept = (self.head.len() + tail.len()) as u64;
        let mut out = String::from_utf8_lossy(&self.head).into_owned();
        if self.total > kept {
            out.push_str(&format!(
                "\n[… {} bytes left out of the middle of {} …]\n",
                self.total - kept,
                self.total
            ));
        }
        out.push_str(&String::from_utf8_lossy(&tail));
        out
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    #[test]
    fn a_short_result_is_untouched_and_a_long_one_says_what_was_cut() {
        assert_eq!(cap_result("hello".into(), 10), "hello");
        let capped = cap_result("é".repeat(10), 5);
        assert!(capped.starts_with("éé\n"), "{capped}");
        assert!(capped.contains("4 of 20 bytes shown"), "{capped}");
    }

    proptest! {
        /// Whatever the chunking, the head and the tail are the stream's own first and last
        /// bytes, and nothing is claimed left out that was kept.
        #[test]
        fn head_and_tail_are_the_streams_ends(
            data in proptest::collection::vec(any::<u8>(), 0..400),
            cuts in proptest::collection::vec(0usize..400, 0..8),
            max in 2usize..64,
        ) {
            let mut kept = HeadTail::new(max);
            let mut rest = &data[..];
            for cut in cuts {
                let (now, later) = rest.split_at(cut.min(rest.len()));
                kept.push(now);
                rest = later;
            }
            kept.push(rest);
            let half = max / 2;
            prop_assert_eq!(kept.total(), data.len() as u64);
            let head_len = kept.head.len();
            prop_assert_eq!(&kept.head[..], &data[..head_len]);
            let mut tail = kept.tail[kept.tail_start..].to_vec();
            tail.extend_from_slice(&kept.tail[..kept.tail_start]);
            if data.len() <= half {
                prop_assert!(tail.is_empty());
            } else {
                let expect = (data.len() - half).min(half);
                prop_assert_eq!(&tail[..], &data[data.len() - expect..]);
            }
            let text = kept.finish();
            prop_assert_eq!(text.contains("left out"), data.len() > 2 * half);
        }
    }
}
