//! A voice note heard before its turn: each recording the message carries (a voice note, an
//! audio file) is sent to the transcription servers, and the line that names it in the
//! model's text says what it said — marked as transcribed, the file still named — or why it
//! was not heard. Nothing is dropped in silence:
//!
//! - a recording over a cap (`transcription.max_bytes`, `max_duration_secs`) is not sent; the
//!   person is told why, and a message that was nothing but it gets that as its answer,
//!   with no call to the model;
//! - servers that fail leave the turn to run with the file, and the person is told
//!   ("couldn't transcribe …: why");
//! - what was heard is shown to the person, quoted under their message, when
//!   `transcription.echo` is on.
//!
//! A turn taken up again after a crash is not heard again: its message, with what was
//! heard, was saved before the model was first called.

use std::io::Read;
use std::sync::Arc;
use std::time::Duration;

use switchboard_audio::{Transcription, clock, duration};
use switchboard_core::Attachment;
use switchboard_tools::Workspace;
use tokio_util::sync::CancellationToken;

use crate::events::{AgentEvent, EventSink};
use crate::input::{TurnInput, attachment_line};

/// What hearing a message's recordings left for its turn.
pub(crate) enum Heard {
    /// The turn runs (with what was heard, or not, named in its text).
    Runs,
    /// The message was nothing but recordings none of which could be sent: this is its
    /// answer, and the model is not called.
    Answered(String),
}

/// Hears the recordings among `input`'s attachments (see the module's text), reading them
/// through `workspace`.
pub(crate) async fn hear(
    transcription: &Transcription,
    workspace: &Arc<Workspace>,
    input: &mut TurnInput,
    events: &EventSink,
    cancel: &CancellationToken,
) -> Heard {
    let recordings: Vec<Attachment> = input
        .attachments
        .iter()
        .filter(|attachment| attachment.is_audio())
        .cloned()
        .collect();
    if recordings.is_empty() {
        return Heard::Runs;
    }
    let mut refused = Vec::new();
    for recording in &recordings {
        let line = attachment_line(recording);
        let (heard, why_not) = match hear_one(transcription, workspace, recording, cancel).await {
            Outcome::Heard(text) => {
                if transcription.echo && !text.is_empty() {
                    let _ = events.send(AgentEvent::Heard(text.clone()));
                }
                (heard_line(recording, Ok(&text)), None)
            }
            Outcome::Refused(why) => (heard_line(recording, Err(&why)), Some(why)),
            Outcome::Failed(why) => {
                let _ = events.send(AgentEvent::Notice(format!(
                    "Couldn't transcribe {}: {why}. The agent gets the file itself.",
                    recording.name
                )));
                (
                    heard_line(recording, Err(&format!("the transcription failed: {why}"))),
                    None,
                )
            }
        };
        input.text = input.text.replacen(&line, &heard, 1);
        if let Some(why) = why_not {
            refused.push(format!("{} was not transcribed: {why}.", recording.name));
        }
    }
    if refused.is_empty() {
        return Heard::Runs;
    }
    let nothing_else = input.content.trim().is_empty() && refused.len() == input.attachments.len();
    if nothing_else {
        return Heard::Answered(format!("I could not listen to this: {}", refused.join(" ")));
    }
    for why in refused {
        let _ = events.send(AgentEvent::Notice(why));
    }
    Heard::Runs
}

enum Outcome {
    Heard(String),
    Refused(String),
    Failed(String),
}

