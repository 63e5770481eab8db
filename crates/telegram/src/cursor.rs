//! [`Cursor`]: which Telegram updates may be confirmed.
//!
//! Telegram keeps an update until `getUpdates` is called with an offset above its id; a
//! poll returns every unconfirmed update from the offset on, old ones included. So the
//! channel publishes each update once, tracks its fate, and moves the offset only past a
//! prefix of settled updates: an update still in flight (its turn runs) holds the offset,
//! so a crash means it comes again — and its session's journal makes sure it is answered
//! exactly once. An update left unprocessed is taken up again at the next poll, at most
//! [`MAX_ATTEMPTS`] times, so one that cannot be processed cannot hold the offset forever.
//!
//! After a week without updates Telegram numbers the next one at random, possibly below the
//! offset — and polling with that offset would confirm it unseen. So a cursor that has seen
//! no update for [`RENUMBERED_AFTER`] forgets its offset and polls from Telegram's oldest
//! unconfirmed update, which is the same place (everything below the offset was confirmed
//! by the poll that sent it).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use switchboard_core::Fate;

/// How often an update left unprocessed is published before it is given up on.
pub const MAX_ATTEMPTS: u8 = 3;

/// How long without an update before the offset is no longer trusted: Telegram renumbers
/// after a week; a day's margin.
pub const RENUMBERED_AFTER: Duration = Duration::from_secs(6 * 24 * 3600);

/// Where one update stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Standing {
    /// Published; its fate is not known yet.
    InFlight { attempts: u8 },
    /// Left unprocessed; publish it again at the next poll.
    Retry { attempts: u8 },
    /// Handled, dropped, or given up on: it may be confirmed.
    Settled,
}

/// The confirmed offset and the updates past it.
#[derive(Clone, Debug)]
pub struct Cursor {
    /// Every update below this is settled; `getUpdates` is called with it.
    base: Option<u32>,
    /// Updates at or past `base`, and where each stands.
    pending: BTreeMap<u32, Standing>,
    /// When the last update came (or the offset was kept, for one read back from disk).
    last_update: Instant,
}

impl Cursor {
    /// A cursor resuming at `base` (read back from disk), last moved at `since`, or at
    /// Telegram's oldest unconfirmed update.
    pub fn new(base: Option<u32>, since: Instant) -> Self {
        Self {
            base,
            pending: BTreeMap::new(),
            last_update: since,
        }
    }

    /// Moves to `base`, kept by the last poller (before a restart, or another gateway of the
    /// cluster), when it is past this cursor's: what lies below it was confirmed.
    pub fn catch_up(&mut self, base: Option<u32>, since: Instant) {
        let Some(base) = base else { return };
        if self.base.is_some_and(|mine| mine >= base) {
            return;
        }
        self.base = Some(base);
        self.pending.retain(|&id, _| id >= base);
        self.last_update = if self.pending.is_empty() {
            since
        } else {
            self.last_update.max(since)
        };
    }

    /// The offset to poll with at `now`.
    pub fn offset(&mut self, now: Instant) -> Option<u32> {
        let quiet = now.saturating_duration_since(self.last_update);
        if self.base.is_some() && self.pending.is_empty() && quiet >= RENUMBERED_AFTER {
            tracing::info!(
                offset = ?self.base,
                "no Telegram update for {} days; polling from Telegram's oldest unconfirmed update, as it may have renumbered",
                quiet.as_secs() / 86_400
            );
            self.base = None;
        }
        self.base
    }

    /// The offset confirmed so far (what to keep on disk).
    pub fn confirmed(&self) -> Option<u32> {
        self.base
    }

    /// An update came in a poll at `now`: whether to publish it (it is new, or due for
    /// another try).
    pub fn take(&mut self, id: u32, now: Instant) -> bool {
        self.last_update = self.last_update.max(now);
        if self.base.is_some_and(|base| id < base) {
            return false;
        }
        match self.pending.get(&id).copied() {
            None => {
                self.pending.insert(id, Standing::InFlight { attempts: 1 });
                true
            }
            Some(Standing::Retry { attempts }) => {
                self.pending.insert(
                    id,
                    Standing::InFlight {
                        attempts: attempts + 1,
                    },
                );
                true
            }
            Some(Standing::InFlight { .. } | Standing::Settled) => false,
        }
    }

    /// Records an update's fate; returns whether the offset moved.
    pub fn settle(&mut self, id: u32, fate: Fate) -> bool {
        let Some(standing) = self.pending.get_mut(&id) else {
            return false;
        };
        *standing = match (fate, *standing) {
            (Fate::Handled | Fate::Dropped, _) => Standing::Settled,
            (Fate::Unprocessed, Standing::InFlight { attempts }) if attempts < MAX_ATTEMPTS => {
                Standing::Retry { attempts }
            }
            (Fate::Unprocessed, _) => {
                tracing::error!(
                    update = id,
                    "a Telegram update could not be processed after {MAX_ATTEMPTS} tries; it is skipped"
                );
                Standing::Settled
            }
        };
        let before = self.base;
        while let Some((&first, Standing::Settled)) = self.pending.first_key_value() {
            self.pending.remove(&first);
            self.base = Some(first.saturating_add(1));
        }
        self.base != before
    }

