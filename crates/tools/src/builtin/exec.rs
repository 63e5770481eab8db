//! `exec`: a shell command in the workspace, with a minimal environment, a timeout and
//! capped output, run by the sandbox helper (`crate::sandbox`: Landlock, a PID namespace or
//! subreaper, an unprivileged user when the daemon is root). Every process the command
//! started ends with the call: when it exits, times out, is stopped or the daemon goes
//! away.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use async_trait::async_trait;
use regex::RegexSet;
use serde::Deserialize;
use serde_json::json;
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::process::{Child, ChildStdin, Command};
use tokio::sync::OnceCell;

use super::args;
use crate::cap::HeadTail;
use crate::sandbox::{Confinement, Isolation, RunAs, exit_code};
use crate::{Tool, ToolContext, ToolError, ToolOutput};

/// Commands refused by default: the obvious ways to wreck a machine. Matched against the
/// command line; none matches `curl`, `rm -rf build` or any path inside the workspace.
pub const DEFAULT_DENY: [&str; 7] = [
    // rm -r of /, /*, ~ or $HOME (any flag order)
    r"(^|[;&|({]\s*|\bsudo\s+)rm\s+(-\S+\s+)*(/\*?|~/?|\$HOME/?)(\s|$|;|&|\|)",
    // making a file system
    r"\bmkfs(\.\w+)?\b",
    // powering off or rebooting
    r"(^|[;&|({]\s*|\bsudo\s+)(shutdown|reboot|poweroff|halt)\b",
    r"\binit\s+[06]\b",
    // the classic fork bomb
    r":\s*\(\s*\)\s*\{\s*:\s*\|\s*:\s*&\s*\}\s*;\s*:",
    // writing over a disk device
    r"\bof=/dev/(sd|hd|vd|xvd|nvme|mmcblk)",
    r">\s*/dev/(sd|hd|vd|xvd|nvme|mmcblk)",
];

/// How `exec` runs commands.
#[derive(Clone, Debug)]
pub struct ExecOptions {
    /// Timeout when the model gives none.
    pub default_timeout: Duration,
    /// The longest timeout the model may ask for.
    pub max_timeout: Duration,
    /// Regular expressions of commands refused.
    pub deny: Vec<String>,
    /// Output kept (head and tail) per stream.
    pub max_output_bytes: usize,
    /// The helper that confines a command (`switchboard sandbox-exec`); `None` runs
    /// `/bin/sh` directly, unconfined (the tools crate's own tests).
    pub sandbox: Option<SandboxHelper>,
    /// The unprivileged user commands run as (set when the daemon runs as root).
    pub run_as: Option<RunAs>,
}

/// The program that runs commands confined, and how far it can.
#[derive(Clone, Debug)]
pub struct SandboxHelper {
    /// The program (the daemon's binary).
    pub program: PathBuf,
    /// Its arguments before the sandbox's own (e.g. `sandbox-exec`).
    pub args: Vec<String>,
    /// Paths a command may not read (the state directory, the config file).
    pub forbidden: Vec<PathBuf>,
}

/// Runs shell commands.
#[derive(Debug)]
pub struct Exec {
    options: ExecOptions,
    /// The deny list, compiled at the first command (compiling it costs a few hundred KiB
    /// of memory at its peak, which a daemon that never runs a command need not pay).
    deny: OnceLock<Result<RegexSet, String>>,
    /// Sessions already told that commands run without Landlock.
    told: Mutex<HashSet<String>>,
    /// How the helper isolates commands here: probed at the first command.
    isolation: OnceCell<Isolation>,
    /// What Landlock gives on this kernel: probed at the first command too (a daemon that
    /// runs none never loads the code).
    confinement: OnceCell<Confinement>,
}

impl Exec {
    /// An `exec` tool (the config checked that the deny patterns are regular expressions).
    pub fn new(options: ExecOptions) -> Self {
        Self {
            options,
            deny: OnceLock::new(),
            told: Mutex::new(HashSet::new()),
            isolation: OnceCell::new(),
            confinement: OnceCell::new(),
        }
    }

