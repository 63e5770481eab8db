//! The sandbox an `exec` command runs in: a helper process (the daemon's own binary, run as
//! `switchboard sandbox-exec`) that confines itself, starts `sh -c` and ends the command's
//! whole process tree when the command ends, when the daemon closes the lifeline and when
//! the daemon is gone.
//!
//! The helper, single-threaded from start to end:
//! 1. enters the command's isolation (a PID namespace, else it becomes a subreaper:
//!    `reaper`);
//! 2. sets `no_new_privs` and applies Landlock (`landlock`);
//! 3. enters the workspace and starts `/bin/sh -c COMMAND` there — as an unprivileged user
//!    when the daemon is root (`privilege`);
//! 4. waits for whichever comes first: the shell exits, or the **lifeline** (its stdin, a
//!    pipe whose only writer is the daemon) reads end of file — the daemon closed it, exited
//!    or was killed with `kill -9`;
//! 5. kills every process the command left and reaps them, then exits with the shell's
//!    status (128 + signal when a signal ended it).
//!
//! The daemon cannot do these from its own process without `unsafe` (`pre_exec`) and a
//! fork per command; a helper costs a few milliseconds per command.
//!
//! # Layout
//! - `landlock`: the file-system ruleset, and how far this kernel enforces it.
//! - `reaper`: the PID namespace or subreaper, and killing what a command left.
//! - `privilege`: who a command runs as when the daemon is root.

mod landlock;
mod privilege;
mod reaper;

use std::os::fd::AsFd;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

pub use landlock::{Confinement, SYSTEM_READ_PATHS, readable};
pub use privilege::{DEFAULT_USER, RunAs};
pub use reaper::Isolation;

/// What the helper needs to know, as given on its command line.
#[derive(Clone, Debug)]
pub struct SandboxArgs {
    /// The workspace: the command's working directory, readable and writable.
    pub workspace: PathBuf,
    /// The command's private temp directory, readable and writable.
    pub tmp: PathBuf,
    /// Paths the command may not read even below a system directory.
    pub forbidden: Vec<PathBuf>,
    /// The user the command runs as (the helper must be root to switch).
    pub run_as: Option<RunAs>,
    /// How the command's processes are kept from outliving it.
    pub isolation: Isolation,
    /// The `sh -c` command line.
    pub command: String,
}

/// How long the helper keeps killing what a command left before it gives up (a process in
/// an uninterruptible sleep dies only when the kernel lets it).
const REAP_PATIENCE: Duration = Duration::from_secs(5);

/// The helper's main: isolate, confine, start the command, wait for it or the lifeline,
/// end everything it started; returns its exit code (126: the sandbox could not be set up;
/// 127: the shell could not start).
pub fn run_sandboxed(args: &SandboxArgs) -> i32 {
    let fail = |code: i32, what: String| {
        eprintln!("switchboard sandbox: {what}");
        code
    };
    if let Err(err) = reaper::enter(args.isolation) {
        return fail(126, format!("could not isolate the command: {err}"));
    }
    if let Err(err) = privilege::no_new_privs() {
        return fail(126, err);
    }
    if let Err(err) = landlock::confine(args) {
        return fail(126, format!("could not apply Landlock: {err}"));
    }
    // Entered here, before the shell drops to its user, and inherited: the user needs no
    // way through the directories above the workspace (root's home is closed to others).
    if let Err(err) = std::env::set_current_dir(&args.workspace) {
        return fail(
            126,
            format!(
                "could not enter the workspace {}: {err}",
                args.workspace.display()
            ),
        );
    }
    let mut command = Command::new("/bin/sh");
    command.arg("-c").arg(&args.command).stdin(Stdio::null());
    if let Some(run_as) = &args.run_as {
        run_as.apply(&mut command);
    }
    let mut shell = match command.spawn() {
        Ok(child) => child,
        Err(err) => {
            let whose = match &args.run_as {
                Some(run_as) => format!(
                    " (it runs as uid {}, gid {}: the workspace {} must be open to them; \
                     see [tools.exec] user)",
                    run_as.uid,
                    run_as.gid,
                    args.workspace.display()
                ),
                None => String::new(),
            };
            return fail(127, format!("could not start /bin/sh: {err}{whose}"));
        }
    };
    let status = wait_for_shell_or_lifeline(&mut shell);
    reaper::kill_descendants(REAP_PATIENCE);
    match status {
        Some(status) => exit_code(status),
        // The daemon let go: the command was ended, its status is of no interest.
        None => 128 + 9,
    }
}

/// `switchboard sandbox-exec --probe-isolation`: whether a PID namespace can be entered
/// here and a process started in it (exit 0), or not (exit 1).
pub fn probe_isolation() -> i32 {
    if reaper::enter(Isolation::PidNamespace).is_err() {
        return 1;
    }
    match Command::new("/bin/true").stdin(Stdio::null()).status() {
        Ok(status) if status.success() => 0,
        _ => 1,
    }
}

/// Waits until the shell exits (its status) or the lifeline on stdin reads end of file
/// (`None`).
fn wait_for_shell_or_lifeline(shell: &mut std::process::Child) -> Option<std::process::ExitStatus> {
    use rustix::event::{PollFd, PollFlags, poll};
    let stdin = std::io::stdin();
    // A descriptor that becomes readable when the shell exits (Linux ≥ 5.3); without one,
    // the shell is looked at every 20 ms.
    let pidfd = rustix::process::Pid::from_raw(shell.id() as i32).and_then(|pid| {
        rustix::process::pidfd_open(pid, rustix::process::PidfdFlags::empty()).ok()
    });
    let tick = rustix::event::Timespec {
        tv_sec: 0,
        tv_nsec: 20_000_000,
    };
    loop {
        if let Ok(Some(status)) = shell.try_wait() {
            return Some(status);
        }
        let lifeline = stdin.as_fd();
        let mut fds = vec![PollFd::new(&lifeline, PollFlags::IN)];
        if let Some(pidfd) = &pidfd {
            fds.push(PollFd::new(pidfd, PollFlags::IN));
        }
        let timeout = if pidfd.is_some() { None } else { Some(&tick) };
        match poll(&mut fds, timeout) {
            Ok(_) => {}
            Err(rustix::io::Errno::INTR) => continue,
            // Cannot wait: treat it as the daemon letting go rather than spin.
            Err(_) => return None,
        }
        let lifeline_ready = !fds[0].revents().is_empty();
        if lifeline_ready && lifeline_closed(&stdin) {
            return None;
        }
    }
}

/// Reads what is on the lifeline: `true` at end of file (or an error). The daemon never
/// writes to it; anything read is ignored.
fn lifeline_closed(stdin: &std::io::Stdin) -> bool {
    use std::io::Read;
    let mut buf = [0u8; 64];
    !matches!(stdin.lock().read(&mut buf), Ok(n) if n > 0)
}

/// An exit status as a shell reports it.
pub fn exit_code(status: std::process::ExitStatus) -> i32 {
    use std::os::unix::process::ExitStatusExt;
    status
        .code()
        .or_else(|| status.signal().map(|signal| 128 + signal))
        .unwrap_or(1)
}
