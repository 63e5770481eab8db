//! The draft streamer: one message edited in place while a reply streams, for any platform
//! that can edit a message.
//!
//! [`Draft`] is the pure state machine; the adapter executes the [`Step`]s it asks for and
//! reports back. The first text is sent at once; after that the draft is edited at most
//! once per interval, and only when what it would show changed. A draft shows at most the
//! platform's limit (the start of the text, then `…`). When the reply is final, the adapter
//! edits the draft one last time with the first part of the whole reply, and sends the rest
//! as new messages.
//!
//! The closing edit goes out at once, however recently the draft was edited. The interval
//! exists for the platform's per-chat rate (Telegram: about one message a second in a chat,
//! short bursts allowed; Discord: five edits in five seconds), and that holds: while a reply
//! streams its edits are an interval apart, so any span of `n` intervals has at most `n + 1`
//! of its edits — the one closing edit is the burst. Waiting out the interval instead left
//! every answer that streamed past its first edit up to a whole interval late (0.5–0.83 s
//! with Telegram's 1 s), when the person wants the whole answer the moment it exists.

use std::time::Duration;

use crate::split::Measure;

/// What a text-less draft shows (platforms refuse empty messages).
const EMPTY: &str = "…";

/// What the adapter should do now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    /// Nothing yet.
    Wait,
    /// Send a new message with this text; report it with [`Draft::sent`].
    Send(String),
    /// Edit the draft message to this text; report it with [`Draft::edited`].
    Edit {
        /// The platform's id of the draft message.
        message: String,
        /// Its new text.
        text: String,
    },
}

/// One reply's draft. Times are durations since any fixed start the adapter chooses.
#[derive(Clone, Debug)]
pub struct Draft {
    interval: Duration,
    limit: usize,
    measure: Measure,
    /// Text streamed since the last reset.
    text: String,
    /// The draft message, once sent.
    message: Option<String>,
    /// What the draft message shows.
    shown: String,
    /// When the draft was last sent or edited.
    last: Option<Duration>,
}

impl Draft {
    /// A draft edited at most once per `interval`, showing at most `limit`.
    pub fn new(interval: Duration, limit: usize, measure: Measure) -> Self {
        Self {
            interval,
            limit: limit.max(16),
            measure,
            text: String::new(),
            message: None,
            shown: String::new(),
            last: None,
        }
    }

    /// Adds streamed text; says what to do at `now`.
    pub fn push(&mut self, piece: &str, now: Duration) -> Step {
        self.text.push_str(piece);
        self.step(now)
    }

    /// The text streamed so far is void (the model starts again): the draft shows the new
    /// text as it comes.
    pub fn reset(&mut self) {
        self.text.clear();
    }

    /// What to do at `now`: send the first text, or edit the draft when the interval passed
    /// and what it would show changed.
    pub fn step(&self, now: Duration) -> Step {
        let preview = self.preview();
        match &self.message {
            None if self.text.trim().is_empty() => Step::Wait,
            None => Step::Send(preview),
            Some(_) if preview == self.shown => Step::Wait,
            Some(message) => {
                let due = self.last.is_none_or(|last| now >= last + self.interval);
                if due {
                    Step::Edit {
                        message: message.clone(),
                        text: preview,
                    }
                } else {
                    Step::Wait
                }
            }
        }
    }

    /// The draft was sent as `message`, showing `text`, at `now`.
    pub fn sent(&mut self, message: String, text: String, now: Duration) {
        self.message = Some(message);
        self.shown = text;
        self.last = Some(now);
    }

    /// The draft was edited to show `text` at `now`.
    pub fn edited(&mut self, text: String, now: Duration) {
        self.shown = text;
        self.last = Some(now);
    }

    /// The draft message, once sent: the final reply's first part is edited into it, at once.
    pub fn message(&self) -> Option<&str> {
        self.message.as_deref()
    }

