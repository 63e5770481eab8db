//! Channel tasks under supervision: a channel whose `run` fails, returns early or panics
//! is restarted with exponential backoff, and its state shows in `/healthz`. (Outbound
//! messages reach a channel through its per-chat delivery lanes, registered on the hub.)

use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt;
use switchboard_core::{Channel, ChannelContext, Trouble};
use tokio::time::Instant;
use tokio_util::task::TaskTracker;

use crate::health::{ChannelState, Health};

/// The first wait before a restart; doubled per consecutive failure.
const FIRST_BACKOFF: Duration = Duration::from_secs(1);
/// The longest wait before a restart.
const MAX_BACKOFF: Duration = Duration::from_secs(60);
/// A run that lasted this long resets the backoff.
const STABLE_AFTER: Duration = Duration::from_secs(60);

/// Runs `channel.run` until `ctx.shutdown` is cancelled, restarting it when it ends early.
/// On a cluster it first waits until this gateway holds the channel's connection (a standby
/// meanwhile), and stops it when another took it.
pub async fn supervise(channel: Arc<dyn Channel>, ctx: ChannelContext, health: Health) {
    let channel_name = channel.name();
    let name = channel_name.to_string();
    let mut restarts = 0u32;
    let mut backoff = FIRST_BACKOFF;
    loop {
        let held = {
            let mut waiting = std::pin::pin!(ctx.hub.connection(&channel_name));
            tokio::select! {
                held = &mut waiting => held,
                () = tokio::time::sleep(Duration::from_millis(50)) => {
                    health.set(&name, ChannelState::Standby);
                    tokio::select! {
                        held = waiting => held,
                        () = ctx.shutdown.cancelled() => {
                            health.set(&name, ChannelState::Stopped);
                            return;
                        }
                    }
                }
            }
        };
        // Stops when the daemon stops, or when the connection is no longer this gateway's.
        let running = ctx.shutdown.child_token();
        let lost = {
            let running = running.clone();
            let held = held.clone();
            tokio::spawn(async move {
                tokio::select! {
                    () = held.cancelled() => running.cancel(),
                    () = running.cancelled() => {}
                }
            })
        };
        let trouble = {
            let (health, name) = (health.clone(), name.clone());
            Trouble::new(move |error| {
                health.set(
                    &name,
                    match error {
                        Some(error) => ChannelState::Reconnecting { restarts, error },
                        None => ChannelState::Running { restarts },
                    },
                );
            })
        };
        let run_ctx = ChannelContext {
            shutdown: running.clone(),
            trouble,
            ..ctx.clone()
        };
        health.set(&name, ChannelState::Running { restarts });
        let started = Instant::now();
        let outcome = AssertUnwindSafe(channel.run(run_ctx)).catch_unwind().await;
        running.cancel();
        lost.abort();
        if ctx.shutdown.is_cancelled() {
            health.set(&name, ChannelState::Stopped);
            return;
        }
        if held.is_cancelled() {
            tracing::warn!(channel = %name, "another gateway holds the channel's connection now; standing by");
            continue;
        }
        let error = match outcome {
            Ok(Ok(())) => "the channel stopped unexpectedly".to_owned(),
            Ok(Err(err)) => err.to_string(),
            Err(panic) => format!(
                "the channel panicked: {}",
                panic
                    .downcast_ref::<&str>()
                    .map(|s| (*s).to_owned())
                    .or_else(|| panic.downcast_ref::<String>().cloned())
                    .unwrap_or_else(|| "unknown panic".into())
            ),
        };
        if started.elapsed() >= STABLE_AFTER {
            backoff = FIRST_BACKOFF;
        }
        restarts += 1;
        tracing::error!(channel = %name, %error, restarts, retry_in_ms = backoff.as_millis() as u64,
            "channel failed; restarting");
        health.set(&name, ChannelState::Failed { restarts, error });
        tokio::select! {
            () = ctx.shutdown.cancelled() => {
                health.set(&name, ChannelState::Stopped);
                return;
            }
            () = tokio::time::sleep(backoff) => {}
        }
        backoff = (backoff * 2).min(MAX_BACKOFF);
    }
}

