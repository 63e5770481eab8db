//! The worker's side of the cluster's fencing, on one process: messages carry a [`Tenure`]
//! made by hand (as a worker's partition would give it), and "another worker" is a second
//! store on the same files, or a store that refuses a write as stale after writing what the
//! other worker did. So each rule is seen on its own, deterministically:
//!
//! - a session read under one holding of its partition is read again under the next;
//! - nothing is started for a message whose holding is lost, and nothing until an unsure
//!   holding is confirmed;
//! - a turn under way is abandoned — nothing more saved or sent — once its holding is lost;
//! - a write refused as stale makes the worker read the session again and decide anew, so
//!   an answer another worker recorded stands and nothing is answered twice.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use switchboard_agent::{Agent, AgentConfig, Dispatcher};
use switchboard_core::{
    Ack, Bus, Channel, ChannelContext, ChannelName, ChatHub, ChatId, ChatMessage, CoreError, Fate,
    InboundMessage, LaneOptions, MessageId, OutboundKind, OutboundMessage, SenderId, SessionKey,
    Shutdown, Tenure, TurnEnd,
};
use switchboard_llm::{ChatRequest, ChatResponse, LlmError, LlmProvider, StreamSink};
use switchboard_sessions::{
    Batch, InboundState, JsonlStore, Loaded, Revision, SessionStore, Snapshot, StoreError,
};
use switchboard_tools::{ToolSources, Workspace};
use tokio::sync::{Notify, mpsc};
use tokio::time::Instant;

const PATIENCE: Duration = Duration::from_secs(10);

/// Answers `re: <the last user text>`, recording each request; while `held`, each call
/// waits for `release` first.
#[derive(Default)]
struct Model {
    requests: Mutex<Vec<Vec<String>>>,
    held: std::sync::atomic::AtomicBool,
    release: Notify,
    called: Notify,
}

impl Model {
    /// The user texts of each request so far.
    fn histories(&self) -> Vec<Vec<String>> {
        self.requests.lock().expect("lock").clone()
    }
}

#[async_trait]
impl LlmProvider for Model {
    fn name(&self) -> &str {
        "model"
    }
    fn model(&self) -> &str {
        "model"
    }
    async fn chat(
        &self,
        request: &ChatRequest,
        _: &StreamSink<'_>,
    ) -> Result<ChatResponse, LlmError> {
        let said: Vec<String> = request
            .messages
            .iter()
            .filter_map(|message| match &**message {
                ChatMessage::User { content, .. } => Some(content.clone()),
                _ => None,
            })
            .collect();
        let last = said.last().cloned().unwrap_or_default();
        self.requests.lock().expect("lock").push(said);
        self.called.notify_one();
        if self.held.load(std::sync::atomic::Ordering::SeqCst) {
            self.release.notified().await;
        }
        Ok(ChatResponse {
            content: format!("re: {last}"),
            ..ChatResponse::default()
        })
    }
}

/// The chat's channel: what reached it.
#[derive(Default)]
struct Chat(Mutex<Vec<OutboundKind>>);

impl Chat {
    fn messages(&self) -> Vec<String> {
        self.0
            .lock()
            .expect("lock")
            .iter()
            .filter_map(|kind| match kind {
                OutboundKind::Message(text) => Some(text.clone()),
                _ => None,
            })
            .collect()
    }
}

#[async_trait]
impl Channel for Chat {
    fn name(&self) -> ChannelName {
        "websocket".into()
    }
    async fn run(&self, _: ChannelContext) -> Result<(), CoreError> {
        Ok(())
    }
    async fn send(&self, message: OutboundMessage) -> Result<switchboard_core::Sent, CoreError> {
        self.0.lock().expect("lock").push(message.kind);
        Ok(switchboard_core::Sent::accepted())
    }
}

/// A worker's process: the hub, the dispatcher running, one agent on `store`.
struct Process {
    hub: Arc<ChatHub>,
    model: Arc<Model>,
    chat: Arc<Chat>,
    fates: mpsc::UnboundedReceiver<(String, Fate)>,
    fate_tx: mpsc::UnboundedSender<(String, Fate)>,
    _shutdown: Shutdown,
}

