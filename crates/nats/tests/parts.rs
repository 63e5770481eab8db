//! The cluster's pieces against a real `nats-server`: the session store and the shared
//! documents seen from two members, inbound in order through a worker's partitions, outbound delivered by the
//! gateway with its receipt, and partitions taken over when a worker leaves.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use switchboard_core::{
    Bus, Channel, ChannelContext, ChannelName, ChatMessage, CoreError, Fate, InboundMessage,
    LaneOptions, OutboundKind, OutboundMessage, SessionKey, TurnEnd,
};
use switchboard_nats::{Cluster, ClusterConfig, NatsBus, NatsState, NatsStore, Role};
use switchboard_sessions::{
    Batch, InboundState, Revision, SessionStore, Snapshot, StoreError, StoreHealth,
};
use switchboard_testkit::NatsServer;
use tokio_util::sync::CancellationToken;

fn config(server: &NatsServer, role: Role, member: &str) -> ClusterConfig {
    ClusterConfig {
        nats_url: server.url(),
        auth: Default::default(),
        tls: None,
        name: "t".into(),
        partitions: 4,
        role,
        lease: Duration::from_secs(1),
        member: member.into(),
    }
}

async fn join(server: &NatsServer, role: Role, member: &str) -> Cluster {
    Cluster::connect(config(server, role, member))
        .await
        .expect("joins the cluster")
}

async fn within<T>(what: &str, future: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(20), future)
        .await
        .unwrap_or_else(|_| panic!("{what}: not within 20 s"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_written_on_one_member_is_read_alike_on_another() {
    let server = NatsServer::start();
    let one = NatsStore::new(&join(&server, Role::Worker, "one").await, &"default".into());
    let two = NatsStore::new(
        &join(&server, Role::Gateway, "two").await,
        &"default".into(),
    );
    let key = SessionKey::from("telegram_4.2");
    let first = one.load(&key).await.expect("load");
    assert!(first.messages.is_empty());

    let asked = [ChatMessage::user("q1"), ChatMessage::assistant("a1")];
    let state = InboundState::Received;
    let id = "m1".into();
    let revision = one
        .append(
            &key,
            first.revision,
            &Batch {
                messages: &asked,
                usage: None,
                inbound: Some((&id, &state)),
            },
        )
        .await
        .expect("append");
    let loaded = two.load(&key).await.expect("load");
    assert_eq!(loaded.messages, asked);
    assert_eq!(loaded.inbound, vec![(id.clone(), InboundState::Received)]);
    assert_eq!(loaded.revision, revision, "both see the same record");

    // Compaction replaces what came before, in one step.
    let window = [ChatMessage::user("q2"), ChatMessage::assistant("a2")];
    let revision = one
        .compact(
            &key,
            revision,
            &Snapshot {
                messages: &window,
                usage: Default::default(),
                inbound: &[(id.clone(), InboundState::Delivered)],
                summary: None,
            },
        )
        .await
        .expect("compact");
    let loaded = two.load(&key).await.expect("load");
    assert_eq!(loaded.messages, window);
    assert_eq!(loaded.inbound, vec![(id, InboundState::Delivered)]);
    assert_eq!(two.transcript(&key).await.expect("transcript"), window);

    let listed = two.list().await.expect("list");
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].key, Some(key.clone()));

    // A long append (larger than one message) comes back whole.
    let long: Vec<ChatMessage> = (0..40)
        .map(|i| ChatMessage::user(format!("{i}:{}", "x".repeat(30_000))))
        .collect();
    one.append(&key, revision, &Batch::messages(&long))
        .await
        .expect("append long");
    let loaded = two.load(&key).await.expect("load");
    assert_eq!(loaded.messages.len(), 42);

    two.archive(&key, loaded.revision).await.expect("archive");
    assert!(one.load(&key).await.expect("load").messages.is_empty());
    assert!(!one.has_history(&key).await);
    assert!(one.list().await.expect("list").is_empty());
}

