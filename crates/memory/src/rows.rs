//! The rows of what was said, as every writer of the index adds and drops them: a transcript
//! file's (`index`), a memory file's chunks (`index`), a cluster's pieces (`pieces`).

use rusqlite::params;
use switchboard_core::{ChatMessage, Origin, cut_at};
use switchboard_sessions::transcript::Said;

/// The most of one message's text indexed.
const MAX_INDEXED: usize = 64 * 1024;

/// One row of what was said, as it is added.
pub(crate) struct Row<'a> {
    pub(crate) file: i64,
    /// `None`: a memory file's chunk.
    pub(crate) session: Option<&'a str>,
    pub(crate) at: Option<i64>,
    pub(crate) who: &'a str,
    pub(crate) text: &'a str,
    pub(crate) archived: bool,
}

/// Adds a row: its id (positive for a chat's, negative for a memory file's) and its text.
pub(crate) fn insert(tx: &rusqlite::Transaction<'_>, row: &Row<'_>) -> Result<(), rusqlite::Error> {
    let next = if row.session.is_some() {
        "(SELECT max(0, coalesce(max(id), 0)) + 1 FROM said)"
    } else {
        "(SELECT min(0, coalesce(min(id), 0)) - 1 FROM said)"
    };
    tx.prepare_cached(&format!(
        "INSERT INTO said (id, file, session, archived) VALUES ({next}, ?1, ?2, ?3)"
    ))?
    .execute(params![row.file, row.session, row.archived])?;
    let id = tx.last_insert_rowid();
    tx.prepare_cached(
        "INSERT INTO said_fts (rowid, text, session, at, who) VALUES (?1, ?2, ?3, ?4, ?5)",
    )?
    .execute(params![id, row.text, row.session, row.at, row.who])?;
    Ok(())
}

/// Deletes the rows of a file; how many.
pub(crate) fn drop_rows(
    tx: &rusqlite::Transaction<'_>,
    file: i64,
) -> Result<usize, rusqlite::Error> {
    tx.execute(
        "DELETE FROM said_fts WHERE rowid IN (SELECT id FROM said WHERE file = ?1)",
        [file],
    )?;
    tx.execute("DELETE FROM said WHERE file = ?1", [file])
}

/// Who said a message and what, when it is something said (a person's or a job's message,
/// an answer with text); tool calls and results are not.
pub(crate) fn spoken(said: &Said) -> Option<(String, &str)> {
    let (who, text) = match &said.message {
        ChatMessage::User {
            content, origin, ..
        } => (
            match origin {
                Origin::Person => "user".to_owned(),
                Origin::Schedule { name, .. } => format!("job {name}"),
                Origin::Heartbeat => "heartbeat".to_owned(),
                Origin::Delegated { .. } => "task".to_owned(),
                Origin::SubAgents { .. } => "sub-agents".to_owned(),
            },
            content.as_str(),
        ),
        ChatMessage::Assistant { content, .. } => ("assistant".to_owned(), content.as_str()),
        ChatMessage::Tool { .. } => return None,
    };
    let text = text.trim();
    if text.is_empty() {
        return None;
    }
    Some((who, cut_at(text, MAX_INDEXED)))
}

/// An offset as SQLite keeps it.
pub(crate) fn signed(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}