/// Starts the supervisor of one channel on `tracker`; the handle ends with it.
pub fn spawn_channel(
    channel: Arc<dyn Channel>,
    ctx: ChannelContext,
    health: Health,
    tracker: &TaskTracker,
) -> tokio::task::JoinHandle<()> {
    tracker.spawn(supervise(channel, ctx, health))
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU32, Ordering};

    use async_trait::async_trait;
    use switchboard_core::{ChannelName, ChatHub, CoreError, OutboundMessage};
    use tokio_util::sync::CancellationToken;

    use super::*;

    /// Fails its first `failures` runs, then runs until shutdown.
    struct Flaky {
        runs: AtomicU32,
        failures: u32,
        panic: bool,
    }

    #[async_trait]
    impl Channel for Flaky {
        fn name(&self) -> ChannelName {
            "flaky".into()
        }
        async fn run(&self, ctx: ChannelContext) -> Result<(), CoreError> {
            let run = self.runs.fetch_add(1, Ordering::SeqCst);
            if run < self.failures {
                if self.panic {
                    panic!("boom {run}");
                }
                return Err(CoreError::Channel {
                    channel: "flaky".into(),
                    message: format!("fail {run}"),
                });
            }
            ctx.shutdown.cancelled().await;
            Ok(())
        }
        async fn send(&self, _: OutboundMessage) -> Result<switchboard_core::Sent, CoreError> {
            Ok(switchboard_core::Sent::accepted())
        }
    }

    async fn restarts_until_running(panic: bool) {
        let channel = Arc::new(Flaky {
            runs: AtomicU32::new(0),
            failures: 3,
            panic,
        });
        let shutdown = CancellationToken::new();
        let ctx = ChannelContext {
            hub: Arc::new(ChatHub::new(1, shutdown.clone())),
            intake: shutdown.clone(),
            shutdown: shutdown.clone(),
            trouble: Default::default(),
        };
        let health = Health::new();
        let task = tokio::spawn(supervise(channel.clone(), ctx, health.clone()));
        // 1 + 2 + 4 seconds of backoff pass instantly in paused time.
        tokio::time::sleep(Duration::from_secs(8)).await;
        assert_eq!(channel.runs.load(Ordering::SeqCst), 4);
        assert_eq!(
            health.get("flaky"),
            Some(ChannelState::Running { restarts: 3 })
        );
        shutdown.cancel();
        task.await.expect("supervisor ends");
        assert_eq!(health.get("flaky"), Some(ChannelState::Stopped));
    }

    #[tokio::test(start_paused = true)]
    async fn a_failing_channel_is_restarted_with_backoff() {
        restarts_until_running(false).await;
    }

    #[tokio::test(start_paused = true)]
    async fn a_panicking_channel_is_restarted_too() {
        restarts_until_running(true).await;
    }

    #[tokio::test(start_paused = true)]
    async fn backoff_doubles_between_restarts() {
        let channel = Arc::new(Flaky {
            runs: AtomicU32::new(0),
            failures: 10,
            panic: false,
        });
        let shutdown = CancellationToken::new();
        let ctx = ChannelContext {
            hub: Arc::new(ChatHub::new(1, shutdown.clone())),
            intake: shutdown.clone(),
            shutdown: shutdown.clone(),
            trouble: Default::default(),
        };
        let health = Health::new();
        tokio::spawn(supervise(channel.clone(), ctx, health.clone()));
        // Runs at t = 0, 1, 3, 7, 15: by t = 10 four runs happened.
        tokio::time::sleep(Duration::from_secs(10)).await;
        assert_eq!(channel.runs.load(Ordering::SeqCst), 4);
        assert!(matches!(
            health.get("flaky"),
            Some(ChannelState::Failed { restarts: 4, .. })
        ));
        shutdown.cancel();
    }
}