    /// What the draft shows: the text, cut to the limit with `…`.
    pub fn preview(&self) -> String {
        let text = self.text.trim();
        if text.is_empty() {
            return EMPTY.to_owned();
        }
        if self.measure.len(text) <= self.limit {
            return text.to_owned();
        }
        let mut used = self.measure.len(EMPTY);
        let mut out = String::new();
        for c in text.chars() {
            used += self.measure.len(c.encode_utf8(&mut [0; 4]));
            if used > self.limit {
                break;
            }
            out.push(c);
        }
        out.push_str(EMPTY);
        out
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    const INTERVAL: Duration = Duration::from_millis(1000);

    /// Plays pieces arriving at the given gaps through a draft, as an adapter would; returns
    /// the times of every send and edit (the send first, if any) and what the draft showed
    /// last.
    fn play(pieces: &[(String, u64, bool)], limit: usize) -> (Vec<Duration>, String) {
        let mut draft = Draft::new(INTERVAL, limit, Measure::Chars);
        let mut now = Duration::ZERO;
        let mut writes = Vec::new();
        let mut shown = String::new();
        for (piece, gap_ms, reset) in pieces {
            now += Duration::from_millis(*gap_ms);
            if *reset {
                draft.reset();
            }
            match draft.push(piece, now) {
                Step::Wait => {}
                Step::Send(text) => {
                    assert!(text.chars().count() <= limit);
                    writes.push(now);
                    shown = text.clone();
                    draft.sent("m1".into(), text, now);
                }
                Step::Edit { message, text } => {
                    assert_eq!(message, "m1");
                    assert!(text.chars().count() <= limit);
                    writes.push(now);
                    shown = text.clone();
                    draft.edited(text, now);
                }
            }
        }
        // The closing edit goes out as the reply ends.
        if draft.message().is_some() {
            writes.push(now);
            shown = draft.preview();
        }
        (writes, shown)
    }

    #[test]
    fn the_first_text_is_sent_at_once_then_edits_wait_for_the_interval() {
        let pieces: Vec<(String, u64, bool)> = vec![
            ("Hel".into(), 0, false),
            ("lo".into(), 300, false),
            (" wor".into(), 300, false),
            ("ld".into(), 500, false),
            ("!".into(), 200, false),
        ];
        let (writes, shown) = play(&pieces, 100);
        // "Hello" waits for the interval (edited with " world" at 1.1 s); the reply ends
        // at 1.3 s and is closed then, not at 2.1 s.
        assert_eq!(
            writes,
            [
                Duration::ZERO,
                Duration::from_millis(1100),
                Duration::from_millis(1300)
            ]
        );
        assert_eq!(shown, "Hello world!");
    }

    #[test]
    fn a_long_reply_is_previewed_up_to_the_limit() {
        let mut draft = Draft::new(INTERVAL, 20, Measure::Chars);
        assert_eq!(
            draft.push(&"x".repeat(50), Duration::ZERO),
            Step::Send(format!("{}…", "x".repeat(19)))
        );
        draft.reset();
        assert_eq!(draft.preview(), "…");
    }

    #[test]
    fn a_reply_that_ends_before_any_edit_closes_at_once() {
        let pieces: Vec<(String, u64, bool)> = vec![
            ("Hel".into(), 0, false),
            ("lo".into(), 30, false),
            (" world".into(), 30, false),
        ];
        let (writes, shown) = play(&pieces, 100);
        assert_eq!(writes, [Duration::ZERO, Duration::from_millis(60)]);
        assert_eq!(shown, "Hello world");
    }

    proptest! {
        #[test]
        fn edits_stay_an_interval_apart_and_the_draft_ends_with_the_text(
            pieces in prop::collection::vec(("[a-z ]{0,8}", 0u64..1500, prop::bool::weighted(0.05)), 1..40),
        ) {
            let (writes, shown) = play(&pieces, 64);
            // Streaming writes an interval apart; the closing edit as the reply ends.
            let streamed = writes.len().saturating_sub(1);
            for pair in writes[..streamed].windows(2) {
                prop_assert!(pair[1] >= pair[0] + INTERVAL, "{writes:?}");
            }
            let end: Duration = pieces.iter().map(|(_, gap, _)| Duration::from_millis(*gap)).sum();
            if let Some(last) = writes.last() {
                prop_assert_eq!(*last, end, "closed as the reply ended: {:?}", writes);
            }
            // So any span of n intervals holds at most n + 1 writes after the first send.
            for (i, from) in writes.iter().enumerate().skip(1) {
                let within = writes[i..].iter().filter(|at| **at < *from + INTERVAL).count();
                prop_assert!(within <= 2, "{writes:?}");
            }
            let last_reset = pieces.iter().rposition(|(_, _, reset)| *reset).unwrap_or(0);
            let text: String = pieces[last_reset..].iter().map(|(p, _, _)| p.as_str()).collect();
            if !writes.is_empty() {
                let mut expected = Draft::new(INTERVAL, 64, Measure::Chars);
                expected.push(&text, Duration::ZERO);
                prop_assert_eq!(shown, expected.preview());
            }
        }
    }
}
