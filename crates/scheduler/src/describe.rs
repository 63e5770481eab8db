//! How a job reads in a list — for a person (`/jobs`, `switchboard cron`, the panel) and for
//! the model (the `cron` tool): its schedule, when it runs next and how soon, how it last
//! ended, times in a zone the person reads.

use jiff::tz::TimeZone;

use super::due::local;
use super::job::{Job, SessionMode};

/// How a job reads in a list, its times in `zone`: `job j3 "tea": every 1h; next Fri 27
/// Nov 14:30 CET (in 25m); last: answered`.
pub fn describe(job: &Job, now: jiff::Timestamp, zone: &TimeZone) -> String {
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
        .map(|run| format!("; last: {}", run.outcome.describe()))
        .unwrap_or_default();
    if let Some(retry) = &job.retry {
        let at = local(retry.at, zone, Some(now));
        last.push_str(&format!(" (trying again at {at}, try {})", retry.attempt));
    }
    let alone = match job.session {
        SessionMode::Chat => "",
        SessionMode::Isolated => ", in its own session",
    };
    format!(
        "job {} \"{}\": {}{alone}; {next}{last}",
        job.id,
        job.name,
        job.schedule.describe(zone)
    )
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
