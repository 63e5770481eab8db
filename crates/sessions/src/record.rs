//! The session file's format — one JSON record per line: a message, the tokens a turn
//! spent, or how far an inbound message got — and reading a file's tail back.
//!
//! A message appended in a turn carries the time it was written (`"at"`, Unix
//! milliseconds, beside its own fields), so what was said is found again with its date. A
//! compacted file opens with `{"copies":N}`: its next N messages are the window copied from
//! the file it replaced, which compaction keeps as a history segment (see
//! [`transcript`](crate::transcript)) — they are on record there already, with their times.
//! `{"summary":"…"}` is the running summary of what left the window (the last one counts).

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::Path;

use serde::{Deserialize, Serialize};
use switchboard_core::{ChatMessage, MessageId, SessionKey, Usage};

use crate::error::StoreError;
use crate::store::{InboundState, Loaded};

/// At most this much of a file's end is read on load; compaction keeps files far smaller.
const TAIL_BYTES: u64 = 8 * 1024 * 1024;

/// One line of a session file.
#[derive(Serialize, Deserialize)]
#[serde(untagged)]
pub(crate) enum Record<'a> {
    Usage { usage: Usage },
    Inbound { inbound: InboundRecord<'a> },
    Copies { copies: usize },
    Summary { summary: std::borrow::Cow<'a, str> },
    Message(std::borrow::Cow<'a, ChatMessage>),
}

/// A message as a turn appends it: its fields and when it was written.
#[derive(Serialize)]
struct Stamped<'a> {
    #[serde(flatten)]
    message: &'a ChatMessage,
    at: i64,
}

/// Now, in Unix milliseconds.
pub(crate) fn now_millis() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

#[derive(Serialize, Deserialize)]
pub(crate) struct InboundRecord<'a> {
    pub(crate) id: std::borrow::Cow<'a, MessageId>,
    #[serde(flatten)]
    pub(crate) state: std::borrow::Cow<'a, InboundState>,
}

/// How many inbound messages a session remembers (read back, and kept by compaction): far
/// more than a platform ever delivers again after a restart.
pub const INBOUND_MEMORY: usize = 256;

/// Records the last state of an inbound message, keeping at most [`INBOUND_MEMORY`].
pub(crate) fn note_inbound(
    inbound: &mut Vec<(MessageId, InboundState)>,
    id: MessageId,
    state: InboundState,
) {
    match inbound.iter_mut().find(|(known, _)| *known == id) {
        Some(entry) => entry.1 = state,
        None => {
            inbound.push((id, state));
            if inbound.len() > INBOUND_MEMORY {
                inbound.remove(0);
            }
        }
    }
}

/// Reads and parses the tail of a session's file without changing anything (safe while
/// its worker appends: a record being written shows as a torn last line and is
/// skipped). `None`: no file; the flag: the file needs repair before the next append.
pub(crate) fn read_tail(
    path: &Path,
    key: &SessionKey,
) -> Result<Option<(Loaded, bool)>, StoreError> {
    let mut file = match File::open(path) {
        Ok(file) => file,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(err) => return Err(StoreError::io(path)(err)),
    };
    let len = file.metadata().map_err(StoreError::io(path))?.len();
    let skip_partial_first = len > TAIL_BYTES;
    if skip_partial_first {
        file.seek(SeekFrom::Start(len - TAIL_BYTES))
            .map_err(StoreError::io(path))?;
    }
    let mut text = Vec::new();
    // Bounded even if the file grows while it is read.
    file.take(TAIL_BYTES)
        .read_to_end(&mut text)
        .map_err(StoreError::io(path))?;

    let (loaded, torn) = parse(&text, skip_partial_first, key);
    let needs_repair = torn || text.last().is_some_and(|&b| b != b'\n');
    Ok(Some((loaded, needs_repair)))
}

