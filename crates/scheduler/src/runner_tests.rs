//! The scheduler's loop on paused time: reminders, intervals, pause and removal, limits,
//! the heartbeat, daylight saving and a wall clock that jumps.
use std::str::FromStr;

use jiff::SignedDuration;
use switchboard_core::{ChannelName, ChatId, Origin, SenderId};

use super::*;
use crate::clock::{Clock, TokioClock};
use crate::due::Schedule;
use crate::job::Outcome;
use crate::job::{JobKind, SessionMode};
use crate::jobs::{Asker, NewJob, owner_of};
use crate::test_setup::*;

#[tokio::test(start_paused = true)]
async fn a_reminder_comes_once_at_its_time_as_scheduled_work() {
    let mut s = start_at("2026-11-25T10:00:00Z", None);
    let now = Timestamp::from_str("2026-11-25T10:00:00Z").expect("ts");
    let job = s
        .add(Schedule::after("2s", now).expect("in 2 s"))
        .await
        .expect("added");
    assert!(
        next(&mut s, Duration::from_millis(1900)).await.is_none(),
        "nothing before its time"
    );
    let message = next(&mut s, Duration::from_secs(1))
        .await
        .expect("at its time");
    assert_eq!(message.content, "Remind me to drink tea.");
    assert_eq!(
        message.origin,
        Origin::Schedule {
            job: job.id.clone(),
            name: "tea".into()
        }
    );
    assert_eq!(
        message.id.as_ref().map(MessageId::as_str),
        Some(format!("sched:{}:{}", job.id, now.as_millisecond() + 2000).as_str())
    );
    message.settle(Fate::Handled);
    // Never again, and the run is recorded answered.
    assert!(next(&mut s, Duration::from_secs(3600)).await.is_none());
    let runs = s.store.runs(&job.id, 5).await.expect("runs");
    assert_eq!(runs.len(), 1, "{runs:?}");
    assert_eq!(runs[0].outcome, Outcome::Answered);
    let jobs = s.left().await;
    assert!(jobs.is_empty(), "a reminder that ran is gone: {jobs:?}");
    s.stop.cancel();
}

#[tokio::test(start_paused = true)]
async fn an_interval_job_runs_each_interval_not_when_paused_never_once_removed() {
    let mut s = start_at("2026-11-25T10:00:00Z", None);
    let now = Timestamp::from_str("2026-11-25T10:00:00Z").expect("ts");
    let job = s
        .add(Schedule::every("10s", now).expect("every"))
        .await
        .expect("added");
    for _ in 0..3 {
        let message = next(&mut s, Duration::from_secs(11)).await.expect("a run");
        message.settle(Fate::Handled);
    }
    let asker = Asker::Chat(chat().0, chat().1);
    s.scheduler
        .jobs()
        .set_enabled(&asker, &job.id, false)
        .await
        .expect("paused");
    assert!(
        next(&mut s, Duration::from_secs(60)).await.is_none(),
        "paused"
    );
    s.scheduler
        .jobs()
        .set_enabled(&asker, &job.id, true)
        .await
        .expect("resumed");
    next(&mut s, Duration::from_secs(11))
        .await
        .expect("runs again")
        .settle(Fate::Handled);
    s.scheduler
        .jobs()
        .remove(&asker, &job.id)
        .await
        .expect("removed");
    assert!(
        next(&mut s, Duration::from_secs(120)).await.is_none(),
        "removed"
    );
    let runs = s.store.runs(&job.id, 20).await.expect("runs");
    assert_eq!(runs.len(), 4);
    assert!(
        runs.iter().all(|run| run.outcome == Outcome::Answered),
        "{runs:?}"
    );
    s.stop.cancel();
}