    /// Updates published and not settled yet.
    pub fn in_flight(&self) -> usize {
        self.pending
            .values()
            .filter(|s| matches!(s, Standing::InFlight { .. }))
            .count()
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn now() -> Instant {
        Instant::now()
    }

    #[test]
    fn the_offset_waits_for_the_oldest_update_in_flight() {
        let mut cursor = Cursor::new(None, now());
        assert!(cursor.take(10, now()) && cursor.take(11, now()) && cursor.take(12, now()));
        assert!(!cursor.take(11, now()), "published once");
        assert!(!cursor.settle(11, Fate::Handled));
        assert!(!cursor.settle(12, Fate::Dropped));
        assert_eq!(cursor.confirmed(), None, "10 is still running");
        assert!(cursor.settle(10, Fate::Handled));
        assert_eq!(cursor.confirmed(), Some(13));
        assert!(
            !cursor.take(12, now()),
            "in flight or settled ones are not taken again"
        );
    }

    #[test]
    fn a_week_without_updates_forgets_the_offset_telegram_may_have_renumbered() {
        let start = now();
        let mut cursor = Cursor::new(Some(5_000), start);
        assert_eq!(
            cursor.offset(start + Duration::from_secs(3600)),
            Some(5_000)
        );
        assert!(cursor.take(5_000, start + Duration::from_secs(3600)));
        let later = start + Duration::from_secs(3600) + RENUMBERED_AFTER;
        assert_eq!(cursor.offset(later), Some(5_000), "5000 is still in flight");
        cursor.settle(5_000, Fate::Handled);
        assert_eq!(cursor.offset(later - Duration::from_secs(1)), Some(5_001));
        assert_eq!(cursor.offset(later), None, "quiet for {RENUMBERED_AFTER:?}");
        assert!(
            cursor.take(17, later),
            "a renumbered update is taken, not seen as confirmed"
        );
        cursor.settle(17, Fate::Handled);
        assert_eq!(cursor.offset(later), Some(18));
    }

    #[test]
    fn an_unprocessed_update_is_retried_then_skipped() {
        let mut cursor = Cursor::new(Some(5), now());
        for _ in 0..MAX_ATTEMPTS {
            assert!(cursor.take(5, now()));
            assert!(!cursor.take(5, now()));
            cursor.settle(5, Fate::Unprocessed);
        }
        assert_eq!(
            cursor.confirmed(),
            Some(6),
            "given up after {MAX_ATTEMPTS} tries"
        );
    }

    /// An update, the order its fate is reported in, and the fate.
    fn shapes() -> impl Strategy<Value = Vec<(u32, u8, Fate)>> {
        let fate = prop_oneof![
            Just(Fate::Handled),
            Just(Fate::Dropped),
            Just(Fate::Unprocessed)
        ];
        prop::collection::vec((0u32..30, 0u8..255, fate), 1..60)
    }

    proptest! {
        /// Updates arriving in polls (repeated, as Telegram repeats unconfirmed ones) and
        /// settling in any order: the offset never passes an update that is not settled,
        /// and once all are settled it is past the last.
        #[test]
        fn the_offset_never_passes_an_unsettled_update(events in shapes()) {
            let mut cursor = Cursor::new(None, now());
            let mut settled: BTreeMap<u32, u8> = BTreeMap::new();
            let mut in_flight: Vec<(u32, u8, Fate)> = Vec::new();
            for (id, order, fate) in events {
                if cursor.take(id, now()) {
                    in_flight.push((id, order, fate));
                }
                // Settle the in-flight update with the smallest order key.
                if let Some(at) = (0..in_flight.len()).min_by_key(|&i| in_flight[i].1) {
                    let (id, _, fate) = in_flight.remove(at);
                    cursor.settle(id, fate);
                    if fate != Fate::Unprocessed {
                        settled.insert(id, 0);
                    }
                }
                if let Some(base) = cursor.confirmed() {
                    for (id, _, _) in &in_flight {
                        prop_assert!(*id >= base, "offset {base} passed {id} in flight");
                    }
                }
            }
            // Drain: every update gets settled for good, retried ones included.
            while let Some((id, _, _)) = in_flight.pop() {
                cursor.settle(id, Fate::Handled);
                for retry in 0..30 {
                    if cursor.take(retry, now()) {
                        in_flight.push((retry, 0, Fate::Handled));
                    }
                }
            }
            prop_assert_eq!(cursor.in_flight(), 0);
        }
    }
}
