//! What each chat's running turn is doing now, as its frames said: whether a turn runs and
//! the question it waits on. A page reloaded in the middle of a turn learns it from its
//! `history` frame — the stop button comes back, and so does a pending approval, which would
//! otherwise stay unanswered until it timed out. Only chats with a turn running have an
//! entry.

use dashmap::DashMap;
use switchboard_core::{ChatId, OutboundKind, TurnEnd};

use crate::protocol::Waiting;

/// The most of a running answer's text kept for a page shown again; past it, the text kept
/// is what came first (the page gets the rest as it streams).
const MAX_TEXT_BYTES: usize = 256 * 1024;

/// A running turn, as its frames so far said.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Live {
    /// The question it waits on.
    pub(crate) waiting: Option<Waiting>,
    /// Its answer so far: the deltas since it started or last started over.
    pub(crate) text: String,
    /// The `seq` of the last frame noted: a page shown again has everything up to it.
    pub(crate) seq: u64,
}

#[derive(Default)]
pub(crate) struct LiveChats(DashMap<ChatId, Live>);

impl LiveChats {
    /// Follows a frame sent to `chat`, numbered `seq`.
    pub(crate) fn note(&self, chat: &ChatId, kind: &OutboundKind, seq: u64) {
        match kind {
            OutboundKind::TurnStarted => {
                self.0.insert(
                    chat.clone(),
                    Live {
                        seq,
                        ..Live::default()
                    },
                );
                return;
            }
            // A command's answer (`/status` during a turn) ends no turn.
            OutboundKind::Done(TurnEnd::NotATurn) => {}
            OutboundKind::Done(_) => {
                self.0.remove(chat);
                return;
            }
            _ => {}
        }
        let Some(mut live) = self.0.get_mut(chat) else {
            return;
        };
        live.seq = live.seq.max(seq);
        match kind {
            OutboundKind::Question { text, awaiting } => {
                live.waiting = Some(Waiting {
                    text: text.clone(),
                    waiting_for: awaiting.as_str(),
                });
            }
            // Outside a turn, or transient: the question still stands.
            OutboundKind::Status(_)
            | OutboundKind::Notice(_)
            | OutboundKind::Transcript(_)
            | OutboundKind::Post(_)
            | OutboundKind::TurnStarted
            | OutboundKind::Done(_) => {}
            // The turn went on: the question was answered.
            OutboundKind::Delta(piece) => {
                live.waiting = None;
                if live.text.len() + piece.len() <= MAX_TEXT_BYTES {
                    live.text.push_str(piece);
                }
            }
            OutboundKind::DraftReset => {
                live.waiting = None;
                live.text.clear();
            }
            OutboundKind::Message(text) => {
                live.waiting = None;
                live.text.clear();
                live.text.push_str(text);
            }
            OutboundKind::Tool(_) | OutboundKind::File(_) | OutboundKind::Error(_) => {
                live.waiting = None
            }
        }
    }

    /// The turn running in `chat`, if one does.
    pub(crate) fn get(&self, chat: &ChatId) -> Option<Live> {
        self.0.get(chat).map(|live| live.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use switchboard_core::Awaiting;

    #[test]
    fn a_turn_runs_from_its_start_to_its_end_and_its_question_lasts_until_it_goes_on() {
        let live = LiveChats::default();
        let chat = ChatId::from("c");
        assert_eq!(live.get(&chat), None);
        live.note(&chat, &OutboundKind::TurnStarted, 1);
        assert_eq!(live.get(&chat).map(|l| l.seq), Some(1));
        live.note(
            &chat,
            &OutboundKind::Question {
                text: "Run exec?".into(),
                awaiting: Awaiting::Approval,
            },
            2,
        );
        live.note(&chat, &OutboundKind::Status("slow".into()), 3);
        live.note(&chat, &OutboundKind::Done(TurnEnd::NotATurn), 4);
        let now = live.get(&chat).expect("running");
        assert_eq!(now.waiting.map(|w| w.waiting_for), Some("approval"));
        assert_eq!(now.seq, 4);
        live.note(&chat, &OutboundKind::Delta("ok".into()), 5);
        assert_eq!(live.get(&chat).and_then(|l| l.waiting), None);
        live.note(&chat, &OutboundKind::Done(TurnEnd::Answered), 6);
        assert_eq!(live.get(&chat), None);
    }

    /// What a page shown again in the middle of an answer gets: the text so far (started
    /// over at a reset) and the seq it covers.
    #[test]
    fn the_answer_so_far_is_kept_with_the_seq_it_covers() {
        let live = LiveChats::default();
        let chat = ChatId::from("c");
        live.note(&chat, &OutboundKind::TurnStarted, 10);
        live.note(&chat, &OutboundKind::Delta("word0 ".into()), 11);
        live.note(&chat, &OutboundKind::Delta("word1".into()), 12);
        let now = live.get(&chat).expect("running");
        assert_eq!((now.text.as_str(), now.seq), ("word0 word1", 12));
        live.note(&chat, &OutboundKind::DraftReset, 13);
        live.note(&chat, &OutboundKind::Delta("again".into()), 14);
        let now = live.get(&chat).expect("running");
        assert_eq!((now.text.as_str(), now.seq), ("again", 14));
    }
}
