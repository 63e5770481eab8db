//! [`Lanes`]: outbound delivery in order per chat, without one chat waiting for another.
//!
//! A chat's messages go out through its *lane*: while one of them is being delivered, the
//! ones published after it queue behind it (up to `capacity`; then their publisher waits).
//! A platform's rate limit, or a slow edit, holds up that chat only. What cannot be
//! delivered (after the channel's own retries) is logged with its chat and counted, never
//! dropped silently.
//!
//! A lane exists only while it has something to deliver. A publisher whose chat has no lane
//! opens one and starts the delivery itself, polling the channel's send once: most sends
//! (a WebSocket frame put into its socket's queue) finish right there and the lane closes
//! again, with no task and no hand-off. A send that has to wait (an HTTP call, a rate
//! limit) is handed, mid-flight, to a task that finishes it, delivers what queued behind it
//! meanwhile, and closes the lane. A future polled once with a waker that does nothing and
//! then polled by its new task loses no wake-up: every poll checks its state afresh.
//!
//! # Why no message is lost or overtaken
//! A chat's entry in the map *is* its lane, and a lane has exactly one deliverer: the
//! publisher that opened it, then the task it handed to, if any. Entries change only under
//! the map's guard for that chat:
//! - a publisher that finds an entry appends to its queue and never delivers itself;
//! - a publisher that finds none inserts one and becomes its deliverer;
//! - the deliverer, after each message, takes the next one from the queue — or, when the
//!   queue is empty, removes the entry — in one step under the guard.
//!
//! So a message appended to a queue is always seen by its deliverer's next look, and
//! messages leave a queue in the order they entered it; a publisher's next message is
//! published only after the previous one was delivered or queued, so it cannot overtake
//! it. (Two publishers of one chat that do not wait for each other have no order to keep.)

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use dashmap::DashMap;
use dashmap::mapref::entry::Entry;
use futures::FutureExt;
use tokio::sync::{Notify, oneshot};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::channel::{Channel, Sent};
use crate::error::CoreError;
use crate::ids::ChatId;
use crate::message::OutboundMessage;

/// How lanes behave.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LaneOptions {
    /// Messages that may queue behind the one a chat's lane is delivering before their
    /// publisher waits.
    pub capacity: usize,
}

impl Default for LaneOptions {
    fn default() -> Self {
        Self { capacity: 256 }
    }
}

/// Who waits to learn whether a message was delivered.
type Receipt = Option<oneshot::Sender<Result<Sent, CoreError>>>;

/// A send under way.
type Sending = Pin<Box<dyn Future<Output = Result<Sent, CoreError>> + Send>>;

/// The delivery lanes of one channel. Cloning shares them.
#[derive(Clone)]
pub struct Lanes {
    inner: Arc<Inner>,
}

struct Inner {
    channel: Arc<dyn Channel>,
    capacity: usize,
    /// Open lanes by chat. See the module doc for who may change an entry.
    lanes: DashMap<ChatId, Lane>,
    /// Woken when a full lane takes a message out of its queue (and when closing).
    room: Notify,
    /// The tasks lanes were handed to, so closing can wait for them.
    tasks: TaskTracker,
    /// Cancelled by [`Lanes::close`]: lanes deliver what is queued; nothing new is taken.
    closing: CancellationToken,
    undeliverable: AtomicU64,
}

/// An open lane: the messages waiting behind the one being delivered.
#[derive(Default)]
struct Lane {
    queue: std::collections::VecDeque<(OutboundMessage, Receipt)>,
    /// A publisher waits for room in this lane.
    waited_on: bool,
}

impl Lanes {
    /// The channel they deliver through.
    pub fn channel(&self) -> &Arc<dyn Channel> {
        &self.inner.channel
    }

    /// Lanes delivering through `channel` (wrap it in
    /// [`RetryingChannel`](crate::RetryingChannel) to retry rate limits and outages).
    pub fn new(channel: Arc<dyn Channel>, options: LaneOptions) -> Self {
        Self {
            inner: Arc::new(Inner {
                channel,
                capacity: options.capacity.max(1),
                lanes: DashMap::new(),
                room: Notify::new(),
                tasks: TaskTracker::new(),
                closing: CancellationToken::new(),
                undeliverable: AtomicU64::new(0),
            }),
        }
    }

    /// Delivers a message after those queued before it in its chat, waiting only while
    /// that chat's lane is full — not for the delivery (its failure is logged and counted).
    pub async fn push(&self, message: OutboundMessage) -> Result<(), CoreError> {
        self.enqueue(message, None).await
    }

