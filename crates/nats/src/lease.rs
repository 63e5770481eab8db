//! [`hold`]: a lease on one key of the leases bucket, held whenever it can be — a platform
//! channel's connection (one gateway runs it), a duty only one member may do at a time (the
//! scheduler's). Taken by create, renewed by compare-and-set every third of the lease, given
//! up at once when the bus stops, so a standby takes over without waiting it out; lost when
//! another holds it or it could not be renewed for a whole lease.

use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use crate::bus::Inner;

/// Holds the lease `key` whenever it can, until the bus stops. While held, `held` carries
/// what is cancelled when it is lost, and `on_held` was told so; otherwise `None`.
pub(crate) async fn hold(
    inner: &Arc<Inner>,
    key: &str,
    what: &str,
    held: tokio::sync::watch::Sender<Option<CancellationToken>>,
    on_held: impl Fn(CancellationToken),
) {
    let leases = inner.cluster.leases.clone();
    let member = inner.cluster.config.member.clone();
    let lease = inner.cluster.config.lease;
    loop {
        let mut revision = loop {
            match leases.create(key, member.clone().into()).await {
                Ok(revision) => break revision,
                Err(_) => tokio::select! {
                    () = inner.stop.cancelled() => return,
                    () = tokio::time::sleep(lease / 3) => {}
                },
            }
        };
        tracing::info!(what, "this member holds the lease");
        let holding = CancellationToken::new();
        held.send_replace(Some(holding.clone()));
        on_held(holding.clone());
        let mut renewed = tokio::time::Instant::now();
        loop {
            tokio::select! {
                () = inner.stop.cancelled() => {
                    holding.cancel();
                    held.send_replace(None);
                    let _ = leases.delete_expect_revision(key, Some(revision)).await;
                    return;
                }
                () = tokio::time::sleep(lease / 3) => {}
            }
            match leases.update(key, member.clone().into(), revision).await {
                Ok(next) => {
                    revision = next;
                    renewed = tokio::time::Instant::now();
                }
                Err(err)
                    if err.kind()
                        == async_nats::jetstream::kv::UpdateErrorKind::WrongLastRevision =>
                {
                    break;
                }
                // Not renewed for a whole lease: it has lapsed, another may hold it.
                Err(_) if renewed.elapsed() >= lease => break,
                Err(_) => {}
            }
        }
        tracing::warn!(what, "lost the lease; standing by");
        holding.cancel();
        held.send_replace(None);
    }
}

/// Waits until `holding` carries a live token (the lease is held) and returns it; never,
/// once the bus stopped.
pub(crate) async fn held(
    mut holding: tokio::sync::watch::Receiver<Option<CancellationToken>>,
) -> CancellationToken {
    loop {
        if let Some(held) = holding.borrow_and_update().clone()
            && !held.is_cancelled()
        {
            return held;
        }
        if holding.changed().await.is_err() {
            return std::future::pending().await;
        }
    }
}
