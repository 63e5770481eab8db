//! signal-cli's event stream within a size: [`Cap`] cuts an event that grows past
//! [`MAX_EVENT_BYTES`] — what it read of it ends there (the stream's reader sees an event that
//! does not parse, and skips it, keeping its id), and the rest of it is dropped up to the blank
//! line that ends it. Following the stream again would not do: signal-cli would send the same
//! event again, for ever.

/// The largest event taken whole (a Signal message is at most 2,000 characters; its
/// attachments come by id).
pub const MAX_EVENT_BYTES: usize = 1024 * 1024;

/// Where a stream of server-sent events is: how far into its event, and whether the event
/// is being dropped.
#[derive(Debug)]
pub(crate) struct Cap {
    max: usize,
    /// Bytes of the event so far.
    since: usize,
    /// Whether only `\r` came since the last `\n` (a `\n` now is the blank line).
    at_line_start: bool,
    skipping: bool,
    /// Events cut so far.
    pub(crate) cut: u64,
}

impl Cap {
    pub(crate) fn new(max: usize) -> Self {
        Self {
            max,
            since: 0,
            at_line_start: true,
            skipping: false,
            cut: 0,
        }
    }

    /// What of `chunk` goes on to the reader.
    pub(crate) fn pass(&mut self, chunk: &[u8]) -> Vec<u8> {
        let mut out = Vec::with_capacity(chunk.len());
        for &byte in chunk {
            let ends_event = byte == b'\n' && self.at_line_start;
            match byte {
                b'\n' => self.at_line_start = true,
                b'\r' => {}
                _ => self.at_line_start = false,
            }
            if self.skipping {
                if ends_event {
                    self.skipping = false;
                    self.since = 0;
                }
                continue;
            }
            out.push(byte);
            if ends_event {
                self.since = 0;
            } else {
                self.since += 1;
                if self.since > self.max {
                    // End what was read of it here; drop the rest.
                    out.extend_from_slice(b"\n\n");
                    self.skipping = true;
                    self.cut += 1;
                }
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn through(cap: &mut Cap, chunks: &[&str]) -> String {
        chunks
            .iter()
            .map(|chunk| String::from_utf8(cap.pass(chunk.as_bytes())).expect("text"))
            .collect()
    }

    #[test]
    fn events_within_the_cap_pass_whole_across_chunks() {
        let mut cap = Cap::new(64);
        let stream = [
            "id: 1\ndata: {\"a\"",
            ":1}\n\nid: 2\r\ndata: {}\r\n",
            "\r\n",
        ];
        assert_eq!(through(&mut cap, &stream), stream.concat());
        assert_eq!(cap.cut, 0);
    }

    #[test]
    fn an_event_over_the_cap_is_ended_there_and_the_next_one_passes() {
        let mut cap = Cap::new(20);
        let big = format!("id: 7\ndata: {}\n\n", "x".repeat(100));
        let out = through(&mut cap, &[&big[..30], &big[30..], "id: 8\ndata: ok\n\n"]);
        assert_eq!(
            out,
            format!("id: 7\ndata: {}\n\nid: 8\ndata: ok\n\n", "x".repeat(9))
        );
        assert_eq!(cap.cut, 1);
    }
}
