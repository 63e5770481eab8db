//! [`Dovecot`]: a real Dovecot (Debian's `dovecot-imapd` and `dovecot-lmtpd`) on 127.0.0.1,
//! in a directory of its own: the agent's mailbox, read over IMAP, and mail delivered into
//! it over LMTP — the way a mail server hands Dovecot what came for a user.

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::sync::{Notify, mpsc};
use tokio_util::sync::CancellationToken;

/// The agent's login (its address too) and password.
pub const USER: &str = "agent@mail.test";
pub const PASSWORD: &str = "agent-secret";

/// A running Dovecot; killed when dropped.
pub struct Dovecot {
    dir: tempfile::TempDir,
    imap_port: u16,
    lmtp_port: u16,
    child: Option<Child>,
    /// Mails waiting to be delivered, in order.
    queue: mpsc::UnboundedSender<Vec<u8>>,
    delivered: Arc<AtomicU64>,
    logins: Arc<AtomicU64>,
    changed: Arc<Notify>,
    stop: CancellationToken,
}

/// Where the server program is: `dovecot` on the `PATH` or in `/usr/sbin`.
pub fn program() -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain([PathBuf::from("/usr/sbin")])
        .map(|dir| dir.join("dovecot"))
        .find(|candidate| candidate.is_file())
}

impl Dovecot {
    /// Starts a server on free ports and waits until it takes connections; `changed` is
    /// notified at each login to the mailbox and each mail delivered.
    ///
    /// # Panics
    /// When Dovecot is not installed (`.ci/run` installs it) or does not start.
    pub async fn start(changed: Arc<Notify>) -> Self {
        let dir = tempfile::tempdir().expect("a directory for Dovecot");
        let (queue, waiting) = mpsc::unbounded_channel();
        let mut server = Self {
            imap_port: free_port(),
            lmtp_port: free_port(),
            dir,
            child: None,
            queue,
            delivered: Arc::new(AtomicU64::new(0)),
            logins: Arc::new(AtomicU64::new(0)),
            changed,
            stop: CancellationToken::new(),
        };
        server.write_config();
        server.resume();
        tokio::spawn(deliver_in_order(
            server.lmtp_port,
            waiting,
            server.delivered.clone(),
            server.changed.clone(),
        ));
        tokio::spawn(count_logins(
            server.dir.path().join("dovecot.log"),
            server.logins.clone(),
            server.changed.clone(),
            server.stop.clone(),
        ));
        server
    }

    /// The mailbox's IMAP address (plain text: Dovecot is on this host).
    pub fn imap_url(&self) -> String {
        format!("imap://127.0.0.1:{}", self.imap_port)
    }

    /// Where it takes mail for the agent over LMTP (`127.0.0.1:<port>`).
    pub fn lmtp_addr(&self) -> String {
        format!("127.0.0.1:{}", self.lmtp_port)
    }

    /// Delivers `mail` into the agent's mailbox (after the ones before it).
    pub fn deliver(&self, mail: Vec<u8>) {
        let _ = self.queue.send(mail);
    }

    /// How many mails were delivered.
    pub fn delivered(&self) -> u64 {
        self.delivered.load(Ordering::SeqCst)
    }

    /// How many times someone logged in to the mailbox.
    pub fn logins(&self) -> u64 {
        self.logins.load(Ordering::SeqCst)
    }

