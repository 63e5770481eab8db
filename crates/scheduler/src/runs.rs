//! A job's runs as the job store keeps them, and the two rules that make each due time
//! happen once: a due time is **claimed** before its run is handed over — added only when no
//! run of it is on record (or its last try ended, for the next try) — and a run is
//! **settled** once — its outcome set only while it is still pending, wherever its turn
//! ended. Pure functions over the list, applied inside the store's one atomic step (a
//! document's lock in one process, a compare-and-set on a cluster).
//!
//! A claim whose scheduler lost the duty before its run ended is **adopted** by the one that
//! holds the duty now (`runs::adopt`: its epoch replaced, while it is pending), which hands
//! its run over again: once per holding, however often it comes across the claim.
//!
//! The list is newest due time first and keeps [`RUNS_KEPT`] runs, but never drops one still
//! pending: a pending run is a claim somebody must settle or take over.

use super::job::{Outcome, Run};

/// Runs kept per job (besides those still pending).
pub const RUNS_KEPT: usize = 20;

/// Records `run`: in place of the record of its due time, or in due-time order.
pub(crate) fn record(runs: &mut Vec<Run>, run: Run) {
    match runs.iter_mut().find(|kept| kept.due == run.due) {
        Some(kept) => *kept = run,
        None => {
            let at = runs
                .iter()
                .position(|kept| kept.due < run.due)
                .unwrap_or(runs.len());
            runs.insert(at, run);
        }
    }
    trim(runs);
}

/// Claims `run`'s due time (its try): recorded when no run of it is on record, or the one
/// on record is an earlier try that ended (`None`). Otherwise the run on record is returned
/// and nothing changes: another scheduler claimed it (or this one, before a restart).
pub(crate) fn claim(runs: &mut Vec<Run>, run: &Run) -> Option<Run> {
    if let Some(kept) = runs.iter().find(|kept| kept.due == run.due) {
        let earlier_ended = kept.attempt < run.attempt && kept.outcome != Outcome::Pending;
        if !earlier_ended {
            return Some(kept.clone());
        }
    }
    record(runs, run.clone());
    None
}

/// Settles the try `attempt` of the run due at `due` (to the millisecond: what a run's
/// message id keeps of it) with `outcome`, when it is on record and still pending; the run
/// as settled, or `None` (it was settled already, elsewhere, or is not this try).
pub(crate) fn settle(
    runs: &mut [Run],
    due: jiff::Timestamp,
    attempt: u32,
    outcome: &Outcome,
    finished: jiff::Timestamp,
) -> Option<Run> {
    let run = runs.iter_mut().find(|kept| {
        kept.due.as_millisecond() == due.as_millisecond() && kept.attempt == attempt
    })?;
    if run.outcome != Outcome::Pending {
        return None;
    }
    run.outcome = outcome.clone();
    run.finished = Some(finished);
    Some(run.clone())
}

/// Adopts the try `attempt` of the run due at `due` for the holding `epoch`, when it is on
/// record, still pending and claimed under another holding; the run as adopted, or `None`
/// (not on record, ended, or this holding's already).
pub(crate) fn adopt(
    runs: &mut [Run],
    due: jiff::Timestamp,
    attempt: u32,
    epoch: u64,
) -> Option<Run> {
    let run = runs.iter_mut().find(|kept| {
        kept.due.as_millisecond() == due.as_millisecond() && kept.attempt == attempt
    })?;
    if run.outcome != Outcome::Pending || run.epoch == Some(epoch) {
        return None;
    }
    run.epoch = Some(epoch);
    Some(run.clone())
}

/// Keeps [`RUNS_KEPT`] runs, and every run still pending.
fn trim(runs: &mut Vec<Run>) {
    let mut settled = 0;
    runs.retain(|run| {
        if run.outcome == Outcome::Pending {
            return true;
        }
        settled += 1;
        settled <= RUNS_KEPT
    });
}

#[cfg(test)]
mod tests {
    use jiff::Timestamp;

    use super::*;

    fn run(second: i64, outcome: Outcome, attempt: u32) -> Run {
        Run {
            job: "j1".into(),
            due: Timestamp::from_second(second).expect("ts"),
            started: None,
            finished: None,
            outcome,
            attempt,
            epoch: None,
        }
    }

