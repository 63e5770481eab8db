//! `[mcp.servers.NAME]`: the MCP servers the agent takes tools from.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;
use switchboard_core::{ConfigProblem, expand_env};
use toml::Spanned;

/// `[mcp]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct McpSection {
    /// The servers, by name (their tools are offered as `NAME__tool`).
    pub servers: BTreeMap<String, ServerEntry>,
}

/// One `[mcp.servers.NAME]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServerEntry {
    /// The program to start; it speaks MCP on its stdin and stdout.
    pub command: Option<Spanned<String>>,
    /// Its arguments.
    #[serde(default)]
    pub args: Vec<String>,
    /// Its environment (besides PATH and HOME): `${ENV}` and `${credential:NAME}` allowed.
    #[serde(default)]
    pub env: BTreeMap<String, Spanned<String>>,
    /// Where it starts (default: the workspace).
    pub cwd: Option<Spanned<String>>,
    /// A server over streamable HTTP: its endpoint (`https://…/mcp`), instead of `command`.
    pub url: Option<Spanned<String>>,
    /// Headers sent to an HTTP server with each request: `${ENV}` and `${credential:NAME}`
    /// allowed (`Authorization = "Bearer ${credential:notes_token}"`).
    #[serde(default)]
    pub headers: BTreeMap<String, Spanned<String>>,
    /// Whether it is used.
    #[serde(default = "yes")]
    pub enabled: bool,
    /// Only these of its tools (its own names).
    pub tools: Option<Vec<String>>,
    /// None of these of its tools.
    #[serde(default)]
    pub exclude_tools: Vec<String>,
    /// These of its tools only read: they run beside other calls, whatever the server says.
    #[serde(default)]
    pub read_only_tools: Vec<String>,
    /// How long one call may run (default: `agent.tool_timeout_secs`).
    pub timeout_secs: Option<Spanned<f64>>,
}

fn yes() -> bool {
    true
}

/// A server to run, resolved from its entry.
#[derive(Clone, Debug, PartialEq)]
pub struct ServerSpec {
    /// Its name.
    pub name: String,
    /// The program.
    pub command: String,
    /// Its arguments.
    pub args: Vec<String>,
    /// Its whole environment: what the entry gives it, and PATH and HOME unless given.
    pub env: Vec<(String, String)>,
    /// Where it starts.
    pub cwd: PathBuf,
    /// An HTTP server's endpoint (then `command` is empty: nothing is started).
    pub url: Option<String>,
    /// The headers sent to an HTTP server, resolved.
    pub headers: Vec<(String, String)>,
    /// Only these tools, when set.
    pub tools: Option<Vec<String>>,
    /// Never these tools.
    pub exclude_tools: Vec<String>,
    /// These run beside other calls.
    pub read_only_tools: Vec<String>,
    /// One call's time limit, when the entry sets one.
    pub timeout: Option<Duration>,
    /// The unprivileged user a started server runs as (a root daemon's `[tools.exec] user`,
    /// with no capabilities and `no_new_privs`); `None`: the daemon's own.
    pub run_as: Option<switchboard_tools::sandbox::RunAs>,
}

/// The longest server name: with `__` and a tool's name, a model's limit is 64 characters.
pub const MAX_NAME: usize = 24;

impl McpSection {
    /// Checks the entries (keys relative to `[mcp]`: `servers.NAME.command`).
    pub fn validate(&self) -> Result<(), ConfigProblem> {
        for (name, entry) in &self.servers {
            check_name(name)?;
            let key = |field: &str| format!("servers.{name}.{field}");
            match &entry.url {
                Some(url) => entry.check_reached(url, &key)?,
                None => entry.check_started(&key)?,
            }
        }
        Ok(())
    }

