//! Spending kept in the state store: the same contract on both backends — files in one
//! process, and the bucket of a real `nats-server` shared by two members.

use std::sync::Arc;

use switchboard_core::StateStore;
use switchboard_nats::{ClusterConfig, NatsState};
use switchboard_sessions::FileState;
use switchboard_testkit::NatsServer;

use super::*;

fn record(day: Date, session: &str, input: u64, usd: f64) -> UsageRecord {
    UsageRecord {
        key: UsageKey {
            day,
            agent: "default".into(),
            session: session.into(),
            model: "m".into(),
            chat: None,
        },
        spent: Spent {
            input,
            output: 1,
            cached: 0,
            usd,
            reasoning: 0,
        },
    }
}

/// What the usage store does on any state store: `one` and `two` are two handles on the
/// same documents (a restart, two processes, two workers).
async fn behaves_as_a_usage_store(one: Arc<dyn StateStore>, two: Arc<dyn StateStore>) {
    let store = StateUsageStore::new(one.clone(), "one");
    let again = StateUsageStore::new(two.clone(), "one");
    let (nov30, dec1) = (
        jiff::civil::date(2026, 11, 30),
        jiff::civil::date(2026, 12, 1),
    );
    store
        .record(&record(nov30, "a", 10, 0.5))
        .await
        .expect("record");
    store
        .record(&record(nov30, "a", 5, 0.25))
        .await
        .expect("record");
    store
        .record(&record(dec1, "a", 1, 1.0))
        .await
        .expect("record");
    assert!(store.warn_once(dec1, "a").await.expect("warn"));
    assert!(!store.warn_once(dec1, "a").await.expect("once"));

    let november = again.spent(nov30, nov30).await.expect("spent");
    assert_eq!(november.len(), 1);
    assert_eq!(november[0].spent.input, 15);
    assert!((november[0].spent.usd - 0.75).abs() < 1e-9);
    let both = again.spent(nov30, dec1).await.expect("spent");
    assert_eq!(both.len(), 2);
    assert!(!again.warn_once(dec1, "a").await.expect("kept"));
    again
        .record(&record(nov30, "b", 1, 2.0))
        .await
        .expect("record");
    let (all, a) = again.day_cost(nov30, "a").await.expect("cost");
    assert!(
        (all - 2.75).abs() < 1e-9 && (a - 0.75).abs() < 1e-9,
        "{all} {a}"
    );

    // Another writer's totals count toward the day's; a sub-agent's spending toward its
    // chat's.
    let other = StateUsageStore::new(two, "two");
    other
        .record(&record(nov30, "c", 1, 1.0))
        .await
        .expect("record");
    let mut child = record(nov30, "spawn_c_1", 1, 0.5);
    child.key.chat = Some("c".into());
    other.record(&child).await.expect("record");
    let (all, c) = store.day_cost(nov30, "c").await.expect("cost");
    assert!(
        (all - 4.25).abs() < 1e-9 && (c - 1.5).abs() < 1e-9,
        "{all} {c}"
    );
    let spent = store.spent(nov30, nov30).await.expect("spent");
    assert!(
        spent
            .iter()
            .any(|r| r.key.session == "spawn_c_1" && r.key.chat() == "c"),
        "{spent:?}"
    );

    // Recording at once from both handles loses nothing.
    let tasks: Vec<_> = (0..10)
        .map(|n| {
            let store = if n % 2 == 0 {
                store.clone()
            } else {
                other.clone()
            };
            tokio::spawn(async move { store.record(&record(dec1, "d", 1, 0.1)).await })
        })
        .collect();
    for task in tasks {
        task.await.expect("task").expect("record");
    }
    let (_, d) = again.day_cost(dec1, "d").await.expect("cost");
    assert!((d - 1.0).abs() < 1e-9, "{d}");
}

#[tokio::test]
async fn spending_in_files_of_one_process() {
    let dir = tempfile::tempdir().expect("tempdir");
    let files = || Arc::new(FileState::new(dir.path())) as Arc<dyn StateStore>;
    behaves_as_a_usage_store(files(), files()).await;
    assert!(dir.path().join("usage/day/2026-11-30/one").exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spending_in_a_clusters_bucket() {
    let server = NatsServer::start();
    let member = async |name: &str| {
        let state = NatsState::connect(ClusterConfig::plain(&server.url(), name))
            .await
            .expect("joins the cluster");
        Arc::new(state) as Arc<dyn StateStore>
    };
    behaves_as_a_usage_store(member("one").await, member("two").await).await;
}
