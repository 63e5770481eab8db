//! Who a command runs as. A daemon that is not root runs commands as itself (they have no
//! capabilities to lose). A daemon running as root — in a container, under `sudo`, started
//! by hand — runs them as an unprivileged user (`[tools.exec] user`, default `nobody`): its
//! uid and gid, no supplementary groups, hence no capabilities (the kernel clears them when
//! every uid leaves 0), and `no_new_privs`, so no set-uid program gives them back.
//!
//! A command running as another user cannot read the daemon's `/proc/<pid>/environ` or
//! memory, nor signal it or its helper.

use std::process::Command;

/// The unprivileged user commands run as when the daemon is root.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RunAs {
    /// Its user id (never 0).
    pub uid: u32,
    /// Its primary group id.
    pub gid: u32,
}

/// The user `[tools.exec] user` names when none is written.
pub const DEFAULT_USER: &str = "nobody";

impl RunAs {
    /// Whether this process runs as root, and so must drop privileges for commands.
    pub fn needed() -> bool {
        rustix::process::geteuid().is_root()
    }

    /// The user a command runs as when the daemon is root: `name` is a user name
    /// (looked up through the system's user database), or `UID` / `UID:GID`. Root (uid 0)
    /// is refused: the point is to leave it.
    pub fn lookup(name: &str) -> Result<Self, String> {
        let name = name.trim();
        let run_as = if let Some((uid, gid)) = numeric(name) {
            Self { uid, gid }
        } else {
            match nix::unistd::User::from_name(name) {
                Ok(Some(user)) => Self {
                    uid: user.uid.as_raw(),
                    gid: user.gid.as_raw(),
                },
                Ok(None) => {
                    return Err(format!(
                        "there is no user `{name}` on this system (write an existing user, or \
                         UID:GID)"
                    ));
                }
                Err(err) => return Err(format!("looking up the user `{name}`: {err}")),
            }
        };
        if run_as.uid == 0 || run_as.gid == 0 {
            return Err(format!(
                "`{name}` is root (uid or gid 0); commands must run as an unprivileged user"
            ));
        }
        // Root of a user namespace (`unshare -Ur`, a rootless container) can switch only to
        // ids its namespace maps.
        for (file, id) in [("uid_map", run_as.uid), ("gid_map", run_as.gid)] {
            if let Ok(map) = std::fs::read_to_string(format!("/proc/self/{file}"))
                && !mapped(&map, id)
            {
                return Err(format!(
                    "`{name}` (id {id}) does not exist in this user namespace (/proc/self/{file}); \
                     name a user it maps, or turn exec off"
                ));
            }
        }
        Ok(run_as)
    }

    /// Sets `command` to start as this user, with no supplementary groups (std calls
    /// `setgroups(0)`, `setgid`, `setuid` in the child, in that order, before it execs).
    pub fn apply(&self, command: &mut Command) {
        use std::os::unix::process::CommandExt;
        command.uid(self.uid).gid(self.gid);
    }

    /// Sets `command` to start as this user, with no supplementary groups and
    /// `no_new_privs`, for a program started without the sandbox helper (an MCP server,
    /// whose stdin is its protocol). The user is taken in the child after its working
    /// directory was entered (as root), like the helper's commands: the user needs no way
    /// through the directories above it.
    #[allow(unsafe_code)]
    pub fn apply_without_privileges(&self, command: &mut Command) {
        use rustix::process::{Gid, Uid};
        use std::os::unix::process::CommandExt;
        let (uid, gid) = (self.uid, self.gid);
        // SAFETY: between fork and exec, in the child's only thread, only raw system calls
        // run (setgroups, setresgid, setresuid, prctl): async-signal-safe, no allocation,
        // no lock. std enters the working directory before this runs.
        unsafe {
            command.pre_exec(move || {
                let gid = Gid::from_raw(gid);
                rustix::thread::set_thread_groups(&[])?;
                rustix::thread::set_thread_res_gid(gid, gid, gid)?;
                let uid = Uid::from_raw(uid);
                rustix::thread::set_thread_res_uid(uid, uid, uid)?;
                rustix::thread::set_no_new_privs(true)?;
                Ok(())
            });
        }
    }

    /// Gives `path` (a command's temp directory) to this user.
    pub fn own(&self, path: &std::path::Path) -> std::io::Result<()> {
        std::os::unix::fs::chown(path, Some(self.uid), Some(self.gid))
    }
}

/// Whether an id map (`/proc/self/uid_map`: lines of `inside outside count`) maps `id`.
fn mapped(map: &str, id: u32) -> bool {
    map.lines().any(|line| {
        let mut numbers = line.split_whitespace().map(|n| n.parse::<u64>().ok());
        match (numbers.next(), numbers.next(), numbers.next()) {
            (Some(Some(inside)), Some(Some(_)), Some(Some(count))) => {
                (inside..inside + count).contains(&u64::from(id))
            }
            _ => false,
        }
    })
}

/// `UID` or `UID:GID` (the gid defaults to the uid).
fn numeric(text: &str) -> Option<(u32, u32)> {
    match text.split_once(':') {
        Some((uid, gid)) => Some((uid.parse().ok()?, gid.parse().ok()?)),
        None => {
            let uid = text.parse().ok()?;
            Some((uid, uid))
        }
    }
}

/// Makes sure nothing this process starts from now on gains privileges on exec (set-uid
/// and file capabilities are ignored).
pub fn no_new_privs() -> Result<(), String> {
    rustix::thread::set_no_new_privs(true).map_err(|err| format!("PR_SET_NO_NEW_PRIVS: {err}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn users_are_found_by_name_or_number_and_root_is_refused() {
        assert_eq!(
            RunAs::lookup("65534"),
            Ok(RunAs {
                uid: 65534,
                gid: 65534
            })
        );
        assert_eq!(
            RunAs::lookup("1000:100"),
            Ok(RunAs {
                uid: 1000,
                gid: 100
            })
        );
        assert!(RunAs::lookup("0").is_err());
        assert!(RunAs::lookup("1000:0").is_err());
        assert!(RunAs::lookup("root").expect_err("root").contains("root"));
        let err = RunAs::lookup("surely-no-such-user-9").expect_err("unknown");
        assert!(err.contains("no user `surely-no-such-user-9`"), "{err}");
        assert!(mapped("         0          0 4294967295\n", 65534));
        assert!(!mapped("         0       1000          1\n", 65534));
        assert!(mapped("0 1000 1\n1 100000 65536\n", 65534));
        // Every system this runs on has `nobody` (Debian: 65534).
        let nobody = RunAs::lookup(DEFAULT_USER).expect("nobody exists");
        assert_ne!(nobody.uid, 0);
    }
}
