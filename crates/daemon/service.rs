//! `switchboard run`: the daemon as a service — started once the stop signals are listened
//! for, reloaded on SIGHUP or when the control panel asks, stopped on SIGTERM or ctrl-c (a
//! second signal cancels the running turns at once), and telling systemd each step.

use std::path::Path;
use std::process::ExitCode;

use anyhow::Context;
use switchboard_tools::ToolRegistry;
use tokio_util::sync::CancellationToken;

use crate::config::Config;
use crate::telemetry::Telemetry;
use crate::{cli, notify};

/// `switchboard run`: starts the daemon and stops it on SIGTERM or ctrl-c. A second
/// signal cancels running turns at once. The signal handlers are installed before anything
/// starts, so a signal that arrives while the daemon starts (or right after it announced
/// readiness) stops it cleanly instead of killing it.
pub async fn run_until_signal(
    config: Option<&Path>,
    role: Option<String>,
) -> anyhow::Result<ExitCode> {
    let mut signals = Signals::install()?;
    if crate::early_stop::requested() {
        tracing::info!("asked to stop while starting: stopping before anything started");
        return Ok(ExitCode::SUCCESS);
    }
    let path = cli::resolve_config(config)?;
    let mut config = Config::load(&path)?;
    if role.is_some() {
        config.role = role;
        config.validate_place()?;
    }
    let telemetry = Telemetry::start(&config.telemetry).await?;
    let mut running = crate::app::start(config, ToolRegistry::new()).await?;
    return_start_memory();
    notify::ready();
    let watchdog = CancellationToken::new();
    notify::spawn_watchdog(watchdog.clone());

    // SIGHUP, or the control panel's "reload" (answered with what it did).
    let mut panel = running.reload_requests();
    loop {
        let answer = tokio::select! {
            signal = signals.next() => match signal {
                Signal::Reload => None,
                Signal::Stop => break,
            },
            Some(answer) = async { panel.as_mut()?.recv().await } => Some(answer),
        };
        notify::reloading();
        let reloaded = running.reload(&path).await;
        notify::ready();
        if let Some(answer) = answer {
            let _ = answer.send(reloaded);
        }
    }
    notify::stopping();
    let turns = running.stopping();
    let hurry = tokio::spawn(async move {
        // A SIGHUP while stopping is no reason to hurry.
        while signals.next().await == Signal::Reload {}
        tracing::warn!("second signal: cancelling running turns now");
        turns.cancel_turns();
    });
    running.shutdown().await;
    hurry.abort();
    telemetry.shutdown().await;
    watchdog.cancel();
    Ok(ExitCode::SUCCESS)
}

/// Gives the allocator's free pages back to the system once the daemon has started: reading
/// the config and building every part leaves freed temporaries in the heap that a lasting
/// allocation above them would otherwise keep resident for the daemon's life (an example
/// config three keys longer cost 52 KiB of idle memory that way).
fn return_start_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    #[allow(unsafe_code)]
    // SAFETY: glibc's `malloc_trim` only returns free memory to the system; it takes the
    // allocator's own locks and touches no allocation in use.
    unsafe {
        nix::libc::malloc_trim(0);
    }
}

/// SIGTERM, SIGINT and SIGHUP, listened for from the moment this is made (signals that
/// arrive before [`Signals::next`] is awaited are kept, not lost).
struct Signals {
    #[cfg(unix)]
    term: tokio::signal::unix::Signal,
    #[cfg(unix)]
    interrupt: tokio::signal::unix::Signal,
    #[cfg(unix)]
    hangup: tokio::signal::unix::Signal,
}

/// What a signal asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Signal {
    /// SIGTERM, SIGINT: stop.
    Stop,
    /// SIGHUP: read the config again.
    Reload,
}

impl Signals {
    fn install() -> anyhow::Result<Self> {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{SignalKind, signal};
            Ok(Self {
                term: signal(SignalKind::terminate()).context("cannot listen for SIGTERM")?,
                interrupt: signal(SignalKind::interrupt()).context("cannot listen for SIGINT")?,
                hangup: signal(SignalKind::hangup()).context("cannot listen for SIGHUP")?,
            })
        }
        #[cfg(not(unix))]
        Ok(Self {})
    }

    /// Waits for the next signal.
    async fn next(&mut self) -> Signal {
        #[cfg(unix)]
        tokio::select! {
            _ = self.term.recv() => {
                tracing::info!("SIGTERM received");
                Signal::Stop
            }
            _ = self.interrupt.recv() => {
                tracing::info!("interrupt received");
                Signal::Stop
            }
            _ = self.hangup.recv() => {
                tracing::info!("SIGHUP received: reading the config again");
                Signal::Reload
            }
        }
        #[cfg(not(unix))]
        {
            let _ = tokio::signal::ctrl_c().await;
            Signal::Stop
        }
    }
}
