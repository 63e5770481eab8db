//! A cluster's chats in the index: the [`Piece`]s of its two streams — the chats' records
//! (with the conversations `/new` closed) and the generations compaction replaced — each
//! taken with its position in one transaction, so an index killed at any moment resumes
//! exactly after what it holds.
//!
//! A generation of a chat's records is what a transcript file is to `index` — a row of
//! `files` keyed `said:GENERATION:CHAT`, read on by byte offset (`offset`: how much of it
//! the index holds, from its start). The two streams are followed side by side, so a copy of
//! a generation may come before or after the records it copies; each piece says where in the
//! generation its bytes start, and only bytes past what is held are read:
//! - a copy's piece, at its offset;
//! - a session's piece, at the end of the generation's session pieces taken before it
//!   (`live`): they come in order, and none is missed but by a rollup that replaced the
//!   whole generation, whose copy then has it.
//!
//! So a member that read a generation live skips its copy, one that starts late reads the
//! copy, and one whose history stream ran ahead skips the records it copied.
//!
//! That a session's pieces come in order is checked, not trusted: each says what was stored
//! before it for its chat (the fence its writer wrote it under), and a piece after something
//! the index did not take is refused ([`IndexError::Missed`]) until what came between is read
//! from the chat's subject and taken ([`Taking::Filled`]) — or, when it is gone (replaced by a
//! rollup since), the piece is taken past the gap ([`Taking::PastGap`]) and the generation is
//! left to its copy, its further records skipped. (A follower at the stream's end on NATS
//! 2.9 was seen to be passed over messages stored as it read: 202 of 7,815 in a bench run,
//! every follower the same ones.) Which
//! generations a `/new` closed is kept per chat (`generations.archived`, the last one): a
//! copy taken after the `/new` that closed it is archived all the same, and one of the
//! conversation after it is not.

use std::path::Path;

use rusqlite::{Connection, OptionalExtension, params};
use switchboard_sessions::transcript::{Piece, PiecePart, Source, read_said_after};

use crate::db::{IndexError, Pass, sql_error};
use crate::rows::{Row, insert, signed, spoken};

/// How a piece is taken.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Taking {
    /// As it came in its stream: after the stream's position last taken, and after what its
    /// chat's records last taken (else refused as [`IndexError::Missed`]).
    Followed,
    /// Read again from its chat's subject to fill a gap: placed by its chat's records only
    /// (its position is before the stream's position), which it does not move.
    Filled,
    /// As it came, after a gap that cannot be filled: the rest of its generation is its
    /// copy's to give.
    PastGap,
}

/// `files.live` of a generation whose records were missed.
const LOST: i64 = -1;

/// The row of `feed` of a stream.
fn feed_row(source: Source) -> i64 {
    match source {
        Source::Sessions => 1,
        Source::History => 2,
    }
}

/// The positions last taken of `streams` (the sessions stream's and the history stream's
/// identities), when the index follows those two; `None` when it follows others or none.
pub(crate) fn follow(
    conn: &Connection,
    path: &Path,
    streams: [&str; 2],
) -> Result<Option<[u64; 2]>, IndexError> {
    let sql = sql_error(path);
    let mut positions = [0u64; 2];
    for (at, (source, stream)) in [Source::Sessions, Source::History]
        .into_iter()
        .zip(streams)
        .enumerate()
    {
        let known: Option<(String, i64)> = conn
            .query_row(
                "SELECT stream, position FROM feed WHERE id = ?1",
                [feed_row(source)],
                |row| Ok((row.get(0)?, row.get(1)?)),
            )
            .optional()
            .map_err(sql)?;
        match known {
            Some((known, position)) if known == stream => positions[at] = position.unsigned_abs(),
            _ => return Ok(None),
        }
    }
    Ok(Some(positions))
}

/// Starts following `streams` from their starts (in an index cleared for them).
pub(crate) fn begin(conn: &Connection, path: &Path, streams: [&str; 2]) -> Result<(), IndexError> {
    let sql = sql_error(path);
    for (source, stream) in [Source::Sessions, Source::History].into_iter().zip(streams) {
        conn.execute(
            "INSERT INTO feed (id, stream, position) VALUES (?1, ?2, 0)",
            params![feed_row(source), stream],
        )
        .map_err(sql)?;
    }
    Ok(())
}

