//! `[cluster]`: where the NATS servers are, what this process is, and how the work is cut.

use std::time::Duration;

use serde::Deserialize;
use switchboard_core::{ConfigProblem, expand_env};
use toml::Spanned;

/// What a process of the cluster runs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// Channels and HTTP: it takes messages from the platforms and delivers replies; no agent.
    Gateway,
    /// Agents: it answers the sessions of the partitions it holds; no channel.
    Worker,
    /// Both (the default).
    #[default]
    All,
}

impl Role {
    /// Whether it runs the channels.
    pub fn runs_channels(self) -> bool {
        matches!(self, Self::Gateway | Self::All)
    }

    /// Whether it runs agents.
    pub fn runs_agents(self) -> bool {
        matches!(self, Self::Worker | Self::All)
    }

    /// Its name in the config and on the command line.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Gateway => "gateway",
            Self::Worker => "worker",
            Self::All => "all",
        }
    }
}

impl std::str::FromStr for Role {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        match text {
            "gateway" => Ok(Self::Gateway),
            "worker" => Ok(Self::Worker),
            "all" => Ok(Self::All),
            other => Err(format!("`{other}` is not a role: gateway, worker or all")),
        }
    }
}

/// `[cluster]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClusterSection {
    /// The NATS servers, comma-separated (`tls://10.0.0.5:4222,tls://10.0.0.6:4222`); a
    /// `user:password@` in them is taken as `user` and `password`.
    pub nats_url: Spanned<String>,
    /// A NATS credentials file's text (`${credential:nats.creds}`): a user's JWT and nkey
    /// seed, for servers run with an operator (`nsc`).
    pub credentials: Option<Spanned<String>>,
    /// An nkey seed (`${credential:nats.nk}`, `SU…`), for servers that list users by nkey.
    pub nkey: Option<Spanned<String>>,
    /// A NATS token (`${NATS_TOKEN}`), for servers that want one.
    pub token: Option<Spanned<String>>,
    /// A user name, with `password`.
    pub user: Option<Spanned<String>>,
    /// The user's password (`${credential:nats-password}`).
    pub password: Option<Spanned<String>>,
    /// TLS to the servers: the CA that signed their certificates, this member's own.
    pub tls: Option<TlsSection>,
    /// Allows servers on another host without credentials (anyone who reaches them could
    /// read and forge every chat): refused unless this says so.
    #[serde(default)]
    pub insecure: bool,
    /// The prefix of every stream, subject and bucket: clusters sharing a NATS differ by it.
    #[serde(default = "default_name")]
    pub name: Spanned<String>,
    /// How many parts the sessions are cut into; each is answered by one worker at a time.
    /// Fixed for the life of the cluster's streams.
    #[serde(default = "default_partitions")]
    pub partitions: Spanned<u32>,
    /// What this process runs (`--role` overrides it).
    #[serde(default)]
    pub role: Role,
    /// How long a lease (a partition's, a platform connection's) lasts unrenewed: a process
    /// that dies loses its leases this long after.
    #[serde(default = "default_lease_secs")]
    pub lease_secs: Spanned<f64>,
    /// This process's name among the members (default: the host's name and the process id).
    pub member: Option<Spanned<String>>,
    /// Where a worker serves `/healthz`, `/readyz` and `/metrics` (it serves no page and no
    /// channel, so not on `http.bind`, which stays the gateways': the same config runs every
    /// member, several on one host included). Default `127.0.0.1:0`: loopback, a free port,
    /// named in the worker's start line.
    pub worker_bind: Option<Spanned<std::net::SocketAddr>>,
}

impl ClusterSection {
    /// Where a worker listens ([`ClusterSection::worker_bind`]).
    pub fn worker_bind(&self) -> std::net::SocketAddr {
        self.worker_bind
            .as_ref()
            .map(|bind| *bind.get_ref())
            .unwrap_or_else(|| std::net::SocketAddr::from(([127, 0, 0, 1], 0)))
    }
}

/// `[cluster.tls]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TlsSection {
    /// The CA certificate (PEM) that signed the servers' certificates, when it is not one
    /// the system trusts.
    pub ca_file: Option<Spanned<String>>,
    /// This member's certificate (PEM), for servers that verify clients.
    pub cert_file: Option<Spanned<String>>,
    /// Its private key (PEM).
    pub key_file: Option<Spanned<String>>,
}

fn default_name() -> Spanned<String> {
    Spanned::new(0..0, "switchboard".to_owned())
}

fn default_partitions() -> Spanned<u32> {
    Spanned::new(0..0, 16)
}

fn default_lease_secs() -> Spanned<f64> {
    Spanned::new(0..0, 10.0)
}

/// The most partitions (each is a consumer on the server).
pub const MAX_PARTITIONS: u32 = 1024;

