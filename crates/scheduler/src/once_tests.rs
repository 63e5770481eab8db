//! Each due time once, on paused time: a leader paused past its lease hands nothing over and
//! the next takes its claims over; due times that passed while nobody fired are recorded
//! as folded; a run that never settles holds its job back only until its catch-up passed.

use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;
use switchboard_core::{Fate, InboundMessage, MessageId, OutboundKind, Tenure};
use tokio::sync::mpsc::Receiver;
use tokio::time::Instant;

use super::due::Schedule;
use super::job::{Job, Outcome, Run};
use super::jobs::NewJob;
use super::store::JobStore;
use super::test_setup::*;
use super::test_setup::{files, job};

const START: &str = "2026-11-25T10:00:00Z";

fn at(text: &str) -> Timestamp {
    Timestamp::from_str(text).expect("ts")
}

/// The next message within `within`, if any.
async fn within(
    inbound: &mut Receiver<InboundMessage>,
    within: Duration,
) -> Option<InboundMessage> {
    tokio::time::timeout(within, inbound.recv())
        .await
        .ok()
        .flatten()
}

fn id(message: &InboundMessage) -> String {
    message
        .id
        .as_ref()
        .map(MessageId::as_str)
        .unwrap_or_default()
        .to_owned()
}

/// The duty moves while its holder is paused: the paused leader fires nothing once its
/// tenure is no longer sure; the next leader takes over the run it left pending (the same
/// message, for the chat's journal to answer once) and fires the next due time itself; the
/// old leader, awake and told it lost the duty, hands nothing over. Each due time is claimed
/// once.
#[tokio::test(start_paused = true)]
async fn a_leader_paused_past_its_lease_fires_nothing_and_the_next_takes_its_claims_over() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (first_bus, first_duty) = Duty::new();
    let (second_bus, second_duty) = Duty::new();
    let (first, mut first_in, _stop_first) = start_on_bus(START, dir.path(), Arc::new(first_bus));
    let (_second, mut second_in, _stop_second) =
        start_on_bus(START, dir.path(), Arc::new(second_bus));
    // Renewed last just before it was paused: sure until :35.
    let old = Tenure::new(1, Instant::now() + Duration::from_secs(35));
    first_duty.send_replace(Some(old.clone()));
    let job = first
        .jobs()
        .add(new_job(Schedule::every("30s", at(START)).expect("every")))
        .await
        .expect("added");

    // The first leader hands the run due at :30 over; its turn is under way (not settled).
    let run_30 = within(&mut first_in, Duration::from_secs(31))
        .await
        .expect("the :30 run");
    let due_30 = format!(
        "sched:{}:{}",
        job.id,
        at("2026-11-25T10:00:30Z").as_millisecond()
    );
    assert_eq!(id(&run_30), due_30);

    // Paused past its lease: by :45 it is no longer sure. The lease lapses and the second
    // member takes the duty, under a later epoch.
    tokio::time::sleep(Duration::from_secs(15)).await;
    assert!(!old.is_sure());
    second_duty.send_replace(Some(Tenure::new(
        2,
        Instant::now() + Duration::from_secs(3600),
    )));
    let taken_over = within(&mut second_in, Duration::from_secs(1))
        .await
        .expect("taken over");
    assert_eq!(
        id(&taken_over),
        due_30,
        "the same run, the same id: the journal answers it once"
    );
    // Its turn ends (the journal answers the copy without a turn).
    run_30.settle(Fate::Handled);
    taken_over.settle(Fate::Handled);

    // The :60 due time: the second leader fires it; the first, unsure, fires nothing, and
    // once it hears it lost the duty it stands by.
    let run_60 = within(&mut second_in, Duration::from_secs(20))
        .await
        .expect("the :60 run");
    assert_eq!(
        id(&run_60),
        format!(
            "sched:{}:{}",
            job.id,
            at("2026-11-25T10:01:00Z").as_millisecond()
        )
    );
    old.lose();
    assert!(
        within(&mut first_in, Duration::from_secs(60))
            .await
            .is_none(),
        "the old leader hands nothing over"
    );
    run_60.settle(Fate::Handled);
    let runs = files(dir.path()).runs(&job.id, 10).await.expect("runs");
    let claims: Vec<(String, Option<u64>)> = runs
        .iter()
        .map(|run| (run.due.to_string(), run.epoch))
        .collect();
    assert!(
        claims.contains(&("2026-11-25T10:00:30Z".into(), Some(2)))
            && claims.contains(&("2026-11-25T10:01:00Z".into(), Some(2))),
        "claimed by the leader of the time, the first's adopted by the second: {claims:?}"
    );
    let unique: std::collections::BTreeSet<&String> = claims.iter().map(|(due, _)| due).collect();
    assert_eq!(
        unique.len(),
        claims.len(),
        "each due time claimed once: {claims:?}"
    );
}

