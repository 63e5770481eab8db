//! `switchboard onboard`: a commented config (its few choices asked in a terminal, else
//! taken from flags) and a workspace with starter files — the context files (SOUL.md,
//! AGENTS.md, USER.md, TOOLS.md, MEMORY.md) and a sample skill. An existing file is never
//! replaced without `--force`.

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
    /// `openai` or `anthropic`.
    pub provider: Option<String>,
    /// The model.
    pub model: Option<String>,
    /// The API root.
    pub base_url: Option<String>,
    /// The variable holding the key, or `none`.
    pub api_key_env: Option<String>,
    /// The systemd credential holding the key (`LoadCredential=NAME:…`), instead of a
    /// variable.
    pub credential_key: Option<String>,
    /// The workspace directory.
    pub workspace: Option<PathBuf>,
    /// The state directory.
    pub state_dir: Option<PathBuf>,
}

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
        Config::parse(&text, path).map_err(|err| anyhow::anyhow!("the config to write: {err}"))?;
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)
                .with_context(|| format!("cannot create {}", parent.display()))?;
        }
        std::fs::write(path, &text).with_context(|| format!("cannot write {}", path.display()))?;
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
    let page = if !websocket.enabled {
        "   (the web chat is off: [channels.websocket] enabled = false)".to_owned()
    } else if *websocket.auth.get_ref() == switchboard_websocket::AuthMode::Token {
        format!("3. open http://{host}/ — the page asks for the token of channels.websocket")
    } else {
        format!("3. open http://{host}/ — the web chat")
    };
    let key = match &config.llm.api_key {
        Some(key) => format!("   (with {} at hand)", key.get_ref()),
        None => String::new(),
    };
    // The service reads its own config (/etc/switchboard): a person's own, in their home,
    // is run by them.
    let personal = std::env::var_os("HOME")
        .filter(|home| !home.is_empty())
        .is_some_and(|home| path.starts_with(home));
    let service = if personal {
        ""
    } else {
        "   or as a service (docs/deployment.md): sudo systemctl enable --now switchboard\n"
    };
    format!(
        "\nNext:\n1. switchboard doctor {config_arg}{key}\n\
         2. switchboard run {config_arg}\n{service}{page}"
    )
}

/// The provider's defaults: model, API root, key variable.
fn defaults(provider: &str) -> (&'static str, &'static str, &'static str) {
    match provider {
        "anthropic" => (
            "claude-sonnet-4-5",
            "https://api.anthropic.com/v1",
            "ANTHROPIC_API_KEY",
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
            "LLM API: openai (any OpenAI-compatible server) or anthropic",
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
    if !matches!(provider, "openai" | "anthropic") {
        anyhow::bail!("--provider must be openai or anthropic, not `{provider}`");
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
        assert!(
            config_text(&Choices {
                provider: Some("gemini".into()),
                ..Choices::default()
            })
            .is_err()
        );
    }
}
