//! How a job reads in a list — for a person (`/jobs`, `switchboard cron`, the panel) and for
//! the model (the `cron` tool): its schedule, when it runs next and how soon, how it last
//! ended, times in a zone the person reads.

use jiff::tz::TimeZone;

use super::due::local;
use super::job::{Job, SessionMode};

/// How a job reads in a list, its times in `zone`: `job j3 "tea": every 1h; next Fri 27
/// Nov 14:30 CET (in 25m); last: answered`.
pub fn describe(job: &Job, now: jiff::Timestamp, zone: &TimeZone) -> String {
    let Reading {
        schedule,
        next,
        last,
    } = reading(job, now, zone);
    let last = if last.is_empty() {
        last
    } else {
        format!("; last: {last}")
    };
    format!("job {} \"{}\": {schedule}; {next}{last}", job.id, job.name)
}

/// A job's schedule, next run and last outcome, each as a person reads it: the columns of
/// the panel's table, the parts of [`describe`]'s line.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Reading {
    /// `every 1h`, `at 08:00 on weekdays`, with `, in its own session` when it is.
    pub schedule: String,
    /// `next Fri 27 Nov 14:30 CET (in 25m)`, `paused` or `done`.
    pub next: String,
    /// How the last run ended (and when it is tried again), or empty before the first.
    pub last: String,
}

/// [`Reading`] of `job`, its times in `zone`.
pub fn reading(job: &Job, now: jiff::Timestamp, zone: &TimeZone) -> Reading {
    let next = match (&job.next_due, job.enabled) {
        (_, false) => "paused".to_owned(),
        (Some(next), true) => {
            let wait = next.duration_since(now);
            let shown = local(*next, zone, Some(now));
            if wait.is_positive() {
                let wait = wait.round(jiff::Unit::Second).unwrap_or(wait);
                format!("next {shown} (in {wait:#})")
            } else {
                format!("next {shown} (due now)")
            }
        }
        (None, true) => "done".to_owned(),
    };
    let mut last = job
        .last
        .as_ref()
        .map(|run| run.outcome.describe())
        .unwrap_or_default();
    if let Some(retry) = &job.retry {
        let at = local(retry.at, zone, Some(now));
        last.push_str(&format!(" (trying again at {at}, try {})", retry.attempt));
    }
    let alone = match job.session {
        SessionMode::Chat => "",
        SessionMode::Isolated => ", in its own session",
    };
    Reading {
        schedule: format!("{}{alone}", job.schedule.describe(zone)),
        next,
        last,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::due::{Schedule, zone};

    #[test]
    fn a_job_reads_in_the_persons_zone_with_how_soon() {
        let zone = zone("Europe/Berlin").expect("zone");
        let now: jiff::Timestamp = "2026-11-27T13:05:00Z".parse().expect("now");
        let job = Job {
            next_due: Some("2026-11-27T13:30:00Z".parse().expect("next")),
            ..crate::test_setup::job("j3")
        };
        assert_eq!(
            describe(&job, now, &zone),
            "job j3 \"job j3\": every 1m; next Fri 27 Nov 14:30 CET (in 25m)"
        );
        let once = Job {
            schedule: Schedule::At {
                at: "2027-01-02T08:00:30Z".parse().expect("at"),
            },
            next_due: Some("2027-01-02T08:00:30Z".parse().expect("next")),
            ..crate::test_setup::job("j4")
        };
        let text = describe(&once, now, &zone);
        assert!(
            text.contains("once at Sat 2 Jan 09:00:30 CET")
                && text.contains("next Sat 2 Jan 2027 09:00:30 CET"),
            "{text}"
        );
    }
}