/// A leader whose store call was under way while its lease lapsed claims a due time after
/// the next leader took the duty and looked: the new leader sees the job's last run pending
/// under the old epoch and takes it over within its poll — not at the job's next due time, an
/// hour away — adopting it, so it hands it over once.
#[tokio::test(start_paused = true)]
async fn a_claim_that_lands_after_the_next_leader_looked_is_taken_over_at_once() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = files(dir.path());
    // Moved past 10:00 by the old leader (its claim of 10:00 lands later).
    let mut job = job_due("1h", "2026-11-25T11:00:00Z", 3600);
    job.schedule = Schedule::every("1h", at(START)).expect("every");
    store.put(&job).await.expect("put");
    let (bus, duty) = Duty::new();
    let (_leader, mut inbound, _stop) = start_on_bus(START, dir.path(), Arc::new(bus));
    duty.send_replace(Some(Tenure::new(
        2,
        Instant::now() + Duration::from_secs(3600),
    )));
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(within(&mut inbound, Duration::ZERO).await.is_none());

    // The old leader's claim (epoch 1), and its note of it on the job.
    let claim = Run {
        job: "j1".into(),
        due: at(START),
        started: Some(at(START)),
        finished: None,
        outcome: Outcome::Pending,
        attempt: 1,
        epoch: Some(1),
    };
    assert_eq!(store.claim(&claim).await.expect("claim"), None);
    let noted = claim.clone();
    store
        .update(
            "j1",
            Box::new(move |job| {
                job.last = Some(noted.clone());
                true
            }),
        )
        .await
        .expect("update");

    let taken_over = within(&mut inbound, Duration::from_secs(5))
        .await
        .expect("taken over within the poll");
    assert_eq!(
        id(&taken_over),
        format!("sched:j1:{}", at(START).as_millisecond())
    );
    assert!(
        within(&mut inbound, Duration::from_secs(60))
            .await
            .is_none(),
        "handed over once by this holding"
    );
    let runs = store.runs("j1", 10).await.expect("runs");
    assert_eq!(
        runs.iter().map(|run| run.epoch).collect::<Vec<_>>(),
        [Some(2)],
        "adopted"
    );
    let job = store.job("j1").await.expect("read").expect("there");
    assert_eq!(job.last.and_then(|last| last.epoch), Some(2));
    taken_over.settle(Fate::Handled);
}

/// A job of chat "c" every `every`, due first at `due`, with `catch_up` (what the store held
/// before the scheduler started).
fn job_due(every: &str, due: &str, catch_up: u64) -> Job {
    Job {
        name: "tick".into(),
        message: "tick".into(),
        schedule: Schedule::every(every, at("2026-11-25T09:00:00Z")).expect("every"),
        catch_up_secs: catch_up,
        created_at: at("2026-11-25T09:00:00Z"),
        next_due: Some(at(due)),
        ..job("j1")
    }
}

