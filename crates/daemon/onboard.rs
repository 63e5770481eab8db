//! `switchboard onboard`: a commented config (its few choices asked in a terminal, else
//! taken from flags) and a workspace with starter files — the context files (SOUL.md,
//! AGENTS.md, USER.md, TOOLS.md, MEMORY.md) and a sample skill. An existing file is never
//! replaced without `--force`.
//!
//! For the service (`--service`, or a key kept as a systemd credential) the config is the
//! service's, and a service reached by every local user must not take `auth = "none"`: a
//! WebSocket token and a control-panel token are generated as credentials beside the key's
//! (`<config dir>/credentials/`, root's only, which the unit loads whole) and the config
//! reads all three as `${credential:…}`.

use std::io::{BufRead, IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;

use crate::config::{Config, Secrets};

/// The config written: the commented example, with the choices put in.
const TEMPLATE: &str = include_str!("../../config.example.toml");

/// What the config written asks of the person (flags, or answers at the prompt).
#[derive(Clone, Debug, Default)]
pub struct Choices {
    /// `openai`, `anthropic` or `gemini`.
    pub provider: Option<String>,
    /// The model.
    pub model: Option<String>,
    /// The API root.
    pub base_url: Option<String>,
    /// The variable holding the key, or `none`.
    pub api_key_env: Option<String>,
    /// The systemd credential holding the key (a file in the credentials directory), instead of a
    /// variable.
    pub credential_key: Option<String>,
    /// The workspace directory.
    pub workspace: Option<PathBuf>,
    /// The state directory.
    pub state_dir: Option<PathBuf>,
}

/// Where `--service` puts things: the paths the unit (systemd/switchboard.service) runs.
pub mod service {
    /// The service's config.
    pub const CONFIG: &str = "/etc/switchboard/config.toml";
    /// Its agent's workspace.
    pub const WORKSPACE: &str = "/var/lib/switchboard/workspace";
    /// Its state directory.
    pub const STATE_DIR: &str = "/var/lib/switchboard/state";
    /// The credential holding the LLM's key.
    pub const KEY: &str = "llm-key";
}

/// The credentials the service path generates: the WebSocket's token and the panel's.
const WS_TOKEN: &str = "ws-token";
const ADMIN_TOKEN: &str = "admin-token";

/// `switchboard onboard` with a config: writes it unless it exists (or `force`), then the
/// workspace it names (or `choices.workspace`).
pub fn with_config(path: &Path, mut choices: Choices, force: bool) -> anyhow::Result<ExitCode> {
    if path.exists() && !force {
        say(&format!(
            "kept    {} (it exists; --force replaces it)",
            path.display()
        ));
    } else {
        if std::io::stdin().is_terminal() && choices.credential_key.is_none() {
            ask(&mut choices)?;
        }
        let text = config_text(&choices)?;
        // Checked as the daemon will read it, before anything is written.
        // (The service's secrets are its credentials, read only under systemd.)
        let secrets = match choices.credential_key {
            Some(_) => Secrets::Skip,
            None => Secrets::Resolve,
        };
        Config::parse_with(&text, path, secrets)
            .map_err(|err| anyhow::anyhow!("the config to write: {err}"))?;
        if let Some(key) = &choices.credential_key {
            credentials(path, key)?;
        }
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)
                .with_context(|| format!("cannot create {}", parent.display()))?;
        }
        std::fs::write(path, &text).with_context(|| format!("cannot write {}", path.display()))?;
        if choices.credential_key.is_some() {
            readable_by_the_service(path)?;
        }
        say(&format!("wrote   {}", path.display()));
    }
    let config = Config::load_with(path, Secrets::Skip)?;
    let workspace = choices
        .workspace
        .clone()
        .unwrap_or_else(|| config.path(&config.agent.workspace));
    let code = run(&workspace, force)?;
    say(&next_steps(path, &config));
    Ok(code)
}

