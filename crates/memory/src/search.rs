//! Searching one agent's index: the best hits of a query, with snippets.

use std::path::{Path, PathBuf};

use rusqlite::{Connection, OpenFlags};
use switchboard_core::{MemoryError, MemoryHit, MemoryQuery, MemoryScope};

use crate::db::{BUSY, Counts, IndexError, counts, sql_error};

/// The most matches a search ranks by relevance; past it, the most recent come first.
pub(crate) const RANKED: usize = 5_000;

/// A database of one agent's index, open for reading: searches.
pub struct Reader {
    conn: Connection,
    path: PathBuf,
}

impl std::fmt::Debug for Reader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reader").field("path", &self.path).finish()
    }
}

impl Reader {
    /// Opens the database at `path` to read (it must exist: the writer makes it).
    pub fn open(path: &Path) -> Result<Self, IndexError> {
        let sql = sql_error(path);
        let conn = Connection::open_with_flags(
            path,
            OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )
        .map_err(sql)?;
        conn.busy_timeout(BUSY).map_err(sql)?;
        Ok(Self {
            conn,
            path: path.to_owned(),
        })
    }

    /// What the index holds.
    pub fn counts(&self) -> Result<Counts, IndexError> {
        counts(&self.conn, &self.path)
    }

    /// The best hits of `query`, best first.
    pub fn search(&self, query: &MemoryQuery) -> Result<Vec<MemoryHit>, MemoryError> {
        let text = query.text.trim();
        if text.is_empty() {
            return Err(MemoryError::Query(
                "say what to search for: words, \"a phrase\", word OR word, prefix*".into(),
            ));
        }
        match self.run(query, text) {
            Ok(hits) => Ok(hits),
            // Punctuation FTS5 reads as syntax (`what's`, `e-mail`, `C++`): the words as
            // phrases instead, each of which must match.
            Err(err) if is_syntax(&err) => {
                let quoted = quote_words(text);
                if quoted.is_empty() {
                    return Err(MemoryError::Query(format!(
                        "{text:?} holds no word to search for"
                    )));
                }
                self.run(query, &quoted).map_err(|err| {
                    MemoryError::Query(format!("{text:?} cannot be searched: {err}"))
                })
            }
            Err(err) => Err(MemoryError::Index(format!(
                "{}: {err}",
                self.path.display()
            ))),
        }
    }

    /// Ranked by relevance (bm25) when at most [`RANKED`] rows match; a query more common
    /// than that (ranking costs about 2 µs a match, and a word of every other message matches
    /// hundreds of thousands) answers with its most recent matches instead, which FTS5 reads
    /// off the end of its lists at once.
    fn run(&self, query: &MemoryQuery, fts: &str) -> Result<Vec<MemoryHit>, rusqlite::Error> {
        let mut filters = String::new();
        let session = match &query.scope {
            MemoryScope::Chat(key) => {
                filters.push_str(" AND rowid > 0 AND session = ?3");
                Some(key.as_str())
            }
            MemoryScope::Chats => {
                filters.push_str(" AND rowid > 0");
                None
            }
            MemoryScope::All => None,
        };
        if query.since.is_some() {
            filters.push_str(" AND at >= ?4");
        }
        if query.until.is_some() {
            filters.push_str(" AND at < ?5");
        }
        let limit = query.limit.clamp(1, MemoryQuery::MAX_LIMIT);
        let mut bound = vec![
            (1, rusqlite::types::Value::from(fts.to_owned())),
            (2, rusqlite::types::Value::from(limit as i64)),
            (6, rusqlite::types::Value::from(MemoryHit::MAX_TEXT as i64)),
        ];
        if let Some(session) = session {
            bound.push((3, rusqlite::types::Value::from(session.to_owned())));
        }
        if let Some(since) = query.since {
            bound.push((4, rusqlite::types::Value::from(since)));
        }
        if let Some(until) = query.until {
            bound.push((5, rusqlite::types::Value::from(until)));
        }
        let bind = |select: &mut rusqlite::CachedStatement<'_>| -> Result<(), rusqlite::Error> {
            for (index, value) in &bound {
                if select.parameter_name(*index).is_some() {
                    select.raw_bind_parameter(*index, value)?;
                }
            }
            Ok(())
        };
        let mut count = self.conn.prepare_cached(&format!(
            "SELECT count(*) FROM (SELECT rowid FROM said_fts \
             WHERE said_fts MATCH ?1{filters} LIMIT {})",
            RANKED + 1
        ))?;
        bind(&mut count)?;
        let matches: i64 = match count.raw_query().next()? {
            Some(row) => row.get(0)?,
            None => 0,
        };
        if matches == 0 {
            return Ok(Vec::new());
        }
        let order = if matches > RANKED as i64 {
            "rowid DESC"
        } else {
            "rank"
        };
        let mut select = self.conn.prepare_cached(&format!(
            "SELECT rowid, session, at, who, snippet(said_fts, 0, '**', '**', '…', 24), \
                    substr(text, 1, ?6), \
                    coalesce((SELECT archived FROM said WHERE said.id = said_fts.rowid), 0) \
             FROM said_fts WHERE said_fts MATCH ?1{filters} ORDER BY {order} LIMIT ?2"
        ))?;
        bind(&mut select)?;
        let mut rows = select.raw_query();
        let mut hits = Vec::new();
        while let Some(row) = rows.next()? {
            let session: Option<String> = row.get(1)?;
            let who: String = row.get(3)?;
            hits.push(MemoryHit {
                file: session.is_none(),
                place: session.unwrap_or_else(|| who.clone()),
                at: row.get(2)?,
                who,
                snippet: row.get(4)?,
                text: row.get(5)?,
                archived: row.get(6)?,
            });
        }
        Ok(hits)
    }
}

/// Whether SQLite refused a query as FTS5 syntax it does not read.
fn is_syntax(err: &rusqlite::Error) -> bool {
    let text = err.to_string();
    text.contains("fts5: syntax error")
        || text.contains("no such column")
        || text.contains("unterminated string")
        || text.contains("unknown special query")
}

/// Every word of `text` as a quoted phrase (FTS5 reads them as "all of these").
fn quote_words(text: &str) -> String {
    text.split(|c: char| !c.is_alphanumeric())
        .filter(|word| !word.is_empty())
        .map(|word| format!("\"{word}\""))
        .collect::<Vec<_>>()
        .join(" ")
}