    /// Which deny pattern, if any, refuses `command`. A deny list that cannot be compiled
    /// refuses every command.
    pub fn denied_by(&self, command: &str) -> Option<&str> {
        let deny = self.deny.get_or_init(|| {
            RegexSet::new(&self.options.deny)
                .map_err(|err| format!("the deny list (tools.exec.deny) cannot be compiled: {err}"))
        });
        let deny = match deny {
            Ok(deny) => deny,
            Err(why) => return Some(why.as_str()),
        };
        let flat = command.split_whitespace().collect::<Vec<_>>().join(" ");
        deny.matches(&flat)
            .iter()
            .next()
            .map(|index| self.options.deny[index].as_str())
    }

    /// How commands are isolated: asked of the helper once (see [`Isolation::probe`]).
    /// The process that runs `line`: the sandbox helper (confined, as `[tools.exec] user`,
    /// held by its lifeline) or a shell, in the workspace, with a minimal environment.
    async fn command(&self, line: &str, workspace: &Path, tmp: &Path) -> Command {
        let mut command = match &self.options.sandbox {
            Some(helper) => {
                let isolation = self.isolation(helper).await;
                let mut command = Command::new(&helper.program);
                command.args(&helper.args);
                command.arg("--workspace").arg(workspace);
                command.arg("--tmp").arg(tmp);
                for path in &helper.forbidden {
                    command.arg("--forbid").arg(path);
                }
                if let Some(run_as) = &self.options.run_as {
                    command.arg("--uid").arg(run_as.uid.to_string());
                    command.arg("--gid").arg(run_as.gid.to_string());
                }
                command.arg("--isolation").arg(isolation.as_str());
                command.arg("--").arg(line);
                // The lifeline: the helper ends the command when this pipe closes.
                command.stdin(Stdio::piped());
                command
            }
            None => {
                let mut command = Command::new("/bin/sh");
                command.arg("-c").arg(line).stdin(Stdio::null());
                if let Some(run_as) = &self.options.run_as {
                    command.uid(run_as.uid).gid(run_as.gid);
                }
                command
            }
        };
        command
            .current_dir(workspace)
            .env_clear()
            .env("PATH", minimal_path())
            .env("HOME", workspace)
            .env("TMPDIR", tmp)
            .env(
                "LANG",
                std::env::var("LANG").unwrap_or_else(|_| "C.UTF-8".into()),
            )
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0);
        command
    }

    async fn isolation(&self, helper: &SandboxHelper) -> Isolation {
        *self
            .isolation
            .get_or_init(|| async {
                let isolation = Isolation::probe(&helper.program, &helper.args).await;
                if isolation == Isolation::Subreaper {
                    tracing::info!(
                        "exec: no PID namespace here (no user namespaces for this user, or \
                         the service forbids them): the helper collects a command's processes \
                         as a subreaper instead (see docs/security.md)"
                    );
                }
                isolation
            })
            .await
    }

    /// What Landlock gives here, asked of the kernel once (and said in the log when it is
    /// not everything).
    async fn confinement(&self) -> Confinement {
        *self
            .confinement
            .get_or_init(|| async {
                let confinement = tokio::task::spawn_blocking(Confinement::probe)
                    .await
                    .unwrap_or(Confinement::None);
                if confinement != Confinement::Full {
                    tracing::warn!(
                        ?confinement,
                        "Landlock is not fully available on this kernel: commands run by \
                         `exec` are confined only as far as it goes (see docs/security.md)"
                    );
                }
                confinement
            })
            .await
    }

    /// A note for the first result in a session when commands are not fully confined.
    async fn confinement_note(&self, session: &str) -> Option<&'static str> {
        let confinement = match &self.options.sandbox {
            Some(_) => Some(self.confinement().await),
            None => None,
        };
        let note = match confinement {
            Some(Confinement::Full) => return None,
            Some(Confinement::Partial) => {
                "note: this kernel's Landlock is older; commands are confined to the workspace \
                 for writing, but not for every kind of access."
            }
            Some(Confinement::None) => {
                "note: this kernel offers no Landlock; commands are NOT confined to the \
                 workspace (they start in it, with a minimal environment)."
            }
            None => "note: commands run without a sandbox (no helper configured).",
        };
        let mut told = self.told.lock().unwrap_or_else(|e| e.into_inner());
        if told.len() > 10_000 {
            told.clear();
        }
        told.insert(session.to_owned()).then_some(note)
    }
}

