//! `matrix-server`: the Matrix channel's test homeserver as a program, for trying the channel
//! by hand — a real Synapse on 127.0.0.1 with the bot's account, and you on it with a Matrix
//! client of your own in an encrypted direct chat with the bot: each line you type is sent
//! there, and what the bot answers is printed (decrypted, its edits as they come). Needs
//! Synapse (`python3 -m venv /opt/synapse && /opt/synapse/bin/pip install matrix-synapse`,
//! or a venv named by `SWITCHBOARD_SYNAPSE`). Built with `--features matrix`.
//!
//! Usage: `matrix-server`; it prints the `[channels.matrix]` section to use, and runs until
//! Ctrl-C, SIGTERM or the end of its input.

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use switchboard_testkit::matrix::{Person, Synapse};
use tokio::io::AsyncBufReadExt;
use tokio::sync::Notify;

#[tokio::main(flavor = "current_thread")]
async fn main() -> std::io::Result<()> {
    let synapse = Synapse::start().await;
    let bot = synapse.register("bot", "bot-password").await;
    let changed = Arc::new(Notify::new());
    let you = Person::join(&synapse, "you", changed.clone()).await;
    let room = you.direct_chat(&bot).await;
    #[allow(clippy::print_stdout)]
    {
        println!(
            "[channels.matrix]\nenabled = true\nhomeserver = \"{}\"\nuser = \"{bot}\"\npassword = \"bot-password\"\nallow_from = [\"{}\"]\n\n# you are {} in an encrypted direct chat with the bot ({room}): type a line to send it\n",
            synapse.url(),
            you.id,
            you.id,
        );
    }
    let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    let mut lines = tokio::io::BufReader::new(tokio::io::stdin()).lines();
    let mut shown = 0;
    let mut joined = false;
    loop {
        tokio::select! {
            stop = tokio::signal::ctrl_c() => return stop,
            _ = terminate.recv() => return Ok(()),
            line = lines.next_line() => {
                let Some(line) = line? else { return Ok(()) };
                if line.trim().is_empty() {
                    continue;
                }
                if !joined {
                    #[allow(clippy::print_stdout)]
                    {
                        println!("(waiting for the bot to join: start switchboard with the section above)");
                    }
                    you.wait_joined(&room, &bot, Duration::from_secs(3600)).await;
                    joined = true;
                }
                you.send(&room, json!({"msgtype": "m.text", "body": line})).await;
            }
            () = changed.notified() => {}
        }
        let seen = you.seen_from(room.as_str(), &bot);
        for message in &seen[shown.min(seen.len())..] {
            let text = match message.edits() {
                Some(_) => format!(
                    "(edited) {}",
                    message.content["m.new_content"]["body"]
                        .as_str()
                        .unwrap_or_default()
                ),
                None => message.content["body"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned(),
            };
            #[allow(clippy::print_stdout)]
            {
                println!("{bot}: {text}");
            }
        }
        shown = seen.len();
    }
}