#[tokio::test(start_paused = true)]
async fn a_chat_sees_and_changes_only_its_own_jobs_and_limits_are_told() {
    let clock = Arc::new(TokioClock::starting_at(
        Timestamp::from_str("2026-11-25T10:00:00Z").expect("ts"),
    ));
    let config = SchedulerConfig {
        max_jobs_per_chat: 2,
        ..SchedulerConfig::default()
    };
    let s = start_on(clock, None, config);
    let now = Timestamp::from_str("2026-11-25T10:00:00Z").expect("ts");
    let job = s
        .add(Schedule::every("1h", now).expect("every"))
        .await
        .expect("added");
    let other = Asker::Chat(ChannelName::from("websocket"), ChatId::from("d"));
    assert!(
        s.scheduler
            .jobs()
            .list(&other)
            .await
            .expect("list")
            .is_empty()
    );
    let err = s
        .scheduler
        .jobs()
        .remove(&other, &job.id)
        .await
        .expect_err("not theirs");
    assert!(err.contains("no job"), "{err}");
    let err = s
        .scheduler
        .jobs()
        .add(new_job(Schedule::every("30s", now).expect("every")))
        .await
        .expect_err("too often");
    assert!(err.contains("scheduler.min_interval_secs"), "{err}");
    let long = NewJob {
        message: "x".repeat(crate::jobs::MAX_MESSAGE_BYTES + 1),
        ..new_job(Schedule::every("1h", now).expect("every"))
    };
    let err = s.scheduler.jobs().add(long).await.expect_err("too long");
    assert!(err.contains("at most 16384 are kept"), "{err}");
    // The cap counts this chat's jobs only.
    s.scheduler
        .jobs()
        .add(new_job(Schedule::every("2h", now).expect("every")))
        .await
        .expect("the second");
    let err = s
        .scheduler
        .jobs()
        .add(new_job(Schedule::every("3h", now).expect("every")))
        .await
        .expect_err("a third");
    assert_eq!(
        err,
        "this chat has 2 jobs, the most it may have (scheduler.max_jobs_per_chat); remove \
         one first"
    );
    let elsewhere = NewJob {
        chat: (ChannelName::from("websocket"), ChatId::from("d")),
        ..new_job(Schedule::every("3h", now).expect("every"))
    };
    s.scheduler
        .jobs()
        .add(elsewhere)
        .await
        .expect("another chat has room");
    s.stop.cancel();
}

/// The heartbeat as the daemon declares it: every 30 s, 08:00-22:00 UTC, its
/// instructions in `dir/HEARTBEAT.md`.
fn heartbeat(s: &Setup, dir: &std::path::Path) -> crate::Declared {
    let workspace = Workspace::new(dir, &[], true).expect("workspace");
    s.scheduler.read_instructions_in(Arc::new(workspace));
    crate::Declared {
        id: "heartbeat".into(),
        message: String::new(),
        schedule: Schedule::Every {
            every_secs: 30,
            from: Timestamp::from_str("2026-11-25T00:00:00Z").expect("ts"),
        },
        chat: chat(),
        session: SessionMode::Isolated,
        catch_up: Duration::from_secs(30),
        enabled: true,
        kind: JobKind::Heartbeat {
            instructions: "HEARTBEAT.md".into(),
        },
        active_hours: Some(crate::ActiveHours::parse("08:00-22:00", "UTC").expect("hours")),
        spec: "heartbeat".into(),
    }
}

#[tokio::test(start_paused = true)]
async fn a_slow_beat_makes_the_next_one_skip_not_stack_and_the_instructions_are_read_each_time() {
    let mut s = start_at("2026-11-25T10:00:00Z", None);
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("HEARTBEAT.md"), "Check the build.").expect("file");
    s.scheduler
        .jobs()
        .sync_declared(&[heartbeat(&s, dir.path())])
        .await
        .expect("declared");
    let slow = next(&mut s, Duration::from_secs(31)).await.expect("a beat");
    assert_eq!(slow.content, "Check the build.");
    assert_eq!(slow.origin, Origin::Heartbeat);
    assert_eq!(slow.channel.as_str(), "cron", "in a session of its own");
    assert_eq!(slow.chat_id.as_str(), "heartbeat");
    // Still running when the next is due: that one is skipped, not stacked.
    assert!(next(&mut s, Duration::from_secs(40)).await.is_none());
    let runs = s.store.runs("heartbeat", 5).await.expect("runs");
    assert!(
        matches!(&runs[0].outcome, Outcome::Skipped { why } if why.contains("still going")),
        "{runs:?}"
    );
    slow.settle(Fate::Handled);
    std::fs::write(dir.path().join("HEARTBEAT.md"), "Check the mail.").expect("file");
    let after = next(&mut s, Duration::from_secs(31))
        .await
        .expect("beats again");
    assert_eq!(after.content, "Check the mail.", "read at each beat");
    after.settle(Fate::Handled);
    // No instructions, no beat: recorded why, nothing handed to the agent.
    std::fs::write(dir.path().join("HEARTBEAT.md"), "  \n").expect("file");
    assert!(next(&mut s, Duration::from_secs(31)).await.is_none());
    let runs = s.store.runs("heartbeat", 1).await.expect("runs");
    assert!(
        matches!(&runs[0].outcome, Outcome::Skipped { why } if why.contains("is empty")),
        "{runs:?}"
    );
    assert!(s.told().is_empty(), "the chat is told nothing of it");
    s.stop.cancel();
}

