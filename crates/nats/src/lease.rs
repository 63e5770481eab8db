//! [`hold`]: a lease on one key of the leases bucket, held whenever it can be — a platform
//! channel's connection (one gateway runs it), a duty only one member may do at a time (the
//! scheduler's). Taken by create, renewed by compare-and-set every third of the lease, given
//! up at once when the bus stops, so a standby takes over without waiting it out; lost when
//! another holds it or it could not be renewed for a whole lease.
//!
//! Each holding is a [`Tenure`]: its epoch is the lease's revision when it was taken, and it
//! is sure until the lease could first have lapsed on the server (see core's `tenure`), so a
//! holder paused past its lease learns it may no longer hold it before it acts again.

use std::sync::Arc;

use switchboard_core::Tenure;
use tokio::time::Instant;

use crate::shared::Inner;

/// Holds the lease `key` whenever it can, until the bus stops. While held, `held` carries
/// its tenure, and `on_held` was told so; otherwise `None`.
pub(crate) async fn hold(
    inner: &Arc<Inner>,
    key: &str,
    what: &str,
    held: tokio::sync::watch::Sender<Option<Tenure>>,
    on_held: impl Fn(Tenure),
) {
    let leases = inner.cluster.leases.clone();
    let member = inner.cluster.config.member.clone();
    let lease = inner.cluster.config.lease;
    loop {
        let (mut revision, taken) = loop {
            let sent = Instant::now();
            match leases.create(key, member.clone().into()).await {
                Ok(revision) => break (revision, sent),
                Err(_) => tokio::select! {
                    () = inner.stop.cancelled() => return,
                    () = tokio::time::sleep(lease / 3) => {}
                },
            }
        };
        tracing::info!(what, epoch = revision, "this member holds the lease");
        let tenure = Tenure::new(revision, sure_until(inner, taken));
        held.send_replace(Some(tenure.clone()));
        on_held(tenure.clone());
        loop {
            tokio::select! {
                () = inner.stop.cancelled() => {
                    tenure.lose();
                    held.send_replace(None);
                    let _ = leases.delete_expect_revision(key, Some(revision)).await;
                    return;
                }
                () = tokio::time::sleep(lease / 3) => {}
            }
            let sent = Instant::now();
            match leases.update(key, member.clone().into(), revision).await {
                Ok(next) => {
                    revision = next;
                    tenure.renew(sure_until(inner, sent));
                }
                Err(err)
                    if err.kind()
                        == async_nats::jetstream::kv::UpdateErrorKind::WrongLastRevision =>
                {
                    break;
                }
                // Not renewed since it could have lapsed: another may hold it now.
                Err(_) if !tenure.is_sure() => break,
                Err(_) => {}
            }
        }
        tracing::warn!(what, "lost the lease; standing by");
        tenure.lose();
        held.send_replace(None);
    }
}

/// Until when a lease renewed (or taken) by a request sent at `sent` is sure: the server
/// cannot let it lapse before `sent` plus the lease. A tenth is kept back for clocks that do
/// not run at quite the same rate.
pub(crate) fn sure_until(inner: &Inner, sent: Instant) -> Instant {
    sent + inner.cluster.config.lease.mul_f64(0.9)
}

/// Waits until `holding` carries a tenure not lost (the lease is held) and returns it;
/// never, once the bus stopped.
pub(crate) async fn held(mut holding: tokio::sync::watch::Receiver<Option<Tenure>>) -> Tenure {
    loop {
        if let Some(held) = holding.borrow_and_update().clone()
            && !held.is_lost()
        {
            return held;
        }
        if holding.changed().await.is_err() {
            return std::future::pending().await;
        }
    }
}