/// How a member proves who it is to the servers.
#[derive(Clone, Default, PartialEq, Eq)]
pub enum Auth {
    /// Not at all (servers on this host, or `insecure = true`).
    #[default]
    None,
    /// A credentials file's text (JWT and nkey seed).
    Credentials(String),
    /// An nkey seed.
    Nkey(String),
    /// A token.
    Token(String),
    /// A user and password.
    UserPassword(String, String),
}

impl Auth {
    /// What it is, without the secret (for `status` and logs).
    pub fn kind(&self) -> &'static str {
        match self {
            Self::None => "none",
            Self::Credentials(_) => "credentials",
            Self::Nkey(_) => "nkey",
            Self::Token(_) => "token",
            Self::UserPassword(..) => "user and password",
        }
    }
}

impl std::fmt::Debug for Auth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::UserPassword(user, _) => write!(f, "UserPassword({user:?}, \"********\")"),
            other => f.write_str(other.kind()),
        }
    }
}

/// TLS to the servers.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Tls {
    /// The CA certificate (PEM) the servers' certificates are checked against, besides the
    /// system's.
    pub ca_file: Option<std::path::PathBuf>,
    /// This member's certificate and key (PEM).
    pub client: Option<(std::path::PathBuf, std::path::PathBuf)>,
}

/// `[cluster]`, resolved.
#[derive(Clone, Debug)]
pub struct ClusterConfig {
    /// The servers, without any password the config wrote in them (safe to show).
    pub nats_url: String,
    /// How this member proves who it is.
    pub auth: Auth,
    /// TLS to the servers, when asked for (a `tls://` server asks for it by itself).
    pub tls: Option<Tls>,
    /// The prefix of everything on the server.
    pub name: String,
    /// How many partitions.
    pub partitions: u32,
    /// What this process runs.
    pub role: Role,
    /// How long a lease lasts unrenewed.
    pub lease: Duration,
    /// This process's name.
    pub member: String,
}

impl ClusterSection {
    /// The section resolved and checked (secrets read); a problem names its key.
    pub fn resolve(&self) -> Result<ClusterConfig, ConfigProblem> {
        let url = self.nats_url.get_ref().trim();
        if url.is_empty() {
            return Err(problem(
                &self.nats_url,
                "nats_url",
                "is empty: name the NATS servers",
            ));
        }
        let name = self.name.get_ref();
        if name.is_empty()
            || name.len() > 32
            || !name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
        {
            return Err(problem(
                &self.name,
                "name",
                "must be 1 to 32 letters, digits, `-` or `_` (it prefixes streams and subjects)",
            ));
        }
        let partitions = *self.partitions.get_ref();
        if !(1..=MAX_PARTITIONS).contains(&partitions) {
            return Err(problem(
                &self.partitions,
                "partitions",
                &format!("must be between 1 and {MAX_PARTITIONS}"),
            ));
        }
        let lease = *self.lease_secs.get_ref();
        if !(1.0..=300.0).contains(&lease) {
            return Err(problem(
                &self.lease_secs,
                "lease_secs",
                "must be between 1 and 300 seconds",
            ));
        }
        let member = match &self.member {
            Some(member) => member.get_ref().clone(),
            None => default_member(),
        };
        let servers = servers(&self.nats_url)?;
        let auth = self.auth(&servers)?;
        let nats_url = servers
            .iter()
            .map(|server| server.shown.clone())
            .collect::<Vec<_>>()
            .join(",");
        if auth == Auth::None
            && !self.insecure
            && let Some(remote) = servers.iter().find(|server| !server.loopback)
        {
            return Err(problem(
                &self.nats_url,
                "nats_url",
                &format!(
                    "{} is not on this host and no credentials are set: anyone who reaches it \
                     could read and forge every chat. Set credentials, nkey, token or user and \
                     password (docs/deployment.md has a server config with a user per role), \
                     or insecure = true",
                    remote.shown
                ),
            ));
        }
        Ok(ClusterConfig {
            nats_url,
            auth,
            tls: self.tls.as_ref().map(TlsSection::resolve).transpose()?,
            name: name.clone(),
            partitions,
            role: self.role,
            lease: Duration::from_secs_f64(lease),
            member,
        })
    }