/// What the index holds of one generation of a chat.
struct Held {
    id: i64,
    /// Bytes from its start.
    offset: u64,
    /// Copies of a window still to skip after `offset`.
    copies: usize,
    /// Bytes of it read in the chat's own records; `None` once one of them was missed.
    live: Option<u64>,
}

/// Takes `piece`: what it says that the index does not hold yet, and (unless
/// [`Taking::Filled`]) its position, in one transaction. A piece at or before the position
/// last taken of its stream, or of its chat's records, was taken already and changes
/// nothing.
pub(crate) fn take(
    conn: &mut Connection,
    path: &Path,
    piece: &Piece,
    taking: Taking,
) -> Result<Pass, IndexError> {
    let sql = sql_error(path);
    let mut pass = Pass::default();
    let tx = conn.transaction().map_err(sql)?;
    let row = feed_row(piece.source);
    let Some(taken): Option<i64> = tx
        .query_row("SELECT position FROM feed WHERE id = ?1", [row], |row| {
            row.get(0)
        })
        .optional()
        .map_err(sql)?
    else {
        // Cleared (`switchboard memory reindex`) since the streams were followed.
        return Err(IndexError::Unfollowed);
    };
    if taking != Taking::Filled && piece.position <= taken.unsigned_abs() {
        return Ok(pass);
    }
    let (generation, at, closes) = match piece.part {
        PiecePart::Session { starts } => {
            let last = last_taken(&tx, &piece.session).map_err(sql)?;
            if piece.position <= last {
                return Ok(pass);
            }
            if taking == Taking::Followed
                && !starts
                && piece.previous.is_some_and(|previous| previous != last)
            {
                return Err(IndexError::Missed {
                    session: piece.session.clone(),
                    after: last,
                });
            }
            (current(&tx, piece, starts).map_err(sql)?, None, false)
        }
        PiecePart::Kept {
            generation,
            offset,
            archived,
        } => (generation, Some(offset), archived),
    };
    if closes {
        close(&tx, &piece.session, generation).map_err(sql)?;
    }
    let archived = closes || generation <= closed(&tx, &piece.session).map_err(sql)?;
    let held = held(&tx, &piece.session, generation).map_err(sql)?;
    if archived {
        tx.execute("UPDATE files SET archived = 1 WHERE id = ?1", [held.id])
            .map_err(sql)?;
    }
    let len = piece.text.len() as u64;
    let lost = at.is_none() && (taking == Taking::PastGap || held.live.is_none());
    // Where in the generation the piece's bytes start (a session's past a gap: nowhere the
    // index can tell, so none of them).
    let start = at.or(held.live).unwrap_or(0);
    let (text, from, copies) = if lost || start + len <= held.offset {
        (&piece.text[..0], held.offset, held.copies)
    } else if start <= held.offset {
        let skip = usize::try_from(held.offset - start).unwrap_or(usize::MAX);
        (
            &piece.text[skip.min(piece.text.len())..],
            held.offset,
            held.copies,
        )
    } else {
        tracing::warn!(session = %piece.session, generation, held = held.offset, start,
            "the memory index missed part of a chat's records: read on from what came");
        (&piece.text[..], start, 0)
    };
    let reading = read_said_after(text, from, copies);
    for said in &reading.said {
        let Some((who, text)) = spoken(said) else {
            continue;
        };
        let row = Row {
            file: held.id,
            session: Some(&piece.session),
            at: said.at.or(Some(piece.millis)),
            who: &who,
            text,
            archived,
        };
        insert(&tx, &row).map_err(sql)?;
        pass.added += 1;
    }
    if !text.is_empty() {
        pass.files += 1;
        tx.execute(
            "UPDATE files SET offset = ?2, copies = ?3 WHERE id = ?1",
            params![
                held.id,
                signed(from + text.len() as u64),
                i64::try_from(reading.copies).unwrap_or(0)
            ],
        )
        .map_err(sql)?;
    }
    if at.is_none() {
        let live = if lost { LOST } else { signed(start + len) };
        tx.execute(
            "UPDATE files SET live = ?2 WHERE id = ?1",
            params![held.id, live],
        )
        .map_err(sql)?;
        tx.execute(
            "UPDATE generations SET last = ?2 WHERE session = ?1",
            params![piece.session, signed(piece.position)],
        )
        .map_err(sql)?;
    }
    if taking != Taking::Filled {
        tx.execute(
            "UPDATE feed SET position = ?2 WHERE id = ?1",
            params![row, signed(piece.position)],
        )
        .map_err(sql)?;
    }
    tx.commit().map_err(sql)?;
    Ok(pass)
}