impl Process {
    fn start(dir: &std::path::Path, store: Arc<dyn SessionStore>) -> Self {
        let workspace = Arc::new(Workspace::new(&dir.join("ws"), &[], true).expect("workspace"));
        let model = Arc::new(Model::default());
        let sources = ToolSources::new();
        let agent = Agent::new(model.clone(), sources, store, AgentConfig::new(workspace));
        let shutdown = Shutdown::new();
        let hub = Arc::new(ChatHub::new(64, shutdown.intake().clone()));
        let chat = Arc::new(Chat::default());
        hub.register_channel(chat.clone(), LaneOptions::default());
        let bus: Arc<dyn Bus> = hub.clone();
        let dispatcher = Arc::new(Dispatcher::new(Arc::new(agent), bus, shutdown.clone()));
        tokio::spawn(dispatcher.run());
        let (fate_tx, fates) = mpsc::unbounded_channel();
        Self {
            hub,
            model,
            chat,
            fates,
            fate_tx,
            _shutdown: shutdown,
        }
    }

    /// Sends `text` (its id the text itself) under `tenure`.
    async fn send(&self, text: &str, tenure: &Tenure) {
        let mut message = InboundMessage::text(
            "websocket".into(),
            ChatId::from("c"),
            SenderId::from("person"),
            text,
        );
        message.id = Some(MessageId::from(text));
        message.tenure = Some(tenure.clone());
        let fates = self.fate_tx.clone();
        let id = text.to_owned();
        message.ack = Some(Ack::new(move |fate| {
            let _ = fates.send((id, fate));
        }));
        self.hub.publish_inbound(message).await.expect("queued");
    }

    /// The fate of the next message settled.
    async fn fate(&mut self) -> (String, Fate) {
        tokio::time::timeout(PATIENCE, self.fates.recv())
            .await
            .expect("a message settled in time")
            .expect("open")
    }
}

fn held(epoch: u64) -> Tenure {
    Tenure::new(epoch, Instant::now() + Duration::from_secs(3600))
}

fn key() -> SessionKey {
    SessionKey::from("websocket_c")
}

#[tokio::test]
async fn a_session_read_under_one_holding_is_read_again_under_the_next() {
    let dir = tempfile::tempdir().expect("tempdir");
    let state = dir.path().join("state");
    let store = Arc::new(JsonlStore::open(&state).expect("store"));
    let mut worker = Process::start(dir.path(), store);
    let first = held(1);
    worker.send("m1", &first).await;
    assert_eq!(worker.fate().await, ("m1".into(), Fate::Handled));

    // Meanwhile another worker held the partition and answered a message of the chat.
    let other = JsonlStore::open(&state).expect("the other worker's store");
    let elsewhere = [ChatMessage::user("m2"), ChatMessage::assistant("re: m2")];
    other
        .append(&key(), Revision::default(), &Batch::messages(&elsewhere))
        .await
        .expect("written elsewhere");

    // Under the same holding, the session in memory is used as it is (nobody else can
    // have written it) ...
    worker.send("m3", &first).await;
    assert_eq!(worker.fate().await, ("m3".into(), Fate::Handled));
    // ... under the next, it is read again.
    worker.send("m4", &held(2)).await;
    assert_eq!(worker.fate().await, ("m4".into(), Fate::Handled));
    let histories = worker.model.histories();
    assert_eq!(histories[1], ["m1", "m3"], "the same holding: from memory");
    assert_eq!(
        histories[2],
        ["m1", "m2", "m3", "m4"],
        "a new holding: the session read again, with what the other worker wrote"
    );
}

#[tokio::test]
async fn nothing_starts_for_a_message_whose_holding_is_lost_or_until_an_unsure_one_is_confirmed() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = Arc::new(JsonlStore::open(&dir.path().join("state")).expect("store"));
    let mut worker = Process::start(dir.path(), store.clone());

    let lost = held(1);
    lost.lose();
    worker.send("m1", &lost).await;
    assert_eq!(
        worker.fate().await,
        ("m1".into(), Fate::Unprocessed),
        "handed back to the partition's new holder"
    );
    assert!(worker.model.histories().is_empty(), "no turn started");
    assert!(
        worker.chat.0.lock().expect("lock").is_empty(),
        "nothing sent"
    );
    assert!(store.load(&key()).await.expect("load").messages.is_empty());

    // Paused past its lease: the holding is unsure until the next renewal says.
    let unsure = Tenure::new(2, Instant::now());
    worker.send("m2", &unsure).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(
        worker.model.histories().is_empty(),
        "it waits for the renewal"
    );
    unsure.renew(Instant::now() + Duration::from_secs(60));
    assert_eq!(worker.fate().await, ("m2".into(), Fate::Handled));
    assert_eq!(worker.chat.messages(), ["re: m2"]);
}

