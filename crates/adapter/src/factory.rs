//! Channels built from their config sections. Each adapter's section (`[channels.<name>]`)
//! implements [`ChannelSection`]; the daemon registers each section once (one line of its
//! `channels!` list) and checks, builds, starts and reloads every channel through this one
//! interface, so it knows no platform by name.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use switchboard_core::{
    Bus, Channel, ConfigProblem, CoreError, MediaLimits, MediaStore, Transcripts,
};

use crate::pairing::Pairing;

/// What a channel may need to know of the daemon's HTTP listener.
#[derive(Clone, Debug)]
pub struct HttpFacts {
    /// Where it listens (`http.bind`).
    pub bind: SocketAddr,
    /// Host names served without a token besides loopback ones (`http.allowed_hosts`).
    pub allowed_hosts: Vec<String>,
}

/// What building a channel needs besides its section.
#[derive(Clone)]
pub struct ChannelParts {
    /// Where inbound messages go and outbound ones come from.
    pub hub: Arc<dyn Bus>,
    /// The daemon's state directory (a cursor, a list of conversations).
    pub state_dir: PathBuf,
    /// The agent's workspace (files people send go under `media/<channel>/`).
    pub workspace: PathBuf,
    /// Who may talk besides the allow lists.
    pub pairing: Arc<Pairing>,
    /// Where small documents are kept (a platform's cursor): the state directory's files,
    /// or the cluster's bucket.
    pub state: Arc<dyn switchboard_core::StateStore>,
    /// Whether a platform connection may move to another gateway (a cluster): then each
    /// chat's delivery is kept in `state` for the one that takes it over ([`KeptChats`]).
    ///
    /// [`KeptChats`]: crate::KeptChats
    pub handed_over: bool,
    /// The HTTP listener.
    pub http: HttpFacts,
    /// Where a chat's conversation so far is read from, for channels that show it again.
    pub transcripts: Option<Arc<dyn Transcripts>>,
    /// Where files for the chats wait until their channel delivered them.
    pub media: Arc<dyn MediaStore>,
}

impl ChannelParts {
    /// Where `channel`'s chats' delivery is kept for a gateway that takes the connection
    /// over: in `state` on a cluster, nowhere alone.
    pub fn kept(&self, channel: &str) -> Option<crate::KeptChats> {
        self.handed_over
            .then(|| crate::KeptChats::new(self.state.clone(), channel))
    }
}

/// A number read when `/healthz` or `/metrics` is asked.
pub type Gauge = Box<dyn Fn() -> usize + Send + Sync>;

/// A channel built from its section, not yet running.
pub struct BuiltChannel {
    /// The channel.
    pub channel: Arc<dyn Channel>,
    /// Its routes on the daemon's HTTP listener (a webhook, a page), if any. They are
    /// mounted once, at start: a reload does not rebuild a channel that has routes.
    pub router: Option<axum::Router>,
    /// Its gauges, by name (`websocket_connections`).
    pub gauges: Vec<(&'static str, Gauge)>,
}

impl BuiltChannel {
    /// A channel without routes or gauges.
    pub fn new(channel: Arc<dyn Channel>) -> Self {
        Self {
            channel,
            router: None,
            gauges: Vec::new(),
        }
    }
}

/// Why a channel could not be built.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    /// A value of its section is wrong.
    #[error("{}: {}", .0.key, .0.message)]
    Config(ConfigProblem),
    /// It could not be set up (an HTTP client, a file).
    #[error(transparent)]
    Start(#[from] CoreError),
}

impl From<ConfigProblem> for BuildError {
    fn from(problem: ConfigProblem) -> Self {
        Self::Config(problem)
    }
}

/// A channel's config section: whether it is on, its checks, and the channel it builds.
pub trait ChannelSection: Send + Sync {
    /// Whether the config enables the channel.
    fn enabled(&self) -> bool;

    /// Checks the section, its secrets resolved (a disabled one is not checked beyond its
    /// types).
    fn validate(&self, http: &HttpFacts) -> Result<(), ConfigProblem>;

    /// Builds the channel (only called when it is enabled).
    fn build(&self, parts: &ChannelParts) -> Result<BuiltChannel, BuildError>;

    /// What its platform takes of files, so a file it cannot take is refused before an
    /// upload starts — on whichever host sends it (none, by default).
    fn media(&self) -> MediaLimits {
        MediaLimits::NONE
    }

    /// The tools the section gives the agent (email's `email`), built from its settings
    /// without connecting anywhere: each call connects. Asked only of an enabled section
    /// whose secrets resolved; none, by default.
    fn tools(&self) -> Vec<Arc<dyn switchboard_tools::Tool>> {
        Vec::new()
    }
}

/// The section of a channel this build leaves out (a cargo feature not enabled): it reads
/// any table (its other keys skipped unread, nothing kept), and refuses one that enables the
/// channel, saying how to build it in.
#[derive(Debug, Default, serde::Deserialize)]
pub struct NotBuilt {
    #[serde(default)]
    enabled: Option<toml::Spanned<bool>>,
}

impl ChannelSection for NotBuilt {
    fn enabled(&self) -> bool {
        false
    }

    fn validate(&self, _http: &HttpFacts) -> Result<(), ConfigProblem> {
        match &self.enabled {
            Some(enabled) if *enabled.get_ref() => Err(ConfigProblem::new(
                Some(enabled.span()),
                "enabled",
                "this switchboard was built without this channel: build it with the cargo \
                 feature of the channel's name (e.g. cargo build --release --features slack)",
            )),
            _ => Ok(()),
        }
    }

    fn build(&self, _parts: &ChannelParts) -> Result<BuiltChannel, BuildError> {
        Err(BuildError::Config(ConfigProblem::new(
            None,
            "enabled",
            "this switchboard was built without this channel",
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_channel_left_out_of_the_build_is_refused_only_when_enabled() {
        let facts = HttpFacts {
            bind: ([127, 0, 0, 1], 8080).into(),
            allowed_hosts: Vec::new(),
        };
        let off: NotBuilt = toml::from_str("enabled = false\nbot_token = \"x\"").expect("reads");
        assert!(off.validate(&facts).is_ok());
        let on: NotBuilt = toml::from_str("enabled = true\nbot_token = \"x\"").expect("reads");
        let problem = on.validate(&facts).expect_err("refused");
        assert_eq!(problem.key, "enabled");
        assert!(
            problem.message.contains("--features"),
            "{}",
            problem.message
        );
    }
}