#[tokio::test(start_paused = true)]
async fn no_beat_comes_outside_the_active_hours() {
    let mut s = start_at("2026-11-25T21:59:00Z", None);
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("HEARTBEAT.md"), "Check.").expect("file");
    s.scheduler
        .jobs()
        .sync_declared(&[heartbeat(&s, dir.path())])
        .await
        .expect("declared");
    next(&mut s, Duration::from_secs(31))
        .await
        .expect("21:59:30, within the hours")
        .settle(Fate::Handled);
    // From 21:59:30 to a second before 08:00.
    let night = Duration::from_secs(10 * 3600 + 29);
    assert!(
        next(&mut s, night).await.is_none(),
        "none from 22:00 to 08:00"
    );
    let morning = next(&mut s, Duration::from_secs(2))
        .await
        .expect("08:00, the hours begin");
    let due = morning
        .id
        .as_ref()
        .map(MessageId::as_str)
        .and_then(|id| id.rsplit(':').next())
        .and_then(|ms| ms.parse::<i64>().ok())
        .expect("due in its id");
    assert_eq!(
        Timestamp::from_millisecond(due).expect("ts"),
        Timestamp::from_str("2026-11-26T08:00:00Z").expect("ts")
    );
    s.stop.cancel();
}

/// The due time a scheduled message's id carries.
fn due_of(message: &InboundMessage) -> Timestamp {
    let id = message.id.as_ref().expect("an id").as_str();
    let millis = id.rsplit(':').next().expect("due").parse().expect("millis");
    Timestamp::from_millisecond(millis).expect("ts")
}

/// The runs of a daily 02:30 job in Berlin, from `from`, as (due, when it arrived).
async fn berlin_half_past_two(from: &str, count: usize) -> Vec<(String, String)> {
    let clock = Arc::new(TokioClock::starting_at(
        Timestamp::from_str(from).expect("ts"),
    ));
    // Polling once an hour: the loop sleeps to each due time, not in small steps.
    let config = SchedulerConfig {
        poll: Duration::from_secs(3600),
        ..SchedulerConfig::default()
    };
    let mut s = start_on(clock, None, config);
    s.scheduler
        .jobs()
        .add(new_job(
            Schedule::cron("30 2 * * *", "Europe/Berlin").expect("cron"),
        ))
        .await
        .expect("added");
    let mut runs = Vec::new();
    for _ in 0..count {
        let message = next(&mut s, Duration::from_secs(26 * 3600))
            .await
            .expect("a run a day");
        let arrived = s.scheduler.jobs().now();
        runs.push((due_of(&message).to_string(), arrived.to_string()));
        message.settle(Fate::Handled);
    }
    s.stop.cancel();
    runs
}

#[tokio::test(start_paused = true)]
async fn a_daily_cron_runs_once_per_local_time_across_spring_forward_and_fall_back() {
    // 02:30 does not exist in Berlin on 2026-03-29: that day's run comes once, at 03:00
    // CEST, the gap's end.
    let spring = berlin_half_past_two("2026-03-27T12:00:00Z", 3).await;
    let times: Vec<&str> = spring.iter().map(|(due, _)| due.as_str()).collect();
    assert_eq!(
        times,
        [
            "2026-03-28T01:30:00Z",
            "2026-03-29T01:00:00Z",
            "2026-03-30T00:30:00Z"
        ]
    );
    // 02:30 happens twice on 2026-10-25: one run, at the first.
    let fall = berlin_half_past_two("2026-10-23T12:00:00Z", 3).await;
    let times: Vec<&str> = fall.iter().map(|(due, _)| due.as_str()).collect();
    assert_eq!(
        times,
        [
            "2026-10-24T00:30:00Z",
            "2026-10-25T00:30:00Z",
            "2026-10-26T01:30:00Z"
        ]
    );
    for (due, arrived) in spring.iter().chain(&fall) {
        assert_eq!(due, arrived, "each run arrives at its time");
    }
}

/// A wall clock that can be set (as NTP or an operator does) on top of tokio's.
struct Settable {
    clock: TokioClock,
    shift: Mutex<SignedDuration>,
}

