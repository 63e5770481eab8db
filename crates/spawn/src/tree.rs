//! [`Trees`]: the sub-agents working for one chat, counted together — its turns' children,
//! their children, and theirs — so that one message cannot make more of them than the
//! chat's limits allow, however deep they nest and however many each starts.
//!
//! # Why a chat's sub-agents are bounded whatever the model does
//! Every child is started for a chat: the chat whose message began the work (a child's own
//! children are started for the same chat, see `InboundMessage::on_behalf_of`). Each start
//! is admitted here, under the spawner's lock, against two counts of that chat:
//! - **running**: its sub-agents running now, at every depth (`spawn.max_children`). A
//!   child counts from its admission until its end, its parent's `/stop` or a failed start.
//! - **started**: its sub-agents started for the turn now answering it, at every depth
//!   (`spawn.max_per_turn`). A turn of the chat's own session answering a new message —
//!   not the one that hands it its sub-agents' results — begins a new count; every other
//!   start (a child's, or the results' turn) counts on the current one. So a tree is at most
//!   `max_per_turn` sub-agents per message, and a chain of results' turns that each start
//!   more shares one count rather than beginning fresh.
//!
//! A chat with nothing running is kept (its count must outlive its children, for the turn
//! that takes their results); past [`KEPT`] chats, those with nothing running are forgotten.

use std::collections::HashMap;

use switchboard_core::SessionKey;

/// Chats remembered; beyond, those with nothing running are forgotten.
const KEPT: usize = 1024;

/// How many sub-agents one chat may have.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TreeLimits {
    /// Running at once, at every depth (`spawn.max_children`).
    pub running: usize,
    /// Started for one turn of the chat, at every depth (`spawn.max_per_turn`).
    pub per_turn: usize,
}

/// The sub-agents of every chat that started some.
#[derive(Default)]
pub(super) struct Trees {
    by_chat: HashMap<SessionKey, Tree>,
}

#[derive(Default)]
struct Tree {
    running: usize,
    /// The turn `started` counts for.
    turn: u64,
    started: usize,
}

impl Trees {
    /// Admits one more sub-agent for `chat` — started by the turn `turn` when that turn
    /// begins a new count (a turn of the chat's own session answering a new message), else
    /// on the current count — or says why not.
    pub(super) fn admit(
        &mut self,
        chat: &SessionKey,
        turn: Option<u64>,
        limits: TreeLimits,
    ) -> Result<(), String> {
        if !self.by_chat.contains_key(chat) && self.by_chat.len() >= KEPT {
            self.by_chat.retain(|_, tree| tree.running > 0);
        }
        let tree = self.by_chat.entry(chat.clone()).or_default();
        if let Some(turn) = turn
            && turn != tree.turn
        {
            tree.turn = turn;
            tree.started = 0;
        }
        if tree.running >= limits.running {
            return Err(format!(
                "{} sub-agents are running for this chat, the most it may have at once \
                 (agent.spawn.max_children, counting sub-agents of sub-agents): wait for their \
                 results",
                tree.running
            ));
        }
        if tree.started >= limits.per_turn {
            return Err(format!(
                "{} sub-agents were started for this request, the most one request may start \
                 (agent.spawn.max_per_turn, counting sub-agents of sub-agents): do the rest \
                 yourself or answer with what you have",
                tree.started
            ));
        }
        tree.running += 1;
        tree.started += 1;
        Ok(())
    }

    /// A sub-agent of `chat` ended (or was stopped, or never started).
    pub(super) fn ended(&mut self, chat: &SessionKey) {
        if let Some(tree) = self.by_chat.get_mut(chat) {
            tree.running = tree.running.saturating_sub(1);
        }
    }

    /// Sub-agents of `chat` running now (tests).
    #[cfg(test)]
    fn running(&self, chat: &SessionKey) -> usize {
        self.by_chat.get(chat).map_or(0, |tree| tree.running)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMITS: TreeLimits = TreeLimits {
        running: 4,
        per_turn: 6,
    };

    /// A turn that starts `fan` children, each of whom starts `fan` of its own, `depth`
    /// levels down, none ending: how many were admitted.
    fn bomb(trees: &mut Trees, chat: &SessionKey, turn: u64, fan: usize, depth: u32) -> usize {
        let mut admitted = 0;
        let mut first = Some(turn);
        for _ in 0..(0..depth).map(|level| fan.pow(level + 1)).sum::<usize>() {
            if trees.admit(chat, first.take(), LIMITS).is_ok() {
                admitted += 1;
            }
        }
        admitted
    }

    #[test]
    fn a_message_that_fans_out_at_every_depth_gets_only_the_chats_running_limit() {
        let mut trees = Trees::default();
        let chat = SessionKey::from("telegram_1");
        // 32 children, each starting 32, four deep: 1,082,400 asked for.
        assert_eq!(bomb(&mut trees, &chat, 1, 32, 4), LIMITS.running);
        assert_eq!(trees.running(&chat), LIMITS.running);
        let other = SessionKey::from("telegram_2");
        assert!(
            trees.admit(&other, Some(2), LIMITS).is_ok(),
            "another chat has limits of its own"
        );
    }

    #[test]
    fn one_turn_starts_at_most_its_share_however_fast_they_end() {
        let mut trees = Trees::default();
        let chat = SessionKey::from("telegram_1");
        let mut started = 0;
        let mut refusal = String::new();
        for n in 0..100 {
            // The first start is the turn's; children's starts come after, each ending at once.
            let turn = (n == 0).then_some(7);
            match trees.admit(&chat, turn, LIMITS) {
                Ok(()) => {
                    started += 1;
                    trees.ended(&chat);
                }
                Err(why) => refusal = why,
            }
        }
        assert_eq!(started, LIMITS.per_turn);
        assert!(refusal.contains("agent.spawn.max_per_turn"), "{refusal}");
        // The turn that takes their results counts on (no turn of its own) …
        assert!(trees.admit(&chat, None, LIMITS).is_err());
        // … the next message's turn begins a new count.
        assert!(trees.admit(&chat, Some(8), LIMITS).is_ok());
    }

    #[test]
    fn ends_free_running_places_and_idle_chats_are_forgotten_past_the_kept_number() {
        let mut trees = Trees::default();
        let busy = SessionKey::from("telegram_busy");
        for _ in 0..LIMITS.running {
            trees.admit(&busy, Some(1), LIMITS).expect("a place");
        }
        let refused = trees.admit(&busy, None, LIMITS).expect_err("full");
        assert!(refused.contains("agent.spawn.max_children"), "{refused}");
        trees.ended(&busy);
        trees.admit(&busy, None, LIMITS).expect("a place freed");
        for n in 0..KEPT * 2 {
            let chat = SessionKey::from(format!("websocket_{n}"));
            trees.admit(&chat, Some(2), LIMITS).expect("admitted");
            trees.ended(&chat);
        }
        assert!(trees.by_chat.len() <= KEPT + 1, "{}", trees.by_chat.len());
        assert_eq!(trees.running(&busy), LIMITS.running, "a busy chat is kept");
    }
}
