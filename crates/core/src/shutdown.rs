//! The one shutdown pattern: tokens that every loop selects on and a tracker that the
//! daemon waits on with a deadline.

use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// Shared by every long-running task of the daemon.
///
/// Stopping happens in two steps: [`Shutdown::stop_intake`] (adapters and the dispatcher
/// take no new messages; running turns go on), then, after a grace period,
/// [`Shutdown::cancel_turns`] (running turns are cancelled and saved with synthetic tool
/// results).
#[derive(Clone, Debug, Default)]
pub struct Shutdown {
    /// Cancelled when intake stops; every receive loop selects on it.
    intake: CancellationToken,
    /// Cancelled when running turns must end now; each turn's own token is its child.
    turns: CancellationToken,
    /// Every spawned worker and channel task; the daemon waits for it to empty.
    tracker: TaskTracker,
}

impl Shutdown {
    /// A fresh shutdown handle with nothing cancelled.
    pub fn new() -> Self {
        Self::default()
    }

    /// The token cancelled when intake stops.
    pub fn intake(&self) -> &CancellationToken {
        &self.intake
    }

    /// The token cancelled when running turns must stop.
    pub fn turns(&self) -> &CancellationToken {
        &self.turns
    }

    /// The tracker of the daemon's tasks.
    pub fn tracker(&self) -> &TaskTracker {
        &self.tracker
    }

    /// Stops intake: no new messages are taken.
    pub fn stop_intake(&self) {
        self.intake.cancel();
    }

    /// Cancels every running turn (and stops intake, if it was not stopped yet).
    pub fn cancel_turns(&self) {
        self.intake.cancel();
        self.turns.cancel();
    }

    /// Stops intake, gives running tasks `grace` to finish, cancels the turns still
    /// running and waits up to `hard` more for them to save and exit. Returns whether
    /// every task ended in time.
    pub async fn drain(&self, grace: Duration, hard: Duration) -> bool {
        self.stop_intake();
        self.tracker.close();
        if tokio::time::timeout(grace, self.tracker.wait())
            .await
            .is_ok()
        {
            return true;
        }
        self.cancel_turns();
        tokio::time::timeout(hard, self.tracker.wait())
            .await
            .is_ok()
    }
}
