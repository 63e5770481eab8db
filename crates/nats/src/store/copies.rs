//! The copies of what a rollup replaces: compaction's (with `[memory]` on) go to the history
//! stream, `/new`'s among the archives of the sessions stream. A copy is written in pieces
//! of whole messages, each naming its generation and its byte offset in it ([`GENERATION`],
//! [`OFFSET`]), so a copy cut short is carried on from its last piece, never begun again,
//! and a reader places each piece without reading the others.

use async_nats::HeaderMap;
use async_nats::jetstream::{self, stream};
use switchboard_core::SessionKey;
use switchboard_sessions::{Revision, StoreError};

use super::wire::{CHUNK_BYTES, last_on, messages_of, next_of, publish};
use crate::names::Names;

/// The header of a copy's piece naming the generation it copies.
pub(crate) const GENERATION: &str = "Switchboard-Generation";

/// The header of a copy's piece giving the byte of the generation it starts at.
pub(crate) const OFFSET: &str = "Switchboard-Offset";

/// Where the copy of a generation a rollup replaces goes.
#[derive(Clone, Copy, Debug)]
pub(super) enum Kept {
    /// Compaction's: to the history stream.
    History,
    /// `/new`'s: among the archives, named by when.
    Archive { millis: u128 },
}

impl Kept {
    /// The subject the copy of `agent`'s `key`'s generation starting at `generation` goes to.
    pub(super) fn subject(
        self,
        names: &Names,
        agent: &str,
        key: &SessionKey,
        generation: u64,
    ) -> String {
        match self {
            Kept::History => names.history_subject(agent, key, generation),
            Kept::Archive { millis } => names.archive_subject(agent, key, millis),
        }
    }
}

/// Copies the generation on `subject` of `stream` (its messages from the first through
/// `last`) to the subject of `copies` that `copy` names for the generation, in pieces of
/// whole messages of at most [`CHUNK_BYTES`], each with its generation and offset; carries
/// on after what that subject already holds of it. Returns how many bytes the generation has.
pub(super) async fn copy_out(
    js: &jetstream::Context,
    (stream, copies): (&stream::Stream, &stream::Stream),
    (subject, last): (&str, u64),
    copy: &(dyn Fn(u64) -> String + Sync),
) -> Result<u64, StoreError> {
    let mut messages = messages_of(stream, subject).await?;
    let mut target: Option<(String, Revision, u64)> = None;
    let mut generation = 0u64;
    let mut offset = 0u64;
    let mut piece: Vec<u8> = Vec::new();
    let mut piece_at = 0u64;
    while let Some((sequence, message)) = next_of(&mut messages).await? {
        if target.is_none() {
            // The first message starts the generation: what of it is copied already?
            generation = sequence;
            let name = copy(sequence);
            let (revision, held) = match last_on(copies, &name).await? {
                None => (Revision(0), 0),
                Some(kept) => {
                    let at = kept
                        .headers
                        .get(OFFSET)
                        .and_then(|v| v.as_str().parse::<u64>().ok())
                        .unwrap_or(0);
                    (Revision(kept.sequence), at + kept.payload.len() as u64)
                }
            };
            target = Some((name, revision, held));
        }
        if let Some((name, revision, held)) = &mut target {
            let payload = &message.payload;
            let end = offset + payload.len() as u64;
            if end > *held {
                if piece.is_empty() {
                    piece_at = offset;
                }
                if !piece.is_empty() && piece.len() + payload.len() > CHUNK_BYTES {
                    *revision =
                        publish_copy(js, name, *revision, (generation, piece_at), &piece).await?;
                    piece.clear();
                    piece_at = offset;
                }
                if offset < *held {
                    // A copy cut short mid-message: never, as pieces are whole messages;
                    // should it be, the copy carries on from where it ends.
                    let skip = usize::try_from(*held - offset).unwrap_or(usize::MAX);
                    piece.extend_from_slice(payload.get(skip..).unwrap_or_default());
                    piece_at = *held;
                } else {
                    piece.extend_from_slice(payload);
                }
            }
            offset = end;
        }
        if sequence >= last {
            break;
        }
    }
    if let Some((name, revision, _)) = &target
        && !piece.is_empty()
    {
        publish_copy(js, name, *revision, (generation, piece_at), &piece).await?;
    }
    Ok(offset)
}

/// Publishes one piece of a copy at byte `offset` of `generation`, after `revision` of the
/// copy's subject (a second copier of one generation is refused as stale).
async fn publish_copy(
    js: &jetstream::Context,
    subject: &str,
    revision: Revision,
    (generation, offset): (u64, u64),
    piece: &[u8],
) -> Result<Revision, StoreError> {
    let mut headers = HeaderMap::new();
    headers.insert(GENERATION, generation.to_string().as_str());
    headers.insert(OFFSET, offset.to_string().as_str());
    // Every try of one piece is one message to the server: its id is what it is.
    let id = format!("{subject}@{offset}");
    publish(js, subject, (revision, &id), false, piece, headers).await
}