async fn hear_one(
    transcription: &Transcription,
    workspace: &Arc<Workspace>,
    recording: &Attachment,
    cancel: &CancellationToken,
) -> Outcome {
    let known = recording.duration_ms.map(Duration::from_millis);
    if let Some(why) = transcription.refusal(recording.bytes, known) {
        return Outcome::Refused(why);
    }
    let read = read(workspace, &recording.path, transcription.max_bytes).await;
    let (bytes, length) = match read {
        Ok(read) => read,
        Err(why) => return Outcome::Failed(why),
    };
    if let Some(why) = transcription.refusal(bytes.len() as u64, known.or(length)) {
        return Outcome::Refused(why);
    }
    let mime = recording
        .mime
        .as_deref()
        .unwrap_or("application/octet-stream");
    let started = std::time::Instant::now();
    let heard = tokio::select! {
        heard = transcription.transcribe(bytes, &recording.name, mime) => heard,
        () = cancel.cancelled() => return Outcome::Failed("the turn was stopped".into()),
    };
    match heard {
        Ok(text) => {
            tracing::info!(file = %recording.name, ms = started.elapsed().as_millis() as u64,
                chars = text.len(), "a recording was transcribed");
            metrics::counter!("switchboard_transcriptions_total", "outcome" => "heard")
                .increment(1);
            Outcome::Heard(text)
        }
        Err(err) => {
            tracing::warn!(file = %recording.name, error = %err, "a recording could not be transcribed");
            metrics::counter!("switchboard_transcriptions_total", "outcome" => "failed")
                .increment(1);
            Outcome::Failed(err.to_string())
        }
    }
}

/// The recording at `path` (through the workspace, at most `max` bytes) and its length when
/// its bytes say, on a blocking thread.
async fn read(
    workspace: &Arc<Workspace>,
    path: &str,
    max: u64,
) -> Result<(Vec<u8>, Option<Duration>), String> {
    let workspace = workspace.clone();
    let path = path.to_owned();
    tokio::task::spawn_blocking(move || {
        let resolved = workspace.resolve(&path).map_err(|err| err.to_string())?;
        let file = workspace
            .open_read(&resolved)
            .map_err(|err| err.to_string())?;
        let mut bytes = Vec::new();
        file.take(max + 1)
            .read_to_end(&mut bytes)
            .map_err(|err| format!("it could not be read: {err}"))?;
        let head = &bytes[..bytes.len().min(duration::HEAD_BYTES)];
        let tail = &bytes[bytes.len().saturating_sub(duration::TAIL_BYTES)..];
        let length = duration::of(head, tail);
        Ok((bytes, length))
    })
    .await
    .unwrap_or_else(|err| Err(format!("reading it stopped: {err}")))
}

/// The line naming a recording in the model's text: what it said, or why it was not heard.
fn heard_line(recording: &Attachment, heard: Result<&str, &str>) -> String {
    let length = recording
        .duration_ms
        .map(|ms| format!(", {}", clock(Duration::from_millis(ms))))
        .unwrap_or_default();
    let what = if recording.voice {
        "voice note"
    } else {
        "audio file"
    };
    let said = match heard {
        Ok("") => "transcribed: nothing was heard in it".to_owned(),
        Ok(text) => format!("transcribed: \"{text}\""),
        Err(why) => format!("not transcribed: {why}"),
    };
    format!(
        "[{what} {} ({}{length}), saved in the workspace at {}; {said}]",
        recording.name,
        recording.mime.as_deref().unwrap_or("unknown type"),
        recording.path
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn note() -> Attachment {
        Attachment {
            duration_ms: Some(7_400),
            voice: true,
            ..Attachment::file(
                "voice-12.ogg".into(),
                Some("audio/ogg".into()),
                "media/telegram/42-12-voice-12.ogg".into(),
                5_000,
            )
        }
    }

    #[test]
    fn the_model_reads_what_was_heard_marked_as_transcribed_and_the_file_named() {
        assert_eq!(
            heard_line(&note(), Ok("buy milk")),
            "[voice note voice-12.ogg (audio/ogg, 0:07), saved in the workspace at \
             media/telegram/42-12-voice-12.ogg; transcribed: \"buy milk\"]"
        );
        assert!(
            heard_line(&note(), Err("the server is down"))
                .ends_with("not transcribed: the server is down]")
        );
    }
}
