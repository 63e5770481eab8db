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
        };
        server.resume();
        server
    }

    /// The URL clients connect to.
    pub fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port)
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
        let child = Command::new(program)
            .args([
                "-js",
                "-a",
                "127.0.0.1",
                "-p",
                &self.port.to_string(),
                "-sd",
            ])
            .arg(self.dir.path().join("jetstream"))
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
