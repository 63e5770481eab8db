//! The terminal agent in a real terminal (a pseudo-terminal the test holds the other end
//! of, made the agent's controlling terminal by util-linux's `setsid --ctty`): lines are
//! edited, history comes back with the up arrow, a pasted block of lines is one message,
//! Ctrl-C stops a running answer and, at an empty prompt, leaves.

use std::io::{Read, Write};
use std::os::fd::OwnedFd;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use switchboard_testkit::{Reply, ScriptedLlm};

use crate::util::{self, BINARY};

/// The test's end of a pseudo-terminal: what the agent wrote so far, and a writer.
struct Terminal {
    master: std::fs::File,
    screen: Arc<Mutex<String>>,
    child: std::process::Child,
}

impl Terminal {
    /// Starts `switchboard agent --config CONFIG` on a new pseudo-terminal.
    fn start(config: &std::path::Path) -> Self {
        use rustix::pty::{OpenptFlags, grantpt, openpt, ptsname, unlockpt};
        let master: OwnedFd = openpt(OpenptFlags::RDWR | OpenptFlags::NOCTTY).expect("openpt");
        grantpt(&master).expect("grantpt");
        unlockpt(&master).expect("unlockpt");
        rustix::termios::tcsetwinsize(
            &master,
            rustix::termios::Winsize {
                ws_row: 40,
                ws_col: 120,
                ws_xpixel: 0,
                ws_ypixel: 0,
            },
        )
        .expect("window size");
        let name = ptsname(&master, Vec::new()).expect("ptsname");
        let slave = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(name.to_str().expect("a path"))
            .expect("the terminal");
        let stdio = || std::process::Stdio::from(slave.try_clone().expect("clone"));
        let child = std::process::Command::new("setsid")
            .args(["--ctty", BINARY, "agent", "--config"])
            .arg(config)
            .env("TERM", "xterm")
            .stdin(stdio())
            .stdout(stdio())
            .stderr(stdio())
            .spawn()
            .expect("setsid runs");
        drop(slave);
        let master = std::fs::File::from(master);
        let screen = Arc::new(Mutex::new(String::new()));
        let mut reader = master.try_clone().expect("clone");
        let seen = screen.clone();
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n) = reader.read(&mut buf) {
                if n == 0 {
                    break;
                }
                seen.lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .push_str(&String::from_utf8_lossy(&buf[..n]));
            }
        });
        Self {
            master,
            screen,
            child,
        }
    }

    /// Types `keys` (bytes as a terminal sends them).
    fn send(&mut self, keys: &str) {
        self.master.write_all(keys.as_bytes()).expect("write");
    }

    /// Waits until the screen shows `text` after the last `marker` (a prompt drawn after
    /// something happened: the editor redraws its line, so prompts cannot be counted).
    async fn wait_for_after(&self, marker: &str, text: &str) {
        let deadline = Instant::now() + util::PATIENCE;
        loop {
            let screen = self
                .screen
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .clone();
            if screen
                .rfind(marker)
                .is_some_and(|at| screen[at..].contains(text))
            {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "{text:?} after {marker:?} never showed:\n{screen}"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// Waits until the screen has shown `text` `count` times in all.
    async fn wait_for(&self, text: &str, count: usize) {
        let deadline = Instant::now() + util::PATIENCE;
        loop {
            let screen = self
                .screen
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .clone();
            if screen.matches(text).count() >= count {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "{text:?} ×{count} never showed:\n{screen}"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}

/// The user messages of the last request the model got.
fn last_user(llm: &ScriptedLlm) -> String {
    let request = llm.requests().pop().expect("a request");
    util::conversation(&request)
        .into_iter()
        .rev()
        .find(|m| m["role"] == "user")
        .and_then(|m| m["content"].as_str().map(str::to_owned))
        .unwrap_or_default()
}

#[tokio::test]
async fn the_prompt_edits_remembers_pastes_and_ctrl_c_stops_then_leaves() {
    if std::process::Command::new("setsid")
        .arg("--help")
        .output()
        .is_err()
    {
        eprintln!("skipped: util-linux's setsid is not installed");
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let llm = ScriptedLlm::start().await.expect("llm");
    let config = dir.path().join("config.toml");
    std::fs::write(&config, util::config_text(&llm.base_url(), dir.path(), "")).expect("write");
    let mut term = Terminal::start(&config);
    term.wait_for("> ", 1).await;

    // Line editing: "helo", left arrow, "l" → "hello".
    term.send("helo\x1b[Dl\r");
    term.wait_for("echo: hello", 1).await;
    assert_eq!(last_user(&llm), "hello");

    // A pasted block of two lines is one message.
    term.wait_for("> ", 2).await;
    term.send("\x1b[200~first line\nsecond line\x1b[201~\r");
    llm.wait_for_requests(2, util::PATIENCE).await;
    assert_eq!(last_user(&llm), "first line\nsecond line");

    // History: the up arrow brings back the message before.
    term.wait_for("> ", 3).await;
    term.send("\x1b[A\r");
    llm.wait_for_requests(3, util::PATIENCE).await;
    assert_eq!(last_user(&llm), "first line\nsecond line");

    // Ctrl-C while an answer streams stops it; the prompt comes back.
    term.wait_for("> ", 4).await;
    llm.push(Reply::paced(
        "one two three four five six seven eight nine ten ".repeat(40),
        Duration::from_millis(50),
    ));
    term.send("tell me a long story\r");
    term.wait_for("one two", 1).await;
    term.send("\x03");
    term.wait_for("[stopped]", 1).await;
    // The prompt drawn after it (the editor is reading again, the terminal in raw mode: a
    // Ctrl-C typed before would be a signal, not a key).
    term.wait_for_after("[stopped]", "> ").await;

    // Ctrl-C with text on the line clears it; at an empty prompt, it leaves.
    term.send("not sent\x03");
    term.send("\x03");
    let deadline = Instant::now() + util::PATIENCE;
    let status = loop {
        if let Some(status) = term.child.try_wait().expect("wait") {
            break status;
        }
        assert!(Instant::now() < deadline, "the agent did not leave");
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    assert!(status.success());
    assert_eq!(llm.requests().len(), 4, "nothing more was sent");
    // The history is kept for the next run.
    let history = std::fs::read_to_string(dir.path().join("state/cli_history")).expect("history");
    assert!(history.contains("hello"), "{history}");
}
