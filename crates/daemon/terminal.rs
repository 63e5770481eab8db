//! `switchboard agent`: turns in the terminal against the same config as the daemon, in
//! the session `cli_<name>`. Replies stream to stdout; tool activity and errors go to
//! stderr; Ctrl-C stops the answer in progress, and at an empty prompt leaves. The prompt
//! (`prompt.rs`) edits lines and keeps their history in a terminal.

use std::io::Write;
use std::path::Path;
use std::process::ExitCode;

use anyhow::Context;
use switchboard_agent::{Agent, AgentEvent, Command, TurnInput};
use switchboard_core::{ChannelName, ChatId, SessionKey};
use switchboard_sessions::Session;
use switchboard_tools::ToolRegistry;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::agents::build_agent;
use crate::cli::resolve_config;
use crate::config::{Config, Secrets};
use crate::prompt::{Prompt, Said};

/// Runs one turn (`message`) or an interactive prompt.
pub async fn run(
    config: Option<&Path>,
    message: Option<String>,
    name: &str,
) -> anyhow::Result<ExitCode> {
    let path = resolve_config(config)?;
    // The agent's own secrets only: no channel's token is needed to talk in a terminal.
    let config = Config::load_with(&path, Secrets::Agent)?;
    let agent = build_agent(&config, ToolRegistry::new(), None)?;
    let key = SessionKey::of(&ChannelName::from("cli"), &ChatId::from(name));
    let mut session = agent
        .load_session(&key)
        .await
        .with_context(|| format!("cannot read session {key}"))?;

    if let Some(text) = message {
        let ok = handle(&agent, &mut session, text).await;
        return Ok(if ok {
            ExitCode::SUCCESS
        } else {
            ExitCode::FAILURE
        });
    }

    eprintln!(
        "switchboard agent — session {key}; /help lists the commands; Ctrl-C stops an answer, \
         and at an empty prompt leaves"
    );
    let history = config.path(&config.agent.state_dir).join("cli_history");
    let mut prompt = Prompt::new(history);
    while let Said::Text(line) = prompt.next().await? {
        let text = line.trim();
        if text.is_empty() {
            continue;
        }
        if matches!(text, "/quit" | "/exit") {
            break;
        }
        handle(&agent, &mut session, text.to_owned()).await;
    }
    Ok(ExitCode::SUCCESS)
}

/// Answers one line: a command, or a turn. Returns whether it succeeded.
async fn handle(agent: &Agent, session: &mut Session, text: String) -> bool {
    match Command::parse(&text) {
        Some(Command::New) => match agent.reset_session(session).await {
            Ok(()) => {
                eprintln!("Started a new session.");
                true
            }
            Err(err) => {
                eprintln!("error: could not start a new session: {err}");
                false
            }
        },
        Some(Command::Approve | Command::Deny) => {
            eprintln!("Nothing is waiting for your approval.");
            true
        }
        Some(Command::Help) => {
            eprintln!(
                "{}\n/quit — leave (so does Ctrl-C at an empty prompt)",
                switchboard_core::commands_help()
            );
            true
        }
        Some(
            command @ (Command::Status | Command::Usage | Command::Model(_) | Command::Memory(_)),
        ) => {
            eprintln!("{}", command.answer(agent, session, None).await);
            true
        }
        Some(Command::Stop) => {
            eprintln!("Nothing to stop (Ctrl-C stops an answer in progress).");
            true
        }
        Some(Command::Jobs(_)) => {
            eprintln!(
                "Scheduled jobs belong to the daemon's chats: `switchboard cron list` shows them."
            );
            true
        }
        None => turn(agent, session, text).await,
    }
}

async fn turn(agent: &Agent, session: &mut Session, text: String) -> bool {
    let cancel = CancellationToken::new();
    let (events, mut rx) = mpsc::unbounded_channel();
    let run = async {
        agent
            .run_turn(session, TurnInput::text(text), &cancel, &events)
            .await;
        drop(events);
    };
    let print = async {
        let mut streamed = false;
        let mut ok = false;
        let mut stdout = std::io::stdout();
        while let Some(event) = rx.recv().await {
            match event {
                AgentEvent::TextDelta(text) => {
                    streamed = true;
                    let _ = write!(stdout, "{text}");
                    let _ = stdout.flush();
                }
                AgentEvent::TextReset => {
                    // Printed text cannot be taken back: mark where the answer starts again.
                    if streamed {
                        let _ = writeln!(stdout);
                        eprintln!("[the text above is void; the answer starts again]");
                    }
                    streamed = false;
                }
                AgentEvent::Verified {
                    rejected: Some(reason),
                    ..
                } => eprintln!("[check: {reason}]"),
                AgentEvent::Verified { rejected: None, .. } => {}
                AgentEvent::Status(text) => eprintln!("[{text}]"),
                AgentEvent::Notice(text) => eprintln!("note: {text}"),
                AgentEvent::Heard(text) => eprintln!("heard: {text}"),
                AgentEvent::ToolStarted { name, .. } => eprintln!("[tool {name} started]"),
                AgentEvent::ToolFinished { name, ok, .. } => {
                    eprintln!("[tool {name} {}]", if ok { "finished" } else { "failed" });
                    streamed = false;
                }
                AgentEvent::Finished { reply, .. } => {
                    if streamed {
                        let _ = writeln!(stdout);
                    } else {
                        let _ = writeln!(stdout, "{reply}");
                    }
                    ok = true;
                }
                AgentEvent::Failed { message } => eprintln!("error: {message}"),
                AgentEvent::Started => {}
            }
        }
        ok
    };
    let interrupt = async {
        if tokio::signal::ctrl_c().await.is_ok() {
            eprintln!("\n[stopped]");
            cancel.cancel();
        }
        std::future::pending::<()>().await;
    };
    let ((), ok) = tokio::select! {
        both = async { tokio::join!(run, print) } => both,
        () = interrupt => unreachable!("interrupt never completes"),
    };
    ok
}