    /// The one way of proving who it is the section names (two are refused).
    fn auth(&self, servers: &[Server]) -> Result<Auth, ConfigProblem> {
        let in_url = servers.iter().find_map(|server| server.user.clone());
        let mut found: Vec<(&str, Auth)> = Vec::new();
        if let Some(creds) = secret(&self.credentials, "credentials")? {
            found.push(("credentials", Auth::Credentials(creds)));
        }
        if let Some(seed) = secret(&self.nkey, "nkey")? {
            found.push(("nkey", Auth::Nkey(seed)));
        }
        if let Some(token) = secret(&self.token, "token")? {
            found.push(("token", Auth::Token(token)));
        }
        match (&self.user, &self.password) {
            (Some(user), Some(_)) => {
                let password = secret(&self.password, "password")?.unwrap_or_default();
                found.push(("user", Auth::UserPassword(user.get_ref().clone(), password)));
            }
            (Some(user), None) => {
                return Err(problem(user, "user", "needs a password (cluster.password)"));
            }
            (None, Some(password)) => {
                return Err(problem(password, "password", "needs a user (cluster.user)"));
            }
            (None, None) => {}
        }
        if let Some((user, password)) = in_url {
            found.push(("nats_url", Auth::UserPassword(user, password)));
        }
        if found.len() > 1 {
            let keys: Vec<&str> = found.iter().map(|(key, _)| *key).collect();
            return Err(problem(
                &self.nats_url,
                "nats_url",
                &format!(
                    "[cluster] names more than one way to log in ({}): keep one",
                    keys.join(", ")
                ),
            ));
        }
        Ok(found.pop().map(|(_, auth)| auth).unwrap_or_default())
    }
}

impl TlsSection {
    fn resolve(&self) -> Result<Tls, ConfigProblem> {
        let file = |value: &Option<Spanned<String>>, key: &str| {
            value
                .as_ref()
                .map(|value| {
                    let path = std::path::PathBuf::from(value.get_ref());
                    if path.is_file() {
                        Ok(path)
                    } else {
                        Err(problem(
                            value,
                            key,
                            &format!("{} is not a readable file", path.display()),
                        ))
                    }
                })
                .transpose()
        };
        let client = match (
            file(&self.cert_file, "tls.cert_file")?,
            file(&self.key_file, "tls.key_file")?,
        ) {
            (Some(cert), Some(key)) => Some((cert, key)),
            (None, None) => None,
            (Some(_), None) => {
                let at = self.cert_file.as_ref().map(Spanned::span);
                return Err(ConfigProblem::new(
                    at,
                    "tls.key_file",
                    "is needed with tls.cert_file",
                ));
            }
            (None, Some(_)) => {
                let at = self.key_file.as_ref().map(Spanned::span);
                return Err(ConfigProblem::new(
                    at,
                    "tls.cert_file",
                    "is needed with tls.key_file",
                ));
            }
        };
        Ok(Tls {
            ca_file: file(&self.ca_file, "tls.ca_file")?,
            client,
        })
    }
}

/// A secret's value, its `${…}` references resolved.
fn secret(value: &Option<Spanned<String>>, key: &str) -> Result<Option<String>, ConfigProblem> {
    value
        .as_ref()
        .map(|value| {
            expand_env(value.get_ref()).map_err(|why| problem(value, key, &why.to_string()))
        })
        .transpose()
}

/// One server of `nats_url`, as the config wrote it.
struct Server {
    /// Its URL without a password, to show.
    shown: String,
    /// Whether it is on this host.
    loopback: bool,
    /// The user and password written in its URL.
    user: Option<(String, String)>,
}

/// The servers of `nats_url`.
fn servers(nats_url: &Spanned<String>) -> Result<Vec<Server>, ConfigProblem> {
    nats_url
        .get_ref()
        .split(',')
        .map(str::trim)
        .filter(|url| !url.is_empty())
        .map(|url| {
            let addr: async_nats::ServerAddr = url.parse().map_err(|err: std::io::Error| {
                // The error must not repeat the URL: it may hold a password.
                problem(
                    nats_url,
                    "nats_url",
                    &format!("a server is not a URL: {err}"),
                )
            })?;
            let loopback = is_loopback(addr.host());
            let user = addr.username().map(|user| {
                (
                    user.to_owned(),
                    addr.password().unwrap_or_default().to_owned(),
                )
            });
            let mut shown = addr.into_inner();
            let _ = shown.set_password(None);
            let _ = shown.set_username("");
            Ok(Server {
                shown: shown.to_string().trim_end_matches('/').to_owned(),
                loopback,
                user,
            })
        })
        .collect()
}