impl Clock for Settable {
    fn now(&self) -> Timestamp {
        let shift = *self.shift.lock().unwrap_or_else(PoisonError::into_inner);
        self.clock.now().saturating_add(shift).expect("in range")
    }
}

impl Settable {
    fn jump(&self, by: SignedDuration) {
        *self.shift.lock().unwrap_or_else(PoisonError::into_inner) += by;
    }
}

#[tokio::test(start_paused = true)]
async fn a_wall_clock_jump_neither_doubles_nor_drops_a_run() {
    let clock = Arc::new(Settable {
        clock: TokioClock::starting_at(Timestamp::from_str("2026-11-25T10:00:30Z").expect("ts")),
        shift: Mutex::new(SignedDuration::ZERO),
    });
    let mut s = start_on(clock.clone(), None, SchedulerConfig::default());
    let job = s
        .add(Schedule::cron("0 * * * *", "UTC").expect("hourly"))
        .await
        .expect("added");
    let first = next(&mut s, Duration::from_secs(3600))
        .await
        .expect("11:00");
    assert_eq!(due_of(&first).to_string(), "2026-11-25T11:00:00Z");
    first.settle(Fate::Handled);
    // Set back by half an hour just after 11:00: 11:00 does not run again; 12:00 does,
    // when the clock says so (90 minutes on).
    clock.jump(SignedDuration::from_mins(-30));
    assert!(
        next(&mut s, Duration::from_secs(89 * 60)).await.is_none(),
        "not doubled"
    );
    let noon = next(&mut s, Duration::from_secs(2 * 60))
        .await
        .expect("12:00");
    assert_eq!(due_of(&noon).to_string(), "2026-11-25T12:00:00Z");
    noon.settle(Fate::Handled);
    // Set forward past 13:00 (within its catch-up): 13:00 runs at once, once.
    clock.jump(SignedDuration::from_mins(75));
    let late = next(&mut s, Duration::from_secs(5)).await.expect("13:00");
    assert_eq!(due_of(&late).to_string(), "2026-11-25T13:00:00Z");
    late.settle(Fate::Handled);
    let after = next(&mut s, Duration::from_secs(50 * 60))
        .await
        .expect("14:00");
    assert_eq!(due_of(&after).to_string(), "2026-11-25T14:00:00Z");
    after.settle(Fate::Handled);
    let runs = s.store.runs(&job.id, 10).await.expect("runs");
    assert_eq!(runs.len(), 4, "{runs:?}");
    s.stop.cancel();
}

/// One person spreading jobs over chat ids, and the daemon's own total, are capped with
/// refusals that name their keys; WebSocket's connections are one person.
#[tokio::test(start_paused = true)]
async fn jobs_are_capped_per_person_across_their_chats_and_per_daemon() {
    let start = Timestamp::from_str("2026-11-25T10:00:00Z").expect("ts");
    let clock = Arc::new(TokioClock::starting_at(start));
    let config = SchedulerConfig {
        max_jobs_per_person: 2,
        max_jobs: 3,
        ..SchedulerConfig::default()
    };
    let s = start_on(clock, None, config);
    let web = ChannelName::from("websocket");
    let add = |chat: &str, owner: String| {
        let chat = (web.clone(), ChatId::from(chat));
        let jobs = s.scheduler.jobs().clone();
        async move {
            jobs.add(NewJob {
                chat,
                owner: Some(owner),
                ..new_job(Schedule::every("1h", start).expect("every"))
            })
            .await
        }
    };
    let token = |conn: u32| owner_of(&web, Some(&SenderId::from(format!("ws:{conn}").as_str())));
    assert_eq!(token(1), token(2), "every connection is the token's holder");
    add("a", token(1)).await.expect("first");
    add("b", token(2)).await.expect("second, another chat");
    let refused = add("c", token(3)).await.expect_err("a third");
    assert!(
        refused.contains("scheduler.max_jobs_per_person"),
        "{refused}"
    );
    let ada = owner_of(&ChannelName::from("telegram"), Some(&SenderId::from("42")));
    assert_eq!(ada, "telegram:42");
    add("42", ada).await.expect("another person's");
    let refused = add("7", "telegram:7".into())
        .await
        .expect_err("a fourth in all");
    assert!(refused.contains("scheduler.max_jobs"), "{refused}");
    s.stop.cancel();
}
