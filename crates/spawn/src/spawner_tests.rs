//! The spawner on a hub of its own: children as messages, their answers handed over once, a
//! stop, their numbering.

use switchboard_core::ChatHub;

use super::*;

fn request(parent: &str, wait: bool) -> Request {
    Request {
        agent: AgentName::default(),
        parent: SessionKey::from(parent),
        task: "look it up".into(),
        label: "lookup".into(),
        chat: SessionKey::from(parent),
        turn: Some(1),
        wait,
        limits: TreeLimits {
            running: 2,
            per_turn: 100,
        },
    }
}

fn setup() -> (
    Spawner,
    tokio::sync::mpsc::Receiver<InboundMessage>,
    CancellationToken,
) {
    let hub: Arc<dyn Bus> = Arc::new(ChatHub::new(16, CancellationToken::new()));
    let inbound = hub.take_inbound().expect("inbound");
    let turns = CancellationToken::new();
    (Spawner::new(hub, turns.clone()), inbound, turns)
}

#[tokio::test]
async fn children_run_as_messages_and_their_answers_come_back_together_once() {
    let (spawner, mut inbound, _turns) = setup();
    let taken = |key: SessionKey| async move { key.as_str() == "spawn_telegram_1~1" };
    let a = spawner
        .start(request("telegram_1", false), taken)
        .await
        .expect("first");
    let b = spawner
        .start(request("telegram_1", false), |_| async { false })
        .await
        .expect("second");
    assert_eq!(
        a.child.as_str(),
        "telegram_1~2",
        "a number with history is skipped"
    );
    assert_eq!(b.child.as_str(), "telegram_1~3");
    let err = spawner
        .start(request("telegram_1", false), |_| async { false })
        .await
        .err()
        .expect("at most two");
    assert!(err.contains("agent.spawn.max_children"), "{err}");
    let task = inbound.recv().await.expect("a's task");
    assert_eq!(task.channel.as_str(), CHANNEL);
    assert_eq!(task.session_key().as_str(), "spawn_telegram_1~2");
    assert!(matches!(task.origin, Origin::Delegated { .. }));
    inbound.recv().await.expect("b's task");

    spawner
        .take(&a.child, OutboundKind::Message("found A".into()))
        .await;
    spawner
        .take(&a.child, OutboundKind::Done(TurnEnd::Answered))
        .await;
    assert!(
        inbound.try_recv().is_err(),
        "b still runs: nothing handed over yet"
    );
    spawner
        .take(&b.child, OutboundKind::Error("model down".into()))
        .await;
    spawner
        .take(&b.child, OutboundKind::Done(TurnEnd::Failed))
        .await;
    let results = inbound.recv().await.expect("the results, once");
    assert_eq!(results.session_key().as_str(), "telegram_1");
    assert!(
        results
            .content
            .contains("Sub-agent telegram_1~2 (\"lookup\"):\nfound A")
    );
    assert!(
        results
            .content
            .contains("(the sub-agent failed) model down")
    );
    assert!(matches!(&results.origin, Origin::SubAgents { children } if children.len() == 2));
    assert!(inbound.try_recv().is_err());
}

#[tokio::test]
async fn a_refused_start_uses_up_no_number() {
    let (spawner, _inbound, _turns) = setup();
    let free = |_| async { false };
    let a = spawner.start(request("telegram_1", false), free).await;
    let _b = spawner.start(request("telegram_1", false), free).await;
    for _ in 0..3 {
        let refused = spawner.start(request("telegram_1", false), free).await;
        assert!(refused.is_err(), "at most two");
    }
    spawner
        .take(&a.expect("a").child, OutboundKind::Done(TurnEnd::Answered))
        .await;
    let next = spawner
        .start(request("telegram_1", false), free)
        .await
        .expect("room again");
    assert_eq!(next.child.as_str(), "telegram_1~3");
}

#[tokio::test]
async fn a_waited_child_answers_its_waiter_and_a_stop_drops_the_rest() {
    let (spawner, mut inbound, _turns) = setup();
    let waited = spawner
        .start(request("websocket_c", true), |_| async { false })
        .await
        .expect("start");
    spawner
        .take(&waited.child, OutboundKind::Message("42".into()))
        .await;
    spawner
        .take(&waited.child, OutboundKind::Done(TurnEnd::Answered))
        .await;
    assert_eq!(waited.answer.expect("waits").await.expect("answer"), "42");
    inbound.recv().await.expect("its task");
    assert!(
        inbound.try_recv().is_err(),
        "a waited answer is not handed over again"
    );

    let a = spawner
        .start(request("websocket_c", false), |_| async { false })
        .await
        .expect("a");
    let b = spawner
        .start(request("websocket_c", false), |_| async { false })
        .await
        .expect("b");
    let agent = AgentName::default();
    let parent = SessionKey::from("websocket_c");
    assert_eq!(spawner.running(&agent, &parent).len(), 2);
    spawner
        .take(&a.child, OutboundKind::Message("A".into()))
        .await;
    spawner
        .take(&a.child, OutboundKind::Done(TurnEnd::Answered))
        .await;
    assert_eq!(spawner.stop(&agent, &parent), 1);
    assert!(a.token.is_cancelled() && b.token.is_cancelled());
    spawner
        .take(&b.child, OutboundKind::Done(TurnEnd::Cancelled))
        .await;
    inbound.recv().await.expect("a's task");
    inbound.recv().await.expect("b's task");
    assert!(
        inbound.try_recv().is_err(),
        "nothing handed over after a /stop"
    );
    let c = spawner
        .start(request("websocket_c", false), |_| async { false })
        .await
        .expect("after");
    assert!(!c.token.is_cancelled(), "a fresh family token");
}
