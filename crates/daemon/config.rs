//! The TOML config: one file, unknown keys refused, secrets as `${ENV_VAR}` references.
//!
//! Every error names the file, the line and column, and the key: a typo must never be
//! silently ignored by a service that runs for months.

use std::path::{Path, PathBuf};

use serde::Deserialize;
use switchboard_adapter::{ChannelSection, HttpFacts};

use crate::config_error::key_of;
pub use crate::config_error::{ConfigError, Source};
pub use crate::config_values::BindAddress;
use crate::config_values::{expand_strings, seconds};
pub use crate::http_config::HttpSection;
pub use switchboard_agent::section::AgentSection;
pub use switchboard_agent::section::{ApprovalsSection, JudgeSection, VerifySection};
pub use switchboard_llm::section::{Fallback, LlmSection, ProviderKind};
use toml::Spanned;

/// The whole config.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// `[agent]`: the default agent.
    #[serde(default)]
    pub agent: AgentSection,
    /// `[agents.NAME]`: further agents (with the keys of `[agent]` they do not set).
    #[serde(default)]
    pub agents: switchboard_agent::section::AgentSections,
    /// `[[bindings]]`: which chats go to which agent.
    #[serde(default)]
    pub bindings: Vec<Spanned<switchboard_agent::section::BindingSection>>,
    /// `[llm]`.
    #[serde(default)]
    pub llm: LlmSection,
    /// `[http]`.
    #[serde(default)]
    pub http: HttpSection,
    /// `[channels.*]`.
    #[serde(default)]
    pub channels: Box<ChannelsSection>,
    /// `[tools]`.
    #[serde(default)]
    pub tools: switchboard_tools::ToolsSection,
    /// `[daemon]`.
    #[serde(default)]
    pub daemon: DaemonSection,
    /// `[telemetry]`.
    #[serde(default)]
    pub telemetry: crate::telemetry::TelemetrySection,
    /// `[scheduler]`.
    #[serde(default)]
    pub scheduler: switchboard_scheduler::SchedulerSection,
    /// `[heartbeat]`.
    #[serde(default)]
    pub heartbeat: switchboard_scheduler::HeartbeatSection,
    /// `[limits]`: daily caps on what the models cost.
    #[serde(default)]
    pub limits: switchboard_usage::LimitsSection,
    /// `[transcription]`: voice notes heard before the turn (off unless enabled).
    #[serde(default)]
    pub transcription: switchboard_audio::TranscriptionSection,
    /// `[speech]`: answers spoken back (off unless enabled).
    #[serde(default)]
    pub speech: switchboard_audio::SpeechSection,
    /// `[memory]`: the search over everything said and noted (off unless enabled).
    #[serde(default)]
    pub memory: switchboard_memory::MemorySection,
    /// `[mcp]`.
    #[cfg(feature = "mcp")]
    #[serde(default)]
    pub mcp: switchboard_mcp::McpSection,
    /// `[mcp]`, in a build without MCP: refused.
    #[cfg(not(feature = "mcp"))]
    #[serde(default)]
    pub mcp: crate::left_out::NotBuiltSection<crate::left_out::NoMcp>,
    /// `[cluster]`: gateways and workers on several hosts (absent: one process, no NATS).
    #[cfg(feature = "cluster")]
    #[serde(default)]
    pub cluster: Option<switchboard_nats::ClusterSection>,
    /// `[cluster]`, in a build without the cluster: refused.
    #[cfg(not(feature = "cluster"))]
    #[serde(default)]
    pub cluster: crate::left_out::NotBuiltSection<crate::left_out::NoCluster>,
    /// The role `run --role` gave, over `[cluster] role`.
    #[serde(skip)]
    pub role: Option<String>,
    /// The file it was read from, for errors raised after parsing.
    #[serde(skip)]
    pub source: Source,
}