/// What to do next: check, run (or install the unit), open the page.
fn next_steps(path: &Path, config: &Config) -> String {
    let config_arg = format!("--config {}", path.display());
    let bind = config.http.bind.get_ref().0;
    let host = if bind.ip().is_unspecified() {
        std::net::SocketAddr::from(([127, 0, 0, 1], bind.port()))
    } else {
        bind
    };
    let websocket = &config.channels.websocket;
    let credential = |value: &str| {
        value
            .strip_prefix("${credential:")
            .and_then(|rest| rest.strip_suffix('}'))
            .map(|name| credentials_dir(path).join(name))
    };
    let ws_token = websocket
        .token
        .as_ref()
        .and_then(|token| credential(token.get_ref()));
    let for_the_service = ws_token.is_some();
    let page = if !websocket.enabled {
        "   (the web chat is off: [channels.websocket] enabled = false)".to_owned()
    } else if let Some(file) = &ws_token {
        format!(
            "3. open http://{host}/?token=$(sudo cat {}) — the web chat (the page keeps the token)",
            file.display()
        )
    } else if *websocket.auth.get_ref() == switchboard_websocket::AuthMode::Token {
        format!("3. open http://{host}/ — the page asks for the token of channels.websocket")
    } else {
        format!("3. open http://{host}/ — the web chat")
    };
    let panel = match config
        .http
        .admin_token
        .as_ref()
        .and_then(|t| credential(t.get_ref()))
    {
        Some(file) => format!(
            "\n   the control panel: http://{host}/admin (its token: sudo cat {})",
            file.display()
        ),
        None => String::new(),
    };
    let key = match &config.llm.api_key {
        Some(key) => match credential(key.get_ref()) {
            Some(file) if !file.exists() => format!(
                "   (first the key: sudo install -m 0600 /dev/stdin {}   # paste it, then ctrl-d)",
                file.display()
            ),
            Some(_) => String::new(),
            None => format!("   (with {} at hand)", key.get_ref()),
        },
        None => String::new(),
    };
    // The service reads its own config (/etc/switchboard): a person's own, in their home,
    // is run by them; one written for the service (its tokens are credentials) is run by
    // systemd, never by hand as root.
    let personal = std::env::var_os("HOME")
        .filter(|home| !home.is_empty())
        .is_some_and(|home| path.starts_with(home));
    let enable = "sudo systemctl enable --now switchboard";
    let run = if for_the_service {
        format!("2. {enable}   (as the switchboard user; docs/deployment.md)\n")
    } else if personal {
        format!("2. switchboard run {config_arg}\n")
    } else {
        format!(
            "2. switchboard run {config_arg}\n   or as a service (docs/deployment.md): {enable}\n"
        )
    };
    format!("\nNext:\n1. switchboard doctor {config_arg}{key}\n{run}{page}{panel}")
}

/// The provider's defaults: model, API root, key variable.
fn defaults(provider: &str) -> (&'static str, &'static str, &'static str) {
    match provider {
        "anthropic" => (
            "claude-sonnet-4-5",
            "https://api.anthropic.com/v1",
            "ANTHROPIC_API_KEY",
        ),
        "gemini" => (
            "gemini-2.5-flash",
            "https://generativelanguage.googleapis.com/v1beta",
            "GEMINI_API_KEY",
        ),
        _ => ("gpt-4o-mini", "https://api.openai.com/v1", "OPENAI_API_KEY"),
    }
}

