//! Jobs kept in the state store: the same contract on both backends — files in one
//! process, and the bucket of a real `nats-server` shared by two members: jobs and their
//! runs kept across a restart and seen by another process, claims and settling once.

use jiff::Timestamp;
use switchboard_nats::{ClusterConfig, NatsState};
use switchboard_sessions::FileState;
use switchboard_testkit::NatsServer;

use super::*;
use crate::runs::RUNS_KEPT;
use crate::test_setup::job;

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
async fn jobs_in_files_of_one_process() {
    let dir = tempfile::tempdir().expect("tempdir");
    // A second store on the same directory: another process, or the next start.
    let files = || StateJobStore::new(Arc::new(FileState::new(dir.path())));
    behaves_as_a_job_store(&files(), &files()).await;
    assert!(dir.path().join("scheduler/job/j1").exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jobs_in_a_clusters_bucket() {
    let server = NatsServer::start();
    let member = async |name: &str| {
        let state = NatsState::connect(ClusterConfig::plain(&server.url(), name))
            .await
            .expect("joins the cluster");
        StateJobStore::new(Arc::new(state))
    };
    behaves_as_a_job_store(&member("one").await, &member("two").await).await;
}

#[tokio::test]
async fn a_jobs_runs_are_kept_to_the_last_few() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = StateJobStore::new(Arc::new(FileState::new(dir.path())));
    store.put(&job("j1")).await.expect("put");
    for second in 0..(RUNS_KEPT as i64 + 30) {
        store
            .record(&run("j1", second, Outcome::Answered))
            .await
            .expect("run");
    }
    let runs = store.runs("j1", 100).await.expect("runs");
    assert_eq!(runs.len(), RUNS_KEPT);
    assert_eq!(
        runs[0].due,
        Timestamp::from_second(RUNS_KEPT as i64 + 29).expect("ts")
    );
}
