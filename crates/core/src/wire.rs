//! The wire form of what crosses between processes (the messages on a cluster's bus):
//! JSON in a versioned envelope, `{"v":1,"body":…}`, at most [`MAX_WIRE_BYTES`].
//!
//! A process refuses an envelope of a version it does not know, saying which, instead of
//! misreading it: a cluster being upgraded host by host sees the error, not a wrong reply.

use serde::Serialize;
use serde::de::DeserializeOwned;

/// The version this build writes and reads.
pub const WIRE_VERSION: u32 = 1;

/// The most bytes one encoded message may take (NATS's default `max_payload` is 1 MiB; a
/// message this large is a person's very long text, or a model's).
pub const MAX_WIRE_BYTES: usize = 1024 * 1024;

/// Why a message could not be put on, or read off, the wire.
#[derive(Debug, thiserror::Error)]
pub enum WireError {
    /// Written by a build that speaks another version.
    #[error(
        "a message of wire version {found} arrived; this build reads version {WIRE_VERSION} \
         (run the same switchboard version on every host)"
    )]
    Version {
        /// The version it carries.
        found: u32,
    },
    /// Too large to send or to read.
    #[error("a message of {bytes} bytes is larger than the {MAX_WIRE_BYTES} bytes the bus carries")]
    TooLarge {
        /// Its size.
        bytes: usize,
    },
    /// Not an envelope, or its body is not what was expected.
    #[error("a message on the bus could not be read: {0}")]
    Malformed(#[from] serde_json::Error),
}

#[derive(Serialize)]
struct Outgoing<'a, T> {
    v: u32,
    body: &'a T,
}

#[derive(serde::Deserialize)]
struct Version {
    v: u32,
}

#[derive(serde::Deserialize)]
struct Incoming<T> {
    body: T,
}

/// `body` in an envelope of this build's version.
pub fn encode<T: Serialize>(body: &T) -> Result<Vec<u8>, WireError> {
    let bytes = serde_json::to_vec(&Outgoing {
        v: WIRE_VERSION,
        body,
    })?;
    if bytes.len() > MAX_WIRE_BYTES {
        return Err(WireError::TooLarge { bytes: bytes.len() });
    }
    Ok(bytes)
}

/// The body of an envelope, if it is of this build's version.
pub fn decode<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, WireError> {
    if bytes.len() > MAX_WIRE_BYTES {
        return Err(WireError::TooLarge { bytes: bytes.len() });
    }
    let Version { v } = serde_json::from_slice(bytes)?;
    if v != WIRE_VERSION {
        return Err(WireError::Version { found: v });
    }
    Ok(serde_json::from_slice::<Incoming<T>>(bytes)?.body)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ack::{Ack, Fate};
    use crate::message::{
        Attachment, Awaiting, InboundMessage, OutboundKind, OutboundMessage, ToolActivity,
        ToolStatus, TurnEnd,
    };
    use crate::origin::Origin;

    #[test]
    fn an_inbound_message_crosses_whole_but_its_ack_and_token_stay_behind() {
        let mut message = InboundMessage::text("telegram".into(), "42".into(), "7".into(), "hi");
        message.id = Some("1001".into());
        message.reply_to = Some("1000".into());
        message.attachments.push(Attachment::file(
            "photo.jpg".into(),
            Some("image/jpeg".into()),
            "media/telegram/1-photo.jpg".into(),
            12,
        ));
        message.attachments.push(Attachment {
            duration_ms: Some(7_500),
            voice: true,
            ..Attachment::file(
                "voice.ogg".into(),
                Some("audio/ogg".into()),
                "media/telegram/1-voice.ogg".into(),
                3_000,
            )
        });
        message.origin = Origin::Heartbeat;
        message.agent = Some("research".into());
        let (fates, seen) = std::sync::mpsc::channel();
        message.ack = Some(Ack::new(move |fate| fates.send(fate).expect("send")));
        message.cancel = Some(tokio_util::sync::CancellationToken::new());

        let read: InboundMessage = decode(&encode(&message).expect("encode")).expect("decode");
        assert_eq!(read.session_key(), message.session_key());
        assert_eq!(read.id, message.id);
        assert_eq!(read.reply_to, message.reply_to);
        assert_eq!(read.content, "hi");
        assert_eq!(read.attachments, message.attachments);
        assert_eq!(read.origin, Origin::Heartbeat);
        assert_eq!(read.agent, message.agent);
        assert_eq!(read.received_at, message.received_at);
        assert!(read.ack.is_none() && read.cancel.is_none());
        // The original keeps its ack: the fate still reaches its channel.
        message.settle(Fate::Handled);
        assert_eq!(seen.try_recv().expect("reported"), Fate::Handled);
    }

    #[test]
    fn every_kind_of_outbound_message_round_trips() {
        let kinds = [
            OutboundKind::TurnStarted,
            OutboundKind::Delta("par".into()),
            OutboundKind::DraftReset,
            OutboundKind::Message("whole".into()),
            OutboundKind::Tool(ToolActivity {
                id: "c1".into(),
                name: "shell".into(),
                status: ToolStatus::Finished,
                detail: "ok".into(),
                elapsed: Some(std::time::Duration::from_millis(1500)),
            }),
            OutboundKind::Status("waiting".into()),
            OutboundKind::Notice("note".into()),
            OutboundKind::Question {
                text: "may I?".into(),
                awaiting: Awaiting::Approval,
            },
            OutboundKind::Post("unasked".into()),
            OutboundKind::Error("broke".into()),
            OutboundKind::Done(TurnEnd::TimeLimit),
        ];
        for kind in kinds {
            let message = OutboundMessage {
                channel: "discord".into(),
                chat_id: "9".into(),
                reply_to: Some("5".into()),
                kind,
                cursor: None,
                turn: None,
            };
            let read: OutboundMessage = decode(&encode(&message).expect("encode")).expect("decode");
            assert_eq!(read, message);
        }
    }

    #[test]
    fn another_version_is_refused_by_name() {
        let err = decode::<Fate>(br#"{"v":2,"body":"handled"}"#).expect_err("refused");
        assert!(matches!(err, WireError::Version { found: 2 }), "{err}");
        assert!(
            err.to_string().contains("same switchboard version"),
            "{err}"
        );
        let err = decode::<Fate>(b"not json").expect_err("refused");
        assert!(matches!(err, WireError::Malformed(_)), "{err}");
        assert_eq!(
            decode::<Fate>(br#"{"v":1,"body":"dropped"}"#).expect("read"),
            Fate::Dropped
        );
    }

    #[test]
    fn a_message_over_the_cap_is_refused_both_ways() {
        let text = "x".repeat(MAX_WIRE_BYTES);
        let err = encode(&text).expect_err("too large");
        assert!(matches!(err, WireError::TooLarge { .. }), "{err}");
        let bytes = vec![b' '; MAX_WIRE_BYTES + 1];
        assert!(matches!(
            decode::<String>(&bytes),
            Err(WireError::TooLarge { .. })
        ));
    }
}
