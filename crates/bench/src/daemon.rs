//! The daemon under test: a release binary started with a generated config, a notify
//! socket to time READY=1, and /proc to read its memory.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::process::{Child, Command};

/// A running daemon.
pub struct Daemon {
    child: Child,
    pub addr: SocketAddr,
    pub pid: u32,
}

/// How long the daemon took to start.
pub struct StartTimes {
    /// exec → READY=1 on the notify socket.
    pub ready: Duration,
}

fn free_port() -> anyhow::Result<u16> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    Ok(listener.local_addr()?.port())
}

/// Writes a config into `dir` for a daemon talking to `llm_url`, with `llm` lines in its
/// `[llm]` table and `tables` (e.g. a `[channels.telegram]`) appended.
pub fn write_config(
    dir: &Path,
    llm_url: &str,
    port: u16,
    llm: &str,
    tables: &str,
) -> anyhow::Result<PathBuf> {
    let config = format!(
        r#"[agent]
workspace = "{dir}/workspace"
state_dir = "{dir}/state"
history_limit = 50
max_concurrent_turns = 256
idle_timeout_secs = 3600

[llm]
base_url = "{llm_url}"
model = "scripted"
{llm}

[http]
bind = "127.0.0.1:{port}"
# The scale scenario opens 10,000 WebSockets, 250 handshakes at a time, from one address.
max_connections = 12000
max_pending_per_client = 256

[channels.websocket]
auth = "none"

[daemon]
shutdown_grace_secs = 5

{tables}
"#,
        dir = dir.display()
    );
    let path = dir.join("config.toml");
    std::fs::write(&path, config)?;
    Ok(path)
}

/// How to start the daemon: its binary, and the CPUs to pin it to (`taskset -c`), so the
/// load generator and the daemon do not compete for the same core.
pub struct Launcher {
    pub binary: PathBuf,
    pub cpus: Option<String>,
}

impl Launcher {
    fn command(&self) -> Command {
        match &self.cpus {
            Some(cpus) => {
                let mut command = Command::new("taskset");
                command.args(["-c", cpus]).arg(&self.binary);
                command
            }
            None => Command::new(&self.binary),
        }
    }
}

/// Starts the daemon with its state in `dir`; returns once READY=1 arrived.
pub async fn start(
    launcher: &Launcher,
    dir: &Path,
    llm_url: &str,
) -> anyhow::Result<(Daemon, StartTimes)> {
    start_with(launcher, dir, llm_url, "").await
}

/// Starts the daemon with `llm` lines in its `[llm]` table; returns once READY=1 arrived.
pub async fn start_with_llm(
    launcher: &Launcher,
    dir: &Path,
    llm_url: &str,
    llm: &str,
) -> anyhow::Result<(Daemon, StartTimes)> {
    start_configured(launcher, dir, llm_url, llm, "").await
}

/// Starts the daemon with `tables` added to its config; returns once READY=1 arrived.
pub async fn start_with(
    launcher: &Launcher,
    dir: &Path,
    llm_url: &str,
    tables: &str,
) -> anyhow::Result<(Daemon, StartTimes)> {
    start_configured(launcher, dir, llm_url, "", tables).await
}

async fn start_configured(
    launcher: &Launcher,
    dir: &Path,
    llm_url: &str,
    llm: &str,
    tables: &str,
) -> anyhow::Result<(Daemon, StartTimes)> {
    let port = free_port()?;
    let config = write_config(dir, llm_url, port, llm, tables)?;
    let notify_path = dir.join("notify.sock");
    let _ = std::fs::remove_file(&notify_path);
    let notify = tokio::net::UnixDatagram::bind(&notify_path)?;

    let started = Instant::now();
    let child = launcher
        .command()
        .args(["run", "--config"])
        .arg(&config)
        .env("NOTIFY_SOCKET", &notify_path)
        .env(
            "RUST_LOG",
            std::env::var("BENCH_DAEMON_LOG").unwrap_or_else(|_| "warn".into()),
        )
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .with_context(|| format!("cannot start {}", launcher.binary.display()))?;
    let mut buf = vec![0u8; 4096];
    let ready = loop {
        let n = tokio::time::timeout(Duration::from_secs(10), notify.recv(&mut buf))
            .await
            .context("no READY=1 within 10 s")??;
        if String::from_utf8_lossy(&buf[..n])
            .lines()
            .any(|l| l == "READY=1")
        {
            break started.elapsed();
        }
    };
    let pid = child.id().context("daemon exited")?;
    let daemon = Daemon {
        child,
        addr: SocketAddr::from(([127, 0, 0, 1], port)),
        pid,
    };
    Ok((daemon, StartTimes { ready }))
}

/// exec → first `/healthz` 200, polling every 0.5 ms.
pub async fn time_to_healthz(
    launcher: &Launcher,
    dir: &Path,
    llm_url: &str,
) -> anyhow::Result<Duration> {
    let port = free_port()?;
    let config = write_config(dir, llm_url, port, "", "")?;
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let started = Instant::now();
    let mut child = launcher
        .command()
        .args(["run", "--config"])
        .arg(&config)
        .env_remove("NOTIFY_SOCKET")
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .kill_on_drop(true)
        .spawn()?;
    let elapsed = loop {
        if started.elapsed() > Duration::from_secs(10) {
            bail!("/healthz never answered");
        }
        if healthz_ok(addr).await {
            break started.elapsed();
        }
        tokio::time::sleep(Duration::from_micros(500)).await;
    };
    terminate(&mut child).await?;
    Ok(elapsed)
}

