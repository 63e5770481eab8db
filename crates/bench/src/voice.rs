//! What a voice note adds to a turn: one chat on the WebSocket channel, against the
//! testkit's audio server (which answers at once, as the scripted LLM does), alternating a
//! typed message and a 30-second voice note (OGG/Opus, as a phone records one). The note is
//! uploaded first (`POST /upload`, timed apart); a turn is timed from its message frame to
//! its reply, so the difference of the two medians is what hearing the note costs the
//! daemon: reading the recording through the workspace, its length from its bytes, the form
//! to the server and its answer.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use anyhow::Context;
use futures::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio_tungstenite::tungstenite::Message;

/// A turn's and an upload's times, in milliseconds, by kind.
#[derive(Debug, Default)]
pub struct VoiceRun {
    pub typed_ms: Vec<f64>,
    pub voice_ms: Vec<f64>,
    pub upload_ms: Vec<f64>,
    /// The recording's size.
    pub note_bytes: usize,
}

/// `rounds` typed messages and `rounds` voice notes of `seconds`, alternated, in one chat.
pub async fn run(addr: SocketAddr, rounds: usize, seconds: f64) -> anyhow::Result<VoiceRun> {
    let note = switchboard_testkit::audio::voice_note(seconds);
    let (mut socket, _) = tokio_tungstenite::connect_async(format!("ws://{addr}/ws"))
        .await
        .context("connect")?;
    socket.next().await.context("ready frame")??;
    let http = reqwest::Client::new();
    let mut run = VoiceRun {
        note_bytes: note.len(),
        ..VoiceRun::default()
    };
    for round in 0..rounds {
        let frame =
            json!({"type": "message", "chat_id": "voice", "content": format!("typed {round}")});
        run.typed_ms.push(turn(&mut socket, frame).await?);

        let uploaded = Instant::now();
        let answer: Value = http
            .post(format!(
                "http://{addr}/upload?chat_id=voice&name=voice-{round}.ogg"
            ))
            .header("content-type", "audio/ogg")
            .body(note.clone())
            .send()
            .await?
            .error_for_status()?
            .json()
            .await?;
        run.upload_ms.push(ms(uploaded.elapsed()));
        let file = answer["file"].as_str().context("an upload's file")?;
        let frame = json!({"type": "message", "chat_id": "voice", "content": "",
            "attachments": [{"file": file, "name": format!("voice-{round}.ogg"), "voice": true,
                "duration_ms": (seconds * 1000.0) as u64}]});
        run.voice_ms.push(turn(&mut socket, frame).await?);
    }
    let _ = socket.close(None).await;
    Ok(run)
}

/// Sends `frame`; the time until its reply's `message` frame (then waits for its `done`).
async fn turn<S>(socket: &mut S, frame: Value) -> anyhow::Result<f64>
where
    S: futures::Sink<Message, Error = tokio_tungstenite::tungstenite::Error>
        + futures::Stream<Item = Result<Message, tokio_tungstenite::tungstenite::Error>>
        + Unpin,
{
    let sent = Instant::now();
    socket.send(Message::text(frame.to_string())).await?;
    let mut replied = None;
    loop {
        let message = socket.next().await.context("socket closed")??;
        let Message::Text(text) = message else {
            continue;
        };
        let frame: Value = serde_json::from_str(text.as_str())?;
        match frame["type"].as_str() {
            Some("message") => replied = Some(sent.elapsed()),
            Some("error") => anyhow::bail!("error frame: {frame}"),
            Some("done") => break,
            _ => {}
        }
    }
    Ok(ms(replied.context("no message frame before done")?))
}

fn ms(elapsed: Duration) -> f64 {
    elapsed.as_secs_f64() * 1000.0
}
