//! An answer spoken back: once a turn's text went out, an answer to a voice note
//! (`[speech] reply = "when_spoken_to"`, or every answer with `"always"`) is also made into
//! audio by the speech servers and sent, after the text and before the exchange's `done`, as a
//! voice message (Telegram's `sendVoice`, an audio file on Discord and Slack, a player on the
//! web page). The text always goes first: a spoken answer that cannot be made — too long,
//! servers failing — leaves the text alone, with one line saying why.

use std::sync::Arc;

use switchboard_audio::SpeakError;
use switchboard_core::{
    Bus, InboundMessage, MediaKind, OutboundFile, OutboundKind, OutboundMessage,
};

use crate::replies::reply;
use crate::voice::Voice;

/// Speaks `answer` (the turn's final text, Markdown) into `message`'s chat, when the
/// config says this answer is spoken; tells the person when it could not be.
pub(crate) async fn speak(
    voice: &Voice,
    hub: &Arc<dyn Bus>,
    message: &InboundMessage,
    answer: &str,
) {
    let (Some(speech), Some(media)) = (&voice.speech, &voice.media) else {
        return;
    };
    let spoken_to = message
        .attachments
        .iter()
        .any(|attachment| attachment.voice);
    if !speech.speaks(spoken_to) || !hub.has_person(&message.channel) {
        return;
    }
    let text = switchboard_adapter::plain_text(answer);
    if text.trim().is_empty() {
        return;
    }
    let started = std::time::Instant::now();
    let spoken = match speech.speak(&text).await {
        Ok(spoken) => spoken,
        Err(err) => {
            let line = match &err {
                SpeakError::TooLong(line) => line.clone(),
                SpeakError::Failed(why) => {
                    tracing::warn!(session = %message.session_key(), error = %why,
                        "an answer could not be spoken");
                    format!("The spoken answer could not be made ({why}); the text is the answer.")
                }
            };
            reply(hub, message, OutboundKind::Notice(line)).await;
            return;
        }
    };
    let kept = match media.keep_bytes(spoken.bytes, &spoken.name).await {
        Ok(kept) => kept,
        Err(err) => {
            let line = format!("The spoken answer could not be kept to send ({err}).");
            reply(hub, message, OutboundKind::Notice(line)).await;
            return;
        }
    };
    tracing::info!(session = %message.session_key(), ms = started.elapsed().as_millis() as u64,
        bytes = kept.bytes, "an answer was spoken");
    let file = OutboundFile {
        key: kept.key,
        name: spoken.name,
        mime: spoken.mime.to_owned(),
        bytes: kept.bytes,
        kind: MediaKind::Voice,
        caption: None,
    };
    let outbound = OutboundMessage::reply_to(message, OutboundKind::File(file));
    if let Err(err) = hub.deliver_outbound(outbound).await {
        let line = format!("The spoken answer could not be sent ({err}); the text is the answer.");
        reply(hub, message, OutboundKind::Notice(line)).await;
    }
}
