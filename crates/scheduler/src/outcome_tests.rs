//! What becomes of runs, on paused time: one pending at a crash is handed over again and
//! one too late is skipped and told; a failed one is tried again with backoff, then told.
use std::str::FromStr;
use std::time::Duration;

use switchboard_core::{InboundMessage, MessageId};

use super::*;
use crate::due::Schedule;
use crate::jobs::NewJob;
use crate::store::JobStore;
use crate::test_setup::*;

#[tokio::test(start_paused = true)]
async fn a_run_pending_at_a_crash_is_handed_over_again_and_a_late_one_is_skipped_and_told() {
    let dir = tempfile::tempdir().expect("tempdir");
    let base = Timestamp::from_str("2026-11-25T10:00:00Z").expect("ts");
    // The daemon before: one job started a run (pending) and crashed; another was due
    // two hours ago, past its catch-up of one.
    let store = files(dir.path());
    let pending_due = base.checked_sub(SignedDuration::from_secs(30)).expect("ts");
    let mut pending = Job {
        name: "pending".into(),
        message: "first".into(),
        schedule: Schedule::At { at: pending_due },
        created_at: base,
        next_due: None,
        ..job("j1")
    };
    pending.last = Some(Run {
        job: "j1".into(),
        due: pending_due,
        started: Some(pending_due),
        finished: None,
        outcome: Outcome::Pending,
        attempt: 1,
        // Recorded by a version before claims: no epoch, and only on the job.
        epoch: None,
    });
    store.put(&pending).await.expect("put");
    let late_due = base.checked_sub(SignedDuration::from_hours(2)).expect("ts");
    let late = Job {
        id: "j2".into(),
        name: "late".into(),
        message: "second".into(),
        schedule: Schedule::At { at: late_due },
        next_due: Some(late_due),
        last: None,
        ..pending.clone()
    };
    store.put(&late).await.expect("put");

    let mut s = start_at("2026-11-25T10:00:00Z", Some(dir));
    let again = next(&mut s, Duration::from_secs(1))
        .await
        .expect("taken up");
    assert_eq!(again.content, "first");
    assert_eq!(
        again.id.as_ref().map(MessageId::as_str),
        Some(format!("sched:j1:{}", pending_due.as_millisecond()).as_str()),
        "the same id: the session journal answers it once"
    );
    again.settle(Fate::Handled);
    assert!(
        next(&mut s, Duration::from_secs(10)).await.is_none(),
        "the late one does not run"
    );
    let runs = s.store.runs("j2", 5).await.expect("runs");
    assert!(
        matches!(&runs[0].outcome, Outcome::Skipped { why } if why.contains("catch-up")),
        "{runs:?}"
    );
    tokio::time::sleep(Duration::from_millis(10)).await;
    let told = s.told();
    assert!(
        matches!(told.as_slice(), [OutboundKind::Notice(text)] if text.contains("\"late\" (job j2) did not run")),
        "{told:?}"
    );
    s.stop.cancel();
}

/// Ends the turn of `message` as the agent's hook would for a model that is down: its
/// outcome is that it failed, then the message is settled handled.
async fn fail(s: &Setup, message: InboundMessage) {
    let run = message.run.as_ref().expect("a run");
    s.scheduler
        .outcomes()
        .turn_ended(run, None, "the model is unreachable")
        .await;
    message.settle(Fate::Handled);
}

