//! `[tools]`: which built-in tools run and how, with one default for each key.

use std::time::Duration;

use std::sync::Arc;

use serde::Deserialize;
use switchboard_core::{ConfigProblem, expand_env};
use toml::Spanned;

use crate::builtin::{
    DEFAULT_DENY, ExecOptions, SandboxHelper, SearchProvider, WebFetchOptions, WebSearchOptions,
};
use crate::netguard::SystemResolver;
use crate::sandbox::{DEFAULT_USER, RunAs};

/// `[tools]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ToolsSection {
    /// File tools reach only the workspace (and `exec` writes only there, where Landlock
    /// is available).
    pub restrict_to_workspace: bool,
    /// A tool's result longer than this is cut, with a note saying so.
    pub max_result_bytes: Spanned<usize>,
    /// `[tools.exec]`.
    pub exec: ExecSection,
    /// `[tools.web_fetch]`.
    pub web_fetch: WebFetchSection,
    /// `[tools.web_search]`.
    pub web_search: WebSearchSection,
}

impl Default for ToolsSection {
    fn default() -> Self {
        Self {
            restrict_to_workspace: true,
            max_result_bytes: Spanned::new(0..0, 16 * 1024),
            exec: ExecSection::default(),
            web_fetch: WebFetchSection::default(),
            web_search: WebSearchSection::default(),
        }
    }
}

/// `[tools.exec]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ExecSection {
    /// Whether the model may run shell commands.
    pub enabled: bool,
    /// Seconds a command may run when the model asks for no other timeout.
    pub timeout_secs: Spanned<f64>,
    /// The longest timeout the model may ask for.
    pub max_timeout_secs: Spanned<f64>,
    /// Regular expressions of command lines refused; replaces the built-in list.
    pub deny: Spanned<Vec<String>>,
    /// The program that runs a command confined; default: the daemon's own binary
    /// (`switchboard sandbox-exec`). Tests that run the daemon in-process set it.
    pub sandbox_helper: Option<String>,
    /// The unprivileged user commands run as when the daemon runs as root (a name, `UID` or
    /// `UID:GID`); ignored otherwise (commands run as the daemon's user).
    pub user: Spanned<String>,
}

impl Default for ExecSection {
    fn default() -> Self {
        Self {
            enabled: true,
            timeout_secs: Spanned::new(0..0, 60.0),
            max_timeout_secs: Spanned::new(0..0, 600.0),
            deny: Spanned::new(0..0, DEFAULT_DENY.iter().map(|s| (*s).to_owned()).collect()),
            sandbox_helper: None,
            user: Spanned::new(0..0, DEFAULT_USER.to_owned()),
        }
    }
}

/// `[tools.web_fetch]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct WebFetchSection {
    /// Whether the model may fetch web pages.
    pub enabled: bool,
    /// Bytes of a page read at most.
    pub max_bytes: Spanned<usize>,
    /// Seconds one fetch may take, redirects included.
    pub timeout_secs: Spanned<f64>,
    /// Redirects followed at most.
    pub max_redirects: usize,
    /// Hosts (`name` or `name:port`) that may be on private or local addresses.
    pub allow_private: Vec<String>,
}

impl Default for WebFetchSection {
    fn default() -> Self {
        Self {
            enabled: true,
            max_bytes: Spanned::new(0..0, 2 * 1024 * 1024),
            timeout_secs: Spanned::new(0..0, 30.0),
            max_redirects: 5,
            allow_private: Vec::new(),
        }
    }
}

/// `[tools.web_search]`: off until a provider is set.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct WebSearchSection {
    /// `"brave"` or `"searxng"`; absent: no `web_search` tool.
    pub provider: Option<Spanned<SearchProvider>>,
    /// The API's base URL; Brave's by default, required for SearXNG.
    pub base_url: Option<Spanned<String>>,
    /// Brave's key, usually `${BRAVE_API_KEY}`.
    pub api_key: Option<Spanned<String>>,
    /// Results returned at most.
    pub max_results: Spanned<usize>,
    /// Seconds one search may take.
    pub timeout_secs: Spanned<f64>,
}

impl Default for WebSearchSection {
    fn default() -> Self {
        Self {
            provider: None,
            base_url: None,
            api_key: None,
            max_results: Spanned::new(0..0, 5),
            timeout_secs: Spanned::new(0..0, 15.0),
        }
    }
}

