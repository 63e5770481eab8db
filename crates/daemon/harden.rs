//! What the daemon does to itself before anything else runs (`run` and `agent`, the
//! commands that run tools): its secrets leave the process environment, and the process is
//! made non-dumpable.
//!
//! - **Secrets withdrawn.** Every variable that holds a secret ([`is_secret_name`], and every
//!   one the config names in a secret key) is read into memory
//!   ([`switchboard_core::environment`], where `${NAME}` finds it) and removed from the
//!   environment. Removing a variable does not touch `/proc/<pid>/environ`, which shows the
//!   environment the process image *started* with; so the image is started again (the same
//!   binary, arguments and pid, through `/proc/self/exe`) with the secrets left out of its
//!   environment and handed over in a pipe instead, read once and closed. The second image
//!   sees [`HANDOVER_VAR`] and does not start again.
//! - **Not dumpable** (`PR_SET_DUMPABLE` 0): the kernel refuses other processes of the
//!   same user `/proc/<pid>/environ`, `mem`, `maps` and `ptrace`, and writes no core dump
//!   full of keys. Root (`CAP_SYS_PTRACE`) still can: `exec` therefore drops root (see
//!   `switchboard_tools::sandbox`).
//!
//! This is one of the few places where the project has `unsafe` (each allowed where it is,
//! with its argument): `std::env::remove_var` may not run while another thread reads the
//! environment, so [`withdraw_secrets`] is an `unsafe fn` that `main` calls before the first
//! thread starts.

use std::collections::{BTreeSet, HashMap};
use std::ffi::OsString;
use std::io::{Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::path::Path;

use switchboard_core::environment::{self, is_secret_name};

/// Set in the second image's environment: the descriptor of the pipe holding the secrets.
pub const HANDOVER_VAR: &str = "SWITCHBOARD_WITHDRAWN_FD";

/// The most the handed-over secrets may weigh (the largest pipe an unprivileged process
/// may ask for).
const MAX_HANDOVER_BYTES: usize = 1024 * 1024;

/// What [`withdraw_secrets`] did, to be logged once logging runs (names only).
#[derive(Debug, Default)]
pub struct Withdrawal {
    /// The variables withdrawn.
    pub names: Vec<String>,
    /// What went wrong, if anything: the secrets are still out of the environment as far as
    /// this process can see, but `/proc/<pid>/environ` may still show them.
    pub problem: Option<String>,
}

impl Withdrawal {
    /// Logs what was done.
    pub fn log(&self) {
        if let Some(problem) = &self.problem {
            tracing::warn!(variables = ?self.names, %problem,
                "secrets were taken out of the environment, but the process could not be \
                 started again without them: /proc/<pid>/environ may still show them");
        } else if !self.names.is_empty() {
            tracing::info!(variables = ?self.names,
                "secrets withdrawn from the process environment (kept in memory only)");
        }
    }
}

/// Withdraws the secrets from the environment; `config` is the config file (its secret
/// keys' `${NAME}`s are secrets whatever their names). Returns only in the image that runs
/// on (the first one starts the second and is gone).
///
/// # Safety
/// Call it while this process has one thread, before anything reads the environment or
/// opens a descriptor it relies on: it removes environment variables (which another thread
/// could be reading), and it takes over a descriptor number named in the environment (the
/// one the image before it left open for it).
#[allow(unsafe_code)]
pub unsafe fn withdraw_secrets(config: Option<&Path>) -> Withdrawal {
    if let Some(fd) = std::env::var_os(HANDOVER_VAR) {
        remove_vars([HANDOVER_VAR]);
        return match take_handover(&fd) {
            Ok(secrets) => {
                let names = secrets.keys().cloned().collect::<BTreeSet<_>>();
                environment::keep_withdrawn(secrets);
                Withdrawal {
                    names: names.into_iter().collect(),
                    problem: None,
                }
            }
            Err(err) => Withdrawal {
                names: Vec::new(),
                problem: Some(format!("the handed-over secrets could not be read: {err}")),
            },
        };
    }
    let referenced = config
        .and_then(|path| std::fs::read_to_string(path).ok())
        .map(|text| crate::config_values::secret_references(&text))
        .unwrap_or_default();
    let names: BTreeSet<String> = std::env::vars_os()
        .filter_map(|(name, _)| name.into_string().ok())
        .filter(|name| is_secret_name(name) || referenced.contains(name))
        .collect();
    if names.is_empty() {
        return Withdrawal::default();
    }
    let secrets: HashMap<String, String> = names
        .iter()
        .filter_map(|name| Some((name.clone(), std::env::var(name).ok()?)))
        .collect();
    remove_vars(names.iter().map(String::as_str));
    let names: Vec<String> = names.into_iter().collect();
    // Returns only if the image could not be started again.
    let problem = restart_without(&secrets);
    environment::keep_withdrawn(secrets);
    Withdrawal {
        names,
        problem: Some(problem),
    }
}

/// Makes the process non-dumpable (see the module's doc). Returns the error, if any.
pub fn not_dumpable() -> Result<(), String> {
    rustix::process::set_dumpable_behavior(rustix::process::DumpableBehavior::NotDumpable)
        .map_err(|err| format!("PR_SET_DUMPABLE: {err}"))
}

/// Removes variables from the process environment.
#[allow(unsafe_code)]
fn remove_vars<'a>(names: impl IntoIterator<Item = &'a str>) {
    for name in names {
        // SAFETY: called only from `withdraw_secrets`, whose caller promises one thread
        // (`main`, before the async runtime): nothing reads the environment meanwhile.
        unsafe { std::env::remove_var(name) };
    }
}

