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
    /// The NATS servers, comma-separated (`nats://10.0.0.5:4222,nats://10.0.0.6:4222`).
    pub nats_url: Spanned<String>,
    /// A NATS credentials file's text (`${credential:nats}`), for servers that want one.
    pub credentials: Option<Spanned<String>>,
    /// A NATS token (`${NATS_TOKEN}`), for servers that want one.
    pub token: Option<Spanned<String>>,
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

/// `[cluster]`, resolved.
#[derive(Clone, Debug)]
pub struct ClusterConfig {
    /// The servers.
    pub nats_url: String,
    /// A credentials file's text.
    pub credentials: Option<String>,
    /// A token.
    pub token: Option<String>,
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
        let secret = |value: &Option<Spanned<String>>, key: &str| {
            value
                .as_ref()
                .map(|value| {
                    expand_env(value.get_ref()).map_err(|why| problem(value, key, &why.to_string()))
                })
                .transpose()
        };
        let member = match &self.member {
            Some(member) => member.get_ref().clone(),
            None => default_member(),
        };
        Ok(ClusterConfig {
            nats_url: url.to_owned(),
            credentials: secret(&self.credentials, "credentials")?,
            token: secret(&self.token, "token")?,
            name: name.clone(),
            partitions,
            role: self.role,
            lease: Duration::from_secs_f64(lease),
            member,
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
