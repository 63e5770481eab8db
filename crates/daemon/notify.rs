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

/// Tells systemd the daemon is reloading its config (`READY=1` follows when done).
pub fn reloading() {
    let _ = sd_notify::notify(false, &[NotifyState::Reloading]);
}

/// Tells systemd the daemon is stopping.
pub fn stopping() {
    let _ = sd_notify::notify(false, &[NotifyState::Stopping]);
}

/// The watchdog interval systemd asked for (`WatchdogSec=`): `$WATCHDOG_USEC`, unless
/// `$WATCHDOG_PID` names another process. (sd_watchdog_enabled(3) treats an absent
/// `$WATCHDOG_PID` as "this process"; the sd-notify crate requires it, so it is read here.)
fn watchdog_interval() -> Option<Duration> {
    let usec: u64 = std::env::var("WATCHDOG_USEC").ok()?.trim().parse().ok()?;
    if let Ok(pid) = std::env::var("WATCHDOG_PID")
        && pid.trim().parse::<u32>().ok() != Some(std::process::id())
    {
        return None;
    }
    (usec > 0).then(|| Duration::from_micros(usec))
}

/// Pings the watchdog at half its interval until `stop` is cancelled, if systemd asked
/// for pings (`WatchdogSec=`).
pub fn spawn_watchdog(stop: CancellationToken) {
    let Some(interval) = watchdog_interval() else {
        return;
    };
    let period = interval / 2;
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
