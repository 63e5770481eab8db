//! When a job is due: its [`Schedule`] — once, at an instant; every so long; or a cron
//! expression in a time zone — and the next due time after a given instant.
//!
//! Due times are instants (UTC timestamps), computed from the schedule each time a run is
//! recorded, never by adding to the last one: a run late by an hour does not shift the
//! next, and a clock that jumps neither doubles a run (the next due time is after the last
//! one recorded) nor drops one (a due time the clock jumped over is due at once, and the
//! catch-up rule decides). Cron expressions are `croner`'s (five fields, or six with
//! seconds) read in a named IANA zone through `jiff`, with the usual daylight-saving rules:
//! a time that falls into a spring-forward gap runs once, at the first instant after the gap;
//! a time that occurs twice at a fall-back runs once, at the first (intervals and wildcards
//! run on both).

use std::str::FromStr;
use std::time::Duration;

use croner::Cron;
use croner::parser::{CronParser, Seconds};
use jiff::tz::TimeZone;
use jiff::{SignedDuration, Timestamp};
use serde::{Deserialize, Serialize};

/// When a job runs.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Schedule {
    /// Once.
    At {
        /// The instant.
        at: Timestamp,
    },
    /// Every `every_secs` seconds, counted from `from`.
    Every {
        /// The interval, in seconds (at least 1).
        every_secs: u64,
        /// Where the count starts (the job's creation).
        from: Timestamp,
    },
    /// A cron expression in a time zone.
    Cron {
        /// The expression (`0 9 * * 1-5`; a sixth, leading field is seconds).
        expr: String,
        /// The IANA zone it is read in (`Europe/Berlin`, `UTC`).
        tz: String,
    },
}