#[derive(Deserialize)]
struct Args {
    command: String,
    #[serde(default)]
    timeout_secs: Option<f64>,
}

#[async_trait]
impl Tool for Exec {
    fn name(&self) -> &str {
        "exec"
    }

    fn description(&self) -> &str {
        "Run a shell command (`sh -c`) in the workspace and get its exit code and output. \
         HOME is the workspace; no secrets are in the environment. Background processes do \
         not outlive the command: everything it starts is killed when it exits."
    }

    fn parameters(&self) -> serde_json::Value {
        json!({
            "type": "object",
            "properties": {
                "command": {"type": "string", "description": "the command line"},
                "timeout_secs": {"type": "number", "description": format!(
                    "seconds before the command is killed (default {}, at most {})",
                    self.options.default_timeout.as_secs(),
                    self.options.max_timeout.as_secs())}
            },
            "required": ["command"]
        })
    }

    fn exclusive(&self) -> bool {
        true
    }

    fn timeout(&self) -> Option<Duration> {
        // The command's own timeout kills it; this one only guards against a stuck tool.
        Some(self.options.max_timeout + Duration::from_secs(10))
    }

    async fn call(
        &self,
        value: serde_json::Value,
        ctx: &ToolContext,
    ) -> Result<ToolOutput, ToolError> {
        let args: Args = args(value)?;
        if args.command.trim().is_empty() {
            return Err(ToolError::InvalidArguments("the command is empty".into()));
        }
        if let Some(pattern) = self.denied_by(&args.command) {
            return Err(ToolError::Denied(format!(
                "this command is on the deny list (`{pattern}`); it was not run"
            )));
        }
        let timeout = match args.timeout_secs {
            Some(secs) if secs.is_finite() && secs > 0.0 => {
                Duration::from_secs_f64(secs).min(self.options.max_timeout)
            }
            _ => self.options.default_timeout,
        };
        let tmp = tempfile::Builder::new()
            .prefix("switchboard-exec-")
            .tempdir()
            .map_err(|err| ToolError::Failed(format!("cannot make a temp directory: {err}")))?;
        let workspace = ctx.workspace.root();

        if let Some(run_as) = &self.options.run_as {
            run_as.own(tmp.path()).map_err(|err| {
                ToolError::Failed(format!(
                    "cannot give the temp directory to uid {}: {err}",
                    run_as.uid
                ))
            })?;
        }

        let mut command = self.command(&args.command, workspace, tmp.path()).await;
        let mut child = command
            .spawn()
            .map_err(|err| ToolError::Failed(format!("cannot start the command: {err}")))?;
        let stdout = child.stdout.take();
        let stderr = child.stderr.take();
        let mut running = Running::new(child, self.options.sandbox.is_some());

        let half = self.options.max_output_bytes;
        let stdout = tokio::spawn(collect(stdout, half));
        let stderr = tokio::spawn(collect(stderr, half));

        let ended = tokio::select! {
            status = running.wait() => Ended::Exited(status),
            () = tokio::time::sleep(timeout) => Ended::TimedOut,
            () = ctx.cancel.cancelled() => Ended::Cancelled,
        };
        // Whatever the command left behind (background jobs) goes with it.
        running.end().await;
        let read = async {
            let out = stdout.await.unwrap_or_else(|_| HeadTail::new(half));
            let err = stderr.await.unwrap_or_else(|_| HeadTail::new(half));
            (out, err)
        };
        // Every process that held the pipes is gone by now; this only guards against a
        // helper that could not kill one (stuck in the kernel).
        let (out, err) = tokio::time::timeout(Duration::from_secs(2), read)
            .await
            .unwrap_or_else(|_| (HeadTail::new(half), HeadTail::new(half)));

        let timed_out = matches!(ended, Ended::TimedOut);
        let note = self.confinement_note(ctx.session.as_str()).await;
        let text = report(note, ended, timeout, [("stdout", out), ("stderr", err)])?;
        if timed_out {
            return Err(ToolError::Failed(text));
        }
        Ok(text.into())
    }
}

