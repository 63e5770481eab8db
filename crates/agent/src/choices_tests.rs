//! Chats' choices in the state store: the same contract on both backends — files in one
//! process, and the bucket of a real `nats-server` shared by two members — and the files of
//! before moved in.

use std::sync::Arc;

use switchboard_nats::{ClusterConfig, NatsState};
use switchboard_sessions::FileState;
use switchboard_testkit::NatsServer;

use super::*;

fn model(name: &str) -> Choices {
    Choices {
        model: Some(name.into()),
    }
}

/// What the choices do on any state store: `one` and `two` are two handles on the same
/// documents (a restart, two workers).
async fn behaves_as_a_choice_store(one: Arc<dyn StateStore>, two: Arc<dyn StateStore>) {
    let key = SessionKey::from("telegram_1");
    let store = StateChoices::new(one.clone(), "default");
    let again = StateChoices::new(two.clone(), "default");
    let elsewhere = StateChoices::new(two, "helper");
    assert_eq!(store.get(&key).await, Choices::default());
    store.set(&key, model("big")).await.expect("set");
    store
        .set(&SessionKey::from("telegram_2"), model("small"))
        .await
        .expect("set");
    assert_eq!(again.get(&key).await, model("big"));
    assert_eq!(elsewhere.get(&key).await, Choices::default(), "per agent");
    again.set(&key, Choices::default()).await.expect("forget");
    assert_eq!(store.get(&key).await, Choices::default());
    assert_eq!(
        store.get(&SessionKey::from("telegram_2")).await,
        model("small")
    );
    // A document that does not read is no choice: the chat uses its agent's model.
    one.put("agents/default/choices/telegram_3", b"{not json".to_vec())
        .await
        .expect("put");
    assert_eq!(
        again.get(&SessionKey::from("telegram_3")).await,
        Choices::default()
    );
}

#[tokio::test]
async fn choices_in_files_of_one_process() {
    let dir = tempfile::tempdir().expect("tempdir");
    let files = || Arc::new(FileState::new(dir.path())) as Arc<dyn StateStore>;
    behaves_as_a_choice_store(files(), files()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn choices_in_a_clusters_bucket() {
    let server = NatsServer::start();
    let member = async |name: &str| {
        let state = NatsState::connect(ClusterConfig::plain(&server.url(), name))
            .await
            .expect("joins the cluster");
        Arc::new(state) as Arc<dyn StateStore>
    };
    behaves_as_a_choice_store(member("one").await, member("two").await).await;
}

#[tokio::test]
async fn the_choices_files_of_every_agent_move_in_once() {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(
        dir.path().join("choices.json"),
        r#"{"telegram_1": {"model": "big"}}"#,
    )
    .expect("default agent's");
    let helper = dir.path().join("agents/helper");
    std::fs::create_dir_all(&helper).expect("dir");
    std::fs::write(
        helper.join("choices.json"),
        r#"{"telegram_1": {"model": "small"}, "websocket_c": {"model": "tiny"}}"#,
    )
    .expect("helper's");
    let state = Arc::new(FileState::new(dir.path())) as Arc<dyn StateStore>;
    assert_eq!(migrate_choices(dir.path(), &state).await.expect("moved"), 3);
    assert_eq!(migrate_choices(dir.path(), &state).await.expect("again"), 0);
    assert!(helper.join("choices.json.migrated").exists());
    let key = SessionKey::from("telegram_1");
    let default = StateChoices::new(state.clone(), AgentName::default().as_str());
    assert_eq!(default.get(&key).await, model("big"));
    let helper = StateChoices::new(state, "helper");
    assert_eq!(helper.get(&key).await, model("small"));
    assert_eq!(
        helper.get(&SessionKey::from("websocket_c")).await,
        model("tiny")
    );
}
