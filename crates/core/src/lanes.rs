//! [`Lanes`]: outbound delivery, one bounded lane per chat.
//!
//! Each chat of a channel gets its own queue and task, which hands the chat's messages to
//! [`Channel::send`] in order. A platform's rate limit, or a slow edit, in one chat waits in
//! that chat's lane only: other chats' lanes go on, and a publisher waits only when its own
//! chat's lane is full. A lane with nothing to do for a while exits, so memory follows the
//! chats that are talking. What cannot be delivered (after the channel's own retries) is
//! logged with its chat and counted, never dropped silently.
//!
//! # Why an exiting lane never loses a message
//! A publisher reserves a slot in the lane's queue without holding the map's entry, then
//! sends into the slot only while holding the entry (a shared guard) and only if the entry
//! still names the same lane. A lane exits only by removing its own entry, under the
//! entry's exclusive guard, when its queue is empty. So either the removal comes first —
//! and the publisher, finding another lane (or none), drops its slot and starts again — or
//! the send comes first, and the lane sees a queue that is not empty and stays.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use dashmap::DashMap;
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::channel::Channel;
use crate::error::CoreError;
use crate::ids::ChatId;
use crate::message::OutboundMessage;

/// How lanes behave.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LaneOptions {
    /// Messages a chat's lane holds before its publisher waits.
    pub capacity: usize,
    /// A lane with nothing to deliver for this long exits.
    pub idle: Duration,
}

impl Default for LaneOptions {
    fn default() -> Self {
        Self {
            capacity: 256,
            idle: Duration::from_secs(60),
        }
    }
}

/// A queued message, and who waits to learn it was delivered. Boxed: a queue allocates its
/// slots in blocks, and idle lanes should not hold whole messages' worth of memory.
type Item = Box<(
    OutboundMessage,
    Option<oneshot::Sender<Result<(), CoreError>>>,
)>;

/// The delivery lanes of one channel. Cloning shares them.
#[derive(Clone)]
pub struct Lanes {
    inner: Arc<Inner>,
}

struct Inner {
    channel: Arc<dyn Channel>,
    options: LaneOptions,
    /// Live lanes by chat. See the module doc for when an entry may be sent to or removed.
    lanes: DashMap<ChatId, Lane>,
    next_id: AtomicU64,
    /// Every lane task, so closing can wait for them to deliver what they hold.
    tasks: TaskTracker,
    /// Cancelled by [`Lanes::close`]: lanes deliver what is queued, then exit; nothing new
    /// is taken.
    closing: CancellationToken,
    undeliverable: AtomicU64,
}

struct Lane {
    /// Tells this lane apart from a successor for the same chat.
    id: u64,
    /// The lane's queue; its task owns the receiver.
    tx: mpsc::Sender<Item>,
}

impl Lanes {
    /// Lanes delivering through `channel` (wrap it in
    /// [`RetryingChannel`](crate::RetryingChannel) to retry rate limits and outages).
    pub fn new(channel: Arc<dyn Channel>, options: LaneOptions) -> Self {
        Self {
            inner: Arc::new(Inner {
                channel,
                options,
                lanes: DashMap::new(),
                next_id: AtomicU64::new(0),
                tasks: TaskTracker::new(),
                closing: CancellationToken::new(),
                undeliverable: AtomicU64::new(0),
            }),
        }
    }

    /// Queues a message in its chat's lane, waiting only while that lane is full.
    pub async fn push(&self, message: OutboundMessage) -> Result<(), CoreError> {
        self.enqueue(message, None).await
    }

    /// Queues a message and waits until it was delivered (or given up on): the result is
    /// the channel's. Messages queued before it in its chat are delivered first.
    pub async fn deliver(&self, message: OutboundMessage) -> Result<(), CoreError> {
        let (tx, rx) = oneshot::channel();
        let channel = message.channel.to_string();
        self.enqueue(message, Some(tx)).await?;
        rx.await.unwrap_or(Err(CoreError::ChannelClosed(channel)))
    }

    async fn enqueue(
        &self,
        message: OutboundMessage,
        done: Option<oneshot::Sender<Result<(), CoreError>>>,
    ) -> Result<(), CoreError> {
        let chat = message.chat_id.clone();
        let item: Item = Box::new((message, done));
        loop {
            if self.inner.closing.is_cancelled() {
                return Err(CoreError::ChannelClosed(
                    self.inner.channel.name().to_string(),
                ));
            }
            let (id, tx) = match self.inner.lanes.get(&chat) {
                Some(lane) => (lane.id, lane.tx.clone()),
                None => {
                    self.start_lane(&chat);
                    continue;
                }
            };
            // Wait for room without holding the entry; a lane that exits meanwhile closes
            // its queue and we start again.
            let Ok(permit) = tx.reserve_owned().await else {
                continue;
            };
            let entry = self.inner.lanes.get(&chat);
            if entry.as_ref().is_some_and(|lane| lane.id == id) {
                permit.send(item);
                return Ok(());
            }
            // The lane exited after we reserved: the slot is worthless, try the new one.
            drop(entry);
            drop(permit);
        }
    }