#[tokio::test]
async fn a_turn_is_abandoned_the_moment_its_holding_is_lost() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = Arc::new(JsonlStore::open(&dir.path().join("state")).expect("store"));
    let mut worker = Process::start(dir.path(), store.clone());
    worker
        .model
        .held
        .store(true, std::sync::atomic::Ordering::SeqCst);
    let tenure = held(1);
    worker.send("m1", &tenure).await;
    tokio::time::timeout(PATIENCE, worker.model.called.notified())
        .await
        .expect("the turn calls the model");
    tenure.lose();
    assert_eq!(worker.fate().await, ("m1".into(), Fate::Unprocessed));
    // The model answers only now: the answer goes nowhere.
    worker.model.release.notify_one();
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(
        worker.chat.messages().is_empty(),
        "no answer from a lost holding"
    );
    let loaded = store.load(&key()).await.expect("load");
    assert_eq!(
        loaded.messages,
        [ChatMessage::user("m1")],
        "only what was saved before the loss: the new holder takes the turn up from there"
    );
    assert_eq!(
        loaded.inbound,
        [(MessageId::from("m1"), InboundState::Received)]
    );
}

/// The files of one process, where the next write that journals `answering` as answered is
/// preceded by what another worker wrote — its own answer, delivered — and refused as
/// stale, as the cluster's store refuses a write made after an out-of-date revision.
struct Overtaken {
    files: JsonlStore,
    answering: MessageId,
    done: std::sync::atomic::AtomicBool,
}

#[async_trait]
impl SessionStore for Overtaken {
    async fn load(&self, key: &SessionKey) -> Result<Loaded, StoreError> {
        self.files.load(key).await
    }
    async fn append(
        &self,
        key: &SessionKey,
        revision: Revision,
        batch: &Batch<'_>,
    ) -> Result<Revision, StoreError> {
        let answers = matches!(batch.inbound, Some((id, InboundState::Answered { .. })) if *id == self.answering);
        if answers && !self.done.swap(true, std::sync::atomic::Ordering::SeqCst) {
            let theirs = [ChatMessage::assistant("re: m1 (from the other worker)")];
            let delivered = InboundState::Delivered;
            let other = Batch {
                messages: &theirs,
                usage: None,
                inbound: Some((&self.answering, &delivered)),
            };
            self.files.append(key, revision, &other).await?;
            return Err(StoreError::Stale);
        }
        self.files.append(key, revision, batch).await
    }
    async fn compact(
        &self,
        key: &SessionKey,
        revision: Revision,
        snapshot: &Snapshot<'_>,
    ) -> Result<Revision, StoreError> {
        self.files.compact(key, revision, snapshot).await
    }
    async fn transcript(&self, key: &SessionKey) -> Result<Vec<ChatMessage>, StoreError> {
        self.files.transcript(key).await
    }
    async fn archive(&self, key: &SessionKey, revision: Revision) -> Result<Revision, StoreError> {
        self.files.archive(key, revision).await
    }
}

#[tokio::test]
async fn a_stale_write_is_decided_anew_and_the_other_workers_answer_stands() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = Arc::new(Overtaken {
        files: JsonlStore::open(&dir.path().join("state")).expect("store"),
        answering: MessageId::from("m1"),
        done: Default::default(),
    });
    let mut worker = Process::start(dir.path(), store.clone());
    worker.send("m1", &held(1)).await;
    assert_eq!(
        worker.fate().await,
        ("m1".into(), Fate::Handled),
        "read again: the other worker delivered it"
    );
    assert!(
        worker.chat.messages().is_empty(),
        "this worker's answer was superseded and never sent: {:?}",
        worker.chat.messages()
    );
    let loaded = store.load(&key()).await.expect("load");
    let answers = loaded
        .messages
        .iter()
        .filter(|message| matches!(message, ChatMessage::Assistant { .. }))
        .count();
    assert_eq!(answers, 1, "one answer on record: {:?}", loaded.messages);

    // The next message is answered on the session as the other worker left it.
    worker.send("m2", &held(1)).await;
    assert_eq!(worker.fate().await, ("m2".into(), Fate::Handled));
    assert_eq!(worker.chat.messages(), ["re: m2"]);
    let done = worker
        .chat
        .0
        .lock()
        .expect("lock")
        .iter()
        .filter(|kind| matches!(kind, OutboundKind::Done(TurnEnd::Answered)))
        .count();
    assert_eq!(done, 1, "one `done`, for m2");
}
