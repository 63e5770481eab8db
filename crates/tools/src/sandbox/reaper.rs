//! Nothing a command starts outlives its call — not a `setsid` child, a double fork, a
//! `nohup` job or a process that ignores SIGTERM. The helper makes it so in one of two ways,
//! chosen once per daemon by a probe ([`Isolation::probe`]):
//!
//! - **A PID namespace** where the kernel allows one (root, or an unprivileged user
//!   namespace): the command's shell is the namespace's first process, and when it ends —
//!   it exits, or the helper kills it — the kernel kills everything else in the namespace.
//!   No process can leave a PID namespace.
//! - **Else a subreaper** (`PR_SET_CHILD_SUBREAPER`): every orphan of the command is
//!   re-parented to the helper instead of to init, so the helper can find the whole tree
//!   (its descendants in `/proc`) and kill it, again and again until none is left.
//!
//! Either way the helper ends the command's tree when the shell exits, when the daemon
//! closes the lifeline (the call ended, was stopped or timed out) and when the daemon dies.
//! Under the subreaper a command that runs as the daemon's own user could kill the helper
//! first and so escape it; as root the daemon runs commands as another user, which cannot
//! (docs/security.md says what remains).

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use rustix::process::{Pid, Signal, WaitOptions, getpid, kill_process, waitpid};

/// How a command's processes are kept from outliving it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Isolation {
    /// The command runs as the first process of a PID namespace of its own.
    PidNamespace,
    /// The helper is a subreaper and kills every descendant it finds.
    Subreaper,
}

impl Isolation {
    /// The helper's `--isolation` value.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::PidNamespace => "pid-namespace",
            Self::Subreaper => "subreaper",
        }
    }

    /// The isolation named by a helper's `--isolation` value.
    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "pid-namespace" => Some(Self::PidNamespace),
            "subreaper" => Some(Self::Subreaper),
            _ => None,
        }
    }

    /// Whether the helper `program` (run with `args`, e.g. `sandbox-exec`) can give a
    /// command a PID namespace here: it tries, in a process of its own, to enter one and
    /// start `/bin/true` in it. Run once per daemon, at the first command.
    pub async fn probe(program: &std::path::Path, args: &[String]) -> Self {
        let status = tokio::process::Command::new(program)
            .args(args)
            .arg("--probe-isolation")
            .env_clear()
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .kill_on_drop(true)
            .status();
        match tokio::time::timeout(Duration::from_secs(10), status).await {
            Ok(Ok(status)) if status.success() => Self::PidNamespace,
            _ => Self::Subreaper,
        }
    }
}

/// Enters `isolation` in the helper, before it starts the command. Must run while the
/// helper has one thread: a process that unshared its PID namespace may start no thread.
pub(crate) fn enter(isolation: Isolation) -> Result<(), String> {
    match isolation {
        Isolation::PidNamespace => enter_pid_namespace(),
        Isolation::Subreaper => rustix::process::set_child_subreaper(Some(getpid()))
            .map_err(|err| format!("PR_SET_CHILD_SUBREAPER: {err}")),
    }
}

/// Makes the next child the first process of a new PID namespace: directly as root, else
/// inside a new user namespace that maps this process's own uid and gid to themselves (so
/// the command runs as the same user, with no capabilities once it execs).
fn enter_pid_namespace() -> Result<(), String> {
    use rustix::thread::UnshareFlags;
    if rustix::process::geteuid().is_root() {
        return unshare(UnshareFlags::NEWPID);
    }
    let uid = rustix::process::getuid().as_raw();
    let gid = rustix::process::getgid().as_raw();
    unshare(UnshareFlags::NEWUSER)?;
    let write = |file: &str, text: String| {
        std::fs::write(format!("/proc/self/{file}"), text)
            .map_err(|err| format!("writing /proc/self/{file}: {err}"))
    };
    write("setgroups", "deny".into())?;
    write("uid_map", format!("{uid} {uid} 1\n"))?;
    write("gid_map", format!("{gid} {gid} 1\n"))?;
    unshare(UnshareFlags::NEWPID)
}

#[allow(unsafe_code)]
fn unshare(flags: rustix::thread::UnshareFlags) -> Result<(), String> {
    // SAFETY: `unshare_unsafe` is unsafe only for `CLONE_FILES` (threads that share a
    // descriptor table stop sharing it); these flags are `CLONE_NEWPID` and
    // `CLONE_NEWUSER`, in the helper, which has a single thread at this point.
    unsafe { rustix::thread::unshare_unsafe(flags) }
        .map_err(|err| format!("unshare({flags:?}): {err}"))
}

/// Kills every descendant of this process and reaps them, until none is left (or
/// `patience` has passed: a process stuck in the kernel cannot be hurried). Returns how
/// many were killed.
pub(crate) fn kill_descendants(patience: Duration) -> usize {
    let me = getpid();
    let deadline = Instant::now() + patience;
    let mut killed = HashSet::new();
    loop {
        for pid in descendants(me) {
            if let Some(pid) = Pid::from_raw(pid) {
                let _ = kill_process(pid, Signal::KILL);
                killed.insert(pid);
            }
        }
        // Reap what died; stop when no child is left. A killed process's own children are
        // re-parented to this one (the subreaper) and found by the next sweep.
        loop {
            match waitpid(None, WaitOptions::NOHANG) {
                Ok(Some(_)) => continue,
                Ok(None) => break,
                Err(_) => return killed.len(),
            }
        }
        if Instant::now() >= deadline {
            return killed.len();
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// The processes below `root` in the process tree, from `/proc`.
fn descendants(root: Pid) -> Vec<i32> {
    let mut children: HashMap<i32, Vec<i32>> = HashMap::new();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    for entry in entries.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<i32>().ok())
        else {
            continue;
        };
        if let Some(parent) = parent_of(pid) {
            children.entry(parent).or_default().push(pid);
        }
    }
    let mut found = Vec::new();
    let mut todo = vec![root.as_raw_nonzero().get()];
    while let Some(pid) = todo.pop() {
        for child in children.remove(&pid).unwrap_or_default() {
            found.push(child);
            todo.push(child);
        }
    }
    found
}

/// A process's parent, from `/proc/<pid>/stat` (its fourth field, after the name in
/// parentheses, which may itself hold spaces and parentheses).
fn parent_of(pid: i32) -> Option<i32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    parse_parent(&stat)
}

fn parse_parent(stat: &str) -> Option<i32> {
    let (_, after_name) = stat.rsplit_once(')')?;
    after_name.split_whitespace().nth(1)?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_parent_is_read_past_a_name_with_spaces_and_parentheses() {
        assert_eq!(parse_parent("42 (sh) S 7 42 42 0 -1"), Some(7));
        assert_eq!(parse_parent("42 (a) b (c) R 9 1 1"), Some(9));
        assert_eq!(parse_parent("garbage"), None);
    }

    #[test]
    fn isolation_names_round_trip() {
        for isolation in [Isolation::PidNamespace, Isolation::Subreaper] {
            assert_eq!(Isolation::parse(isolation.as_str()), Some(isolation));
        }
        assert_eq!(Isolation::parse("none"), None);
    }
}
