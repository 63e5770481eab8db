//! The job store in a file: jobs and their runs kept across a restart, claims and settling.

use jiff::Timestamp;

use super::*;
use crate::due::Schedule;
use crate::job::{JobKind, Outcome, SessionMode};
use crate::runs::RUNS_KEPT;

fn job(id: &str) -> Job {
    Job {
        id: id.into(),
        name: format!("job {id}"),
        message: "ping".into(),
        schedule: Schedule::Every {
            every_secs: 60,
            from: Timestamp::UNIX_EPOCH,
        },
        channel: "websocket".into(),
        chat_id: "c".into(),
        session: SessionMode::Chat,
        enabled: true,
        created_by: "operator".into(),
        catch_up_secs: 3600,
        created_at: Timestamp::UNIX_EPOCH,
        next_due: Some(Timestamp::UNIX_EPOCH),
        last: None,
        declared: None,
        kind: JobKind::Task,
        active_hours: None,
        retry: None,
        agent: None,
        owner: None,
    }
}

fn run(job: &str, second: i64, outcome: Outcome) -> Run {
    Run {
        job: job.into(),
        due: Timestamp::from_second(second).expect("ts"),
        started: None,
        finished: None,
        outcome,
        attempt: 1,
        epoch: None,
    }
}

/// What every job store does: `store` and `other` are two handles on the same jobs
/// (two processes, or a restart).
pub(crate) async fn behaves_as_a_job_store(store: &dyn JobStore, other: &dyn JobStore) {
    let id = store.new_id().await.expect("id");
    assert_eq!(id, "j1");
    store.put(&job(&id)).await.expect("put");
    store.put(&job("j2")).await.expect("put");
    assert!(store.remove("j2").await.expect("remove"));
    assert!(!store.remove("j2").await.expect("twice"));
    store
        .record(&run("j1", 60, Outcome::Pending))
        .await
        .expect("run");
    store
        .record(&run("j1", 60, Outcome::Answered))
        .await
        .expect("run");
    store
        .record(&run("j1", 120, Outcome::Quiet))
        .await
        .expect("run");

    let jobs = other.jobs().await.expect("jobs");
    assert_eq!(
        jobs.iter().map(|j| j.id.as_str()).collect::<Vec<_>>(),
        ["j1"]
    );
    let runs = other.runs("j1", 10).await.expect("runs");
    assert_eq!(
        runs.iter().map(|r| r.outcome.as_str()).collect::<Vec<_>>(),
        ["quiet", "answered"],
        "newest first, the later record of a run replacing the earlier"
    );
    // Ids are not reused after a removal.
    assert_eq!(other.new_id().await.expect("id"), "j3");

    // A due time is claimed once, whichever handle asks; a run is settled once.
    let claimed = run("j1", 180, Outcome::Pending);
    assert_eq!(store.claim(&claimed).await.expect("claim"), None);
    let taken = other.claim(&claimed).await.expect("claim");
    assert_eq!(taken.map(|run| run.outcome), Some(Outcome::Pending));
    // A claim is adopted by the next holding of the duty once, from either handle.
    let adopted = other
        .adopt("j1", claimed.due, 1, 7)
        .await
        .expect("adopt")
        .expect("pending");
    assert_eq!(adopted.epoch, Some(7));
    assert_eq!(
        store.adopt("j1", claimed.due, 1, 7).await.expect("adopt"),
        None
    );
    let ended = Timestamp::from_second(190).expect("ts");
    let settled = other
        .settle("j1", claimed.due, 1, &Outcome::Answered, ended)
        .await
        .expect("settle");
    assert_eq!(settled.map(|run| run.finished), Some(Some(ended)));
    assert_eq!(
        store
            .settle("j1", claimed.due, 1, &Outcome::Quiet, ended)
            .await
            .expect("settle"),
        None,
        "settled already"
    );
    assert_eq!(
        store.runs("j1", 1).await.expect("runs")[0].outcome,
        Outcome::Answered
    );

    // What one writes, the other reads (and its version moves).
    let before = store.version().await;
    other.put(&job("j4")).await.expect("put");
    assert_ne!(store.version().await, before);
    assert_eq!(store.jobs().await.expect("jobs").len(), 2);

    // A change sees the job as it is, and declining writes nothing.
    let changed = other
        .update(
            "j4",
            Box::new(|job| {
                job.enabled = false;
                true
            }),
        )
        .await
        .expect("update")
        .expect("there");
    assert!(!changed.enabled);
    assert!(!store.job("j4").await.expect("job").expect("there").enabled);
    assert_eq!(
        store
            .update("j4", Box::new(|_| false))
            .await
            .expect("update"),
        None
    );
    assert_eq!(
        store
            .update("nope", Box::new(|_| true))
            .await
            .expect("update"),
        None
    );
}

#[tokio::test]
async fn jobs_and_runs_survive_a_restart_and_another_process_is_seen() {
    let dir = tempfile::tempdir().expect("tempdir");
    // A second store on the same directory: another process, or the next start.
    behaves_as_a_job_store(
        &FileJobStore::new(dir.path()),
        &FileJobStore::new(dir.path()),
    )
    .await;
}

#[tokio::test]
async fn jobs_in_a_state_store_behave_the_same() {
    let dir = tempfile::tempdir().expect("tempdir");
    let state = || {
        let files: Arc<dyn switchboard_core::StateStore> =
            Arc::new(switchboard_sessions::FileState::new(dir.path()));
        super::super::StateJobStore::new(files)
    };
    behaves_as_a_job_store(&state(), &state()).await;
    assert!(dir.path().join("scheduler/job/j1").exists());
}

#[tokio::test]
async fn a_torn_last_record_is_cut_and_the_rest_read() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = FileJobStore::new(dir.path());
    store.put(&job("j1")).await.expect("put");
    store.put(&job("j2")).await.expect("put");
    let path = dir.path().join("scheduler/jobs.jsonl");
    let mut text = std::fs::read_to_string(&path).expect("read");
    text.push_str(r#"{"record":"job","id":"j3","na"#);
    std::fs::write(&path, text).expect("torn");
    let again = FileJobStore::new(dir.path());
    assert_eq!(again.jobs().await.expect("jobs").len(), 2);
    again.put(&job("j5")).await.expect("appends after the cut");
    let text = std::fs::read_to_string(&path).expect("read");
    assert!(text.ends_with("}\n") && !text.contains(r#""na{"#), "{text}");
    assert_eq!(
        FileJobStore::new(dir.path())
            .jobs()
            .await
            .expect("jobs")
            .len(),
        3
    );
}

#[tokio::test]
async fn the_file_is_rewritten_when_it_holds_far_more_than_it_needs() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = FileJobStore::new(dir.path());
    store.put(&job("j1")).await.expect("put");
    for second in 0..400 {
        store
            .record(&run("j1", second, Outcome::Answered))
            .await
            .expect("run");
    }
    let lines = std::fs::read_to_string(dir.path().join("scheduler/jobs.jsonl"))
        .expect("read")
        .lines()
        .count();
    assert!(lines < 2 * (2 + RUNS_KEPT) + 64 + 2, "{lines} lines");
    let runs = FileJobStore::new(dir.path())
        .runs("j1", 100)
        .await
        .expect("runs");
    assert_eq!(runs.len(), RUNS_KEPT);
    assert_eq!(runs[0].due, Timestamp::from_second(399).expect("ts"));
}
