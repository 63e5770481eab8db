//! [`NatsServer`]: a real `nats-server` (Debian's package, with JetStream) on 127.0.0.1, in a
//! directory of its own, for the cluster's tests. It can be stopped and started again on the
//! same port and storage, as a restart of the server is.

use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A running `nats-server -js`; killed when dropped.
#[derive(Debug)]
pub struct NatsServer {
    port: u16,
    dir: tempfile::TempDir,
    child: Option<Child>,
    /// A config file of the test's own (accounts, TLS), and the environment it reads.
    configured: Option<Configured>,
}

/// A server run with a config file.
#[derive(Debug)]
struct Configured {
    file: PathBuf,
    env: Vec<(String, String)>,
    tls: bool,
}

/// Where the server program is: `$NATS_SERVER`, else `nats-server` on the `PATH` or in
/// `/usr/sbin` (where Debian puts it).
pub fn program() -> Option<PathBuf> {
    if let Some(path) = std::env::var_os("NATS_SERVER") {
        return Some(path.into());
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain([PathBuf::from("/usr/sbin"), PathBuf::from("/usr/local/sbin")])
        .map(|dir| dir.join("nats-server"))
        .find(|candidate| candidate.is_file())
}

impl NatsServer {
    /// Starts a server on a free port, with JetStream, and waits until it takes connections.
    ///
    /// # Panics
    /// When there is no `nats-server` (`.ci/run` installs it) or it does not start.
    pub fn start() -> Self {
        let port = free_port();
        let dir = tempfile::tempdir().expect("a directory for nats-server");
        let mut server = Self {
            port,
            dir,
            child: None,
            configured: None,
        };
        server.resume();
        server
    }

    /// Starts a server with the config `make` writes for a free port and a directory of
    /// its own (`make(port, dir)`), its environment `env` (the passwords a config names as
    /// `$VAR`); `tls`: clients reach it with `tls://`.
    ///
    /// # Panics
    /// When there is no `nats-server` or it does not start.
    pub fn start_configured(
        make: impl FnOnce(u16, &Path) -> String,
        env: &[(&str, &str)],
        tls: bool,
    ) -> Self {
        let port = free_port();
        let dir = tempfile::tempdir().expect("a directory for nats-server");
        let file = dir.path().join("server.conf");
        std::fs::write(&file, make(port, dir.path())).expect("the server's config");
        let mut server = Self {
            port,
            dir,
            child: None,
            configured: Some(Configured {
                file,
                env: env
                    .iter()
                    .map(|(name, value)| ((*name).to_owned(), (*value).to_owned()))
                    .collect(),
                tls,
            }),
        };
        server.resume();
        server
    }

    /// The URL clients connect to.
    pub fn url(&self) -> String {
        let scheme = match &self.configured {
            Some(configured) if configured.tls => "tls",
            _ => "nats",
        };
        format!("{scheme}://127.0.0.1:{}", self.port)
    }

    /// Where it keeps its streams.
    pub fn store_dir(&self) -> &Path {
        self.dir.path()
    }

    /// Kills it (as a crash would).
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts it again on the same port and storage, and waits until it takes connections.
    ///
    /// # Panics
    /// When it does not start.
    pub fn resume(&mut self) {
        self.kill();
        let program = program()
            .expect("nats-server is not installed (apt-get install nats-server; .ci/run does it)");
        let log = std::fs::File::create(self.dir.path().join("server.log")).expect("log file");
        let mut command = Command::new(program);
        match &self.configured {
            Some(configured) => {
                command.arg("-c").arg(&configured.file);
                command.envs(configured.env.iter().map(|(name, value)| (name, value)));
            }
            None => {
                command
                    .args([
                        "-js",
                        "-a",
                        "127.0.0.1",
                        "-p",
                        &self.port.to_string(),
                        "-sd",
                    ])
                    .arg(self.dir.path().join("jetstream"));
            }
        }
        let child = command
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("nats-server starts");
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(20);
        while TcpStream::connect(("127.0.0.1", self.port)).is_err() {
            assert!(
                Instant::now() < deadline,
                "nats-server did not listen within 20 s: {}",
                std::fs::read_to_string(self.dir.path().join("server.log")).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for NatsServer {
    fn drop(&mut self) {
        self.kill();
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .map(|addr| addr.port())
        .expect("a free port")
}
