//! [`Synapse`]: a real Matrix homeserver (Synapse, from PyPI) on 127.0.0.1, in a directory
//! of its own, with a generated config: rate limits raised out of the way (the suite's
//! 429s come from the [`Proxy`](super::Proxy)), no federation, users registered through its
//! shared secret as an operator would.

use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use base64::Engine;
use serde_json::{Value, json};

/// The homeserver's name: users are `@name:localhost`.
pub const SERVER_NAME: &str = "localhost";
const SHARED_SECRET: &str = "switchboard-test-registration";

/// Where Synapse is installed: the venv `SWITCHBOARD_SYNAPSE` names, else `/opt/synapse`
/// (where `.ci/run` puts it); its Python, if it has one with Synapse in it.
pub fn python() -> Option<PathBuf> {
    let venv = std::env::var_os("SWITCHBOARD_SYNAPSE")
        .map_or_else(|| PathBuf::from("/opt/synapse"), PathBuf::from);
    let python = venv.join("bin/python");
    venv.join("bin/synapse_homeserver")
        .is_file()
        .then_some(python)
}

/// A running Synapse; killed when dropped.
pub struct Synapse {
    dir: tempfile::TempDir,
    port: u16,
    child: Option<Child>,
    http: matrix_sdk::reqwest::Client,
}

impl Synapse {
    /// Starts a homeserver on a free port and waits until it answers.
    ///
    /// # Panics
    /// When Synapse is not installed (`.ci/run` installs it) or does not start.
    pub async fn start() -> Self {
        let dir = tempfile::tempdir().expect("a directory for Synapse");
        let mut server = Self {
            port: free_port(),
            dir,
            child: None,
            http: matrix_sdk::reqwest::Client::new(),
        };
        server.write_config();
        server.resume().await;
        server
    }