/// Asks for what the flags left open, offering the defaults.
fn ask(choices: &mut Choices) -> anyhow::Result<()> {
    let mut lines = std::io::stdin().lock().lines();
    let mut prompt = |question: &str, default: &str| -> anyhow::Result<String> {
        let mut out = std::io::stdout();
        write!(out, "{question} [{default}]: ")?;
        out.flush()?;
        let answer = lines.next().transpose()?.unwrap_or_default();
        let answer = answer.trim();
        Ok(if answer.is_empty() { default } else { answer }.to_owned())
    };
    if choices.provider.is_none() {
        choices.provider = Some(prompt(
            "LLM API: openai (any OpenAI-compatible server), anthropic or gemini",
            "openai",
        )?);
    }
    let (model, base_url, key) = defaults(choices.provider.as_deref().unwrap_or("openai"));
    if choices.model.is_none() {
        choices.model = Some(prompt("Model", model)?);
    }
    if choices.base_url.is_none() {
        choices.base_url = Some(prompt(
            "API root (Ollama: http://127.0.0.1:11434/v1)",
            base_url,
        )?);
    }
    if choices.api_key_env.is_none() {
        choices.api_key_env = Some(prompt(
            "Environment variable that will hold the API key (none for local servers)",
            key,
        )?);
    }
    Ok(())
}

/// The example config with the choices put in.
fn config_text(choices: &Choices) -> anyhow::Result<String> {
    let provider = choices.provider.as_deref().unwrap_or("openai");
    if !matches!(provider, "openai" | "anthropic" | "gemini") {
        anyhow::bail!("--provider must be openai, anthropic or gemini, not `{provider}`");
    }
    let (model, base_url, key) = defaults(provider);
    let model = choices.model.as_deref().unwrap_or(model);
    let base_url = choices.base_url.as_deref().unwrap_or(base_url);
    let key = choices.api_key_env.as_deref().unwrap_or(key);
    let key = match &choices.credential_key {
        Some(name) => format!("credential:{name}"),
        None => key.to_owned(),
    };
    let quoted = |value: &str| toml::Value::String(value.to_owned()).to_string();
    let mut replaced = [false; 4];
    let mut out = String::with_capacity(TEMPLATE.len());
    for line in TEMPLATE.lines() {
        let comment = line.find(" #").map(|at| &line[at..]).unwrap_or_default();
        let setting = |key: &str, value: String| format!("{key} = {value:<28}{comment}");
        let new = match line {
            l if !replaced[0] && l.starts_with("provider = ") => {
                replaced[0] = true;
                setting("provider", quoted(provider))
            }
            l if !replaced[1] && l.starts_with("base_url = ") => {
                replaced[1] = true;
                setting("base_url", quoted(base_url))
            }
            l if !replaced[2] && l.starts_with("api_key = ") => {
                replaced[2] = true;
                if key.eq_ignore_ascii_case("none") && choices.credential_key.is_none() {
                    "# api_key = \"${…}\"                  # none: the server needs no key"
                        .to_owned()
                } else {
                    setting("api_key", quoted(&format!("${{{key}}}")))
                }
            }
            l if !replaced[3] && l.starts_with("model = ") => {
                replaced[3] = true;
                setting("model", quoted(model))
            }
            l => l.to_owned(),
        };
        out.push_str(&new);
        out.push('\n');
    }
    if choices.credential_key.is_some() {
        out = the_service_takes_tokens(&out);
    }
    for (dir, key, default) in [
        (&choices.workspace, "workspace", "~/.switchboard/workspace"),
        (&choices.state_dir, "state_dir", "~/.switchboard/state"),
    ] {
        if let Some(dir) = dir {
            // Padded as the example's line was, so its comment stays in its column.
            let old = format!("{key} = \"{default}\"");
            let new = format!("{key} = {}", quoted(&dir.display().to_string()));
            let new = format!("{new:<width$}", width = old.len());
            out = out.replacen(&old, &new, 1);
        }
    }
    Ok(out)
}

