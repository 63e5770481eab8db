//! A stop asked for while the daemon starts — before it listens for signals the way it does
//! once running (`app::Signals`) — ends it cleanly, not by the signal's default action.
//!
//! # Why no SIGTERM is lost or fatal between the process's start and its listening
//! [`hold`], first thing in `main`, blocks SIGTERM, SIGINT and SIGHUP on the main thread. A
//! blocked signal stays pending, and both the mask and what is pending survive `execve`: the
//! image that withdraws the secrets and starts itself again (`harden`) hands them to the next
//! one. [`catch`], once that is decided and before any other thread exists, installs handlers
//! that note a stop (SIGHUP is nothing to do yet: the config is read after) and only then
//! unblocks them — so a signal pending since the start is delivered to the handler, and every
//! thread started after (the runtime's, and the children it spawns) inherits an open mask.
//! The daemon, listening, asks [`requested`] and stops at once if a stop came before.

use std::sync::atomic::{AtomicBool, Ordering};

use nix::sys::signal::{
    SaFlags, SigAction, SigHandler, SigSet, SigmaskHow, Signal, pthread_sigmask, sigaction,
};

static REQUESTED: AtomicBool = AtomicBool::new(false);

fn signals() -> SigSet {
    let mut set = SigSet::empty();
    for signal in [Signal::SIGTERM, Signal::SIGINT, Signal::SIGHUP] {
        set.add(signal);
    }
    set
}

/// Holds the stop and reload signals back (pending) on this thread, until [`catch`].
pub fn hold() {
    if let Err(err) = pthread_sigmask(SigmaskHow::SIG_BLOCK, Some(&signals()), None) {
        eprintln!("switchboard: cannot hold signals back while starting: {err}");
    }
}

extern "C" fn noted(signal: nix::libc::c_int) {
    // Async-signal-safe: one atomic store.
    if signal != Signal::SIGHUP as nix::libc::c_int {
        REQUESTED.store(true, Ordering::SeqCst);
    }
}

/// Notes a stop from now on, and lets the signals held back by [`hold`] in (a pending one is
/// noted at once). Call before any other thread starts.
#[allow(unsafe_code)]
pub fn catch() {
    let action = SigAction::new(
        SigHandler::Handler(noted),
        SaFlags::SA_RESTART,
        SigSet::empty(),
    );
    for signal in [Signal::SIGTERM, Signal::SIGINT, Signal::SIGHUP] {
        // SAFETY: the handler only stores to an atomic, which is async-signal-safe; tokio's
        // signal handling, installed later, replaces it (and chains to it).
        if let Err(err) = unsafe { sigaction(signal, &action) } {
            eprintln!("switchboard: cannot catch {signal} while starting: {err}");
        }
    }
    if let Err(err) = pthread_sigmask(SigmaskHow::SIG_UNBLOCK, Some(&signals()), None) {
        eprintln!("switchboard: cannot let signals in: {err}");
    }
}

/// Whether a stop (SIGTERM, SIGINT) came since [`catch`].
pub fn requested() -> bool {
    REQUESTED.load(Ordering::SeqCst)
}