/// The channels a config may enable: each is registered here once, by the name of its
/// section (`[channels.<name>]`) and the adapter crate's section type, which parses, checks
/// and builds it (`switchboard_adapter::ChannelSection`). Nothing else in the daemon knows a
/// channel by name.
macro_rules! channels {
    ($($(#[$cfg:meta])* $name:ident: $section:ty),* $(,)?) => {
        /// `[channels]`: each channel's section belongs to its adapter crate; this only
        /// composes them.
        #[derive(Debug, Default, Deserialize)]
        #[serde(deny_unknown_fields)]
        pub struct ChannelsSection {
            $(
                $(#[$cfg])*
                #[doc = concat!("`[channels.", stringify!($name), "]`.")]
                #[serde(default)]
                pub $name: $section,
            )*
        }

        impl ChannelsSection {
            /// Every channel's section with its name, in the order they are started.
            pub fn all(&self) -> Vec<(&'static str, &dyn ChannelSection)> {
                vec![$(
                    $(#[$cfg])*
                    (stringify!($name), &self.$name as &dyn ChannelSection),
                )*]
            }
        }
    };
}

channels! {
    websocket: switchboard_websocket::WsSection,
    telegram: switchboard_telegram::TelegramSection,
    discord: switchboard_discord::DiscordSection,
    // A channel behind a cargo feature: without it, a section that enables it is refused.
    #[cfg(feature = "slack")]
    slack: switchboard_slack::SlackSection,
    #[cfg(not(feature = "slack"))]
    slack: switchboard_adapter::NotBuilt,
    #[cfg(feature = "whatsapp")]
    whatsapp: switchboard_whatsapp::WhatsAppSection,
    #[cfg(not(feature = "whatsapp"))]
    whatsapp: switchboard_adapter::NotBuilt,
    #[cfg(feature = "signal")]
    signal: switchboard_signal::SignalSection,
    #[cfg(not(feature = "signal"))]
    signal: switchboard_adapter::NotBuilt,
    #[cfg(feature = "email")]
    email: switchboard_email::EmailSection,
    #[cfg(not(feature = "email"))]
    email: switchboard_adapter::NotBuilt,
    #[cfg(feature = "matrix")]
    matrix: switchboard_matrix::MatrixSection,
    #[cfg(not(feature = "matrix"))]
    matrix: switchboard_adapter::NotBuilt,
}

impl ChannelsSection {
    /// The names of the channels the config enables.
    pub fn enabled(&self) -> Vec<&'static str> {
        self.all()
            .into_iter()
            .filter_map(|(name, section)| section.enabled().then_some(name))
            .collect()
    }
}

/// `[daemon]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct DaemonSection {
    /// Seconds running turns get to finish on shutdown before they are cancelled.
    pub shutdown_grace_secs: Spanned<f64>,
    /// Inbound messages queued before adapters wait.
    pub inbound_queue: usize,
}

impl Default for DaemonSection {
    fn default() -> Self {
        Self {
            shutdown_grace_secs: Spanned::new(0..0, 10.0),
            inbound_queue: 1024,
        }
    }
}

/// Whether a config's secrets (`api_key`, `token`, … and the checks that need them) are
/// resolved when it is read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Secrets {
    /// Resolved and checked: the daemon, `doctor`.
    Resolve,
    /// Left alone, and the sections whose checks need them (the channels', `[tools]`'s,
    /// `/metrics`' token) not checked: `pairing` and `status`, run from an operator's shell
    /// that has neither the service's environment nor its credentials.
    Skip,
    /// Only what an agent's turns use (its tools', MCP's): `switchboard agent`, which runs
    /// turns in a terminal and serves no channel and no HTTP.
    Agent,
}

impl Config {
    /// Reads and checks a config file.
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        Self::load_with(path, Secrets::Resolve)
    }

    /// Reads and checks a config file, resolving its secrets or not.
    pub fn load_with(path: &Path, secrets: Secrets) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|err| ConfigError {
            file: path.display().to_string(),
            line: None,
            column: None,
            key: String::new(),
            message: format!("cannot read the config file: {err}"),
        })?;
        Self::parse_with(&text, path, secrets)
    }

    /// Parses and checks config text; `path` is only used in errors and to resolve
    /// relative paths.
    pub fn parse(text: &str, path: &Path) -> Result<Self, ConfigError> {
        Self::parse_with(text, path, Secrets::Resolve)
    }

    /// [`Config::parse`], resolving secrets or not.
    pub fn parse_with(text: &str, path: &Path, secrets: Secrets) -> Result<Self, ConfigError> {
        let source = Source {
            path: path.to_path_buf(),
            text: text.to_owned(),
        };
        let mut table = toml::de::DeTable::parse(text)
            .map_err(|err| source.error_at(err.span(), String::new(), err.message().to_owned()))?;
        expand_strings(table.get_mut(), &mut Vec::new())
            .map_err(|(span, key, message)| source.error_at(Some(span), key, message))?;
        switchboard_agent::section::inherit(table.get_mut())
            .map_err(|(span, key, message)| source.error_at(Some(span), key, message))?;
        let deserializer = toml::de::Deserializer::from(table);
        let mut config: Config = serde_path_to_error::deserialize(deserializer).map_err(|err| {
            let key = key_of(err.path());
            let inner = err.into_inner();
            source.error_at(inner.span(), key, inner.message().to_owned())
        })?;
        config.source = source;
        config.validate(secrets)?;
        Ok(config)
    }

    fn validate(&self, secrets: Secrets) -> Result<(), ConfigError> {
        let specs = self.agent_specs();
        for spec in &specs {
            spec.section.validate(&spec.key, &self.source)?;
        }
        switchboard_agent::section::validate_agents(&specs, &self.bindings, &self.source)?;
        self.limits
            .validate(&self.llm.prices, &self.model_names(), &self.source)?;
        self.http.validate(&self.source)?;
        for (value, key) in [
            (&self.agent.ask_timeout_secs, "agent.ask_timeout_secs"),
            (
                &self.daemon.shutdown_grace_secs,
                "daemon.shutdown_grace_secs",
            ),
        ] {
            seconds(value).map_err(|message| {
                self.source
                    .error_at(Some(value.span()), key.into(), message)
            })?;
        }
        self.llm.validate(&self.source)?;
        self.transcription
            .validate()
            .map_err(|problem| self.source.problem("transcription", problem))?;
        self.speech
            .validate()
            .map_err(|problem| self.source.problem("speech", problem))?;
        self.telemetry.validate(&self.source)?;
        self.memory.validate(&self.source)?;
        self.scheduler
            .validate(&self.heartbeat, &self.channels.enabled(), &self.source)?;
        // Either MCP's own section or, in a build without it, its refusal.
        self.mcp
            .validate()
            .map_err(|problem| self.source.problem("mcp", problem))?;
        self.validate_place()?;
        if secrets == Secrets::Skip {
            return Ok(());
        }
        #[cfg(feature = "mcp")]
        self.mcp_servers()?;
        self.tools
            .validate()
            .map_err(|problem| self.source.problem("tools", problem))?;
        if secrets == Secrets::Agent {
            return Ok(());
        }
        self.metrics_access()?;
        let http = self.http_facts();
        for (name, section) in self.channels.all() {
            section
                .validate(&http)
                .map_err(|problem| self.source.problem(&format!("channels.{name}"), problem))?;
        }
        Ok(())
    }

    /// Where a worker listens: `[cluster] worker_bind` (a process alone runs the channels and
    /// listens on `http.bind`).
    pub fn worker_bind(&self) -> std::net::SocketAddr {
        #[cfg(feature = "cluster")]
        if let Some(section) = &self.cluster {
            return section.worker_bind();
        }
        self.http.bind.get_ref().0
    }

    /// Checks `[cluster]` and the role (`run --role` over the section's).
    pub(crate) fn validate_place(&self) -> Result<(), ConfigError> {
        let config = self;
        #[cfg(feature = "cluster")]
        {
            let Some(section) = &config.cluster else {
                return match &config.role {
                    Some(_) => Err(config.source.error_at(
                        None,
                        "cluster".into(),
                        "`--role` needs a [cluster] section: without one the daemon runs alone"
                            .into(),
                    )),
                    None => Ok(()),
                };
            };
            section
                .resolve()
                .map_err(|problem| config.source.problem("cluster", problem))?;
            if let Some(role) = &config.role {
                role.parse::<switchboard_nats::Role>()
                    .map_err(|why| config.source.error_at(None, "--role".into(), why))?;
            }
            Ok(())
        }
        #[cfg(not(feature = "cluster"))]
        {
            config
                .cluster
                .validate()
                .map_err(|problem| config.source.problem("cluster", problem))?;
            match &config.role {
                Some(_) => Err(config.source.error_at(
                    None,
                    "cluster".into(),
                    "`--role` needs a [cluster] section: without one the daemon runs alone".into(),
                )),
                None => Ok(()),
            }
        }
    }

    /// The MCP servers to run, resolved (their `${…}` filled in, paths made whole).
    #[cfg(feature = "mcp")]
    pub fn mcp_servers(&self) -> Result<Vec<switchboard_mcp::ServerSpec>, ConfigError> {
        let base = self
            .source
            .path
            .parent()
            .unwrap_or(Path::new("."))
            .to_owned();
        let mut specs = self
            .mcp
            .specs(&base, &self.path(&self.agent.workspace))
            .map_err(|problem| self.source.problem("mcp", problem))?;
        if specs.iter().any(|spec| spec.url.is_none()) {
            let run_as = self
                .tools
                .unprivileged_user()
                .map_err(|problem| self.source.problem("tools", problem))?;
            for spec in specs.iter_mut().filter(|spec| spec.url.is_none()) {
                spec.run_as = run_as;
            }
        }
        Ok(specs)
    }

    /// Who may read `/metrics`: `http.metrics_token`'s bearer, else the chat's token, else
    /// requests with a loopback (or allowed) Host (`HttpSection::metrics_access`).
    pub fn metrics_access(&self) -> Result<switchboard_http::Auth, ConfigError> {
        self.http.metrics_access(|| self.chat_token(), &self.source)
    }

    /// The control panel's token, resolved and checked (never the chat's); `None`: no panel.
    pub fn admin_access(&self) -> Result<Option<String>, ConfigError> {
        self.http
            .admin_access(self.chat_token().ok().flatten(), &self.source)
    }

    /// The WebSocket channel's token, when it is on and asks for one.
    fn chat_token(&self) -> Result<Option<String>, ConfigError> {
        let websocket = &self.channels.websocket;
        if !websocket.enabled || *websocket.auth.get_ref() != switchboard_websocket::AuthMode::Token
        {
            return Ok(None);
        }
        websocket
            .token()
            .map(Some)
            .map_err(|problem| self.source.problem("channels.websocket", problem))
    }

    /// Every model the config names, `[llm]`'s first.
    pub(crate) fn model_names(&self) -> Vec<String> {
        let llm = &self.llm;
        let mut names = vec![llm.model.clone()];
        let fallbacks = llm.fallbacks.iter().map(|fallback| &fallback.model);
        let specs = self.agent_specs();
        let agents = specs
            .iter()
            .filter_map(|spec| spec.section.model.as_ref().map(|m| m.get_ref().clone()));
        // A judge's calls are priced (and counted against the chat) like the agent's own.
        let judges = specs
            .iter()
            .filter_map(|spec| spec.section.verify.judge.as_ref().map(|j| j.model.clone()));
        for name in fallbacks
            .chain(&llm.models)
            .cloned()
            .chain(agents)
            .chain(judges)
        {
            if !names.contains(&name) {
                names.push(name);
            }
        }
        names
    }

    /// Every job the config declares, `[[scheduler.jobs]]` and the heartbeat, read at `now`.
    pub fn declared_jobs(
        &self,
        now: jiff::Timestamp,
    ) -> Result<Vec<switchboard_scheduler::Declared>, ConfigError> {
        switchboard_scheduler::declared_jobs(
            &self.scheduler,
            &self.heartbeat,
            &self.channels.enabled(),
            &self.source,
            now,
        )
    }

    /// The caps, as the agent reads them.
    pub(crate) fn limits(&self) -> switchboard_usage::Limits {
        self.limits.limits()
    }

    /// The price table, as the agent reads it.
    pub(crate) fn prices(&self) -> switchboard_usage::Prices {
        switchboard_usage::prices(&self.llm.prices)
    }

    /// The zone whose midnight begins a day for the caps.
    pub(crate) fn limits_zone(&self) -> Option<String> {
        self.limits.zone(self.scheduler.timezone.as_ref())
    }

    /// Every agent, the default first.
    pub(crate) fn agent_specs(&self) -> Vec<switchboard_agent::section::AgentSpec<'_>> {
        switchboard_agent::section::specs(&self.agent, &self.agents, |raw| self.path(raw))
    }

    /// The names of the MCP servers the config enables (none in a build without MCP).
    pub fn mcp_names(&self) -> Vec<String> {
        #[cfg(feature = "mcp")]
        let names = (self.mcp.servers.iter())
            .filter(|(_, entry)| entry.enabled)
            .map(|(name, _)| name.clone())
            .collect();
        #[cfg(not(feature = "mcp"))]
        let names = Vec::new();
        names
    }

    /// Whether the value at dotted `key` is used: not under a disabled channel's section,
    /// nor under `[tools.web_search]` without a provider.
    pub fn in_use(&self, key: &str) -> bool {
        for (name, section) in self.channels.all() {
            if key.starts_with(&format!("channels.{name}.")) {
                return section.enabled();
            }
        }
        if key.starts_with("tools.web_search.") {
            return self.tools.web_search.provider.is_some();
        }
        if key.starts_with("transcription.") {
            return self.transcription.enabled;
        }
        if key.starts_with("speech.") {
            return self.speech.enabled;
        }
        if key.starts_with("memory.") && key != "memory.enabled" && key != "memory.summarize" {
            return self.memory.enabled;
        }
        true
    }

    /// What channels may need to know of the HTTP listener.
    pub fn http_facts(&self) -> HttpFacts {
        HttpFacts {
            bind: self.http.bind.get_ref().0,
            allowed_hosts: self.http.allowed_hosts.clone(),
        }
    }

    /// A path from the config: `~` is the home directory, relative paths are relative to
    /// the config file's directory.
    pub fn path(&self, raw: &str) -> PathBuf {
        let expanded = match raw.strip_prefix("~/") {
            Some(rest) => std::env::var_os("HOME")
                .map(|home| PathBuf::from(home).join(rest))
                .unwrap_or_else(|| PathBuf::from(raw)),
            None => PathBuf::from(raw),
        };
        if expanded.is_absolute() {
            return expanded;
        }
        // From the config's directory as it really is (no symlink in it), so a `..` after it
        // is dropped with the name before it: `examples/../target` is shown as
        // `/…/target`, not as a path a person has to work out.
        let dir = self.source.path.parent().unwrap_or(Path::new("."));
        let dir = std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf());
        let mut out = PathBuf::new();
        for part in dir.join(expanded).components() {
            match part {
                std::path::Component::CurDir => {}
                std::path::Component::ParentDir
                    if matches!(
                        out.components().next_back(),
                        Some(std::path::Component::Normal(_))
                    ) =>
                {
                    out.pop();
                }
                other => out.push(other),
            }
        }
        out
    }
}

pub use switchboard_core::expand_env;

/// Config text as if read from `/etc/switchboard/config.toml` (the tests of the sections).
#[cfg(test)]
pub(crate) fn parse_for_test(text: &str) -> Result<Config, ConfigError> {
    Config::parse(text, Path::new("/etc/switchboard/config.toml"))
}

/// [`parse_for_test`] after the two lines every test config needs (a WebSocket channel
/// without a token), so the section a test is about starts on line 3.
#[cfg(test)]
pub(crate) fn parse_minimal_for_test(text: &str) -> Result<Config, ConfigError> {
    parse_for_test(&format!("{}{text}", tests::MINIMAL))
}

#[cfg(test)]
#[path = "config_tests.rs"]
mod tests;