/// The example's `auth = "none"` made `auth = "token"`, with the WebSocket's token and the
/// panel's read from the credentials [`credentials`] generates.
fn the_service_takes_tokens(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut section = "";
    for line in text.lines() {
        if line.starts_with('[') {
            section = line.split(']').next().unwrap_or_default();
        }
        let websocket = section == "[channels.websocket";
        let comment = line.find(" #").map(|at| &line[at..]).unwrap_or_default();
        let setting = |key: &str, value: &str| format!("{key} = {value:<28}{comment}");
        let new = if websocket && line.starts_with("auth = \"none\"") {
            format!(
                "{:<41}# a token: the service is reached by every local user",
                "auth = \"token\""
            )
        } else if websocket && line.starts_with("# token = ") {
            setting("token", &format!("\"${{credential:{WS_TOKEN}}}\""))
        } else if line.starts_with("# admin_token = ") {
            setting("admin_token", &format!("\"${{credential:{ADMIN_TOKEN}}}\""))
        } else if websocket && line.trim_start().starts_with("# To require one: auth = ") {
            continue;
        } else {
            line.to_owned()
        };
        out.push_str(&new);
        out.push('\n');
    }
    out
}

/// The service's credentials directory, beside its config: `/etc/switchboard/credentials`,
/// which the unit loads whole (`LoadCredential=switchboard:…`).
pub fn credentials_dir(config: &Path) -> PathBuf {
    config
        .parent()
        .unwrap_or(Path::new("/"))
        .join("credentials")
}

/// Makes the service's credentials directory (0700) with a WebSocket token and a panel
/// token in it (each kept when there), and the LLM's key (asked for at a terminal when
/// missing; else the next steps say how to put it there).
fn credentials(config: &Path, key: &str) -> anyhow::Result<()> {
    use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
    let dir = credentials_dir(config);
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(&dir)
        .with_context(|| format!("cannot create {}", dir.display()))?;
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700))
        .with_context(|| format!("cannot make {} root's only", dir.display()))?;
    let write = |name: &str, value: &str| -> anyhow::Result<()> {
        let path = dir.join(name);
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&path)
            .with_context(|| format!("cannot write {}", path.display()))?;
        writeln!(file, "{value}").with_context(|| format!("cannot write {}", path.display()))?;
        say(&format!("wrote   {}", path.display()));
        Ok(())
    };
    for name in [WS_TOKEN, ADMIN_TOKEN] {
        if !dir.join(name).exists() {
            write(name, &token()?)?;
        }
    }
    if !dir.join(key).exists() && std::io::stdin().is_terminal() {
        let value = ask_secret(&format!(
            "The LLM's API key (kept in {}; empty to put it there later)",
            dir.join(key).display()
        ))?;
        if !value.is_empty() {
            write(key, &value)?;
        }
    }
    Ok(())
}

/// 24 random bytes from the kernel, as 48 hex digits.
fn token() -> anyhow::Result<String> {
    let mut bytes = [0u8; 24];
    std::io::Read::read_exact(
        &mut std::fs::File::open("/dev/urandom").context("cannot open /dev/urandom")?,
        &mut bytes,
    )
    .context("cannot read /dev/urandom")?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// Reads a line at the terminal without echoing it.
fn ask_secret(question: &str) -> anyhow::Result<String> {
    use rustix::termios::{self, LocalModes, OptionalActions};
    let stdin = std::io::stdin();
    let mut out = std::io::stdout();
    write!(out, "{question}: ")?;
    out.flush()?;
    let before = termios::tcgetattr(&stdin).ok();
    if let Some(before) = &before {
        let mut quiet = before.clone();
        quiet.local_modes.remove(LocalModes::ECHO);
        let _ = termios::tcsetattr(&stdin, OptionalActions::Now, &quiet);
    }
    let mut line = String::new();
    let read = stdin.lock().read_line(&mut line);
    if let Some(before) = &before {
        let _ = termios::tcsetattr(&stdin, OptionalActions::Now, before);
    }
    writeln!(out)?;
    read?;
    Ok(line.trim().to_owned())
}

/// The service's config, when root writes it for a `switchboard` group: root's, readable
/// by the group (0640), so the service reads it and cannot change it.
fn readable_by_the_service(path: &Path) -> anyhow::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    if !rustix::process::geteuid().is_root() {
        return Ok(());
    }
    let Ok(Some(group)) = nix::unistd::Group::from_name("switchboard") else {
        return Ok(());
    };
    std::os::unix::fs::chown(path, Some(0), Some(group.gid.as_raw()))
        .with_context(|| format!("cannot give {} to the switchboard group", path.display()))?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o640))
        .with_context(|| format!("cannot make {} 0640", path.display()))
}

