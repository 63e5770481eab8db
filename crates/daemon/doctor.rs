//! `switchboard doctor`: checks what a daemon needs before it is started — the config, its
//! directories, every model (a tiny request each), every channel's token (asked of the
//! platform) — and prints a ✓ or ✗ line for each. Exits non-zero if any failed.
//!
//! Run from an operator's shell, it may lack what the service has: a `${credential:…}`
//! outside systemd, a `${VAR}` the unit sets. Such a secret is not a failure — its checks
//! are marked `?`, and doctor prints the command that runs it as the service sees its
//! secrets (`systemd-run` with the unit's `LoadCredential=`, `Environment…=` and `User=`).

use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use switchboard_adapter::{ChannelParts, Pairing};
use switchboard_core::{Channel, ChatHub, ChatMessage};
use switchboard_llm::{ChatRequest, LlmProvider};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::cli::resolve_config;
use crate::config::{Config, Secrets};
use crate::health::Health;
use crate::platforms::{Parts, Platforms};

/// How long one check may take.
const CHECK_TIMEOUT: Duration = Duration::from_secs(30);

/// How a check came out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mark {
    /// It passed (✓).
    Ok,
    /// It failed (✗).
    Failed,
    /// It could not be made here: a secret it needs is the service's (?).
    Unchecked,
}

/// One line of the report.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Line {
    /// How the check came out.
    pub mark: Mark,
    /// What was checked, and what came of it.
    pub text: String,
}

impl Line {
    pub(crate) fn ok(text: impl Into<String>) -> Self {
        Self {
            mark: Mark::Ok,
            text: text.into(),
        }
    }

    pub(crate) fn failed(text: impl Into<String>) -> Self {
        Self {
            mark: Mark::Failed,
            text: text.into(),
        }
    }

    fn unchecked(text: impl Into<String>) -> Self {
        Self {
            mark: Mark::Unchecked,
            text: text.into(),
        }
    }
}

impl std::fmt::Display for Line {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mark = match self.mark {
            Mark::Ok => "✓",
            Mark::Failed => "✗",
            Mark::Unchecked => "?",
        };
        write!(f, "{mark} {}", self.text)
    }
}

/// A secret of the config this shell cannot resolve: its key, its reference, and why.
#[derive(Clone, Debug)]
struct Unreachable {
    key: String,
    reference: String,
    why: String,
}

/// The secrets of `config` that cannot be resolved here (those of disabled channels aside).
fn unreachable_secrets(config: &Config) -> Vec<Unreachable> {
    crate::config_values::secret_keys(&config.source.text)
        .into_iter()
        .filter(|(key, _)| config.in_use(key))
        .filter_map(|(key, reference)| {
            let why = switchboard_core::expand_env(&format!("${{{reference}}}")).err()?;
            Some(Unreachable {
                key,
                reference,
                why: why.to_string(),
            })
        })
        .collect()
}

