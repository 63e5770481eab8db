//! [`Tenure`]: a process's right to act on what a lease gives it — on a cluster, a worker's
//! partition of the sessions — judged without asking the server.
//!
//! A lease is renewed every third of its length and lapses on the server when a renewal does
//! not come in time; another member may take it from then on. So a worker that was paused
//! (SIGSTOP, a stalled VM) wakes believing it holds what it lost, and whatever it does before
//! its next renewal fails would be done twice. A tenure makes that belief checkable:
//!
//! - Its **epoch** (the lease's revision when it was taken) names one holding. What was read
//!   under an earlier epoch may have been written by the lease's other holders since, and is
//!   read again.
//! - It is **sure** until the earliest moment the lease could have lapsed on the server: when
//!   the last renewal that succeeded was *sent*, plus the lease (less a margin), on this
//!   process's monotonic clock. The server cannot have let it lapse sooner, whatever the
//!   network did meanwhile; a clock that kept running through a pause makes the tenure unsure
//!   the moment the process wakes. Until the next renewal answers, the holder does not know:
//!   [`Tenure::confirmed`] waits for that answer.
//! - It is **lost** for good once a renewal is refused (another member holds the lease), the
//!   lease is given up, or its holder stops.
//!
//! A worker asks [`Tenure::confirmed`] before it starts anything for a message and abandons a
//! turn once the tenure [is lost](Tenure::lost); what a turn under way wrote meanwhile is
//! fenced by the session store's conditional writes. In one process nothing is leased:
//! messages carry no tenure.

use std::sync::Arc;

use tokio::sync::watch;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// One holding of a lease. Cloning shares it.
#[derive(Clone)]
pub struct Tenure {
    inner: Arc<Inner>,
}

struct Inner {
    epoch: u64,
    /// Until when the holding is sure; replaced by each renewal. Its receivers are the
    /// waiters of [`Tenure::confirmed`].
    sure_until: watch::Sender<Instant>,
    /// Cancelled once the holding is lost for good.
    lost: CancellationToken,
}

impl Tenure {
    /// A holding of epoch `epoch`, sure until `sure_until`.
    pub fn new(epoch: u64, sure_until: Instant) -> Self {
        Self {
            inner: Arc::new(Inner {
                epoch,
                sure_until: watch::Sender::new(sure_until),
                lost: CancellationToken::new(),
            }),
        }
    }

    /// The epoch: which holding of the lease this is.
    pub fn epoch(&self) -> u64 {
        self.inner.epoch
    }

    /// Whether the holding is certainly still this process's now.
    pub fn is_sure(&self) -> bool {
        !self.is_lost() && Instant::now() < *self.inner.sure_until.borrow()
    }

    /// Whether it is lost for good.
    pub fn is_lost(&self) -> bool {
        self.inner.lost.is_cancelled()
    }

    /// Completes once the holding is lost for good.
    pub async fn lost(&self) {
        self.inner.lost.cancelled().await;
    }

    /// A token cancelled once the holding is lost, for what stops on a token.
    pub fn token(&self) -> CancellationToken {
        self.inner.lost.child_token()
    }

    /// A holding that is never lost, of an epoch of this process's own: what a process
    /// alone holds (nobody else could take it).
    pub fn for_good() -> Self {
        /// One epoch per process start (its milliseconds), so what one start claimed is
        /// told apart from the next's.
        static EPOCH: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
        let epoch = *EPOCH.get_or_init(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(1, |since| {
                    u64::try_from(since.as_millis()).unwrap_or(u64::MAX)
                })
        });
        // Thirty years: as good as never, and well inside what an `Instant` can hold.
        let never = Instant::now() + std::time::Duration::from_secs(30 * 365 * 24 * 3600);
        Self::new(epoch, never)
    }

    /// Whether the holding is this process's: at once while it is sure; otherwise once the
    /// holder's next renewal says (true) or the holding is lost (false).
    pub async fn confirmed(&self) -> bool {
        let mut renewals = self.inner.sure_until.subscribe();
        loop {
            if self.is_lost() {
                return false;
            }
            if Instant::now() < *renewals.borrow_and_update() {
                return true;
            }
            tokio::select! {
                () = self.inner.lost.cancelled() => return false,
                changed = renewals.changed() => if changed.is_err() { return false },
            }
        }
    }

    /// The holder renewed the lease: sure until `sure_until`.
    pub fn renew(&self, sure_until: Instant) {
        if !self.is_lost() {
            self.inner.sure_until.send_replace(sure_until);
        }
    }

    /// The holding is over, for good.
    pub fn lose(&self) {
        self.inner.lost.cancel();
        // Wakes the waiters of `confirmed`.
        self.inner.sure_until.send_modify(|_| {});
    }
}

impl std::fmt::Debug for Tenure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tenure")
            .field("epoch", &self.inner.epoch)
            .field("lost", &self.is_lost())
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_tenure_is_sure_until_its_lease_could_have_lapsed_and_then_waits_for_the_holder() {
        let tenure = Tenure::new(7, Instant::now() + Duration::from_secs(9));
        assert_eq!(tenure.epoch(), 7);
        assert!(tenure.is_sure());
        assert!(tenure.confirmed().await, "sure: confirmed at once");

        // Paused past the lease: no longer sure, and nothing is confirmed until the holder
        // hears back from the server.
        tokio::time::advance(Duration::from_secs(30)).await;
        assert!(!tenure.is_sure());
        let waiting = tokio::spawn({
            let tenure = tenure.clone();
            async move { tenure.confirmed().await }
        });
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert!(!waiting.is_finished(), "it waits for the renewal's answer");
        tenure.renew(Instant::now() + Duration::from_secs(9));
        assert!(waiting.await.expect("joins"), "renewed: still ours");
        assert!(tenure.is_sure());
    }

    #[tokio::test(start_paused = true)]
    async fn a_lost_tenure_is_never_confirmed_again_and_wakes_its_waiters() {
        let tenure = Tenure::new(1, Instant::now());
        let waiting = tokio::spawn({
            let tenure = tenure.clone();
            async move { tenure.confirmed().await }
        });
        let lost = tokio::spawn({
            let tenure = tenure.clone();
            async move { tenure.lost().await }
        });
        tokio::time::sleep(Duration::from_millis(10)).await;
        tenure.lose();
        assert!(!waiting.await.expect("joins"), "lost: not confirmed");
        lost.await.expect("the loss is seen");
        tenure.renew(Instant::now() + Duration::from_secs(60));
        assert!(
            !tenure.is_sure(),
            "a renewal after the loss changes nothing"
        );
        assert!(!tenure.confirmed().await);
    }
}