/// The starter files, by path in the workspace.
pub const STARTER_FILES: [(&str, &str); 6] = [
    ("SOUL.md", include_str!("starter/SOUL.md")),
    ("AGENTS.md", include_str!("starter/AGENTS.md")),
    ("USER.md", include_str!("starter/USER.md")),
    ("TOOLS.md", include_str!("starter/TOOLS.md")),
    ("MEMORY.md", include_str!("starter/MEMORY.md")),
    (
        "skills/daily-note/SKILL.md",
        include_str!("starter/skills/daily-note/SKILL.md"),
    ),
];

/// Writes the starter files into `workspace`, keeping those that exist unless `force`.
/// Prints a line per file.
pub fn run(workspace: &Path, force: bool) -> anyhow::Result<ExitCode> {
    std::fs::create_dir_all(workspace)
        .with_context(|| format!("cannot create {}", workspace.display()))?;
    let mut kept = 0;
    for (name, text) in STARTER_FILES {
        let path = workspace.join(name);
        if path.exists() && !force {
            say(&format!(
                "kept    {} (it exists; --force replaces it)",
                path.display()
            ));
            kept += 1;
            continue;
        }
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)
                .with_context(|| format!("cannot create {}", parent.display()))?;
        }
        std::fs::write(&path, text).with_context(|| format!("cannot write {}", path.display()))?;
        say(&format!("wrote   {}", path.display()));
    }
    if kept == STARTER_FILES.len() {
        say("nothing to do: every starter file is there");
    }
    Ok(ExitCode::SUCCESS)
}

#[allow(clippy::print_stdout)]
fn say(line: &str) {
    println!("{line}");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_written_config_reads_and_carries_the_choices() {
        let choices = Choices {
            provider: Some("anthropic".into()),
            api_key_env: Some("MY_KEY".into()),
            workspace: Some("/srv/agent".into()),
            ..Choices::default()
        };
        let text = config_text(&choices).expect("text");
        let config =
            Config::parse(&text, Path::new("/etc/switchboard/config.toml")).expect("reads");
        assert_eq!(config.llm.model, "claude-sonnet-4-5");
        assert_eq!(config.llm.base_url(), "https://api.anthropic.com/v1");
        assert_eq!(
            config.llm.api_key.as_ref().map(|k| k.get_ref().as_str()),
            Some("${MY_KEY}")
        );
        assert_eq!(config.agent.workspace, "/srv/agent");
        assert!(text.contains("# switchboard config."), "comments kept");

        let local = Choices {
            base_url: Some("http://127.0.0.1:11434/v1".into()),
            model: Some("llama3.1".into()),
            api_key_env: Some("none".into()),
            ..Choices::default()
        };
        let config = Config::parse(&config_text(&local).expect("text"), Path::new("/c.toml"))
            .expect("reads");
        assert!(config.llm.api_key.is_none());
        assert_eq!(config.llm.model, "llama3.1");
        let gemini = Choices {
            provider: Some("gemini".into()),
            ..Choices::default()
        };
        let config = Config::parse(&config_text(&gemini).expect("text"), Path::new("/c.toml"))
            .expect("reads");
        assert_eq!(
            config.llm.base_url(),
            "https://generativelanguage.googleapis.com/v1beta"
        );
        assert_eq!(config.llm.model, "gemini-2.5-flash");
        assert!(
            config_text(&Choices {
                provider: Some("bard".into()),
                ..Choices::default()
            })
            .is_err()
        );
    }
}