/// What the model is told of a command that ended: the note on its confinement, how it
/// ended, and what it wrote; a command stopped is an error of its own.
fn report(
    note: Option<&str>,
    ended: Ended,
    timeout: Duration,
    streams: [(&str, HeadTail); 2],
) -> Result<String, ToolError> {
    let mut text = String::new();
    if let Some(note) = note {
        text.push_str(note);
        text.push('\n');
    }
    match ended {
        Ended::Exited(Ok(status)) => text.push_str(&format!("exit code {}\n", exit_code(status))),
        Ended::Exited(Err(err)) => text.push_str(&format!("exit status unknown: {err}\n")),
        Ended::TimedOut => text.push_str(&format!(
            "killed after {} s (its timeout), with every process it started\n",
            timeout.as_secs_f64()
        )),
        Ended::Cancelled => return Err(ToolError::Cancelled),
    }
    for (name, stream) in streams {
        if stream.total() > 0 {
            text.push_str(&format!("--- {name} ---\n"));
            text.push_str(stream.finish().trim_end_matches('\n'));
            text.push('\n');
        }
    }
    Ok(text)
}

/// How a command's wait ended.
enum Ended {
    Exited(std::io::Result<std::process::ExitStatus>),
    TimedOut,
    Cancelled,
}

/// How long the helper gets to end a command's processes and exit once the lifeline is
/// closed, before its whole process group is killed instead.
const HELPER_PATIENCE: Duration = Duration::from_secs(8);

/// A started command, ended on every way out of a call — including the call's future being
/// dropped by a timeout or a shutdown.
///
/// With the helper, ending it means closing the lifeline and letting the helper kill the
/// command's tree (it is the subreaper, or holds the PID namespace); killing the helper
/// first would orphan what left the group. Without a helper, the group is killed.
struct Running {
    /// `None` once ended.
    child: Option<Child>,
    /// The write end of the helper's stdin; closing it tells the helper to end.
    lifeline: Option<ChildStdin>,
    /// The command's process group (the helper's, or the shell's).
    group: Option<u32>,
}

impl Running {
    fn new(mut child: Child, helper: bool) -> Self {
        let lifeline = if helper { child.stdin.take() } else { None };
        Self {
            group: child.id(),
            child: Some(child),
            lifeline,
        }
    }

    /// Waits for the command (the helper, or the shell) to exit.
    async fn wait(&mut self) -> std::io::Result<std::process::ExitStatus> {
        match &mut self.child {
            Some(child) => child.wait().await,
            None => std::future::pending().await,
        }
    }

    /// Ends the command and everything it started, and reaps it.
    async fn end(&mut self) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        let helper = self.lifeline.take().is_some();
        if helper
            && tokio::time::timeout(HELPER_PATIENCE, child.wait())
                .await
                .is_ok()
        {
            return;
        }
        kill_group(self.group);
        let _ = child.kill().await;
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        let group = self.group;
        if self.lifeline.take().is_some()
            && let Ok(runtime) = tokio::runtime::Handle::try_current()
        {
            // The lifeline is closed (dropped above): the helper ends the command; the group
            // is killed only if it has not exited in time.
            runtime.spawn(async move {
                if tokio::time::timeout(HELPER_PATIENCE, child.wait())
                    .await
                    .is_err()
                {
                    kill_group(group);
                    let _ = child.kill().await;
                }
            });
            return;
        }
        kill_group(group);
        let _ = child.start_kill();
    }
}

/// Sends SIGKILL to a process group.
fn kill_group(group: Option<u32>) {
    if let Some(pid) = group.and_then(|id| rustix::process::Pid::from_raw(id as i32)) {
        let _ = rustix::process::kill_process_group(pid, rustix::process::Signal::KILL);
    }
}

/// Reads a stream to its end, keeping its head and tail.
async fn collect(stream: Option<impl AsyncRead + Unpin>, max: usize) -> HeadTail {
    let mut kept = HeadTail::new(max);
    let Some(mut stream) = stream else {
        return kept;
    };
    let mut buf = vec![0u8; 16 * 1024];
    while let Ok(n) = stream.read(&mut buf).await {
        if n == 0 {
            break;
        }
        kept.push(&buf[..n]);
    }
    kept
}

/// The daemon's PATH if it has one, else the usual system directories.
fn minimal_path() -> String {
    std::env::var("PATH")
        .ok()
        .filter(|path| !path.is_empty())
        .unwrap_or_else(|| "/usr/local/bin:/usr/bin:/bin".into())
}
