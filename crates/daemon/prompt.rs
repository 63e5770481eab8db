//! The terminal agent's prompt. In a terminal: `rustyline` — line editing, history (kept in
//! the state directory, across runs), a pasted block of several lines is one message
//! (bracketed paste), Ctrl-C clears a line with text and at an empty prompt leaves, Ctrl-D
//! leaves. Its reads block, so it runs on a thread of its own, asked for one line at a time:
//! between two reads the terminal is back in its usual mode, where Ctrl-C is a signal the
//! running answer listens for. From a pipe: one message per line.

use std::path::PathBuf;

use anyhow::Context;
use rustyline::{
    Cmd, ConditionalEventHandler, Event, EventContext, EventHandler, KeyCode, KeyEvent, Modifiers,
    Movement, RepeatCount,
};
use tokio::io::{AsyncBufReadExt, BufReader, Lines, Stdin};
use tokio::sync::{mpsc, oneshot};

/// The most lines the history keeps.
const HISTORY_LINES: usize = 1000;

/// What the person did at the prompt.
#[derive(Debug, PartialEq, Eq)]
pub enum Said {
    /// They sent this (several lines, when pasted).
    Text(String),
    /// They want to leave: Ctrl-C at an empty prompt, Ctrl-D, end of input.
    Leave,
}

/// Where the prompt's lines come from.
pub enum Prompt {
    /// A terminal: the editor thread, asked for a line through `ask`.
    Editor {
        /// Each request carries where its answer goes; the thread ends when this closes.
        ask: mpsc::Sender<oneshot::Sender<Said>>,
    },
    /// A pipe or a file.
    Plain(Lines<BufReader<Stdin>>),
}

impl Prompt {
    /// The prompt for this process's stdin; `history` is the file a terminal's history is
    /// kept in.
    pub fn new(history: PathBuf) -> Self {
        if !std::io::IsTerminal::is_terminal(&std::io::stdin()) {
            return Self::Plain(BufReader::new(tokio::io::stdin()).lines());
        }
        let (ask, mut asked) = mpsc::channel::<oneshot::Sender<Said>>(1);
        std::thread::spawn(move || {
            let mut editor = match editor(&history) {
                Ok(editor) => editor,
                Err(err) => {
                    eprintln!("error: the line editor cannot start: {err}");
                    return;
                }
            };
            while let Some(answer) = asked.blocking_recv() {
                let said = match editor.readline("> ") {
                    Ok(line) => {
                        if !line.trim().is_empty() {
                            let _ = editor.add_history_entry(line.as_str());
                            let _ = editor.append_history(&history);
                        }
                        Said::Text(line)
                    }
                    Err(
                        rustyline::error::ReadlineError::Interrupted
                        | rustyline::error::ReadlineError::Eof,
                    ) => Said::Leave,
                    Err(err) => {
                        eprintln!("error: cannot read the terminal: {err}");
                        Said::Leave
                    }
                };
                if answer.send(said).is_err() {
                    return;
                }
            }
        });
        Self::Editor { ask }
    }

    /// The next thing the person said.
    pub async fn next(&mut self) -> anyhow::Result<Said> {
        match self {
            Self::Editor { ask } => {
                let (answer, said) = oneshot::channel();
                if ask.send(answer).await.is_err() {
                    return Ok(Said::Leave);
                }
                Ok(said.await.unwrap_or(Said::Leave))
            }
            Self::Plain(lines) => {
                eprint!("> ");
                // Once a turn listened for Ctrl-C, the signal no longer ends the process by
                // itself: the prompt listens too.
                let line = tokio::select! {
                    line = lines.next_line() => line.context("cannot read stdin")?,
                    _ = tokio::signal::ctrl_c() => {
                        eprintln!();
                        None
                    }
                };
                Ok(line.map_or(Said::Leave, Said::Text))
            }
        }
    }
}

/// The editor: history from `history` (created private to its user), Ctrl-C bound to
/// [`CtrlC`].
fn editor(history: &std::path::Path) -> rustyline::Result<rustyline::DefaultEditor> {
    let config = rustyline::Config::builder()
        .max_history_size(HISTORY_LINES)?
        .history_ignore_dups(true)?
        .history_ignore_space(true)
        .bracketed_paste(true)
        .build();
    let mut editor = rustyline::DefaultEditor::with_config(config)?;
    editor.bind_sequence(
        KeyEvent(KeyCode::Char('C'), Modifiers::CTRL),
        EventHandler::Conditional(Box::new(CtrlC)),
    );
    if history.exists() {
        let _ = editor.load_history(history);
    } else {
        let mut options = std::fs::OpenOptions::new();
        options.write(true).create(true);
        std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
        let _ = options.open(history);
    }
    Ok(editor)
}

/// Ctrl-C at the prompt: clears a line that has text (as shells do); at an empty prompt,
/// the default — leave.
struct CtrlC;

impl ConditionalEventHandler for CtrlC {
    fn handle(
        &self,
        _event: &Event,
        _count: RepeatCount,
        _positive: bool,
        ctx: &EventContext,
    ) -> Option<Cmd> {
        (!ctx.line().is_empty()).then_some(Cmd::Kill(Movement::WholeLine))
    }
}
