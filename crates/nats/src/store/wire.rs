//! What a store says to JetStream: a publish conditional on the subject's last sequence, and
//! reading a subject's messages in order. Shared by the session store and its copies.

use async_nats::HeaderMap;
use async_nats::jetstream::{self, consumer, context::PublishErrorKind, stream};
use futures::StreamExt;
use switchboard_sessions::{Revision, StoreError};

/// The most bytes one message carries (records, or a piece of a copy); more is several.
pub(super) const CHUNK_BYTES: usize = 512 * 1024;

/// Publishes `piece` on `subject` with `headers`, only if `revision` is still the subject's
/// last sequence (else [`StoreError::Stale`]); a rollup of the subject when `rollup`. `id` is
/// the message's `Nats-Msg-Id`, so a try repeated after a lost acknowledgement is the same
/// message. Returns the subject's new revision.
pub(super) async fn publish(
    js: &jetstream::Context,
    subject: &str,
    (revision, id): (Revision, &str),
    rollup: bool,
    piece: &[u8],
    mut headers: HeaderMap,
) -> Result<Revision, StoreError> {
    headers.insert(
        "Nats-Expected-Last-Subject-Sequence",
        revision.0.to_string().as_str(),
    );
    headers.insert("Nats-Msg-Id", id);
    if rollup {
        headers.insert("Nats-Rollup", "sub");
    }
    let stored = js
        .publish_with_headers(
            subject.to_owned(),
            headers,
            bytes::Bytes::copy_from_slice(piece),
        )
        .await
        .map_err(failed)?
        .await;
    match stored {
        Ok(ack) => Ok(Revision(ack.sequence)),
        Err(err) if err.kind() == PublishErrorKind::WrongLastSequence => Err(StoreError::Stale),
        Err(err) => Err(failed(err)),
    }
}

/// The last message on `subject` of `stream` (`None`: none).
pub(super) async fn last_on(
    stream: &stream::Stream,
    subject: &str,
) -> Result<Option<jetstream::message::StreamMessage>, StoreError> {
    match stream.get_last_raw_message_by_subject(subject).await {
        Ok(message) => Ok(Some(message)),
        Err(err) if err.kind() == stream::LastRawMessageErrorKind::NoMessageFound => Ok(None),
        Err(err) => Err(failed(err)),
    }
}

/// The messages on `subject` of `stream`, oldest first, as the server sends them (waiting
/// for more after the last: read up to a known sequence).
pub(super) async fn messages_of(
    stream: &stream::Stream,
    subject: &str,
) -> Result<consumer::pull::Ordered, StoreError> {
    stream
        .create_consumer(consumer::pull::OrderedConfig {
            filter_subject: subject.to_owned(),
            deliver_policy: consumer::DeliverPolicy::All,
            ..Default::default()
        })
        .await
        .map_err(failed)?
        .messages()
        .await
        .map_err(failed)
}

/// The next of `messages` and its stream sequence; `None` when they end.
pub(super) async fn next_of(
    messages: &mut consumer::pull::Ordered,
) -> Result<Option<(u64, jetstream::Message)>, StoreError> {
    let Some(message) = messages.next().await else {
        return Ok(None);
    };
    let message = message.map_err(failed)?;
    let sequence = message.info().map_err(failed)?.stream_sequence;
    Ok(Some((sequence, message)))
}

/// A failure of the server or the connection, as the store tells it.
pub(super) fn failed(err: impl std::fmt::Display) -> StoreError {
    StoreError::Io {
        path: std::path::PathBuf::from("nats"),
        source: std::io::Error::other(format!("NATS: {err}")),
    }
}