    /// What it logged.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("dovecot.log")).unwrap_or_default()
    }

    /// Kills it, every process of it (each connection is served by a process of its own,
    /// which would outlive its master): every connection to it breaks.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = Command::new("kill")
                .args(["-KILL", "--"])
                .arg(format!("-{}", child.id()))
                .status();
            let _ = child.kill();
            let _ = child.wait();
        }
        // Its processes end with their master; the ports are free once they have.
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::net::TcpStream::connect(("127.0.0.1", self.imap_port)).is_ok()
            && Instant::now() < deadline
        {
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Starts it again on the same ports and mailbox, and waits until it takes connections.
    ///
    /// # Panics
    /// When it does not start.
    pub fn resume(&mut self) {
        self.kill();
        let program =
            program().expect("Dovecot is not installed (apt-get install dovecot-imapd dovecot-lmtpd; .ci/run does it)");
        let child = Command::new(program)
            // A process group of its own, killed whole.
            .process_group(0)
            .arg("-F")
            .arg("-c")
            .arg(self.dir.path().join("dovecot.conf"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("Dovecot starts");
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(20);
        for port in [self.imap_port, self.lmtp_port] {
            while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
                assert!(
                    Instant::now() < deadline,
                    "Dovecot did not listen within 20 s: {}",
                    self.log()
                );
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    }

    fn write_config(&self) {
        let root = self.dir.path();
        // Mail is kept as a user who is not root (Dovecot refuses root's mail).
        let (uid, gid, login_user) = match unix_ids() {
            (0, _) => (65534, 65534, None),
            (uid, gid) => (uid, gid, Some(user_name())),
        };
        let mail = root.join("mail");
        std::fs::create_dir_all(&mail).expect("the mail folder");
        for place in [root, mail.as_path()] {
            set_mode(place, 0o777);
        }
        std::fs::write(
            root.join("users"),
            format!(
                "{USER}:{{PLAIN}}{PASSWORD}:{uid}:{gid}::{}/agent\n",
                mail.display()
            ),
        )
        .expect("the users file");
        let users = root.join("users");
        let users = users.display();
        let login_users = login_user.map_or(String::new(), |user| {
            format!("default_login_user = {user}\ndefault_internal_user = {user}\n")
        });
        let config = format!(
            r#"protocols = imap lmtp
listen = 127.0.0.1
base_dir = {base}/run
state_dir = {base}/state
instance_name = switchboard-test-{imap}
log_path = {base}/dovecot.log
{login_users}ssl = no
disable_plaintext_auth = no
auth_mechanisms = plain login
mail_location = maildir:~/Maildir
first_valid_uid = 1
postmaster_address = postmaster@mail.test
passdb {{
  driver = passwd-file
  args = scheme=PLAIN username_format=%u {users}
}}
userdb {{
  driver = passwd-file
  args = username_format=%u {users}
}}
service imap-login {{
  chroot =
  inet_listener imap {{
    address = 127.0.0.1
    port = {imap}
  }}
  inet_listener imaps {{
    port = 0
  }}
}}
service lmtp {{
  inet_listener lmtp {{
    address = 127.0.0.1
    port = {lmtp}
  }}
  unix_listener lmtp {{
    mode = 0600
  }}
}}
service anvil {{
  chroot =
}}
"#,
            base = root.display(),
            imap = self.imap_port,
            lmtp = self.lmtp_port,
        );
        std::fs::write(root.join("dovecot.conf"), config).expect("the config");
    }
}

impl Drop for Dovecot {
    fn drop(&mut self) {
        self.stop.cancel();
        self.kill();
    }
}

/// Delivers the queued mails one after another over LMTP, each again until Dovecot took it
/// (it may be restarting).
async fn deliver_in_order(
    port: u16,
    mut waiting: mpsc::UnboundedReceiver<Vec<u8>>,
    delivered: Arc<AtomicU64>,
    changed: Arc<Notify>,
) {
    while let Some(mail) = waiting.recv().await {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
        loop {
            match lmtp(port, &mail).await {
                Ok(()) => break,
                Err(err) if tokio::time::Instant::now() > deadline => {
                    panic!("Dovecot did not take a mail over LMTP: {err}")
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
            }
        }
        delivered.fetch_add(1, Ordering::SeqCst);
        changed.notify_waiters();
    }
}

/// One delivery: LHLO, MAIL, RCPT, DATA (dot-stuffed), QUIT.
async fn lmtp(port: u16, mail: &[u8]) -> std::io::Result<()> {
    let stream = tokio::net::TcpStream::connect(("127.0.0.1", port)).await?;
    let (read, mut write) = stream.into_split();
    let mut read = BufReader::new(read);
    expect(&mut read, "2").await?;
    for (command, reply) in [
        ("LHLO test.local\r\n".to_owned(), "2"),
        ("MAIL FROM:<people@people.test>\r\n".to_owned(), "2"),
        (format!("RCPT TO:<{USER}>\r\n"), "2"),
        ("DATA\r\n".to_owned(), "3"),
    ] {
        write.write_all(command.as_bytes()).await?;
        expect(&mut read, reply).await?;
    }
    let mut data = Vec::with_capacity(mail.len() + 64);
    for line in mail.split_inclusive(|b| *b == b'\n') {
        if line.first() == Some(&b'.') {
            data.push(b'.');
        }
        data.extend_from_slice(line);
    }
    if !data.ends_with(b"\r\n") {
        data.extend_from_slice(b"\r\n");
    }
    data.extend_from_slice(b".\r\n");
    write.write_all(&data).await?;
    expect(&mut read, "2").await?;
    write.write_all(b"QUIT\r\n").await?;
    Ok(())
}

/// Reads a (multi-line) reply; an error unless its code starts with `class`.
async fn expect(
    read: &mut BufReader<tokio::net::tcp::OwnedReadHalf>,
    class: &str,
) -> std::io::Result<()> {
    loop {
        let mut line = String::new();
        if read.read_line(&mut line).await? == 0 {
            return Err(std::io::Error::other("LMTP: the connection closed"));
        }
        if !line.starts_with(class) {
            return Err(std::io::Error::other(format!("LMTP: {}", line.trim())));
        }
        if line.as_bytes().get(3) != Some(&b'-') {
            return Ok(());
        }
    }
}

/// Counts the logins Dovecot logs, notifying `changed` at each.
async fn count_logins(
    log: PathBuf,
    logins: Arc<AtomicU64>,
    changed: Arc<Notify>,
    stop: CancellationToken,
) {
    while !stop.is_cancelled() {
        let text = tokio::fs::read_to_string(&log).await.unwrap_or_default();
        let seen = text
            .lines()
            .filter(|line| line.contains("imap-login: Info: Login: user=<"))
            .count() as u64;
        if logins.swap(seen, Ordering::SeqCst) != seen {
            changed.notify_waiters();
        }
        tokio::select! {
            () = stop.cancelled() => return,
            () = tokio::time::sleep(Duration::from_millis(20)) => {}
        }
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .map(|addr| addr.port())
        .expect("a free port")
}

fn set_mode(path: &Path, mode: u32) {
    use std::os::unix::fs::PermissionsExt;
    let _ = std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode));
}

/// This process's user and group ids (from `/proc`: the testkit has no libc).
fn unix_ids() -> (u32, u32) {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata("/proc/self")
        .map(|meta| (meta.uid(), meta.gid()))
        .unwrap_or((0, 0))
}

fn user_name() -> String {
    std::env::var("USER").unwrap_or_else(|_| "nobody".into())
}
