//! The session file's format — one JSON record per line: a message, the tokens a turn
//! spent, or how far an inbound message got — and reading a file's tail back.

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
    Message(std::borrow::Cow<'a, ChatMessage>),
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

    let mut loaded = Loaded::default();
    let mut lines = text.split(|&b| b == b'\n').peekable();
    if skip_partial_first {
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
            Ok(Record::Inbound { inbound }) => note_inbound(
                &mut loaded.inbound,
                inbound.id.into_owned(),
                inbound.state.into_owned(),
            ),
            Err(err) if is_last => {
                tracing::warn!(session = %key, path = %path.display(), error = %err,
                    "skipping torn last record of session file");
                torn = true;
                continue;
            }
            Err(err) => {
                tracing::warn!(session = %key, path = %path.display(), line = line_no,
                    error = %err, "skipping unreadable record of session file");
                continue;
            }
        }
        loaded.records += 1;
    }
    let needs_repair = torn || text.last().is_some_and(|&b| b != b'\n');
    Ok(Some((loaded, needs_repair)))
}
