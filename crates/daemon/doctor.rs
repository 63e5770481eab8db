//! `switchboard doctor`: checks what a daemon needs before it is started — the config, its
//! directories, every model (a tiny request each), every channel's token (asked of the
//! platform) — and prints a ✓ or ✗ line for each. Exits non-zero if any failed.

use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use switchboard_adapter::Pairing;
use switchboard_core::{Channel, ChatHub, ChatMessage};
use switchboard_llm::{ChatRequest, LlmProvider};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::cli::resolve_config;
use crate::config::Config;
use crate::health::Health;
use crate::platforms::{self, Parts, Platforms};
use crate::{llm_config, turn_config};

/// How long one check may take.
const CHECK_TIMEOUT: Duration = Duration::from_secs(30);

/// One line of the report.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Line {
    /// Whether the check passed.
    pub ok: bool,
    /// What was checked, and what came of it.
    pub text: String,
}

impl Line {
    fn ok(text: impl Into<String>) -> Self {
        Self {
            ok: true,
            text: text.into(),
        }
    }

    fn failed(text: impl Into<String>) -> Self {
        Self {
            ok: false,
            text: text.into(),
        }
    }
}

impl std::fmt::Display for Line {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}", if self.ok { "✓" } else { "✗" }, self.text)
    }
}

/// Runs `switchboard doctor`.
pub async fn run(config: Option<&Path>) -> anyhow::Result<ExitCode> {
    use std::io::Write as _;
    let path = resolve_config(config)?;
    let lines = match Config::load(&path) {
        Ok(config) => {
            let mut lines = vec![Line::ok(format!("config {} reads", path.display()))];
            lines.extend(report(&config).await);
            lines
        }
        Err(err) => vec![Line::failed(format!("config: {err}"))],
    };
    let mut out = std::io::stdout();
    for line in &lines {
        let _ = writeln!(out, "{line}");
    }
    Ok(if lines.iter().all(|line| line.ok) {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// The checks of a config that read: directories, models, channels.
pub async fn report(config: &Config) -> Vec<Line> {
    let mut lines = Vec::new();
    for (key, raw) in [
        ("agent.workspace", &config.agent.workspace),
        ("agent.state_dir", &config.agent.state_dir),
    ] {
        let dir = config.path(raw);
        lines.push(match writable(&dir) {
            Ok(()) => Line::ok(format!("{key} {} is writable", dir.display())),
            Err(err) => Line::failed(format!("{key} {}: {err}", dir.display())),
        });
    }

    let mut models = match llm_config::models(config, None) {
        Ok(models) => models,
        Err(err) => {
            lines.push(Line::failed(format!("llm: {err:#}")));
            Vec::new()
        }
    };
    match turn_config::verify(config) {
        Ok(verify) => {
            if let Some(judge) = verify.judge {
                models.push(("agent.verify.judge".to_owned(), judge.llm));
            }
        }
        Err(err) => lines.push(Line::failed(format!("agent.verify.judge: {err:#}"))),
    }
    for (key, model) in models {
        lines.push(ask(&key, model.as_ref()).await);
    }

    for channel in channels(config, &mut lines) {
        let name = channel.name();
        let checked = tokio::time::timeout(CHECK_TIMEOUT, channel.check()).await;
        lines.push(match checked {
            Ok(Ok(Some(said))) => {
                Line::ok(format!("channels.{name}: the token is accepted ({said})"))
            }
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

/// The enabled platform channels, built (not started) to be asked about their tokens.
fn channels(config: &Config, lines: &mut Vec<Line>) -> Vec<Arc<dyn Channel>> {
    let state_dir = config.path(&config.agent.state_dir);
    let platforms = Platforms::new(Parts {
        hub: ChatHub::new(1, CancellationToken::new()),
        health: Health::new(),
        pairing: Arc::new(Pairing::open(&state_dir)),
        state_dir,
        workspace: config.path(&config.agent.workspace),
        intake: CancellationToken::new(),
        stop: CancellationToken::new(),
        tracker: TaskTracker::new(),
    });
    let mut channels = Vec::new();
    for name in platforms::NAMES {
        match platforms.build(config, name) {
            Ok(Some(built)) => channels.push(built.channel),
            Ok(None) => {}
            Err(err) => lines.push(Line::failed(format!("channels.{name}: {err:#}"))),
        }
    }
    channels
}