/// The generation a session's piece is of (one that `starts` begins its own), noted as the
/// chat's current one.
fn current(
    tx: &rusqlite::Transaction<'_>,
    piece: &Piece,
    starts: bool,
) -> Result<u64, rusqlite::Error> {
    let current: Option<i64> = tx
        .query_row(
            "SELECT generation FROM generations WHERE session = ?1",
            [&piece.session],
            |row| row.get(0),
        )
        .optional()?;
    let generation = match current {
        Some(generation) if !starts && generation > 0 => generation.unsigned_abs(),
        _ => piece.position,
    };
    tx.execute(
        "INSERT INTO generations (session, generation) VALUES (?1, ?2) \
         ON CONFLICT(session) DO UPDATE SET generation = ?2",
        params![piece.session, signed(generation)],
    )?;
    Ok(generation)
}

/// Notes that a `/new` closed the conversation of `session` whose last generation is
/// `generation`: everything of it held so far is archived, and what comes of it later.
fn close(
    tx: &rusqlite::Transaction<'_>,
    session: &str,
    generation: u64,
) -> Result<(), rusqlite::Error> {
    let generation = signed(generation);
    tx.execute(
        "INSERT INTO generations (session, generation, archived) VALUES (?1, 0, ?2) \
         ON CONFLICT(session) DO UPDATE SET archived = max(archived, ?2)",
        params![session, generation],
    )?;
    let of = "SELECT id FROM files WHERE path = ?1 AND key LIKE 'said:%' \
              AND generation BETWEEN 1 AND ?2";
    tx.execute(
        &format!("UPDATE said SET archived = 1 WHERE archived = 0 AND file IN ({of})"),
        params![session, generation],
    )?;
    tx.execute(
        &format!("UPDATE files SET archived = 1 WHERE id IN ({of})"),
        params![session, generation],
    )?;
    Ok(())
}

/// The position of the records of `session` last taken (0: none).
fn last_taken(tx: &rusqlite::Transaction<'_>, session: &str) -> Result<u64, rusqlite::Error> {
    let last: Option<i64> = tx
        .query_row(
            "SELECT last FROM generations WHERE session = ?1",
            [session],
            |row| row.get(0),
        )
        .optional()?;
    Ok(last.unwrap_or(0).unsigned_abs())
}

/// The last generation of `session` a `/new` closed (0: none).
fn closed(tx: &rusqlite::Transaction<'_>, session: &str) -> Result<u64, rusqlite::Error> {
    let closed: Option<i64> = tx
        .query_row(
            "SELECT archived FROM generations WHERE session = ?1",
            [session],
            |row| row.get(0),
        )
        .optional()?;
    Ok(closed.unwrap_or(0).unsigned_abs())
}

/// What the index holds of `generation` of `session` (nothing yet: a new row).
fn held(
    tx: &rusqlite::Transaction<'_>,
    session: &str,
    generation: u64,
) -> Result<Held, rusqlite::Error> {
    let key = format!("said:{generation}:{session}");
    let known: Option<(i64, i64, i64, i64)> = tx
        .query_row(
            "SELECT id, offset, copies, live FROM files WHERE key = ?1",
            [&key],
            |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?, row.get(3)?)),
        )
        .optional()?;
    if let Some((id, offset, copies, live)) = known {
        return Ok(Held {
            id,
            offset: offset.unsigned_abs(),
            copies: usize::try_from(copies).unwrap_or(0),
            live: (live != LOST).then_some(live.unsigned_abs()),
        });
    }
    tx.execute(
        "INSERT INTO files (key, path, head, offset, generation) VALUES (?1, ?2, x'', 0, ?3)",
        params![key, session, signed(generation)],
    )?;
    Ok(Held {
        id: tx.last_insert_rowid(),
        offset: 0,
        copies: 0,
        live: Some(0),
    })
}

#[cfg(test)]
#[path = "pieces_tests.rs"]
mod tests;