async fn healthz_ok(addr: SocketAddr) -> bool {
    let Ok(mut stream) = tokio::net::TcpStream::connect(addr).await else {
        return false;
    };
    let request = format!("GET /healthz HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    if stream.write_all(request.as_bytes()).await.is_err() {
        return false;
    }
    let mut response = Vec::new();
    let _ = stream.read_to_end(&mut response).await;
    response.starts_with(b"HTTP/1.1 200")
}

async fn terminate(child: &mut Child) -> anyhow::Result<()> {
    if let Some(pid) = child.id() {
        std::process::Command::new("kill")
            .args(["-TERM", &pid.to_string()])
            .status()?;
    }
    let status = tokio::time::timeout(Duration::from_secs(20), child.wait())
        .await
        .context("daemon did not exit after SIGTERM")??;
    if !status.success() {
        bail!("daemon exited with {status}");
    }
    Ok(())
}

impl Daemon {
    /// Resident memory in KiB.
    pub fn rss_kib(&self) -> u64 {
        rss_kib(self.pid)
    }

    /// Anonymous resident memory (heap, stacks) in KiB.
    pub fn rss_anon_kib(&self) -> u64 {
        status_field(self.pid, "RssAnon:")
    }

    /// Its threads.
    pub fn threads(&self) -> u64 {
        status_field(self.pid, "Threads:")
    }

    /// What the daemon costs while idle: its highest RSS (KiB) from 3 s on, and the CPU its
    /// threads use per minute (ms) over `window`.
    pub async fn idle_cost(&self, window: Duration) -> (u64, f64) {
        tokio::time::sleep(Duration::from_secs(3)).await;
        let rss = self.rss_kib();
        let cpu = thread_cpu_ns(self.pid);
        tokio::time::sleep(window).await;
        let used = cpu_ns_between(&cpu, &thread_cpu_ns(self.pid));
        let per_minute = used as f64 / 1e6 * 60.0 / window.as_secs_f64();
        (rss.max(self.rss_kib()), per_minute)
    }

    /// SIGTERM and wait for exit 0.
    /// Kills it with SIGKILL, not waiting.
    pub fn kill(mut self) {
        let _ = self.child.start_kill();
    }

    pub async fn stop(mut self) -> anyhow::Result<()> {
        terminate(&mut self.child).await
    }
}

/// VmRSS of a process, in KiB (0 if unreadable).
pub fn rss_kib(pid: u32) -> u64 {
    status_field(pid, "VmRSS:")
}

/// A number of a process's `/proc/PID/status` (`VmRSS:`, `RssAnon:`, `Threads:`); 0 if
/// unreadable.
pub fn status_field(pid: u32, field: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|status| {
            status
                .lines()
                .find_map(|line| line.strip_prefix(field))
                .and_then(|value| value.trim().trim_end_matches("kB").trim().parse().ok())
        })
        .unwrap_or(0)
}

/// CPU time (user + system) a process used so far, in microseconds (0 if unreadable).
pub fn cpu_us(pid: u32) -> u64 {
    // Fields 14 and 15 of /proc/<pid>/stat, counted after the `(comm)` field, which may
    // itself hold spaces; in clock ticks, which Linux reports at 100 per second.
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|stat| {
            let rest = stat.rsplit_once(')')?.1;
            let fields: Vec<&str> = rest.split_whitespace().collect();
            let ticks =
                fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
            Some(ticks * 10_000)
        })
        .unwrap_or(0)
}

/// Time on a CPU of each thread of a process so far, in nanoseconds, by thread id (from
/// `/proc/<pid>/task/*/schedstat`: finer than the 10 ms ticks of `/proc/<pid>/stat`).
pub fn thread_cpu_ns(pid: u32) -> std::collections::HashMap<u32, u64> {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return Default::default();
    };
    tasks
        .flatten()
        .filter_map(|task| {
            let tid = task.file_name().to_str()?.parse().ok()?;
            let stat = std::fs::read_to_string(task.path().join("schedstat")).ok()?;
            Some((tid, stat.split_whitespace().next()?.parse().ok()?))
        })
        .collect()
}

/// CPU time a process's threads used between two [`thread_cpu_ns`] readings, in
/// nanoseconds (a thread that ended in between is not counted).
pub fn cpu_ns_between(
    before: &std::collections::HashMap<u32, u64>,
    after: &std::collections::HashMap<u32, u64>,
) -> u64 {
    after
        .iter()
        .map(|(tid, ns)| ns.saturating_sub(before.get(tid).copied().unwrap_or(0)))
        .sum()
}

/// The entries of every agent's memory index, as the daemon's `/healthz` counts them.
pub async fn memory_entries(addr: SocketAddr) -> anyhow::Result<u64> {
    let health: serde_json::Value = reqwest::get(format!("http://{addr}/healthz"))
        .await?
        .json()
        .await?;
    Ok(health["memory"]
        .as_object()
        .map(|agents| {
            agents
                .values()
                .filter_map(|agent| agent["entries"].as_u64())
                .sum()
        })
        .unwrap_or(0))
}

/// Waits until the daemon's `/healthz` counts MCP tools (its servers are up).
pub async fn wait_for_mcp_tools(addr: SocketAddr, within: Duration) -> anyhow::Result<()> {
    let client = reqwest::Client::new();
    let deadline = Instant::now() + within;
    loop {
        let health: serde_json::Value = client
            .get(format!("http://{addr}/healthz"))
            .send()
            .await?
            .json()
            .await?;
        if health["mcp_tools"].as_u64().unwrap_or(0) > 0 {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!("no MCP tools within {within:?}: {health}");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
