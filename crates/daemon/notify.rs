//! systemd's notify protocol: READY=1 once serving, STOPPING=1 on shutdown, watchdog
//! pings while alive. Silent when `$NOTIFY_SOCKET` is not set.

use std::time::Duration;

use sd_notify::NotifyState;
use tokio_util::sync::CancellationToken;

/// Tells systemd the daemon is serving.
pub fn ready() {
    if let Err(err) = sd_notify::notify(false, &[NotifyState::Ready]) {
        tracing::warn!(error = %err, "could not send READY=1 to systemd");
    }
}

/// Tells systemd the daemon is stopping.
pub fn stopping() {
    let _ = sd_notify::notify(false, &[NotifyState::Stopping]);
}

/// Pings the watchdog at half its interval until `stop` is cancelled, if systemd asked
/// for pings (`WatchdogSec=`).
pub fn spawn_watchdog(stop: CancellationToken) {
    let mut usec = 0;
    if !sd_notify::watchdog_enabled(false, &mut usec) || usec == 0 {
        return;
    }
    let period = Duration::from_micros(usec) / 2;
    tokio::spawn(async move {
        let mut ticks = tokio::time::interval(period);
        loop {
            tokio::select! {
                () = stop.cancelled() => return,
                _ = ticks.tick() => {
                    let _ = sd_notify::notify(false, &[NotifyState::Watchdog]);
                }
            }
        }
    });
}