    fn at(second: i64) -> Timestamp {
        Timestamp::from_second(second).expect("ts")
    }

    #[test]
    fn a_due_time_is_claimed_once_and_a_later_try_only_after_the_earlier_ended() {
        let mut runs = Vec::new();
        assert!(claim(&mut runs, &run(60, Outcome::Pending, 1)).is_none());
        let taken = claim(&mut runs, &run(60, Outcome::Pending, 1)).expect("claimed");
        assert_eq!(taken.outcome, Outcome::Pending);
        assert!(
            claim(&mut runs, &run(60, Outcome::Pending, 2)).is_some(),
            "the first try has not ended"
        );
        let failed = Outcome::Failed { why: "down".into() };
        assert!(settle(&mut runs, at(60), 1, &failed, at(61)).is_some());
        assert!(claim(&mut runs, &run(60, Outcome::Pending, 2)).is_none());
        assert!(claim(&mut runs, &run(60, Outcome::Pending, 2)).is_some());
        assert_eq!(runs.len(), 1, "one record per due time: its last try");
        assert!(claim(&mut runs, &run(120, Outcome::Pending, 1)).is_none());
    }

    #[test]
    fn a_run_is_settled_once_wherever_it_ended() {
        let mut runs = vec![run(60, Outcome::Pending, 1)];
        let settled = settle(&mut runs, at(60), 1, &Outcome::Answered, at(70)).expect("pending");
        assert_eq!(settled.finished, Some(at(70)));
        assert_eq!(
            settle(&mut runs, at(60), 1, &Outcome::Answered, at(80)),
            None,
            "settled already: a second report changes nothing"
        );
        assert_eq!(
            settle(&mut runs, at(60), 2, &Outcome::Answered, at(80)),
            None
        );
        assert_eq!(
            settle(&mut runs, at(99), 1, &Outcome::Answered, at(80)),
            None
        );
        assert_eq!(runs[0].finished, Some(at(70)));
    }

    #[test]
    fn a_claim_is_adopted_once_per_holding_and_only_while_it_is_pending() {
        let mut runs = vec![run(60, Outcome::Pending, 1)];
        runs[0].epoch = Some(4);
        let adopted = adopt(&mut runs, at(60), 1, 9).expect("adopted");
        assert_eq!(adopted.epoch, Some(9));
        assert_eq!(
            adopt(&mut runs, at(60), 1, 9),
            None,
            "this holding's already"
        );
        assert_eq!(adopt(&mut runs, at(60), 2, 11), None, "not this try");
        assert_eq!(adopt(&mut runs, at(61), 1, 11), None, "not on record");
        assert!(
            adopt(&mut runs, at(60), 1, 11).is_some(),
            "the next holding's"
        );
        settle(&mut runs, at(60), 1, &Outcome::Answered, at(70)).expect("settled");
        assert_eq!(adopt(&mut runs, at(60), 1, 12), None, "ended");
        assert_eq!(runs[0].epoch, Some(11));
    }

    #[test]
    fn the_newest_runs_are_kept_and_no_pending_one_is_ever_dropped() {
        let mut runs = Vec::new();
        record(&mut runs, run(0, Outcome::Pending, 1));
        for second in 1..=100 {
            record(&mut runs, run(second, Outcome::Answered, 1));
        }
        assert_eq!(runs.len(), RUNS_KEPT + 1);
        assert_eq!(runs[0].due, at(100), "newest first");
        record(
            &mut runs,
            run(300, Outcome::Skipped { why: "late".into() }, 1),
        );
        record(&mut runs, run(200, Outcome::Answered, 1));
        assert_eq!(
            runs.iter().take(3).map(|kept| kept.due).collect::<Vec<_>>(),
            [at(300), at(200), at(100)],
            "in due-time order, whenever recorded"
        );
        assert!(
            runs.iter().any(|kept| kept.due == at(0)),
            "the pending claim is kept"
        );
        record(&mut runs, run(90, Outcome::Quiet, 1));
        let again: Vec<&Run> = runs.iter().filter(|kept| kept.due == at(90)).collect();
        assert_eq!(again.len(), 1);
        assert_eq!(
            again[0].outcome,
            Outcome::Quiet,
            "recorded again in its place"
        );
    }
}
