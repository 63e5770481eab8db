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
    /// How many there are, for messages.
    max: usize,
}

impl TurnSlots {
    /// `max` slots (at least one).
    pub fn new(max: usize) -> Arc<Self> {
        let max = max.max(1);
        Arc::new(Self {
            semaphore: Arc::new(Semaphore::new(max)),
            max,
        })
    }

    /// How many turns may run at once.
    pub fn max(&self) -> usize {
        self.max
    }

    /// How many slots are free now.
    pub fn free(&self) -> usize {
        self.semaphore.available_permits()
    }

    /// A slot, if one is free now.
    pub fn try_take(self: &Arc<Self>) -> Option<Arc<HeldSlot>> {
        let permit = self.semaphore.clone().try_acquire_owned().ok()?;
        Some(HeldSlot::new(self.clone(), permit))
    }

    /// A slot, waiting until one is free.
    pub async fn take(self: &Arc<Self>) -> Arc<HeldSlot> {
        let permit = self.acquire().await;
        HeldSlot::new(self.clone(), permit)
    }

    async fn acquire(&self) -> OwnedSemaphorePermit {
        // The semaphore is never closed.
        match self.semaphore.clone().acquire_owned().await {
            Ok(permit) => permit,
            Err(_) => unreachable!("the turn semaphore is never closed"),
        }
    }
}

/// One turn's hold on a slot; the slot is free again when the last clone is dropped (the
/// turn ended) or while a tool waits for other turns.
#[derive(Debug)]
pub struct HeldSlot {
    slots: Arc<TurnSlots>,
    state: Mutex<Hold>,
}

#[derive(Debug)]
struct Hold {
    /// The slot, while the turn holds it.
    permit: Option<OwnedSemaphorePermit>,
    /// Waits for other turns going on now; the slot is let go while there is any.
    waiting: usize,
}

impl HeldSlot {
    fn new(slots: Arc<TurnSlots>, permit: OwnedSemaphorePermit) -> Arc<Self> {
        Arc::new(Self {
            slots,
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
        let permit = self.slots.acquire().await;
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
        let parent = slots.try_take().expect("the one slot");
        assert!(slots.try_take().is_none(), "all taken");
        parent.release();
        let child = slots.try_take().expect("the parent's slot, lent");
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
        let turn = slots.try_take().expect("slot");
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
        let turn = slots.try_take().expect("slot");
        turn.release();
        let other = slots.try_take().expect("lent");
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
}