#[tokio::test(start_paused = true)]
async fn a_failed_run_is_tried_again_with_backoff_then_the_chat_is_told_once() {
    let mut s = start_at("2026-11-25T10:00:00Z", None);
    let now = Timestamp::from_str("2026-11-25T10:00:00Z").expect("ts");
    let job = s
        .scheduler
        .jobs()
        .add(NewJob {
            session: SessionMode::Isolated,
            ..new_job(Schedule::after("1s", now).expect("in 1 s"))
        })
        .await
        .expect("added");
    let first = next(&mut s, Duration::from_secs(2)).await.expect("the run");
    let due = now.as_millisecond() + 1000;
    assert_eq!(
        first.id.as_ref().map(MessageId::as_str),
        Some(format!("sched:{}:{due}", job.id).as_str())
    );
    fail(&s, first).await;
    // Tried again 30 s later, as a message of its own, then 2 min after that.
    assert!(next(&mut s, Duration::from_secs(29)).await.is_none());
    let second = next(&mut s, Duration::from_secs(2)).await.expect("try 2");
    assert_eq!(
        second.id.as_ref().map(MessageId::as_str),
        Some(format!("sched:{}:{due}:2", job.id).as_str())
    );
    assert_eq!(second.content, "Remind me to drink tea.");
    fail(&s, second).await;
    assert!(next(&mut s, Duration::from_secs(119)).await.is_none());
    let third = next(&mut s, Duration::from_secs(2)).await.expect("try 3");
    fail(&s, third).await;
    // Three tries: no more; recorded failed, the chat told once, the job gone.
    assert!(next(&mut s, Duration::from_secs(3600)).await.is_none());
    let runs = s.store.runs(&job.id, 5).await.expect("runs");
    assert_eq!(runs.len(), 1, "one run, tried three times: {runs:?}");
    assert_eq!(runs[0].attempt, 3);
    assert!(
        matches!(&runs[0].outcome, Outcome::Failed { why } if why == "the model is unreachable"),
        "{runs:?}"
    );
    let told = s.told();
    assert!(
        matches!(told.as_slice(), [OutboundKind::Notice(text)]
            if text == "The scheduled task \"tea\" (job j1) failed (3 tries): the model is unreachable"),
        "{told:?}"
    );
    let left = s.left().await;
    assert!(left.is_empty(), "{left:?}");
    s.stop.cancel();
}

#[tokio::test(start_paused = true)]
async fn a_failed_run_is_not_tried_again_past_its_next_due_time() {
    let mut s = start_at("2026-11-25T10:00:00Z", None);
    let now = Timestamp::from_str("2026-11-25T10:00:00Z").expect("ts");
    s.scheduler
        .jobs()
        .add(new_job(Schedule::every("20s", now).expect("every")))
        .await
        .expect("added");
    let first = next(&mut s, Duration::from_secs(21)).await.expect("a run");
    fail(&s, first).await;
    // The next try would be 30 s on, past the next run (20 s on): the next run it is.
    let again = next(&mut s, Duration::from_secs(21))
        .await
        .expect("next run");
    assert!(
        again
            .id
            .as_ref()
            .is_some_and(|id| id.as_str().matches(':').count() == 2),
        "a first try of the next due time: {:?}",
        again.id
    );
    s.stop.cancel();
}

/// A run whose turn ended on a worker that died before it settled the run: the worker that
/// takes the message up finds the answer on record, sends it again without a turn — and
/// settles the run then, so it does not hold its job back.
#[tokio::test(start_paused = true)]
async fn a_run_answered_again_without_a_turn_is_settled_then() {
    let mut s = start_at("2026-11-25T10:00:00Z", None);
    let now = Timestamp::from_str("2026-11-25T10:00:00Z").expect("ts");
    let job = s
        .add(Schedule::after("1s", now).expect("in 1 s"))
        .await
        .expect("added");
    let message = next(&mut s, Duration::from_secs(2)).await.expect("the run");
    assert!(message.run.is_some(), "the message names its run");
    let run = message.run.as_ref().expect("a run");
    s.scheduler
        .outcomes()
        .handled_again(run, Some(TurnEnd::Answered))
        .await;
    let runs = s.store.runs(&job.id, 5).await.expect("runs");
    assert_eq!(runs[0].outcome, Outcome::Answered, "{runs:?}");
    // Its ack (on a cluster: only that the bus stored it) changes nothing more.
    message.settle(Fate::Handled);
    s.stop.cancel();
}