/// The fence of the cluster's sessions: a member whose picture of a session is out of date
/// (it lost the session's partition while paused, and another wrote the session since)
/// can neither add to it nor compact away what it never saw — every such write is refused
/// as stale and lands nothing — and it writes again once it has read the session afresh.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_writer_with_an_out_of_date_picture_is_refused_and_lands_nothing() {
    let server = NatsServer::start();
    let old = NatsStore::new(&join(&server, Role::Worker, "old").await, &"default".into());
    let new = NatsStore::new(&join(&server, Role::Worker, "new").await, &"default".into());
    let key = SessionKey::from("websocket_chat-1");
    let m0 = [ChatMessage::user("m0"), ChatMessage::assistant("re: m0")];
    let seen_by_old = old
        .append(&key, Revision(0), &Batch::messages(&m0))
        .await
        .expect("the first owner writes");

    // The partition moved: the new owner reads the session and answers m1 on it.
    let read = new.load(&key).await.expect("load");
    assert_eq!(read.revision, seen_by_old);
    let m1 = [ChatMessage::user("m1"), ChatMessage::assistant("re: m1")];
    let state = InboundState::Delivered;
    let id = "m1".into();
    let after_m1 = new
        .append(
            &key,
            read.revision,
            &Batch {
                messages: &m1,
                usage: None,
                inbound: Some((&id, &state)),
            },
        )
        .await
        .expect("the new owner writes");

    // The old owner wakes with its picture of before m1.
    let stale = [
        ChatMessage::user("m1"),
        ChatMessage::assistant("a second answer"),
    ];
    assert!(matches!(
        old.append(&key, seen_by_old, &Batch::messages(&stale))
            .await,
        Err(StoreError::Stale)
    ));
    let window = [m0[0].clone(), m0[1].clone()];
    let compacted = old
        .compact(
            &key,
            seen_by_old,
            &Snapshot {
                messages: &window,
                usage: Default::default(),
                inbound: &[],
                summary: None,
            },
        )
        .await;
    assert!(
        matches!(compacted, Err(StoreError::Stale)),
        "a compaction never drops a record its writer has not read"
    );
    assert!(matches!(
        old.archive(&key, seen_by_old).await,
        Err(StoreError::Stale)
    ));
    assert_eq!(
        old.health(),
        StoreHealth::Ok,
        "a refusal is not a failing store"
    );

    let now = new.load(&key).await.expect("load");
    assert_eq!(now.revision, after_m1, "nothing landed");
    assert_eq!(now.messages, [m0.to_vec(), m1.to_vec()].concat());
    assert_eq!(now.inbound, vec![(id, InboundState::Delivered)]);

    // Read afresh, its writes land again.
    let again = old.load(&key).await.expect("load");
    let m2 = [ChatMessage::user("m2")];
    old.append(&key, again.revision, &Batch::messages(&m2))
        .await
        .expect("a writer that read the session afresh writes");
    assert_eq!(new.load(&key).await.expect("load").messages.len(), 5);
}

/// A channel that records what it is sent.
#[derive(Default)]
struct Recorder(Mutex<Vec<OutboundMessage>>);

#[async_trait::async_trait]
impl Channel for Recorder {
    fn name(&self) -> ChannelName {
        "telegram".into()
    }
    async fn run(&self, _: ChannelContext) -> Result<(), CoreError> {
        Ok(())
    }
    async fn send(&self, message: OutboundMessage) -> Result<switchboard_core::Sent, CoreError> {
        self.0.lock().expect("lock").push(message);
        Ok(switchboard_core::Sent::accepted())
    }
}