/// The scheduler was down from 10:00 to 10:00:35 (a job every 10 s): the run due at 10:00
/// runs, late but within its catch-up, and the due times after it that passed meanwhile are
/// each recorded, folded into it — none silently dropped.
#[tokio::test(start_paused = true)]
async fn due_times_that_passed_while_nobody_fired_are_recorded_as_folded() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = files(dir.path());
    store
        .put(&job_due("10s", "2026-11-25T10:00:00Z", 3600))
        .await
        .expect("put");
    let mut s = start_at("2026-11-25T10:00:35Z", Some(dir));
    let caught_up = next(&mut s, Duration::from_secs(1))
        .await
        .expect("caught up");
    assert_eq!(
        id(&caught_up),
        format!("sched:j1:{}", at(START).as_millisecond())
    );
    caught_up.settle(Fate::Handled);
    // The loop settles what the ack says.
    tokio::time::sleep(Duration::from_millis(10)).await;
    let runs = s.store.runs("j1", 10).await.expect("runs");
    let shown: Vec<(String, String)> = runs
        .iter()
        .map(|run| (run.due.to_string(), run.outcome.describe()))
        .collect();
    assert_eq!(shown.len(), 4, "{shown:?}");
    assert_eq!(shown[3], ("2026-11-25T10:00:00Z".into(), "answered".into()));
    for (due, (at, said)) in ["10:00:30", "10:00:20", "10:00:10"].iter().zip(&shown) {
        assert_eq!(at, &format!("2026-11-25T{due}Z"));
        assert!(
            said.starts_with("skipped: it came due while no scheduler was firing jobs")
                && said.ends_with("folded into the run due at 2026-11-25T10:00:00Z"),
            "{said}"
        );
    }
    let job = s.store.job("j1").await.expect("read").expect("there");
    assert_eq!(job.next_due, Some(at("2026-11-25T10:00:40Z")));
    let told: Vec<String> = s
        .told()
        .into_iter()
        .filter_map(|kind| match kind {
            OutboundKind::Notice(text) => Some(text),
            _ => None,
        })
        .collect();
    assert_eq!(told.len(), 1, "the chat is told once: {told:?}");
    assert!(
        told[0].contains("missed 3 more due times after the one at 2026-11-25T10:00:00Z")
            && told[0].contains("the last at 2026-11-25T10:00:30Z"),
        "{told:?}"
    );
    s.stop.cancel();
}

/// A run whose end never comes (lost with the worker that ran it): the next due times are
/// skipped as "still going" — recorded — only until its catch-up has passed; then it is
/// recorded failed and the job runs again.
#[tokio::test(start_paused = true)]
async fn a_run_that_never_settles_holds_its_job_back_only_until_its_catch_up_passed() {
    let mut s = start_at(START, None);
    let job = s
        .scheduler
        .jobs()
        .add(NewJob {
            catch_up: Some(Duration::from_secs(25)),
            ..new_job(Schedule::every("10s", at(START)).expect("every"))
        })
        .await
        .expect("added");
    let lost = next(&mut s, Duration::from_secs(11))
        .await
        .expect("the first run");
    // Its ack is never reported: kept alive, as a message a dead worker held.
    let kept = lost;
    let early = next(&mut s, Duration::from_secs(25)).await;
    assert!(
        early.is_none(),
        "held back while the first may still be going: {:?}",
        early.map(|m| (m.id, m.content))
    );
    let again = next(&mut s, Duration::from_secs(11))
        .await
        .expect("the job goes on");
    assert_eq!(
        id(&again),
        format!(
            "sched:{}:{}",
            job.id,
            at("2026-11-25T10:00:40Z").as_millisecond()
        )
    );
    let runs = s.store.runs(&job.id, 10).await.expect("runs");
    let shown: Vec<String> = runs
        .iter()
        .rev()
        .map(|run| run.outcome.describe())
        .collect();
    assert_eq!(
        shown,
        [
            "failed: it never reported how it ended (lost with the worker that ran it?)",
            "skipped: the run before it was still going",
            "skipped: the run before it was still going",
            "pending",
        ],
        "every due time accounted for"
    );
    drop(kept);
    s.stop.cancel();
}
