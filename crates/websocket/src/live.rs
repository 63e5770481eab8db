//! What each chat's running turn is doing now, as its frames said: whether a turn runs and
//! the question it waits on. A page reloaded in the middle of a turn learns it from its
//! `history` frame — the stop button comes back, and so does a pending approval, which would
//! otherwise stay unanswered until it timed out. Only chats with a turn running have an
//! entry.

use dashmap::DashMap;
use switchboard_core::{ChatId, OutboundKind, TurnEnd};

use crate::protocol::Waiting;

#[derive(Default)]
pub(crate) struct LiveChats(DashMap<ChatId, Option<Waiting>>);

impl LiveChats {
    /// Follows a frame sent to `chat`.
    pub(crate) fn note(&self, chat: &ChatId, kind: &OutboundKind) {
        match kind {
            OutboundKind::TurnStarted => {
                self.0.insert(chat.clone(), None);
            }
            OutboundKind::Question { text, awaiting } => {
                self.0.insert(
                    chat.clone(),
                    Some(Waiting {
                        text: text.clone(),
                        waiting_for: awaiting.as_str(),
                    }),
                );
            }
            // A command's answer (`/status` during a turn) ends no turn.
            OutboundKind::Done(TurnEnd::NotATurn) => {}
            OutboundKind::Done(_) => {
                self.0.remove(chat);
            }
            // Outside a turn, or transient: the question still stands.
            OutboundKind::Status(_) | OutboundKind::Notice(_) | OutboundKind::Post(_) => {}
            // The turn went on: the question was answered.
            OutboundKind::Delta(_)
            | OutboundKind::DraftReset
            | OutboundKind::Message(_)
            | OutboundKind::Tool(_)
            | OutboundKind::Error(_) => {
                if let Some(mut waiting) = self.0.get_mut(chat) {
                    *waiting = None;
                }
            }
        }
    }

    /// Whether a turn runs in `chat`, and what it waits on.
    pub(crate) fn get(&self, chat: &ChatId) -> (bool, Option<Waiting>) {
        match self.0.get(chat) {
            Some(waiting) => (true, waiting.clone()),
            None => (false, None),
        }
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
        assert_eq!(live.get(&chat), (false, None));
        live.note(&chat, &OutboundKind::TurnStarted);
        assert_eq!(live.get(&chat), (true, None));
        live.note(
            &chat,
            &OutboundKind::Question {
                text: "Run exec?".into(),
                awaiting: Awaiting::Approval,
            },
        );
        live.note(&chat, &OutboundKind::Status("slow".into()));
        live.note(&chat, &OutboundKind::Done(TurnEnd::NotATurn));
        let (running, waiting) = live.get(&chat);
        assert!(running);
        assert_eq!(waiting.map(|w| w.waiting_for), Some("approval"));
        live.note(&chat, &OutboundKind::Delta("ok".into()));
        assert_eq!(live.get(&chat), (true, None));
        live.note(&chat, &OutboundKind::Done(TurnEnd::Answered));
        assert_eq!(live.get(&chat), (false, None));
    }
}