    /// The enabled servers, resolved: `${…}` in their environment filled in, `cwd` relative
    /// to `base` (the config's directory), the workspace by default.
    pub fn specs(&self, base: &Path, workspace: &Path) -> Result<Vec<ServerSpec>, ConfigProblem> {
        let mut specs = Vec::new();
        for (name, entry) in self.servers.iter().filter(|(_, entry)| entry.enabled) {
            let timeout = entry
                .timeout_secs
                .as_ref()
                .map(|secs| Duration::from_secs_f64(*secs.get_ref()));
            if let Some(url) = &entry.url {
                let headers = entry.headers(name)?;
                specs.push(ServerSpec {
                    name: name.clone(),
                    command: String::new(),
                    args: Vec::new(),
                    env: Vec::new(),
                    cwd: workspace.to_owned(),
                    url: Some(url.get_ref().clone()),
                    headers,
                    tools: entry.tools.clone(),
                    exclude_tools: entry.exclude_tools.clone(),
                    read_only_tools: entry.read_only_tools.clone(),
                    timeout,
                    run_as: None,
                });
                continue;
            }
            let Some(command) = &entry.command else {
                continue;
            };
            let env = entry.environment(name)?;
            let cwd = entry
                .cwd
                .as_ref()
                .map_or_else(|| workspace.to_owned(), |cwd| base.join(cwd.get_ref()));
            // A path (not a name looked up on PATH) is read from the config's directory:
            // the server starts in its `cwd`, where a relative one would mean another file.
            let command = command.get_ref();
            let command = if command.contains('/') && Path::new(command).is_relative() {
                base.join(command).display().to_string()
            } else {
                command.clone()
            };
            specs.push(ServerSpec {
                name: name.clone(),
                command,
                args: entry.args.clone(),
                env,
                cwd,
                url: None,
                headers: Vec::new(),
                tools: entry.tools.clone(),
                exclude_tools: entry.exclude_tools.clone(),
                read_only_tools: entry.read_only_tools.clone(),
                timeout,
                run_as: None,
            });
        }
        Ok(specs)
    }
}

/// A server's name: its tools are offered as `NAME__tool`.
fn check_name(name: &str) -> Result<(), ConfigProblem> {
    if name.is_empty()
        || name.len() > MAX_NAME
        || !name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
        || name.contains("__")
    {
        return Err(ConfigProblem::new(
            None,
            &format!("servers.{name}"),
            format!(
                "a server's name is 1-{MAX_NAME} letters, digits, `-` or `_` (no `__`): \
                 its tools are offered as NAME__tool"
            ),
        ));
    }
    Ok(())
}

impl ServerEntry {
    /// Its headers, their `${…}` filled in and checked.
    fn headers(&self, name: &str) -> Result<Vec<(String, String)>, ConfigProblem> {
        let mut headers = Vec::new();
        for (header, value) in &self.headers {
            let key = format!("servers.{name}.headers.{header}");
            let resolved = expand_env(value.get_ref())
                .map_err(|err| ConfigProblem::new(Some(value.span()), &key, err.to_string()))?;
            if http::HeaderValue::from_str(&resolved).is_err() {
                return Err(ConfigProblem::new(
                    Some(value.span()),
                    &key,
                    "not a header's value (a line break or a control character?)",
                ));
            }
            headers.push((header.clone(), resolved));
        }
        Ok(headers)
    }

    /// The environment it starts with: its `env`, `${…}` filled in, and the daemon's `PATH`
    /// and `HOME` unless it sets them.
    fn environment(&self, name: &str) -> Result<Vec<(String, String)>, ConfigProblem> {
        let mut env = Vec::new();
        for (variable, value) in &self.env {
            let resolved = expand_env(value.get_ref()).map_err(|err| {
                ConfigProblem::new(
                    Some(value.span()),
                    &format!("servers.{name}.env.{variable}"),
                    err.to_string(),
                )
            })?;
            env.push((variable.clone(), resolved));
        }
        for inherited in ["PATH", "HOME"] {
            if !self.env.contains_key(inherited)
                && let Some(value) = std::env::var_os(inherited)
            {
                env.push((inherited.to_owned(), value.to_string_lossy().into_owned()));
            }
        }
        Ok(env)
    }

    /// A server reached over HTTP: a URL with a host, headers with names — and no command.
    fn check_reached(
        &self,
        url: &Spanned<String>,
        key: &impl Fn(&str) -> String,
    ) -> Result<(), ConfigProblem> {
        if self.command.is_some() {
            return Err(ConfigProblem::new(
                Some(url.span()),
                &key("url"),
                "a server is either started (`command`) or reached (`url`), not both",
            ));
        }
        let parsed = url::Url::parse(url.get_ref()).map_err(|err| {
            ConfigProblem::new(Some(url.span()), &key("url"), format!("not a URL: {err}"))
        })?;
        if !matches!(parsed.scheme(), "http" | "https") || parsed.host().is_none() {
            return Err(ConfigProblem::new(
                Some(url.span()),
                &key("url"),
                "an http:// or https:// URL with a host",
            ));
        }
        for (header, value) in &self.headers {
            if http::HeaderName::from_bytes(header.as_bytes()).is_err() {
                return Err(ConfigProblem::new(
                    Some(value.span()),
                    &key("headers"),
                    format!("`{header}` is not a header's name"),
                ));
            }
        }
        Ok(())
    }

