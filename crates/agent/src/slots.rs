//! [`TurnSlots`]: how many turns may run at once — a person's, a scheduled run's, a
//! sub-agent's — across every session and every agent of the daemon
//! (`[agent] max_concurrent_turns`). Every turn takes its slot here, so there is one limit
//! and one place that enforces it.
//!
//! A turn holds its slot as a [`HeldSlot`] for as long as it runs, with one exception: a
//! tool that waits for other turns (a parent waiting for its sub-agents) lets go of it
//! while it waits and takes one again after (`TurnSlot::release` / `retake`). Otherwise a
//! parent holding the last slot would wait forever for a child that waits for a slot — a
//! deadlock at `max_concurrent_turns = 1`, and with N parents at N slots.
//!
//! # Why sub-agents never take every slot
//! A sub-agent's turn takes a slot like any, and one of the fewer slots sub-agents may hold
//! at once (`[agent] max_subagent_turns`, by default half, at least one) — that one first,
//! so a sub-agent waiting for its share holds no slot another chat could use. With more than
//! one slot the share leaves at least one to the chats' own turns, so a chat whose message
//! started a tree of sub-agents cannot keep every other chat waiting. A turn that waits for
//! its children lets go of both, and takes both back after.
//!
//! # Why a released slot is never held twice, nor held while released
//! Releases and retakes pair up, and several may overlap (three sub-agents waited for in one
//! tool batch). The state — the permit, and how many waits are open — changes only under
//! one lock: the first release drops the permit; the last retake takes a new one, and only
//! keeps it if no release came while it waited for it (else that waiter owns the released
//! state, and the permit is given back at once).

use std::sync::{Arc, Mutex, PoisonError};

use async_trait::async_trait;
use switchboard_tools::TurnSlot;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// The slots of turns that may run at once. Shared by every agent of a daemon.
#[derive(Debug)]
pub struct TurnSlots {
    /// One permit per slot; a running turn holds one (see the module doc).
    semaphore: Arc<Semaphore>,
    /// One permit per slot sub-agents may hold at once; a sub-agent's turn holds one too.
    subagents: Arc<Semaphore>,
    /// How many there are, for messages.
    max: usize,
    max_subagents: usize,
}

/// Whose turn takes a slot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Taker {
    /// A chat's own turn: a person's message, a scheduled run, the heartbeat.
    Chat,
    /// A sub-agent's.
    SubAgent,
}

/// What a turn holds while it runs: a slot, and a sub-agent's place among the slots.
#[derive(Debug)]
struct Permits {
    _slot: OwnedSemaphorePermit,
    _subagent: Option<OwnedSemaphorePermit>,
}

impl TurnSlots {
    /// `max` slots (at least one), of which sub-agents may hold the default share (see
    /// [`default_subagents`]).
    pub fn new(max: usize) -> Arc<Self> {
        Self::with_subagents(max, default_subagents(max))
    }

    /// `max` slots (at least one), of which sub-agents may hold `subagents` at once (at
    /// least one, at most `max`).
    pub fn with_subagents(max: usize, subagents: usize) -> Arc<Self> {
        let max = max.max(1);
        let max_subagents = subagents.clamp(1, max);
        Arc::new(Self {
            semaphore: Arc::new(Semaphore::new(max)),
            subagents: Arc::new(Semaphore::new(max_subagents)),
            max,
            max_subagents,
        })
    }

    /// How many turns may run at once.
    pub fn max(&self) -> usize {
        self.max
    }

    /// How many of them may be sub-agents' turns.
    pub fn max_subagents(&self) -> usize {
        self.max_subagents
    }

    /// How many slots are free now.
    pub fn free(&self) -> usize {
        self.semaphore.available_permits()
    }

    /// A slot for `taker`'s turn, if one is free now.
    pub fn try_take(self: &Arc<Self>, taker: Taker) -> Option<Arc<HeldSlot>> {
        let subagent = match taker {
            Taker::Chat => None,
            Taker::SubAgent => Some(self.subagents.clone().try_acquire_owned().ok()?),
        };
        let slot = self.semaphore.clone().try_acquire_owned().ok()?;
        let permits = Permits {
            _slot: slot,
            _subagent: subagent,
        };
        Some(HeldSlot::new(self.clone(), taker, permits))
    }

    /// A slot for `taker`'s turn, waiting until one is free.
    pub async fn take(self: &Arc<Self>, taker: Taker) -> Arc<HeldSlot> {
        let permits = self.acquire(taker).await;
        HeldSlot::new(self.clone(), taker, permits)
    }

    async fn acquire(&self, taker: Taker) -> Permits {
        // The semaphores are never closed. A sub-agent's place first: waiting for it holds
        // no slot.
        let subagent = match taker {
            Taker::Chat => None,
            Taker::SubAgent => Some(permit(&self.subagents).await),
        };
        Permits {
            _slot: permit(&self.semaphore).await,
            _subagent: subagent,
        }
    }
}

async fn permit(semaphore: &Arc<Semaphore>) -> OwnedSemaphorePermit {
    match semaphore.clone().acquire_owned().await {
        Ok(permit) => permit,
        Err(_) => unreachable!("the turn semaphores are never closed"),
    }
}

/// How many of `max` slots sub-agents may hold at once unless configured: half, at least
/// one — which leaves the chats at least one of two or more.
pub fn default_subagents(max: usize) -> usize {
    (max / 2).max(1)
}

