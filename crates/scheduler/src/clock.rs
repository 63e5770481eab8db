//! [`Clock`]: what "now" is to the scheduler — the system's, or tokio's (paused in tests).

use jiff::{SignedDuration, Timestamp};

/// What "now" is.
pub trait Clock: Send + Sync {
    /// The current instant.
    fn now(&self) -> Timestamp;
}

/// The system's wall clock.
#[derive(Debug, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Timestamp {
        Timestamp::now()
    }
}

/// A clock that moves with tokio's (so `tokio::time::pause` and `advance` move it), from an
/// instant it was set to: for tests where time is the subject.
#[derive(Debug)]
pub struct TokioClock {
    start: Timestamp,
    at: tokio::time::Instant,
}

impl TokioClock {
    /// A clock reading `start` now.
    pub fn starting_at(start: Timestamp) -> Self {
        Self {
            start,
            at: tokio::time::Instant::now(),
        }
    }
}

impl Clock for TokioClock {
    fn now(&self) -> Timestamp {
        let elapsed = SignedDuration::try_from(self.at.elapsed()).unwrap_or(SignedDuration::MAX);
        self.start.saturating_add(elapsed).unwrap_or(self.start)
    }
}
