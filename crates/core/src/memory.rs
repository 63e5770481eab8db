//! What an agent's memory is asked and answers: a search over everything it was told and
//! wrote down (its transcripts and its memory files). The index that answers lives in
//! `switchboard-memory`; the `memory_search` tool, recall before a turn and `/memory` ask it
//! through [`Memory`].

use crate::{AgentName, SessionKey};

/// Where a search looks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MemoryScope {
    /// One chat: its conversation now and those `/new` closed.
    Chat(SessionKey),
    /// Every chat of the agent.
    Chats,
    /// Every chat of the agent and its memory files (`MEMORY.md`, `memory/*.md`).
    All,
}

/// A search of an agent's memory.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemoryQuery {
    /// What to find: words (all must match), `"quoted phrases"`, `OR`, `NOT`, `prefix*`.
    pub text: String,
    /// Where to look.
    pub scope: MemoryScope,
    /// Only what was said at or after this time (Unix milliseconds).
    pub since: Option<i64>,
    /// Only what was said before this time (Unix milliseconds).
    pub until: Option<i64>,
    /// At most this many hits, best first.
    pub limit: usize,
}

impl MemoryQuery {
    /// The most hits a search returns, whatever it asks for.
    pub const MAX_LIMIT: usize = 50;

    /// A search for `text` in `scope`, any time, the default number of hits.
    pub fn new(text: impl Into<String>, scope: MemoryScope) -> Self {
        Self {
            text: text.into(),
            scope,
            since: None,
            until: None,
            limit: 10,
        }
    }
}

/// Something a search found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemoryHit {
    /// Where: the chat's session (`telegram_42`), or the memory file (`MEMORY.md`).
    pub place: String,
    /// Whether `place` is a memory file rather than a chat.
    pub file: bool,
    /// When it was said (Unix milliseconds); `None` when not known (a transcript written
    /// before messages carried their time) and for memory files.
    pub at: Option<i64>,
    /// Who said it: `user`, `assistant`, `job NAME`, `heartbeat`, … (`file` for a file).
    pub who: String,
    /// Its text around the match, the matching words marked `**so**`.
    pub snippet: String,
    /// Its whole text (cut at [`MemoryHit::MAX_TEXT`]), to tell it from what a window holds.
    pub text: String,
    /// Whether its conversation was closed by `/new`.
    pub archived: bool,
}

impl MemoryHit {
    /// The most of a message's text a hit carries.
    pub const MAX_TEXT: usize = 4096;

    /// The hit as one line: `[2026-12-01 18:04 UTC, telegram_42, user] …snippet…`.
    pub fn line(&self) -> String {
        let mut head = Vec::with_capacity(4);
        if let Some(at) = self.at {
            head.push(utc_minute(at));
        }
        head.push(self.place.clone());
        if !self.file {
            head.push(self.who.clone());
        }
        if self.archived {
            head.push("archived".to_owned());
        }
        format!("[{}] {}", head.join(", "), self.snippet.replace('\n', " "))
    }
}

/// Hits as the lines a model or a person reads, or a sentence saying none matched.
pub fn memory_lines(query: &str, hits: &[MemoryHit]) -> String {
    if hits.is_empty() {
        return format!("Nothing in memory matches {query:?}.");
    }
    hits.iter()
        .map(MemoryHit::line)
        .collect::<Vec<_>>()
        .join("\n")
}

/// Why a search failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum MemoryError {
    /// The query is not one the index reads (said so in words a person can act on).
    #[error("{0}")]
    Query(String),
    /// The index could not answer.
    #[error("the memory index failed: {0}")]
    Index(String),
}

/// An agent's memory, as the agent loop and its tools ask it.
#[async_trait::async_trait]
pub trait Memory: Send + Sync + std::fmt::Debug + 'static {
    /// What `agent` may find of `query`: only its own chats and files, never another
    /// agent's.
    async fn search(
        &self,
        agent: &AgentName,
        query: MemoryQuery,
    ) -> Result<Vec<MemoryHit>, MemoryError>;
}