/// Runs `switchboard doctor`.
pub async fn run(config: Option<&Path>) -> anyhow::Result<ExitCode> {
    use std::io::Write as _;
    let path = resolve_config(config)?;
    // Root, outside the service, reads the service's credentials where the unit does (the
    // directory beside its config): `sudo switchboard doctor` checks what the service uses.
    let beside = crate::onboard::credentials_dir(&path);
    if std::env::var_os("CREDENTIALS_DIRECTORY").is_none()
        && rustix::process::geteuid().is_root()
        && beside.is_dir()
    {
        switchboard_core::read_credentials_from(beside);
    }
    let mut advice = None;
    let lines = match Config::load_with(&path, Secrets::Skip) {
        Err(err) => vec![Line::failed(format!("config: {err}"))],
        Ok(config) => {
            let unreachable = unreachable_secrets(&config);
            if unreachable.is_empty() {
                // Everything resolves here: check the config as the daemon reads it.
                match Config::load(&path) {
                    Ok(config) => {
                        let mut lines = vec![Line::ok(format!("config {} reads", path.display()))];
                        lines.extend(report(&config, &[]).await);
                        lines
                    }
                    Err(err) => vec![Line::failed(format!("config: {err}"))],
                }
            } else {
                let mut lines = vec![Line::ok(format!(
                    "config {} reads (its secrets aside)",
                    path.display()
                ))];
                for secret in &unreachable {
                    lines.push(Line::unchecked(format!(
                        "{}: ${{{}}} cannot be resolved in this shell ({}): not checked here",
                        secret.key, secret.reference, secret.why
                    )));
                }
                let keys: Vec<String> = unreachable.iter().map(|s| s.key.clone()).collect();
                lines.extend(report(&config, &keys).await);
                advice = Some(as_the_service(&path, &unreachable));
                lines
            }
        }
    };
    let mut out = std::io::stdout();
    for line in &lines {
        let _ = writeln!(out, "{line}");
    }
    if let Some(advice) = advice {
        let _ = writeln!(out, "\n{advice}");
    }
    Ok(if lines.iter().any(|line| line.mark == Mark::Failed) {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

/// How to run doctor with the service's secrets: `systemd-run` with the unit's credential,
/// environment and user lines (read with `systemctl cat`), or placeholders for them.
fn as_the_service(config: &Path, unreachable: &[Unreachable]) -> String {
    let program = std::env::current_exe()
        .map(|exe| exe.display().to_string())
        .unwrap_or_else(|_| "switchboard".into());
    let unit = unit_settings();
    let mut properties: Vec<String> = unit.clone();
    if unit.is_empty() {
        for secret in unreachable {
            if let Some(name) = secret.reference.strip_prefix("credential:") {
                properties.push(format!("LoadCredential={name}:/path/to/{name}"));
            } else {
                properties.push(format!("Environment={}=…", secret.reference));
            }
        }
    }
    let quoted: Vec<String> = properties
        .iter()
        .map(|p| format!("-p '{}'", p.replace('\'', "'\\''")))
        .collect();
    let whence = if unit.is_empty() {
        "(no switchboard.service found: fill in where the secrets are)"
    } else {
        "(the lines of switchboard.service that hand it its secrets)"
    };
    format!(
        "Some secrets are the service's, not this shell's. Check them as the service sees them \
         {whence}:\n  sudo systemd-run --pipe --wait --quiet {} {program} doctor --config {}",
        quoted.join(" "),
        // systemd-run starts in /: a relative path would name another file.
        std::path::absolute(config)
            .unwrap_or_else(|_| config.to_path_buf())
            .display()
    )
}

/// The lines of the installed `switchboard.service` (and its drop-ins) that give it secrets
/// and its user, as `systemctl cat` shows them; none without systemd or the unit.
fn unit_settings() -> Vec<String> {
    const WANTED: [&str; 8] = [
        "LoadCredential=",
        "LoadCredentialEncrypted=",
        "SetCredential=",
        "SetCredentialEncrypted=",
        "Environment=",
        "EnvironmentFile=",
        "User=",
        "Group=",
    ];
    let Ok(output) = std::process::Command::new("systemctl")
        .args(["cat", "--no-pager", "switchboard.service"])
        .stdin(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .output()
    else {
        return Vec::new();
    };
    if !output.status.success() {
        return Vec::new();
    }
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .map(str::trim)
        .filter(|line| WANTED.iter().any(|w| line.starts_with(w)))
        .map(str::to_owned)
        .collect()
}

/// The checks of a config that read: directories, models, channels. `unchecked` are the
/// secret keys that cannot be resolved here: the models and channels that need them are
/// marked `?`, not asked.
pub async fn report(config: &Config, unchecked: &[String]) -> Vec<Line> {
    let mut lines = directories(config);
    for (key, model) in models(config, &mut lines) {
        if unchecked.iter().any(|k| *k == format!("{key}.api_key")) {
            lines.push(Line::unchecked(format!(
                "{key} ({} {}): not asked, its key is the service's",
                model.name(),
                model.model()
            )));
            continue;
        }
        lines.push(ask(&key, model.as_ref()).await);
    }
    audio_servers(config, unchecked, &mut lines).await;
    #[cfg(feature = "mcp")]
    mcp_servers(config, &mut lines).await;
    if let Some(checked) = Box::pin(crate::cluster_report::doctor(config)).await {
        lines.push(checked.map_or_else(Line::failed, Line::ok));
    }
    for channel in channels(config, unchecked, &mut lines) {
        let name = channel.name();
        let checked = tokio::time::timeout(CHECK_TIMEOUT, channel.check()).await;
        lines.push(match checked {
            Ok(Ok(Some(said))) => Line::ok(format!(
                "channels.{name}: its credentials are accepted ({said})"
            )),
            Ok(Ok(None)) => continue,
            Ok(Err(err)) => Line::failed(format!("channels.{name}: {err}")),
            Err(_) => Line::failed(format!(
                "channels.{name}: no answer within {} s",
                CHECK_TIMEOUT.as_secs()
            )),
        });
    }
    lines
}

/// The transcription and speech servers the config enables, each asked whether it answers
/// and takes its key (no audio is sent).
async fn audio_servers(config: &Config, unchecked: &[String], lines: &mut Vec<Line>) {
    let transcription = config.transcription.build(None);
    let speech = config.speech.build(None);
    let mut servers = Vec::new();
    match &transcription {
        Ok(Some(built)) => servers.extend(built.servers()),
        Ok(None) => {}
        Err(err) => lines.push(Line::failed(format!("transcription: {err}"))),
    }
    match &speech {
        Ok(Some(built)) => servers.extend(built.servers()),
        Ok(None) => {}
        Err(err) => lines.push(Line::failed(format!("speech: {err}"))),
    }
    for server in servers {
        let key = server.key();
        let what = format!("{key} ({})", server.describe());
        if unchecked.iter().any(|k| *k == format!("{key}.api_key")) {
            lines.push(Line::unchecked(format!(
                "{what}: not asked, its key is the service's"
            )));
            continue;
        }
        lines.push(
            match tokio::time::timeout(CHECK_TIMEOUT, server.check()).await {
                Ok(Ok(said)) => Line::ok(format!("{what}: {said}")),
                Ok(Err(err)) => Line::failed(format!("{what}: {err}")),
                Err(_) => Line::failed(format!(
                    "{what}: no answer within {} s",
                    CHECK_TIMEOUT.as_secs()
                )),
            },
        );
    }
}

/// Whether each workspace and the state directory take a file.
fn directories(config: &Config) -> Vec<Line> {
    let mut dirs = vec![(
        "agent.state_dir".to_owned(),
        config.path(&config.agent.state_dir),
    )];
    for spec in config.agent_specs() {
        dirs.insert(
            dirs.len() - 1,
            (format!("{}.workspace", spec.key), spec.workspace),
        );
    }
    dirs.into_iter()
        .map(|(key, dir)| match writable(&dir) {
            Ok(()) => Line::ok(format!("{key} {} is writable", dir.display())),
            Err(err) => Line::failed(format!("{key} {}: {err}", dir.display())),
        })
        .collect()
}

/// Every model to ask, with the config key that describes it: the chain, the models beyond
/// it (on `[llm]`'s server), the judge; one that cannot be built is a failed line.
fn models(config: &Config, lines: &mut Vec<Line>) -> Vec<switchboard_llm::section::Keyed> {
    let mut models = match config.llm.chain_models(None) {
        Ok(models) => models,
        Err(err) => {
            lines.push(Line::failed(format!("llm: {err:#}")));
            Vec::new()
        }
    };
    let chain: Vec<String> = models
        .iter()
        .map(|(_, model)| model.model().to_owned())
        .collect();
    for name in config.model_names() {
        if chain.contains(&name) {
            continue;
        }
        let llm = &config.llm;
        match llm.model(llm.server_of(&name), None) {
            Ok(model) => models.push(("llm".to_owned(), model)),
            Err(err) => lines.push(Line::failed(format!("model {name}: {err:#}"))),
        }
    }
    match crate::agents::verify(&config.llm, &config.agent, "agent") {
        Ok(verify) => {
            if let Some(judge) = verify.judge {
                models.push(("agent.verify.judge".to_owned(), judge.llm));
            }
        }
        Err(err) => lines.push(Line::failed(format!("agent.verify.judge: {err:#}"))),
    }
    models
}

/// Whether each MCP server starts (or answers) and which tools it offers.
#[cfg(feature = "mcp")]
async fn mcp_servers(config: &Config, lines: &mut Vec<Line>) {
    let specs = match config.mcp_servers() {
        Ok(specs) => specs,
        Err(err) => {
            lines.push(Line::unchecked(format!(
                "mcp: {err}: servers not started here"
            )));
            return;
        }
    };
    for spec in specs {
        let key = format!("mcp.servers.{}", spec.name);
        lines.push(match Box::pin(switchboard_mcp::probe(&spec)).await {
            Ok(tools) => {
                let names: Vec<&str> = tools.iter().map(|(n, _)| n.as_str()).collect();
                Line::ok(format!(
                    "{key}: up, {} tools ({})",
                    names.len(),
                    names.join(", ")
                ))
            }
            Err(why) => Line::failed(format!("{key}: {why}")),
        });
    }
}

/// Whether `dir` exists (or can be made) and takes a file.
fn writable(dir: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    let probe = dir.join(format!(".switchboard-doctor-{}", std::process::id()));
    std::fs::write(&probe, b"ok")?;
    std::fs::remove_file(&probe)
}

/// A tiny request to one model.
async fn ask(key: &str, model: &dyn LlmProvider) -> Line {
    let request = ChatRequest {
        messages: vec![Arc::new(ChatMessage::user("Reply with the word: ok"))],
        ..ChatRequest::default()
    };
    let started = Instant::now();
    let answer = tokio::time::timeout(CHECK_TIMEOUT, model.chat(&request, &|_| {})).await;
    let what = format!("{key} ({} {})", model.name(), model.model());
    match answer {
        Ok(Ok(_)) => Line::ok(format!(
            "{what} answered in {} ms",
            started.elapsed().as_millis()
        )),
        Ok(Err(err)) => Line::failed(format!("{what}: {err}")),
        Err(_) => Line::failed(format!(
            "{what}: no answer within {} s",
            CHECK_TIMEOUT.as_secs()
        )),
    }
}

/// The enabled platform channels, built (not started) to be asked about their tokens; those
/// with an `unchecked` secret are marked `?` instead.
fn channels(config: &Config, unchecked: &[String], lines: &mut Vec<Line>) -> Vec<Arc<dyn Channel>> {
    let state_dir = config.path(&config.agent.state_dir);
    let state: Arc<dyn switchboard_core::StateStore> =
        Arc::new(switchboard_sessions::FileState::new(&state_dir));
    let platforms = Platforms::new(Parts {
        channel: ChannelParts {
            hub: Arc::new(ChatHub::new(1, CancellationToken::new())),
            pairing: Arc::new(Pairing::new(state.clone())),
            state,
            media: Arc::new(switchboard_adapter::FileMedia::new(&state_dir)),
            state_dir,
            workspace: config.path(&config.agent.workspace),
            http: config.http_facts(),
            handed_over: false,
            transcripts: None,
        },
        health: Health::new(),
        intake: CancellationToken::new(),
        stop: CancellationToken::new(),
        tracker: TaskTracker::new(),
    });
    let mut channels = Vec::new();
    for (name, section) in config.channels.all() {
        let prefix = format!("channels.{name}.");
        let theirs = unchecked.iter().any(|key| key.starts_with(&prefix));
        match platforms.build(config, name, section) {
            Ok(Some(_)) | Err(_) if theirs => lines.push(Line::unchecked(format!(
                "channels.{name}: its token was not asked for, it is the service's"
            ))),
            Ok(Some(built)) => channels.push(built.channel().clone()),
            Ok(None) => {}
            Err(err) => lines.push(Line::failed(format!("channels.{name}: {err:#}"))),
        }
    }
    channels
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_service_hint_names_the_config_by_its_whole_path() {
        let hint = as_the_service(Path::new("examples/fake-llm.toml"), &[]);
        let named = hint
            .rsplit(" --config ")
            .next()
            .expect("the config is named");
        assert!(Path::new(named).is_absolute(), "{hint}");
        assert!(named.ends_with("examples/fake-llm.toml"), "{hint}");
    }
}