/// One turn's hold on a slot; the slot is free again when the last clone is dropped (the
/// turn ended) or while a tool waits for other turns.
#[derive(Debug)]
pub struct HeldSlot {
    slots: Arc<TurnSlots>,
    taker: Taker,
    state: Mutex<Hold>,
}

#[derive(Debug)]
struct Hold {
    /// The slot, while the turn holds it.
    permit: Option<Permits>,
    /// Waits for other turns going on now; the slot is let go while there is any.
    waiting: usize,
}

impl HeldSlot {
    fn new(slots: Arc<TurnSlots>, taker: Taker, permit: Permits) -> Arc<Self> {
        Arc::new(Self {
            slots,
            taker,
            state: Mutex::new(Hold {
                permit: Some(permit),
                waiting: 0,
            }),
        })
    }

    fn hold(&self) -> std::sync::MutexGuard<'_, Hold> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Whether the turn holds its slot now (tests).
    pub fn is_held(&self) -> bool {
        self.hold().permit.is_some()
    }
}

#[async_trait]
impl TurnSlot for HeldSlot {
    fn release(&self) {
        let mut hold = self.hold();
        hold.waiting += 1;
        hold.permit = None;
    }

    async fn retake(&self) {
        {
            let mut hold = self.hold();
            hold.waiting = hold.waiting.saturating_sub(1);
            if hold.waiting > 0 || hold.permit.is_some() {
                return;
            }
        }
        let permit = self.slots.acquire(self.taker).await;
        let mut hold = self.hold();
        // A wait that started meanwhile owns the released state: the permit goes back.
        if hold.waiting == 0 && hold.permit.is_none() {
            hold.permit = Some(permit);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[tokio::test]
    async fn a_turn_that_waits_lends_its_slot_so_the_turn_it_waits_for_can_run() {
        let slots = TurnSlots::new(1);
        let parent = slots.try_take(Taker::Chat).expect("the one slot");
        assert!(slots.try_take(Taker::Chat).is_none(), "all taken");
        parent.release();
        let child = slots
            .try_take(Taker::Chat)
            .expect("the parent's slot, lent");
        // The parent wants its slot back while the child still runs: it waits.
        let back = tokio::spawn({
            let parent = parent.clone();
            async move { parent.retake().await }
        });
        tokio::task::yield_now().await;
        assert!(!back.is_finished(), "the child holds the only slot");
        assert!(!parent.is_held());
        drop(child);
        tokio::time::timeout(Duration::from_secs(5), back)
            .await
            .expect("retaken once the child is done")
            .expect("join");
        assert!(parent.is_held());
        assert_eq!(slots.free(), 0);
        drop(parent);
        assert_eq!(slots.free(), 1, "freed when the turn ends");
    }

    #[tokio::test]
    async fn overlapping_waits_let_go_once_and_take_one_slot_back_after_the_last() {
        let slots = TurnSlots::new(2);
        let turn = slots.try_take(Taker::Chat).expect("slot");
        turn.release();
        turn.release();
        assert_eq!(slots.free(), 2, "released once for both waits");
        turn.retake().await;
        assert!(!turn.is_held(), "one wait still goes on");
        assert_eq!(slots.free(), 2);
        turn.retake().await;
        assert!(turn.is_held());
        assert_eq!(slots.free(), 1, "one slot, not two");
    }

    #[tokio::test]
    async fn a_wait_that_starts_while_a_retake_waits_keeps_the_slot_released() {
        let slots = TurnSlots::new(1);
        let turn = slots.try_take(Taker::Chat).expect("slot");
        turn.release();
        let other = slots.try_take(Taker::Chat).expect("lent");
        let retake = tokio::spawn({
            let turn = turn.clone();
            async move { turn.retake().await }
        });
        tokio::task::yield_now().await;
        // Another call of the same batch starts waiting before the slot came back.
        turn.release();
        drop(other);
        tokio::time::timeout(Duration::from_secs(5), retake)
            .await
            .expect("the retake ends")
            .expect("join");
        assert!(!turn.is_held(), "a wait goes on: the slot stays lent");
        assert_eq!(slots.free(), 1);
        turn.retake().await;
        assert!(turn.is_held());
        assert_eq!(slots.free(), 0);
    }

    #[tokio::test]
    async fn sub_agents_hold_at_most_their_share_and_leave_the_rest_to_chats() {
        let slots = TurnSlots::with_subagents(4, 2);
        let a = slots.try_take(Taker::SubAgent).expect("a sub-agent's");
        let b = slots.try_take(Taker::SubAgent).expect("another");
        assert!(
            slots.try_take(Taker::SubAgent).is_none(),
            "the sub-agents' share is taken"
        );
        // A third waits for the share without holding a slot meanwhile.
        let third = tokio::spawn({
            let slots = slots.clone();
            async move { slots.take(Taker::SubAgent).await }
        });
        tokio::task::yield_now().await;
        assert!(!third.is_finished());
        let chat = slots.try_take(Taker::Chat).expect("a chat's turn runs");
        let other = slots.try_take(Taker::Chat).expect("and another");
        assert_eq!(slots.free(), 0);
        drop((chat, other));
        // A sub-agent that waits for its own children lends its share too.
        a.release();
        let third = tokio::time::timeout(Duration::from_secs(5), third)
            .await
            .expect("the lent share is taken")
            .expect("join");
        assert!(third.is_held());
        drop((b, third));
        assert_eq!(slots.free(), 4);
        assert_eq!(TurnSlots::new(1).max_subagents(), 1, "at one slot, one");
        assert_eq!(TurnSlots::new(8).max_subagents(), 4, "by default, half");
    }
}