/// `millis` as `YYYY-MM-DD HH:MM UTC`.
pub fn utc_minute(millis: i64) -> String {
    let secs = millis.div_euclid(1000);
    let (days, rest) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02} UTC",
        rest / 3600,
        rest % 3600 / 60
    )
}

/// A time a person or model writes — `2026-11-30`, `2026-11-30 18:04`, `2026-11-30T18:04:05Z`
/// — read as UTC, in Unix milliseconds; `None` when it is none of these.
pub fn parse_utc(text: &str) -> Option<i64> {
    let text = text.trim().trim_end_matches('Z').trim_end_matches(" UTC");
    let (date, time) = match text.split_once(['T', ' ']) {
        Some((date, time)) => (date, Some(time)),
        None => (text, None),
    };
    let mut parts = date.splitn(3, '-');
    let y: i64 = parts.next()?.parse().ok()?;
    let m: u32 = parts.next()?.parse().ok()?;
    let d: u32 = parts.next()?.parse().ok()?;
    if !(1..=12).contains(&m) || !(1..=31).contains(&d) || !(1970..=9999).contains(&y) {
        return None;
    }
    let mut secs = days_from_civil(y, m, d) * 86_400;
    if let Some(time) = time {
        let mut parts = time.splitn(3, ':');
        let h: i64 = parts.next()?.parse().ok()?;
        let min: i64 = parts.next()?.parse().ok()?;
        let s: i64 = match parts.next() {
            Some(s) => s.split('.').next()?.parse().ok()?,
            None => 0,
        };
        if h > 23 || min > 59 || s > 60 {
            return None;
        }
        secs += h * 3600 + min * 60 + s;
    }
    // A day that does not exist (February 30th) reads as another: refused.
    (civil_from_days(secs.div_euclid(86_400)) == (y, m, d)).then_some(secs * 1000)
}

/// Days since 1970-01-01 of a date (Howard Hinnant's `days_from_civil`).
fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let m = i64::from(m);
    let mp = if m > 2 { m - 3 } else { m + 9 };
    let doy = (153 * mp + 2) / 5 + i64::from(d) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// The date of a day count since 1970-01-01 (Howard Hinnant's `civil_from_days`).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m as u32, d as u32)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_read_as_utc_minutes() {
        assert_eq!(utc_minute(0), "1970-01-01 00:00 UTC");
        // 2026-12-01T18:04:30Z
        assert_eq!(utc_minute(1_796_148_270_000), "2026-12-01 18:04 UTC");
        assert_eq!(utc_minute(951_782_400_000), "2000-02-29 00:00 UTC");
    }

    #[test]
    fn written_times_are_read_as_utc() {
        assert_eq!(parse_utc("2026-12-01"), Some(1_796_083_200_000));
        assert_eq!(parse_utc("2026-12-01 18:04:30"), Some(1_796_148_270_000));
        assert_eq!(parse_utc("2026-12-01T18:04:30Z"), Some(1_796_148_270_000));
        assert_eq!(parse_utc("2026-12-01T18:04"), Some(1_796_148_240_000));
        assert_eq!(parse_utc("2000-02-29"), Some(951_782_400_000));
        for bad in [
            "2026-02-30",
            "yesterday",
            "2026-13-01",
            "2026-12-01T25:00",
            "",
        ] {
            assert_eq!(parse_utc(bad), None, "{bad}");
        }
    }

    #[test]
    fn a_hit_is_one_line_with_its_date_place_and_speaker() {
        let hit = MemoryHit {
            place: "telegram_42".into(),
            file: false,
            at: Some(1_796_148_270_000),
            who: "user".into(),
            snippet: "my **locker** code\nis 4711".into(),
            text: String::new(),
            archived: true,
        };
        assert_eq!(
            hit.line(),
            "[2026-12-01 18:04 UTC, telegram_42, user, archived] my **locker** code is 4711"
        );
        assert_eq!(memory_lines("x", &[]), "Nothing in memory matches \"x\".");
    }
}
