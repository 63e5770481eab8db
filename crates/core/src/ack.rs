//! [`Ack`]: how a channel learns what became of an inbound message, so it can confirm it to
//! its platform (move a polling cursor past it) only once it will never be needed again.

use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};

/// What became of an inbound message.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Fate {
    /// It was answered and the answer delivered, or it was a repeat of one that was: the
    /// platform need not deliver it again.
    Handled,
    /// It will not be processed and should not come again: refused (its chat's queue was
    /// full), dropped by `/stop`, or not meant for the agent.
    Dropped,
    /// It was not processed (the daemon stopped first): the platform should deliver it
    /// again, and the next daemon will take it up where this one left it.
    Unprocessed,
}

/// Reports an inbound message's [`Fate`] to its channel, once.
///
/// Clones share one report: the first [`Ack::report`] wins. If every clone is dropped
/// without a report (a task that ended early, a message lost in a queue), the fate is
/// [`Fate::Unprocessed`], so a message can never be confirmed without being handled.
#[derive(Clone)]
pub struct Ack {
    inner: Arc<Inner>,
}

/// What a report calls.
type Report = Box<dyn FnOnce(Fate) + Send>;

struct Inner {
    /// Taken by the first report (or by drop). Held only to take it.
    report: Mutex<Option<Report>>,
}

impl Ack {
    /// An ack that calls `report` with the message's fate (from whichever task settles
    /// it; it should return quickly).
    pub fn new(report: impl FnOnce(Fate) + Send + 'static) -> Self {
        Self {
            inner: Arc::new(Inner {
                report: Mutex::new(Some(Box::new(report))),
            }),
        }
    }

    /// Reports the fate, unless it was reported already.
    pub fn report(&self, fate: Fate) {
        self.inner.report(fate);
    }
}

impl Inner {
    fn report(&self, fate: Fate) {
        let report = self
            .report
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(report) = report {
            report(fate);
        }
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.report(Fate::Unprocessed);
    }
}

impl fmt::Debug for Ack {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Ack")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn recorder() -> (Ack, Arc<Mutex<Vec<Fate>>>) {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let log = seen.clone();
        let ack = Ack::new(move |fate| log.lock().expect("lock").push(fate));
        (ack, seen)
    }

    #[test]
    fn the_first_report_wins_and_later_ones_are_ignored() {
        let (ack, seen) = recorder();
        let clone = ack.clone();
        clone.report(Fate::Handled);
        ack.report(Fate::Dropped);
        drop((ack, clone));
        assert_eq!(*seen.lock().expect("lock"), [Fate::Handled]);
    }

    #[test]
    fn an_ack_dropped_unreported_means_unprocessed() {
        let (ack, seen) = recorder();
        let clone = ack.clone();
        drop(ack);
        assert!(seen.lock().expect("lock").is_empty(), "a clone is alive");
        drop(clone);
        assert_eq!(*seen.lock().expect("lock"), [Fate::Unprocessed]);
    }
}