impl ToolsSection {
    /// Checks the values; the problem names the key relative to `[tools]`.
    pub fn validate(&self) -> Result<(), ConfigProblem> {
        if *self.max_result_bytes.get_ref() < 1024 {
            return Err(ConfigProblem::new(
                Some(self.max_result_bytes.span()),
                "max_result_bytes",
                format!(
                    "must be at least 1024, got {}",
                    self.max_result_bytes.get_ref()
                ),
            ));
        }
        for (value, key) in [
            (&self.exec.timeout_secs, "exec.timeout_secs"),
            (&self.exec.max_timeout_secs, "exec.max_timeout_secs"),
            (&self.web_fetch.timeout_secs, "web_fetch.timeout_secs"),
            (&self.web_search.timeout_secs, "web_search.timeout_secs"),
        ] {
            let secs = *value.get_ref();
            if !(secs.is_finite() && secs > 0.0 && secs <= 86_400.0) {
                return Err(ConfigProblem::new(
                    Some(value.span()),
                    key,
                    format!("must be a positive number of seconds up to a day, got {secs}"),
                ));
            }
        }
        if self.exec.timeout_secs.get_ref() > self.exec.max_timeout_secs.get_ref() {
            return Err(ConfigProblem::new(
                Some(self.exec.timeout_secs.span()),
                "exec.timeout_secs",
                format!(
                    "is longer than exec.max_timeout_secs ({} s)",
                    self.exec.max_timeout_secs.get_ref()
                ),
            ));
        }
        for pattern in self.exec.deny.get_ref() {
            // Parsed only: compiling is left to the first command (exec.rs).
            if let Err(err) = regex_syntax::Parser::new().parse(pattern) {
                return Err(ConfigProblem::new(
                    Some(self.exec.deny.span()),
                    "exec.deny",
                    format!("`{pattern}` is not a regular expression: {err}"),
                ));
            }
        }
        if *self.web_fetch.max_bytes.get_ref() < 1024 {
            return Err(ConfigProblem::new(
                Some(self.web_fetch.max_bytes.span()),
                "web_fetch.max_bytes",
                format!(
                    "must be at least 1024, got {}",
                    self.web_fetch.max_bytes.get_ref()
                ),
            ));
        }
        let results = &self.web_search.max_results;
        if !(1..=20).contains(results.get_ref()) {
            return Err(ConfigProblem::new(
                Some(results.span()),
                "web_search.max_results",
                format!("must be between 1 and 20, got {}", results.get_ref()),
            ));
        }
        self.exec_user()?;
        self.web_search_options().map(|_| ())
    }

    /// Who commands run as: `[tools.exec] user` when the daemon is root, else `None`
    /// (commands run as the daemon's own, unprivileged, user).
    pub fn exec_user(&self) -> Result<Option<RunAs>, ConfigProblem> {
        if !self.exec.enabled {
            return Ok(None);
        }
        self.unprivileged_user()
    }

    /// Who the programs the daemon starts run as — `exec`'s commands, MCP servers:
    /// `[tools.exec] user` when the daemon is root, else `None` (they run as the daemon's
    /// own, unprivileged, user).
    pub fn unprivileged_user(&self) -> Result<Option<RunAs>, ConfigProblem> {
        if !RunAs::needed() {
            return Ok(None);
        }
        RunAs::lookup(self.exec.user.get_ref())
            .map(Some)
            .map_err(|why| ConfigProblem::new(Some(self.exec.user.span()), "exec.user", why))
    }

    /// How `web_fetch` fetches, from this section.
    pub fn web_fetch_options(&self) -> WebFetchOptions {
        WebFetchOptions {
            max_bytes: *self.web_fetch.max_bytes.get_ref(),
            timeout: Duration::from_secs_f64(*self.web_fetch.timeout_secs.get_ref()),
            max_redirects: self.web_fetch.max_redirects,
            allow_private: self.web_fetch.allow_private.clone(),
            resolver: Arc::new(SystemResolver),
        }
    }

    /// How `web_search` searches; `None` when no provider is set. The key's `${ENV}` is
    /// expanded here, so a missing variable is a config error.
    pub fn web_search_options(&self) -> Result<Option<WebSearchOptions>, ConfigProblem> {
        let section = &self.web_search;
        let Some(provider) = &section.provider else {
            return Ok(None);
        };
        let base_url = match (&section.base_url, *provider.get_ref()) {
            (Some(url), _) => {
                let text = url.get_ref().trim();
                if !(text.starts_with("http://") || text.starts_with("https://")) {
                    return Err(ConfigProblem::new(
                        Some(url.span()),
                        "web_search.base_url",
                        format!("`{text}` is not an http:// or https:// URL"),
                    ));
                }
                text.to_owned()
            }
            (None, SearchProvider::Brave) => "https://api.search.brave.com".to_owned(),
            (None, SearchProvider::Searxng) => {
                return Err(ConfigProblem::new(
                    Some(provider.span()),
                    "web_search.base_url",
                    "searxng needs the instance's URL, e.g. base_url = \"http://127.0.0.1:8888\"",
                ));
            }
        };
        let api_key = match &section.api_key {
            Some(raw) => Some(expand_env(raw.get_ref()).map_err(|unresolved| {
                ConfigProblem::new(
                    Some(raw.span()),
                    "web_search.api_key",
                    unresolved.to_string(),
                )
            })?),
            None => None,
        };
        if *provider.get_ref() == SearchProvider::Brave && api_key.is_none() {
            return Err(ConfigProblem::new(
                Some(provider.span()),
                "web_search.api_key",
                "brave needs an API key, e.g. api_key = \"${BRAVE_API_KEY}\"",
            ));
        }
        Ok(Some(WebSearchOptions {
            provider: *provider.get_ref(),
            base_url,
            api_key,
            max_results: *section.max_results.get_ref(),
            timeout: Duration::from_secs_f64(*section.timeout_secs.get_ref()),
        }))
    }

    /// How `exec` runs, from this section.
    /// Fails (never falling back to root) when the daemon is root and the user cannot be
    /// found.
    pub fn exec_options(
        &self,
        sandbox: Option<SandboxHelper>,
    ) -> Result<ExecOptions, ConfigProblem> {
        Ok(ExecOptions {
            run_as: self.exec_user()?,
            default_timeout: Duration::from_secs_f64(*self.exec.timeout_secs.get_ref()),
            max_timeout: Duration::from_secs_f64(*self.exec.max_timeout_secs.get_ref()),
            deny: self.exec.deny.get_ref().clone(),
            // Two streams, each kept to half of a result.
            max_output_bytes: *self.max_result_bytes.get_ref() / 2 - 256,
            sandbox,
        })
    }
}