/// Starts this binary again in place (same pid, arguments and environment, which no longer
/// holds the secrets), handing `secrets` over in a pipe. Returns only on failure, with why.
fn restart_without(secrets: &HashMap<String, String>) -> String {
    let mut payload = Vec::new();
    for (name, value) in secrets {
        // As in /proc/<pid>/environ: NAME=VALUE, each ended by a NUL (neither holds one).
        payload.extend_from_slice(name.as_bytes());
        payload.push(b'=');
        payload.extend_from_slice(value.as_bytes());
        payload.push(0);
    }
    if payload.len() > MAX_HANDOVER_BYTES {
        return format!("the secrets take more than {MAX_HANDOVER_BYTES} bytes");
    }
    let (read, write) = match rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC) {
        Ok(ends) => ends,
        Err(err) => return format!("pipe: {err}"),
    };
    // All of it must fit in the pipe before anyone reads it.
    if payload.len() > 60 * 1024
        && let Err(err) = rustix::pipe::fcntl_setpipe_size(&write, payload.len())
    {
        return format!("a pipe of {} bytes: {err}", payload.len());
    }
    if let Err(err) = std::fs::File::from(write).write_all(&payload) {
        return format!("writing the pipe: {err}");
    }
    // The read end outlives the exec; every other descriptor of ours is close-on-exec.
    if let Err(err) = rustix::io::fcntl_setfd(&read, rustix::io::FdFlags::empty()) {
        return format!("fcntl: {err}");
    }
    let mut args = std::env::args_os();
    let arg0 = args.next().unwrap_or_else(|| OsString::from("switchboard"));
    let err = std::process::Command::new("/proc/self/exe")
        .arg0(arg0)
        .args(args)
        .env(HANDOVER_VAR, read.as_raw_fd().to_string())
        .exec();
    format!("starting /proc/self/exe again: {err}")
}

/// Reads the secrets the first image handed over at descriptor `fd`, and closes it.
fn take_handover(fd: &std::ffi::OsStr) -> std::io::Result<HashMap<String, String>> {
    let invalid =
        |what: &str| std::io::Error::new(std::io::ErrorKind::InvalidData, what.to_owned());
    let fd: i32 = fd
        .to_str()
        .and_then(|text| text.parse().ok())
        .filter(|fd| *fd > 2)
        .ok_or_else(|| invalid("not a descriptor number"))?;
    // The descriptor must be a pipe, or this was no handover of ours.
    let meta = std::fs::metadata(format!("/proc/self/fd/{fd}"))?;
    if !std::os::unix::fs::FileTypeExt::is_fifo(&meta.file_type()) {
        return Err(invalid("not a pipe"));
    }
    // SAFETY: the descriptor was left open across exec by `restart_without` in the image
    // before this one, for this code to take; nothing else in this process knows of it (it
    // runs first in `main`), and it is checked above to be open and a pipe.
    #[allow(unsafe_code)]
    let owned = unsafe { OwnedFd::from_raw_fd(fd) };
    let mut payload = Vec::new();
    std::fs::File::from(owned)
        .take(MAX_HANDOVER_BYTES as u64 + 1)
        .read_to_end(&mut payload)?;
    if payload.len() > MAX_HANDOVER_BYTES {
        return Err(invalid("too large"));
    }
    let mut secrets = HashMap::new();
    for entry in payload.split(|byte| *byte == 0).filter(|e| !e.is_empty()) {
        let text = std::str::from_utf8(entry).map_err(|_| invalid("not UTF-8"))?;
        let (name, value) = text.split_once('=').ok_or_else(|| invalid("no `=`"))?;
        secrets.insert(name.to_owned(), value.to_owned());
    }
    Ok(secrets)
}