/// Reads records (lines) back: what they hold, and whether the last line was torn (it is
/// skipped, as is any other unreadable line, with a warning). `skip_first`: the first line
/// is a partial one (the text starts mid-file).
pub(crate) fn parse(text: &[u8], skip_first: bool, key: &SessionKey) -> (Loaded, bool) {
    let mut loaded = Loaded::default();
    let mut lines = text.split(|&b| b == b'\n').peekable();
    if skip_first {
        lines.next();
    }
    let mut torn = false;
    let mut line_no = 0usize;
    while let Some(line) = lines.next() {
        line_no += 1;
        let is_last = lines.peek().is_none();
        if line.is_empty() {
            continue;
        }
        match serde_json::from_slice::<Record<'_>>(line) {
            Ok(Record::Message(message)) => loaded.messages.push(message.into_owned()),
            Ok(Record::Usage { usage }) => loaded.usage += usage,
            Ok(Record::Copies { .. }) => {}
            Ok(Record::Summary { summary }) => loaded.summary = Some(summary.into_owned()),
            Ok(Record::Inbound { inbound }) => note_inbound(
                &mut loaded.inbound,
                inbound.id.into_owned(),
                inbound.state.into_owned(),
            ),
            Err(err) if is_last => {
                tracing::warn!(session = %key, error = %err,
                    "skipping torn last record of session");
                torn = true;
                continue;
            }
            Err(err) => {
                tracing::warn!(session = %key, line = line_no,
                    error = %err, "skipping unreadable record of session");
                continue;
            }
        }
        loaded.records += 1;
    }
    (loaded, torn)
}

/// A batch's records as lines (each ending in a newline), in the order
/// [`Batch`](crate::Batch) gives: what a store keeps of one append.
pub fn batch_lines(batch: &crate::store::Batch<'_>) -> Result<Vec<u8>, StoreError> {
    let at = now_millis();
    let mut buf = Vec::with_capacity(256 * (batch.messages.len() + 2));
    for message in batch.messages {
        serde_json::to_writer(&mut buf, &Stamped { message, at })?;
        buf.push(b'\n');
    }
    let records = batch
        .usage
        .map(|usage| Record::Usage { usage })
        .into_iter()
        .chain(batch.inbound.map(|(id, state)| inbound_record(id, state)));
    for record in records {
        serde_json::to_writer(&mut buf, &record)?;
        buf.push(b'\n');
    }
    Ok(buf)
}

/// A snapshot's records as lines: the inbound states, the usage, the summary (when there is
/// one), the number of messages copied (when there are any), the messages — what a store keeps of a compacted session.
pub fn snapshot_lines(snapshot: &crate::store::Snapshot<'_>) -> Result<Vec<u8>, StoreError> {
    let copies = snapshot.messages.len();
    let records = snapshot
        .inbound
        .iter()
        .map(|(id, state)| inbound_record(id, state))
        .chain(std::iter::once(Record::Usage {
            usage: snapshot.usage,
        }))
        .chain(snapshot.summary.map(|summary| Record::Summary {
            summary: std::borrow::Cow::Borrowed(summary),
        }))
        .chain((copies > 0).then_some(Record::Copies { copies }))
        .chain(
            snapshot
                .messages
                .iter()
                .map(|m| Record::Message(std::borrow::Cow::Borrowed(m))),
        );
    let mut buf = Vec::new();
    for record in records {
        serde_json::to_writer(&mut buf, &record)?;
        buf.push(b'\n');
    }
    Ok(buf)
}

fn inbound_record<'a>(
    id: &'a switchboard_core::MessageId,
    state: &'a crate::store::InboundState,
) -> Record<'a> {
    Record::Inbound {
        inbound: InboundRecord {
            id: std::borrow::Cow::Borrowed(id),
            state: std::borrow::Cow::Borrowed(state),
        },
    }
}

/// What records (lines, as [`batch_lines`] and [`snapshot_lines`] write them) hold, for a
/// store that keeps them elsewhere than in a file. An unreadable line is skipped with a
/// warning.
pub fn read_lines(text: &[u8], key: &SessionKey) -> Loaded {
    parse(text, false, key).0
}