    /// Starts a lane for `chat` unless one runs.
    fn start_lane(&self, chat: &ChatId) {
        self.inner.lanes.entry(chat.clone()).or_insert_with(|| {
            let (tx, rx) = mpsc::channel(self.inner.options.capacity.max(1));
            let id = self.inner.next_id.fetch_add(1, Ordering::Relaxed);
            self.inner
                .tasks
                .spawn(run_lane(self.inner.clone(), chat.clone(), id, rx));
            Lane { id, tx }
        });
    }

    /// Messages given up on since start.
    pub fn undeliverable(&self) -> u64 {
        self.inner.undeliverable.load(Ordering::Relaxed)
    }

    /// Lanes running now (chats with something recent to deliver).
    pub fn active(&self) -> usize {
        self.inner.lanes.len()
    }

    /// Stops taking messages, lets every lane deliver what it holds, and waits up to
    /// `deadline` for them. Returns whether all finished.
    pub async fn close(&self, deadline: Duration) -> bool {
        self.inner.closing.cancel();
        self.inner.tasks.close();
        tokio::time::timeout(deadline, self.inner.tasks.wait())
            .await
            .is_ok()
    }
}

/// One chat's lane: delivers its messages in order until it is idle or closed.
async fn run_lane(inner: Arc<Inner>, chat: ChatId, id: u64, mut rx: mpsc::Receiver<Item>) {
    loop {
        let item = tokio::select! {
            biased;
            item = rx.recv() => item,
            // Closing and nothing left: leave (what was queued went out above).
            () = inner.closing.cancelled() => {
                if leave(&inner, &chat, id, &rx) {
                    return;
                }
                continue;
            }
            () = tokio::time::sleep(inner.options.idle) => {
                if leave(&inner, &chat, id, &rx) {
                    return;
                }
                continue;
            }
        };
        let Some(item) = item else { return };
        let (message, done) = *item;
        let result = inner.channel.send(message.clone()).await;
        if let Err(err) = &result {
            let count = inner.undeliverable.fetch_add(1, Ordering::Relaxed) + 1;
            tracing::warn!(channel = %message.channel, chat = %message.chat_id, error = %err,
                undeliverable = count, "a message could not be delivered");
        }
        if let Some(done) = done {
            let _ = done.send(result);
        }
    }
}