    /// Delivers a message after those queued before it in its chat, and waits until it
    /// was delivered (or given up on): the result is the channel's.
    pub async fn deliver(&self, message: OutboundMessage) -> Result<Sent, CoreError> {
        self.queue(message).await?.await
    }

    /// Queues a message like [`Lanes::push`] and returns its receipt: what resolves once the
    /// channel delivered it (or gave up: the error). Messages queued one after another go out
    /// in that order, whenever their receipts are awaited.
    pub async fn queue(
        &self,
        message: OutboundMessage,
    ) -> Result<impl Future<Output = Result<Sent, CoreError>> + Send + 'static, CoreError> {
        let (tx, rx) = oneshot::channel();
        self.enqueue(message, Some(tx)).await?;
        let channel = self.inner.channel.name().to_string();
        Ok(async move { rx.await.unwrap_or(Err(CoreError::ChannelClosed(channel))) })
    }

    async fn enqueue(&self, message: OutboundMessage, receipt: Receipt) -> Result<(), CoreError> {
        let inner = &self.inner;
        let chat = message.chat_id.clone();
        loop {
            if inner.closing.is_cancelled() {
                return Err(CoreError::ChannelClosed(inner.channel.name().to_string()));
            }
            // Registered before the guard is released, so a message taken out of the
            // queue after that wakes us.
            let room = inner.room.notified();
            match inner.lanes.entry(chat.clone()) {
                Entry::Occupied(mut lane) => {
                    let lane = lane.get_mut();
                    if lane.queue.len() < inner.capacity {
                        lane.queue.push_back((message, receipt));
                        return Ok(());
                    }
                    lane.waited_on = true;
                }
                Entry::Vacant(vacant) => {
                    vacant.insert(Lane::default());
                    break;
                }
            }
            room.await;
        }
        // This publisher opened the lane: it delivers its message, and hands the lane to a
        // task if the send has to wait or more messages queued meanwhile.
        let mut sending = inner.sending(message);
        match sending
            .as_mut()
            .poll(&mut Context::from_waker(Waker::noop()))
        {
            Poll::Ready(result) => {
                inner.settle(&chat, result, receipt);
                if let Some((message, receipt)) = inner.next(&chat) {
                    let sending = inner.sending(message);
                    inner
                        .tasks
                        .spawn(drain(inner.clone(), chat, sending, receipt));
                }
            }
            Poll::Pending => {
                inner
                    .tasks
                    .spawn(drain(inner.clone(), chat, sending, receipt));
            }
        }
        Ok(())
    }

    /// Messages given up on since start.
    pub fn undeliverable(&self) -> u64 {
        self.inner.undeliverable.load(Ordering::Relaxed)
    }

    /// Lanes open now (chats with something being delivered).
    pub fn active(&self) -> usize {
        self.inner.lanes.len()
    }

    /// Stops taking messages, lets every lane deliver what it holds, and waits up to
    /// `deadline` for them. Returns whether all finished.
    pub async fn close(&self, deadline: Duration) -> bool {
        self.inner.closing.cancel();
        self.inner.room.notify_waiters();
        self.inner.tasks.close();
        tokio::time::timeout(deadline, self.inner.tasks.wait())
            .await
            .is_ok()
    }
}

impl Inner {
    /// The send of one message, owning what it needs so a task can finish it. A channel
    /// that panics in `send` fails that message, not the lane.
    fn sending(self: &Arc<Self>, message: OutboundMessage) -> Sending {
        let inner = self.clone();
        Box::pin(async move {
            AssertUnwindSafe(inner.channel.send(message))
                .catch_unwind()
                .await
                .unwrap_or_else(|_| {
                    Err(CoreError::Channel {
                        channel: inner.channel.name().to_string(),
                        message: "the channel failed while sending (a bug; see the log)".into(),
                    })
                })
        })
    }

    /// Reports how a delivery went: to whoever waits for it, and in the log and the count
    /// when it failed.
    fn settle(&self, chat: &ChatId, result: Result<Sent, CoreError>, receipt: Receipt) {
        if let Err(err) = &result {
            let count = self.undeliverable.fetch_add(1, Ordering::Relaxed) + 1;
            tracing::warn!(channel = %self.channel.name(), chat = %chat, error = %err,
                undeliverable = count, "a message could not be delivered");
        }
        if let Some(receipt) = receipt {
            let _ = receipt.send(result);
        }
    }

    /// The deliverer's next message, or `None` after closing the empty lane (one step
    /// under the entry's guard: see the module doc).
    fn next(&self, chat: &ChatId) -> Option<(OutboundMessage, Receipt)> {
        let Entry::Occupied(mut lane) = self.lanes.entry(chat.clone()) else {
            debug_assert!(false, "only a lane's deliverer removes it");
            return None;
        };
        let Some(next) = lane.get_mut().queue.pop_front() else {
            lane.remove();
            return None;
        };
        if std::mem::take(&mut lane.get_mut().waited_on) {
            self.room.notify_waiters();
        }
        Some(next)
    }
}