/// Whether `host` names this host.
fn is_loopback(host: &str) -> bool {
    host == "localhost"
        || host.ends_with(".localhost")
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

impl ClusterConfig {
    /// A worker named `member` of the cluster `switchboard` at `nats_url`, without
    /// credentials or TLS, with the default partitions and lease: what a `[cluster]` with
    /// only `nats_url` and `member` resolves to.
    pub fn plain(nats_url: &str, member: &str) -> Self {
        Self {
            nats_url: nats_url.to_owned(),
            auth: Auth::default(),
            tls: None,
            name: default_name().into_inner(),
            partitions: *default_partitions().get_ref(),
            role: Role::Worker,
            lease: Duration::from_secs_f64(*default_lease_secs().get_ref()),
            member: member.to_owned(),
        }
    }

    /// A server on another host the bus would reach without TLS, if there is one.
    pub fn in_the_clear(&self) -> Option<&str> {
        if self.tls.is_some() {
            return None;
        }
        self.nats_url.split(',').find(|url| {
            url.parse::<async_nats::ServerAddr>()
                .is_ok_and(|addr| !addr.tls_required() && !is_loopback(addr.host()))
        })
    }
}

fn problem<T>(value: &Spanned<T>, key: &str, why: &str) -> ConfigProblem {
    ConfigProblem::new(Some(value.span()), key, why)
}

/// The host's name and this process's id.
fn default_member() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|name| name.trim().to_owned())
        .unwrap_or_default();
    let host = if host.is_empty() {
        "host".to_owned()
    } else {
        host
    };
    format!("{host}-{}", std::process::id())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn section(text: &str) -> ClusterSection {
        toml::from_str(text).expect("parses")
    }

    fn refused(text: &str) -> ConfigProblem {
        section(text).resolve().expect_err("refused")
    }

    #[test]
    fn a_password_in_the_url_logs_in_and_is_never_shown() {
        let config = section(
            "nats_url = \"nats://worker:s3cret@10.0.0.5:4222, nats://worker:s3cret@10.0.0.6:4222\"",
        )
        .resolve()
        .expect("resolves");
        assert_eq!(
            config.auth,
            Auth::UserPassword("worker".into(), "s3cret".into())
        );
        assert_eq!(config.nats_url, "nats://10.0.0.5:4222,nats://10.0.0.6:4222");
        assert!(!format!("{config:?}").contains("s3cret"), "{config:?}");
    }

    #[test]
    fn a_server_on_another_host_without_credentials_is_refused_unless_insecure() {
        let problem = refused("nats_url = \"nats://10.0.0.5:4222\"");
        assert_eq!(problem.key, "nats_url");
        assert!(
            problem.message.contains("could read and forge every chat"),
            "{}",
            problem.message
        );
        for allowed in [
            "nats_url = \"nats://10.0.0.5:4222\"\ninsecure = true",
            "nats_url = \"nats://127.0.0.1:4222\"",
            "nats_url = \"nats://localhost:4222\"",
            "nats_url = \"nats://10.0.0.5:4222\"\ntoken = \"t0ken\"",
            "nats_url = \"nats://10.0.0.5:4222\"\nuser = \"gw\"\npassword = \"pw\"",
        ] {
            assert!(section(allowed).resolve().is_ok(), "{allowed}");
        }
    }

    #[test]
    fn one_way_to_log_in_and_each_complete() {
        let two = refused("nats_url = \"nats://10.0.0.5:4222\"\ntoken = \"t\"\nnkey = \"SU\"");
        assert!(
            two.message
                .contains("more than one way to log in (nkey, token)"),
            "{}",
            two.message
        );
        let lone = refused("nats_url = \"nats://10.0.0.5:4222\"\nuser = \"gw\"");
        assert_eq!(lone.key, "user");
        let url_and_user =
            refused("nats_url = \"nats://a:b@10.0.0.5:4222\"\nuser = \"gw\"\npassword = \"pw\"");
        assert!(
            url_and_user.message.contains("user, nats_url"),
            "{}",
            url_and_user.message
        );
        assert!(
            !url_and_user.message.contains(":b@"),
            "no password in the message"
        );
    }

    #[test]
    fn tls_files_are_checked_where_the_config_names_them() {
        let dir = tempfile::tempdir().expect("tempdir");
        let ca = dir.path().join("ca.pem");
        std::fs::write(&ca, "pem").expect("write");
        let config = section(&format!(
            "nats_url = \"tls://10.0.0.5:4222\"\ntoken = \"t\"\n[tls]\nca_file = \"{}\"\n",
            ca.display()
        ))
        .resolve()
        .expect("resolves");
        assert_eq!(config.tls.and_then(|tls| tls.ca_file), Some(ca.clone()));
        let missing = refused(&format!(
            "nats_url = \"tls://10.0.0.5:4222\"\ntoken = \"t\"\n[tls]\nca_file = \"{}\"\n",
            dir.path().join("nope.pem").display()
        ));
        assert_eq!(missing.key, "tls.ca_file");
        let half = refused(&format!(
            "nats_url = \"tls://10.0.0.5:4222\"\ntoken = \"t\"\n[tls]\ncert_file = \"{}\"\n",
            ca.display()
        ));
        assert_eq!(half.key, "tls.key_file");
    }
}