/// Removes the lane's entry if its queue is empty (under the entry's exclusive guard).
fn leave(inner: &Inner, chat: &ChatId, id: u64, rx: &mpsc::Receiver<Item>) -> bool {
    inner
        .lanes
        .remove_if(chat, |_, lane| lane.id == id && rx.is_empty())
        .is_some()
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;
    use std::sync::Mutex;

    use async_trait::async_trait;
    use tokio::time::Instant;

    use super::*;
    use crate::channel::ChannelContext;
    use crate::ids::ChannelName;
    use crate::message::OutboundKind;
    use crate::retry::{ChannelRetry, RetryingChannel};

    /// Records deliveries; chats listed in `limited` are rate limited on their first send,
    /// chats in `slow` take that long per message.
    #[derive(Default)]
    struct Recorder {
        delivered: Mutex<Vec<(ChatId, String, Instant)>>,
        limited: Mutex<HashMap<ChatId, Duration>>,
        slow: HashMap<ChatId, Duration>,
        fail: Vec<ChatId>,
    }

    #[async_trait]
    impl Channel for Recorder {
        fn name(&self) -> ChannelName {
            "test".into()
        }
        async fn run(&self, _: ChannelContext) -> Result<(), CoreError> {
            Ok(())
        }
        async fn send(&self, message: OutboundMessage) -> Result<(), CoreError> {
            if let Some(wait) = self.limited.lock().expect("lock").remove(&message.chat_id) {
                return Err(CoreError::RateLimited {
                    retry_after: Some(wait),
                });
            }
            if self.fail.contains(&message.chat_id) {
                return Err(CoreError::Channel {
                    channel: "test".into(),
                    message: "chat not found".into(),
                });
            }
            if let Some(wait) = self.slow.get(&message.chat_id) {
                tokio::time::sleep(*wait).await;
            }
            let OutboundKind::Message(text) = message.kind else {
                return Ok(());
            };
            self.delivered
                .lock()
                .expect("lock")
                .push((message.chat_id, text, Instant::now()));
            Ok(())
        }
    }

    fn message(chat: &str, text: &str) -> OutboundMessage {
        OutboundMessage {
            channel: "test".into(),
            chat_id: chat.into(),
            reply_to: None,
            kind: OutboundKind::Message(text.into()),
        }
    }

    fn lanes(recorder: Arc<Recorder>, options: LaneOptions) -> Lanes {
        let retrying = RetryingChannel::new(recorder, ChannelRetry::default());
        Lanes::new(Arc::new(retrying), options)
    }

    #[tokio::test(start_paused = true)]
    async fn a_rate_limited_chat_does_not_delay_another() {
        let recorder = Arc::new(Recorder::default());
        recorder
            .limited
            .lock()
            .expect("lock")
            .insert("a".into(), Duration::from_secs(5));
        let lanes = lanes(recorder.clone(), LaneOptions::default());
        let start = Instant::now();
        lanes.push(message("a", "to a")).await.expect("push");
        lanes.deliver(message("b", "to b")).await.expect("b");
        lanes.deliver(message("a", "after a")).await.expect("a");
        let delivered = recorder.delivered.lock().expect("lock").clone();
        let at = |text: &str| {
            delivered
                .iter()
                .find(|(_, t, _)| t == text)
                .map(|(_, _, at)| at.duration_since(start))
                .expect("delivered")
        };
        assert_eq!(at("to b"), Duration::ZERO, "b did not wait for a's limit");
        assert_eq!(
            at("to a"),
            Duration::from_secs(5),
            "a waited what it was told"
        );
        assert!(at("after a") >= at("to a"), "a's messages stay in order");
    }

    #[tokio::test(start_paused = true)]
    async fn a_full_lane_makes_only_its_own_publisher_wait() {
        let recorder = Arc::new(Recorder {
            slow: [(ChatId::from("slow"), Duration::from_secs(10))].into(),
            ..Recorder::default()
        });
        let lanes = lanes(
            recorder.clone(),
            LaneOptions {
                capacity: 1,
                idle: Duration::from_secs(60),
            },
        );
        let start = Instant::now();
        // The slow lane takes one into delivery and one into its queue; the third waits.
        lanes.push(message("slow", "1")).await.expect("push");
        lanes.push(message("slow", "2")).await.expect("push");
        let blocked = tokio::spawn({
            let lanes = lanes.clone();
            async move { lanes.push(message("slow", "3")).await }
        });
        lanes.deliver(message("fast", "hi")).await.expect("fast");
        assert_eq!(start.elapsed(), Duration::ZERO, "another chat never waits");
        assert!(!blocked.is_finished());
        blocked.await.expect("join").expect("push");
        assert!(start.elapsed() >= Duration::from_secs(10));
    }

    #[tokio::test(start_paused = true)]
    async fn undeliverable_messages_are_counted_and_reported() {
        let recorder = Arc::new(Recorder {
            fail: vec!["gone".into()],
            ..Recorder::default()
        });
        let lanes = lanes(recorder, LaneOptions::default());
        let err = lanes
            .deliver(message("gone", "hello?"))
            .await
            .expect_err("not delivered");
        assert!(err.to_string().contains("chat not found"), "{err}");
        assert_eq!(lanes.undeliverable(), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn closing_delivers_what_was_queued_then_refuses() {
        let recorder = Arc::new(Recorder {
            slow: [(ChatId::from("c"), Duration::from_secs(1))].into(),
            ..Recorder::default()
        });
        let lanes = lanes(recorder.clone(), LaneOptions::default());
        for i in 0..5 {
            lanes
                .push(message("c", &i.to_string()))
                .await
                .expect("push");
        }
        assert!(lanes.close(Duration::from_secs(60)).await);
        assert_eq!(recorder.delivered.lock().expect("lock").len(), 5);
        assert!(lanes.push(message("c", "late")).await.is_err());
        assert_eq!(lanes.active(), 0);
    }

    /// Many chats, messages pushed at random moments around the lanes' idle exits: every
    /// message is delivered once, each chat's in order.
    #[tokio::test(start_paused = true)]
    async fn random_pushes_around_idle_exits_lose_nothing_and_keep_order() {
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        let mut rng = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        let recorder = Arc::new(Recorder::default());
        let lanes = lanes(
            recorder.clone(),
            LaneOptions {
                capacity: 2,
                idle: Duration::from_millis(10),
            },
        );
        let mut sent: HashMap<ChatId, Vec<String>> = HashMap::new();
        for n in 0..2_000 {
            let chat = ChatId::from(format!("c{}", rng() % 7));
            let text = n.to_string();
            sent.entry(chat.clone()).or_default().push(text.clone());
            lanes
                .push(message(chat.as_str(), &text))
                .await
                .expect("push");
            if rng() % 3 == 0 {
                // Let lanes drain and, often, exit before the next push.
                tokio::time::sleep(Duration::from_millis(rng() % 25)).await;
            }
        }
        assert!(lanes.close(Duration::from_secs(60)).await);
        let mut got: HashMap<ChatId, Vec<String>> = HashMap::new();
        for (chat, text, _) in recorder.delivered.lock().expect("lock").iter() {
            got.entry(chat.clone()).or_default().push(text.clone());
        }
        assert_eq!(got, sent);
    }
}