    /// Its client API's address.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// What it logged.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("homeserver.log")).unwrap_or_default()
    }

    /// Kills it (kill -9): every connection to it breaks.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts it again on the same port and database, and waits until it answers.
    ///
    /// # Panics
    /// When it does not start within 60 s.
    pub async fn resume(&mut self) {
        self.kill();
        let python = python().expect(
            "Synapse is not installed (python3 -m venv /opt/synapse && /opt/synapse/bin/pip install matrix-synapse; .ci/run does it)",
        );
        let config = self.dir.path().join("homeserver.yaml");
        let child = Command::new(python)
            .process_group(0)
            .args(["-m", "synapse.app.homeserver", "--config-path"])
            .arg(&config)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(
                std::fs::File::create(self.dir.path().join("stderr.log"))
                    .map_or_else(|_| Stdio::null(), Stdio::from),
            )
            .spawn()
            .expect("Synapse starts");
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(60);
        let versions = format!("{}/_matrix/client/versions", self.url());
        loop {
            if let Ok(response) = self.http.get(&versions).send().await
                && response.status().is_success()
            {
                return;
            }
            if let Some(child) = self.child.as_mut()
                && let Ok(Some(status)) = child.try_wait()
            {
                panic!(
                    "Synapse ended ({status}): {}\n{}",
                    std::fs::read_to_string(self.dir.path().join("stderr.log")).unwrap_or_default(),
                    self.log()
                );
            }
            assert!(
                Instant::now() < deadline,
                "Synapse did not answer within 60 s: {}",
                self.log()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Registers `@name:localhost` with `password`, as `register_new_matrix_user` does
    /// (the admin API, signed with the shared secret); returns the user's id.
    ///
    /// # Panics
    /// When the homeserver refuses.
    pub async fn register(&self, name: &str, password: &str) -> String {
        let endpoint = format!("{}/_synapse/admin/v1/register", self.url());
        let nonce: Value = self
            .http
            .get(&endpoint)
            .send()
            .await
            .expect("a nonce")
            .json()
            .await
            .expect("a nonce's JSON");
        let nonce = nonce["nonce"].as_str().expect("a nonce").to_owned();
        let key = ring::hmac::Key::new(
            ring::hmac::HMAC_SHA1_FOR_LEGACY_USE_ONLY,
            SHARED_SECRET.as_bytes(),
        );
        let message = format!("{nonce}\0{name}\0{password}\0notadmin");
        let mac: String = ring::hmac::sign(&key, message.as_bytes())
            .as_ref()
            .iter()
            .map(|byte| format!("{byte:02x}"))
            .collect();
        let response = self
            .http
            .post(&endpoint)
            .json(
                &json!({"nonce": nonce, "username": name, "password": password,
                          "admin": false, "mac": mac}),
            )
            .send()
            .await
            .expect("registering");
        let status = response.status();
        let body: Value = response.json().await.unwrap_or_default();
        assert!(status.is_success(), "registering {name}: {status} {body}");
        body["user_id"].as_str().expect("a user id").to_owned()
    }

    fn write_config(&self) {
        let root = self.dir.path();
        let base = root.display();
        // The signing key as Synapse writes it: `ed25519 <id> <seed, unpadded base64>`.
        let seed: [u8; 32] = std::array::from_fn(|_| fastrand::u8(..));
        let seed = base64::engine::general_purpose::STANDARD_NO_PAD.encode(seed);
        std::fs::write(root.join("signing.key"), format!("ed25519 a_test {seed}\n"))
            .expect("the signing key");
        std::fs::write(
            root.join("log.config"),
            format!(
                "version: 1\nformatters:\n  precise:\n    format: '%(asctime)s %(name)s %(levelname)s %(message)s'\nhandlers:\n  file:\n    class: logging.FileHandler\n    formatter: precise\n    filename: {base}/homeserver.log\nroot:\n  level: INFO\n  handlers: [file]\ndisable_existing_loggers: false\n"
            ),
        )
        .expect("the log config");
        let unlimited = "{per_second: 100000, burst_count: 100000}";
        let config = format!(
            r#"server_name: "{SERVER_NAME}"
pid_file: {base}/homeserver.pid
listeners:
  - port: {port}
    bind_addresses: ['127.0.0.1']
    type: http
    tls: false
    x_forwarded: false
    resources:
      - names: [client]
        compress: false
database:
  name: sqlite3
  args:
    database: {base}/homeserver.db
log_config: {base}/log.config
media_store_path: {base}/media
max_upload_size: 60M
registration_shared_secret: "{SHARED_SECRET}"
macaroon_secret_key: "switchboard-test-macaroon"
form_secret: "switchboard-test-form"
signing_key_path: {base}/signing.key
report_stats: false
trusted_key_servers: []
suppress_key_server_warning: true
presence:
  enabled: false
url_preview_enabled: false
enable_media_repo: true
rc_message: {unlimited}
rc_registration: {unlimited}
rc_login:
  address: {unlimited}
  account: {unlimited}
  failed_attempts: {unlimited}
rc_joins:
  local: {unlimited}
  remote: {unlimited}
rc_joins_per_room: {unlimited}
rc_invites:
  per_room: {unlimited}
  per_user: {unlimited}
  per_issuer: {unlimited}
rc_room_creation: {unlimited}
rc_key_requests: {unlimited}
rc_3pid_validation: {unlimited}
rc_media_create: {unlimited}
rc_admin_redaction: {unlimited}
rc_delayed_event_mgmt: {unlimited}
rc_presence:
  per_user: {unlimited}
"#,
            port = self.port,
        );
        std::fs::write(root.join("homeserver.yaml"), config).expect("the config");
    }
}

impl Drop for Synapse {
    fn drop(&mut self) {
        self.kill();
        // SWITCHBOARD_TEST_LOGS=DIR keeps its log as DIR/synapse-<port>.log, beside the
        // daemons' logs, for a failure's post-mortem.
        if let Some(dir) = std::env::var_os("SWITCHBOARD_TEST_LOGS") {
            let kept = std::path::Path::new(&dir).join(format!("synapse-{}.log", self.port));
            let _ = std::fs::copy(self.dir.path().join("homeserver.log"), kept);
        }
    }
}

pub(crate) fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .map(|addr| addr.port())
        .expect("a free port")
}