fn inbound(chat: &str, text: &str) -> InboundMessage {
    let mut message =
        InboundMessage::text("telegram".into(), chat.into(), "7".into(), text.to_owned());
    message.id = Some(format!("{chat}-{text}").into());
    message
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn messages_reach_the_worker_in_order_and_replies_the_gateway_with_receipts() {
    let server = NatsServer::start();
    let gateway = NatsBus::new(
        join(&server, Role::Gateway, "gw").await,
        16,
        CancellationToken::new(),
    );
    let worker = NatsBus::new(
        join(&server, Role::Worker, "w1").await,
        16,
        CancellationToken::new(),
    );
    worker.start_worker();
    let mut taken = worker.take_inbound().expect("inbound");
    let recorder = Arc::new(Recorder::default());
    gateway.register_channel(recorder.clone(), LaneOptions::default());

    // The gateway's channel is told once the bus holds the message.
    let (fates, mut told) = tokio::sync::mpsc::unbounded_channel();
    for text in ["1", "2", "3"] {
        let mut message = inbound("42", text);
        let fates = fates.clone();
        message.ack = Some(switchboard_core::Ack::new(move |fate| {
            let _ = fates.send(fate);
        }));
        gateway.publish_inbound(message).await.expect("publish");
        assert_eq!(told.recv().await, Some(Fate::Handled));
    }
    for text in ["1", "2", "3"] {
        let message = within("the worker gets it", taken.recv())
            .await
            .expect("message");
        assert_eq!(message.content, text, "in order");
        assert_eq!(message.session_key(), SessionKey::from("telegram_42"));
        message.settle(Fate::Handled);
    }
    within("the only worker holds all", async {
        while worker.held_partitions().len() < 4 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;

    // A reply: published by the worker, delivered by the gateway, with the receipt.
    let reply = |kind| OutboundMessage {
        channel: "telegram".into(),
        chat_id: "42".into(),
        reply_to: None,
        kind,
        cursor: None,
        turn: None,
    };
    worker
        .publish_outbound(reply(OutboundKind::Message("hello".into())))
        .await
        .expect("publish");
    within(
        "delivered with its receipt",
        worker.deliver_outbound(reply(OutboundKind::Done(TurnEnd::Answered))),
    )
    .await
    .expect("delivered");
    let sent = recorder.0.lock().expect("lock").clone();
    assert_eq!(
        sent.iter().map(|m| m.kind.clone()).collect::<Vec<_>>(),
        [
            OutboundKind::Message("hello".into()),
            OutboundKind::Done(TurnEnd::Answered)
        ]
    );
    assert!(
        within(
            "notify",
            worker.may_notify(&"telegram".into(), &"42".into())
        )
        .await
        .expect("asked")
    );
    let unknown = worker.may_notify(&"discord".into(), &"1".into()).await;
    assert!(
        matches!(unknown, Err(CoreError::UnknownChannel(_))),
        "{unknown:?}"
    );
    worker.close().await;
    gateway.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_that_leaves_hands_its_partitions_and_unsettled_messages_on() {
    let server = NatsServer::start();
    let gateway = NatsBus::new(
        join(&server, Role::Gateway, "gw").await,
        64,
        CancellationToken::new(),
    );
    let first_intake = CancellationToken::new();
    let first = NatsBus::new(
        join(&server, Role::Worker, "w1").await,
        64,
        first_intake.clone(),
    );
    first.start_worker();
    let mut first_taken = first.take_inbound().expect("inbound");
    within("w1 holds all", async {
        while first.held_partitions().len() < 4 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;

    let second = NatsBus::new(
        join(&server, Role::Worker, "w2").await,
        64,
        CancellationToken::new(),
    );
    second.start_worker();
    let mut second_taken = second.take_inbound().expect("inbound");
    within("the partitions are split", async {
        while first.held_partitions().len() != 2 || second.held_partitions().len() != 2 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;

    // Messages of many chats: each reaches the worker that holds its partition.
    for chat in 0..20 {
        gateway
            .publish_inbound(inbound(&chat.to_string(), "hi"))
            .await
            .expect("publish");
    }
    let mut unsettled = Vec::new();
    let mut seen = 0;
    while seen < 20 {
        tokio::select! {
            Some(message) = first_taken.recv() => { unsettled.push(message); seen += 1; }
            Some(message) = second_taken.recv() => { message.settle(Fate::Handled); seen += 1; }
            () = tokio::time::sleep(Duration::from_secs(20)) => panic!("only {seen} of 20 arrived"),
        }
    }
    assert!(!unsettled.is_empty(), "both workers got some");
    let left: Vec<String> = unsettled.iter().map(|m| m.chat_id.to_string()).collect();

    // The first worker stops taking messages without settling its own: the second takes
    // its partitions and gets them again.
    first_intake.cancel();
    drop(unsettled);
    let mut again = Vec::new();
    while again.len() < left.len() {
        let message = within("redelivered to the second", second_taken.recv())
            .await
            .expect("message");
        again.push(message.chat_id.to_string());
        message.settle(Fate::Handled);
    }
    again.sort();
    let mut left = left;
    left.sort();
    assert_eq!(again, left);
    within("the second holds all", async {
        while second.held_partitions().len() < 4 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    first.close().await;
    second.close().await;
    gateway.close().await;
    drop(first_taken);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shared_documents_are_one_truth_for_every_member() {
    use switchboard_core::{Change, StateStore};
    let server = NatsServer::start();
    let one: Arc<dyn StateStore> =
        Arc::new(NatsState::new(&join(&server, Role::Worker, "one").await));
    let two: Arc<dyn StateStore> =
        Arc::new(NatsState::new(&join(&server, Role::Gateway, "two").await));
    assert_eq!(one.get("pairing.json").await.expect("get"), None);
    one.put("pairing.json", b"{}".to_vec()).await.expect("put");
    assert_eq!(
        two.get("pairing.json")
            .await
            .expect("get")
            .expect("there")
            .bytes,
        b"{}"
    );

    // Members counting at once: compare-and-set loses no one's change.
    let mut tasks = Vec::new();
    for n in 0..20 {
        let store = if n % 2 == 0 { one.clone() } else { two.clone() };
        tasks.push(tokio::spawn(async move {
            let mut count = |bytes: Option<&[u8]>| {
                let n: u64 = bytes
                    .and_then(|b| std::str::from_utf8(b).ok()?.parse().ok())
                    .unwrap_or(0);
                Change::Put((n + 1).to_string().into_bytes())
            };
            store
                .update("usage/day/2026-11-26", &mut count)
                .await
                .expect("update");
        }));
    }
    for task in tasks {
        within("the counts", task).await.expect("task");
    }
    let counted = one
        .get("usage/day/2026-11-26")
        .await
        .expect("get")
        .expect("there");
    assert_eq!(counted.bytes, b"20");

    // A prefix is read with its keys as written (dots and all), nothing beside it.
    for key in [
        "scheduler/job/j1",
        "scheduler/job/a.b=c",
        "scheduler/runs/j1",
    ] {
        two.put(key, key.as_bytes().to_vec()).await.expect("put");
    }
    let jobs = one.scan("scheduler/job").await.expect("scan");
    assert_eq!(
        jobs.iter().map(|(key, _)| key.as_str()).collect::<Vec<_>>(),
        ["scheduler/job/a.b=c", "scheduler/job/j1"]
    );
    assert!(one.scan("nothing").await.expect("scan").is_empty());

    // Removed, it is gone for both, and made again from nothing.
    let mut remove = |_: Option<&[u8]>| Change::Delete;
    two.update("scheduler/job/j1", &mut remove)
        .await
        .expect("delete");
    assert_eq!(one.get("scheduler/job/j1").await.expect("get"), None);
    assert_eq!(one.scan("scheduler/job").await.expect("scan").len(), 1);
    let mut seen = None;
    let mut again = |bytes: Option<&[u8]>| {
        seen = Some(bytes.map(<[u8]>::to_vec));
        Change::Put(b"again".to_vec())
    };
    one.update("scheduler/job/j1", &mut again)
        .await
        .expect("again");
    assert_eq!(seen, Some(None), "a removed document reads as none");
    assert_eq!(
        two.get("scheduler/job/j1")
            .await
            .expect("get")
            .expect("there")
            .bytes,
        b"again"
    );
}

/// A member that wrote a document keeps it in memory to save a read on its next change —
/// but a change that decides to write nothing (a claim already taken, a run settled, a job
/// not yet due) is decided on the document as the server has it, not on that memory:
/// another member may have changed it since, and nothing would tell the first otherwise.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_change_that_writes_nothing_is_decided_on_the_servers_document() {
    use switchboard_core::{Change, StateStore};
    let server = NatsServer::start();
    let one: Arc<dyn StateStore> =
        Arc::new(NatsState::new(&join(&server, Role::Worker, "one").await));
    let two: Arc<dyn StateStore> =
        Arc::new(NatsState::new(&join(&server, Role::Worker, "two").await));
    let set = |value: &'static [u8]| move |_: Option<&[u8]>| Change::Put(value.to_vec());
    one.update("scheduler/job/j9", &mut set(b"due 10:00"))
        .await
        .expect("one writes");
    two.update("scheduler/job/j9", &mut set(b"due 10:05"))
        .await
        .expect("two moves it on");
    // One moves the job past 10:05 only if it is due at 10:05: as it last wrote it, it is
    // not — as it is, it is.
    let mut decided_on = Vec::new();
    let mut move_past = |bytes: Option<&[u8]>| {
        decided_on.push(bytes.map(<[u8]>::to_vec));
        if bytes == Some(b"due 10:05".as_slice()) {
            Change::Put(b"due 10:10".to_vec())
        } else {
            Change::Keep
        }
    };
    one.update("scheduler/job/j9", &mut move_past)
        .await
        .expect("update");
    assert_eq!(
        decided_on.last(),
        Some(&Some(b"due 10:05".to_vec())),
        "decided on the server's document"
    );
    assert_eq!(
        two.get("scheduler/job/j9")
            .await
            .expect("get")
            .expect("there")
            .bytes,
        b"due 10:10"
    );
}