/// A lane handed to a task: finishes the send under way, then delivers the queue.
async fn drain(inner: Arc<Inner>, chat: ChatId, mut sending: Sending, mut receipt: Receipt) {
    loop {
        let result = sending.await;
        inner.settle(&chat, result, receipt);
        let Some((message, next)) = inner.next(&chat) else {
            return;
        };
        sending = inner.sending(message);
        receipt = next;
    }
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
        panic_on: Option<String>,
    }

    #[async_trait]
    impl Channel for Recorder {
        fn name(&self) -> ChannelName {
            "test".into()
        }
        async fn run(&self, _: ChannelContext) -> Result<(), CoreError> {
            Ok(())
        }
        async fn send(&self, message: OutboundMessage) -> Result<Sent, CoreError> {
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
                return Ok(Sent::accepted());
            };
            assert!(
                self.panic_on.as_deref() != Some(text.as_str()),
                "told to panic"
            );
            self.delivered
                .lock()
                .expect("lock")
                .push((message.chat_id, text, Instant::now()));
            Ok(Sent::accepted())
        }
    }

    fn message(chat: &str, text: &str) -> OutboundMessage {
        OutboundMessage {
            channel: "test".into(),
            chat_id: chat.into(),
            reply_to: None,
            kind: OutboundKind::Message(text.into()),
            cursor: None,
            turn: None,
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
        let lanes = lanes(recorder.clone(), LaneOptions { capacity: 1 });
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

    /// Many chats, some of whose sends wait a random while (handing their lane to a task)
    /// and some finish at once, messages pushed at random moments around lanes opening and
    /// closing: every message is delivered once, each chat's in order.
    #[tokio::test(start_paused = true)]
    async fn random_pushes_around_lanes_closing_lose_nothing_and_keep_order() {
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        let mut rng = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        let recorder = Arc::new(Recorder {
            slow: (0..7)
                .filter(|n| n % 2 == 0)
                .map(|n| (ChatId::from(format!("c{n}")), Duration::from_millis(3 * n)))
                .collect(),
            ..Recorder::default()
        });
        let lanes = lanes(recorder.clone(), LaneOptions { capacity: 2 });
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
                // Let lanes drain and, often, close before the next push.
                tokio::time::sleep(Duration::from_millis(rng() % 25)).await;
            }
        }
        assert!(lanes.close(Duration::from_secs(60)).await);
        let mut got: HashMap<ChatId, Vec<String>> = HashMap::new();
        for (chat, text, _) in recorder.delivered.lock().expect("lock").iter() {
            got.entry(chat.clone()).or_default().push(text.clone());
        }
        assert_eq!(got, sent);
        assert_eq!(lanes.active(), 0, "every lane closed once empty");
    }

    /// A send that finishes at once is done when `push` returns, and leaves no lane open:
    /// the common case costs no task.
    #[tokio::test]
    async fn a_send_that_finishes_at_once_is_delivered_by_its_publisher() {
        let recorder = Arc::new(Recorder::default());
        let lanes = lanes(recorder.clone(), LaneOptions::default());
        for i in 0..3 {
            lanes
                .push(message("c", &i.to_string()))
                .await
                .expect("push");
            assert_eq!(recorder.delivered.lock().expect("lock").len(), i + 1);
            assert_eq!(lanes.active(), 0);
        }
    }

    /// A channel whose send panics fails that message (reported and counted); the chat's
    /// later messages still go out.
    #[tokio::test(start_paused = true)]
    async fn a_panicking_send_fails_its_message_not_the_chat() {
        let recorder = Arc::new(Recorder {
            panic_on: Some("boom".into()),
            slow: [(ChatId::from("c"), Duration::from_millis(5))].into(),
            ..Recorder::default()
        });
        let lanes = lanes(recorder.clone(), LaneOptions::default());
        lanes.push(message("c", "before")).await.expect("push");
        let boom = lanes.deliver(message("c", "boom"));
        let err = boom.await.expect_err("the panic fails the message");
        assert!(err.to_string().contains("failed while sending"), "{err}");
        lanes.deliver(message("c", "after")).await.expect("after");
        let texts: Vec<String> = recorder
            .delivered
            .lock()
            .expect("lock")
            .iter()
            .map(|(_, text, _)| text.clone())
            .collect();
        assert_eq!(texts, ["before", "after"]);
        assert_eq!(lanes.undeliverable(), 1);
    }
}