/// A schedule as someone asked for it, not read yet: exactly one of once `in` so long, once
/// `at` a time, `every` so long, or a `cron` expression — as the `cron` tool, the
/// `switchboard cron add` command and `[[scheduler.jobs]]` all take it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum When<'a> {
    /// Once, this long from now: `10m`.
    In(&'a str),
    /// Once, at this time: an RFC 3339 instant, or a local date and time.
    At(&'a str),
    /// Repeatedly, this often: `30m`.
    Every(&'a str),
    /// A cron expression: `0 9 * * 1-5`.
    Cron(&'a str),
}

impl<'a> When<'a> {
    /// The one of `in`, `at`, `every`, `cron` that is given; an error naming them when none
    /// or several are.
    pub fn one_of(
        after: Option<&'a str>,
        at: Option<&'a str>,
        every: Option<&'a str>,
        cron: Option<&'a str>,
    ) -> Result<Self, String> {
        match (after, at, every, cron) {
            (Some(after), None, None, None) => Ok(Self::In(after)),
            (None, Some(at), None, None) => Ok(Self::At(at)),
            (None, None, Some(every), None) => Ok(Self::Every(every)),
            (None, None, None, Some(cron)) => Ok(Self::Cron(cron)),
            _ => Err("give exactly one of `in`, `at`, `every`, `cron`".into()),
        }
    }

    /// The schedule it asks for, read at `now` (`in`, `every`) and in zone `tz` (`at` without
    /// an offset, `cron`).
    pub fn schedule(self, tz: &str, now: Timestamp) -> Result<Schedule, String> {
        match self {
            Self::In(after) => Schedule::after(after, now),
            Self::At(at) => Schedule::at(at, tz),
            Self::Every(every) => Schedule::every(every, now),
            Self::Cron(expr) => Schedule::cron(expr, tz),
        }
    }
}

impl Schedule {
    /// Once, at `text`: an RFC 3339 instant (`2026-12-24T18:00:00+01:00`), or a date and
    /// time on the clock of zone `tz` (`2026-12-24 18:00`).
    pub fn at(text: &str, tz: &str) -> Result<Self, String> {
        let text = text.trim();
        if let Ok(at) = Timestamp::from_str(text) {
            return Ok(Self::At { at });
        }
        let civil = jiff::civil::DateTime::from_str(text).map_err(|_| {
            format!(
                "`{text}` is not a time: write an instant such as 2026-12-24T18:00:00+01:00, or \
                 a date and time such as 2026-12-24 18:00 (read in {tz})"
            )
        })?;
        let zone = zone(tz)?;
        let at = civil
            .to_zoned(zone)
            .map_err(|err| format!("`{text}` in {tz}: {err}"))?
            .timestamp();
        Ok(Self::At { at })
    }

    /// Once, `text` from `now` (`2s`, `10m`, `1h 30m`, `2 days`).
    pub fn after(text: &str, now: Timestamp) -> Result<Self, String> {
        let wait = duration(text)?;
        let at = now
            .checked_add(wait)
            .map_err(|_| format!("`{text}` from now is past the end of time"))?;
        Ok(Self::At { at })
    }

    /// Every `text` (`30s`, `15m`, `1h`), counted from `now`.
    pub fn every(text: &str, now: Timestamp) -> Result<Self, String> {
        let every = duration(text)?;
        let every_secs = u64::try_from(every.as_secs())
            .ok()
            .filter(|secs| *secs >= 1)
            .ok_or_else(|| format!("`{text}` is not an interval of at least one second"))?;
        Ok(Self::Every {
            every_secs,
            from: now,
        })
    }

    /// The cron expression `expr`, read in zone `tz`; checked that it parses and runs.
    pub fn cron(expr: &str, tz: &str) -> Result<Self, String> {
        let schedule = Self::Cron {
            expr: expr.trim().to_owned(),
            tz: tz.to_owned(),
        };
        let now = Timestamp::now();
        schedule
            .next_after(now)?
            .ok_or_else(|| format!("`{expr}` never runs"))?;
        Ok(schedule)
    }

    /// The first due time strictly after `after`; `None` when there is none (a one-shot
    /// whose time has come).
    pub fn next_after(&self, after: Timestamp) -> Result<Option<Timestamp>, String> {
        match self {
            Self::At { at } => Ok((*at > after).then_some(*at)),
            Self::Every { every_secs, from } => {
                let every = i64::try_from(*every_secs).unwrap_or(i64::MAX).max(1);
                if after < *from {
                    return Ok(Some(*from));
                }
                let since = after.duration_since(*from).as_secs();
                let steps = since / every + 1;
                let next = from
                    .checked_add(SignedDuration::from_secs(steps.saturating_mul(every)))
                    .ok();
                Ok(next)
            }
            Self::Cron { expr, tz } => {
                let cron = parse_cron(expr)?;
                let zoned = after.to_zoned(zone(tz)?);
                match cron.find_next_occurrence(&zoned, false) {
                    Ok(next) => Ok(Some(next.timestamp())),
                    Err(croner::errors::CronError::TimeSearchLimitExceeded) => Ok(None),
                    Err(err) => Err(format!("`{expr}`: {err}")),
                }
            }
        }
    }

    /// The shortest time between two runs, as far as it is known: an interval's, or, for a
    /// cron expression, the smallest gap among its next few runs. `None` for a one-shot.
    pub fn shortest_gap(&self, now: Timestamp) -> Option<Duration> {
        match self {
            Self::At { .. } => None,
            Self::Every { every_secs, .. } => Some(Duration::from_secs(*every_secs)),
            Self::Cron { .. } => {
                let mut last = self.next_after(now).ok().flatten()?;
                let mut shortest = None::<Duration>;
                for _ in 0..8 {
                    let Some(next) = self.next_after(last).ok().flatten() else {
                        break;
                    };
                    let gap = Duration::try_from(next.duration_since(last)).ok()?;
                    shortest = Some(shortest.map_or(gap, |s| s.min(gap)));
                    last = next;
                }
                shortest
            }
        }
    }

    /// How people read it, times in `zone`: `once at Fri 27 Nov 14:30 CET`, `every 30m`,
    /// `cron 0 9 * * * (Europe/Berlin)`.
    pub fn describe(&self, zone: &TimeZone) -> String {
        match self {
            Self::At { at } => format!("once at {}", local(*at, zone, None)),
            Self::Every { every_secs, .. } => {
                format!("every {:#}", SignedDuration::from_secs(*every_secs as i64))
            }
            Self::Cron { expr, tz } => format!("cron {expr} ({tz})"),
        }
    }
}

/// An instant as a person reads it in `zone`: `Fri 27 Nov 14:30 CET` (seconds when it has
/// them; the year when it is not `now`'s).
pub fn local(at: Timestamp, zone: &TimeZone, now: Option<Timestamp>) -> String {
    let at = at
        .round(jiff::Unit::Second)
        .unwrap_or(at)
        .to_zoned(zone.clone());
    let time = if at.second() == 0 {
        "%H:%M"
    } else {
        "%H:%M:%S"
    };
    let this_year = now.is_none_or(|now| now.to_zoned(zone.clone()).year() == at.year());
    let date = if this_year {
        "%a %-d %b"
    } else {
        "%a %-d %b %Y"
    };
    at.strftime(&format!("{date} {time} %Z")).to_string()
}

/// A duration as people write it: `2s`, `10m`, `1h 30m`, `2 days`, or ISO 8601's `PT2M`.
pub fn duration(text: &str) -> Result<SignedDuration, String> {
    let text = text.trim();
    let parsed = SignedDuration::from_str(text)
        .or_else(|_| {
            jiff::Span::from_str(text)
                .and_then(|span| span.to_duration(jiff::SpanRelativeTo::days_are_24_hours()))
        })
        .map_err(|_| {
            format!("`{text}` is not a duration: write e.g. 30s, 10m, 1h 30m or 2 days")
        })?;
    if parsed.is_negative() {
        return Err(format!("`{text}` is in the past"));
    }
    Ok(parsed)
}

/// A time zone by its IANA name; `UTC` always works.
pub fn zone(name: &str) -> Result<TimeZone, String> {
    if name.eq_ignore_ascii_case("UTC") {
        return Ok(TimeZone::UTC);
    }
    TimeZone::get(name).map_err(|err| {
        format!("`{name}` is not a time zone this system knows (an IANA name such as Europe/Berlin): {err}")
    })
}

/// The zone jobs use when none is named: `configured`, else the system's, else UTC.
pub fn default_zone(configured: Option<&str>) -> String {
    if let Some(name) = configured {
        return name.to_owned();
    }
    TimeZone::try_system()
        .ok()
        .and_then(|zone| zone.iana_name().map(str::to_owned))
        .unwrap_or_else(|| "UTC".to_owned())
}

/// A cron expression: five fields, or six with a leading seconds field.
fn parse_cron(expr: &str) -> Result<Cron, String> {
    CronParser::builder()
        .seconds(Seconds::Optional)
        .build()
        .parse(expr.trim())
        .map_err(|err| format!("`{expr}` is not a cron expression: {err}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ts(text: &str) -> Timestamp {
        Timestamp::from_str(text).expect("a timestamp")
    }

    #[test]
    fn one_shots_and_intervals_fall_where_they_should() {
        let now = ts("2026-11-25T10:00:00Z");
        let once = Schedule::after("2s", now).expect("in 2 s");
        assert_eq!(once.next_after(now), Ok(Some(ts("2026-11-25T10:00:02Z"))));
        assert_eq!(once.next_after(ts("2026-11-25T10:00:02Z")), Ok(None));
        assert_eq!(
            Schedule::after("1h 30m", now).expect("ok"),
            Schedule::At {
                at: ts("2026-11-25T11:30:00Z")
            }
        );

        let every = Schedule::every("15m", now).expect("every");
        assert_eq!(every.next_after(now), Ok(Some(ts("2026-11-25T10:15:00Z"))));
        // Late by ten minutes: the next one is still on the grid, not 15 minutes after.
        assert_eq!(
            every.next_after(ts("2026-11-25T10:25:00Z")),
            Ok(Some(ts("2026-11-25T10:30:00Z")))
        );
        assert_eq!(every.shortest_gap(now), Some(Duration::from_secs(900)));

        for bad in ["soon", "-5m", ""] {
            assert!(Schedule::after(bad, now).is_err(), "{bad}");
        }
        assert!(Schedule::every("0s", now).is_err());
        assert_eq!(
            Schedule::at("2026-12-24 18:00", "Europe/Berlin").expect("civil"),
            Schedule::At {
                at: ts("2026-12-24T17:00:00Z")
            }
        );
        assert!(Schedule::at("tomorrow-ish", "UTC").is_err());
        assert!(Schedule::cron("0 9 * * *", "Mars/Olympus").is_err());
        assert!(Schedule::cron("every morning", "UTC").is_err());
    }

    #[test]
    fn a_cron_in_a_named_zone_runs_once_per_local_time_across_daylight_saving() {
        // Europe/Berlin springs forward on 2026-03-29 (02:00 → 03:00) and falls back on
        // 2026-10-25 (03:00 → 02:00).
        let daily = Schedule::Cron {
            expr: "30 2 * * *".into(),
            tz: "Europe/Berlin".into(),
        };
        let runs = |from: &str, count: usize| {
            let mut at = ts(from);
            let mut out = Vec::new();
            for _ in 0..count {
                at = daily.next_after(at).expect("computes").expect("runs");
                out.push(at.to_string());
            }
            out
        };
        // 02:30 does not exist on the 29th: one run, at the first instant after the gap.
        assert_eq!(
            runs("2026-03-27T12:00:00Z", 3),
            [
                "2026-03-28T01:30:00Z", // 02:30 CET
                "2026-03-29T01:00:00Z", // 03:00 CEST, the gap's end
                "2026-03-30T00:30:00Z", // 02:30 CEST
            ]
        );
        // 02:30 happens twice on the 25th: one run, the first.
        assert_eq!(
            runs("2026-10-23T12:00:00Z", 3),
            [
                "2026-10-24T00:30:00Z", // 02:30 CEST
                "2026-10-25T00:30:00Z", // 02:30 CEST, the first of the two
                "2026-10-26T01:30:00Z", // 02:30 CET
            ]
        );
        let hourly = Schedule::cron("0 * * * *", "UTC").expect("hourly");
        assert_eq!(
            hourly.shortest_gap(ts("2026-01-01T00:00:00Z")),
            Some(Duration::from_secs(3600))
        );
        let seconds = Schedule::cron("*/10 * * * * *", "UTC").expect("six fields");
        assert_eq!(
            seconds.shortest_gap(ts("2026-01-01T00:00:00Z")),
            Some(Duration::from_secs(10))
        );
    }
}