    /// A server started over stdio: its command, timeout and environment — and no headers.
    fn check_started(&self, key: &impl Fn(&str) -> String) -> Result<(), ConfigProblem> {
        if let Some((header, value)) = self.headers.iter().next() {
            return Err(ConfigProblem::new(
                Some(value.span()),
                &key("headers"),
                format!("`{header}`: headers go to a server reached by `url`"),
            ));
        }
        let Some(command) = &self.command else {
            return Err(ConfigProblem::new(
                None,
                &key("command"),
                "say how to start the server: command = \"npx\", args = [\"-y\", \"…\"] \
             — or where to reach it: url = \"https://…/mcp\"",
            ));
        };
        if command.get_ref().trim().is_empty() {
            return Err(ConfigProblem::new(
                Some(command.span()),
                &key("command"),
                "empty",
            ));
        }
        if let Some(timeout) = &self.timeout_secs {
            let secs = *timeout.get_ref();
            if !(secs.is_finite() && secs > 0.0 && secs <= 86_400.0) {
                return Err(ConfigProblem::new(
                    Some(timeout.span()),
                    &key("timeout_secs"),
                    "seconds, more than 0 and at most 86400",
                ));
            }
        }
        for (variable, value) in &self.env {
            if variable.is_empty() || variable.contains('=') || variable.contains('\0') {
                return Err(ConfigProblem::new(
                    Some(value.span()),
                    &key("env"),
                    format!("`{variable}` is not a variable's name"),
                ));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn section(text: &str) -> McpSection {
        toml::from_str(text).expect("parses")
    }

    #[test]
    fn a_stdio_server_resolves_with_only_its_environment_and_path_and_home() {
        let mcp = section(
            "[servers.files]\ncommand = \"npx\"\nargs = [\"-y\", \"server-files\"]\n\
             env = { ROOT = \"/srv\" }\ntimeout_secs = 5\n\n\
             [servers.off]\ncommand = \"x\"\nenabled = false\n",
        );
        mcp.validate().expect("valid");
        let local = section("[servers.mine]\ncommand = \"bin/server\"\n");
        let specs = local
            .specs(Path::new("/etc/sb"), Path::new("/var/ws"))
            .expect("specs");
        assert_eq!(
            specs[0].command, "/etc/sb/bin/server",
            "from the config's directory"
        );
        let specs = mcp
            .specs(Path::new("/etc/sb"), Path::new("/var/ws"))
            .expect("specs");
        assert_eq!(specs.len(), 1, "the disabled one is left out");
        let files = &specs[0];
        assert_eq!(files.command, "npx");
        assert_eq!(files.args, ["-y", "server-files"]);
        assert_eq!(files.cwd, Path::new("/var/ws"));
        assert_eq!(files.timeout, Some(Duration::from_secs(5)));
        let names: Vec<&str> = files.env.iter().map(|(k, _)| k.as_str()).collect();
        assert!(names.starts_with(&["ROOT"]), "{names:?}");
        assert!(
            names.iter().all(|n| ["ROOT", "PATH", "HOME"].contains(n)),
            "{names:?}"
        );
    }

    #[test]
    fn bad_entries_are_named() {
        for (text, key, says) in [
            (
                "[servers.x]\nargs = []\n",
                "servers.x.command",
                "say how to start",
            ),
            (
                "[servers.x]\nurl = \"ftp://127.0.0.1:1/mcp\"\n",
                "servers.x.url",
                "an http:// or https:// URL",
            ),
            (
                "[servers.x]\nurl = \"http://h/mcp\"\ncommand = \"y\"\n",
                "servers.x.url",
                "not both",
            ),
            (
                "[servers.x]\ncommand = \"y\"\nheaders = { A = \"b\" }\n",
                "servers.x.headers",
                "reached by `url`",
            ),
            (
                "[servers.x]\nurl = \"http://h/mcp\"\nheaders = { \"a b\" = \"c\" }\n",
                "servers.x.headers",
                "not a header's name",
            ),
            (
                "[servers.\"a b\"]\ncommand = \"x\"\n",
                "servers.a b",
                "letters, digits",
            ),
            (
                "[servers.a__b]\ncommand = \"x\"\n",
                "servers.a__b",
                "no `__`",
            ),
            (
                "[servers.x]\ncommand = \"x\"\ntimeout_secs = 0\n",
                "servers.x.timeout_secs",
                "more than 0",
            ),
        ] {
            let problem = section(text).validate().expect_err(text);
            assert_eq!(problem.key, key, "{text}");
            assert!(
                problem.message.contains(says),
                "{text}: {}",
                problem.message
            );
        }
        assert!(toml::from_str::<McpSection>("[servers.x]\ncomand = \"x\"\n").is_err());
    }
}
