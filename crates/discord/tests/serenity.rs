//! Why the Discord channel speaks the gateway and sends its messages itself rather than
//! through serenity (0.12), the library the design names: the two guarantees serenity's path
//! cannot keep, each shown on that path against the same fake Discord the channel is tested
//! with. Each test asserts the limitation; when a serenity release lifts it, the test fails,
//! and that piece of the channel should move to serenity.
//!
//! - **Order within a chat.** serenity's client hands every event to a task of its own
//!   (`dispatch_model` spawns each handler call), and a stand-alone `gateway::Shard` cannot
//!   be read from outside the crate (`WsClient::recv_json` is `pub(crate)`). A handler that
//!   awaits anything — a publish waiting for room on the hub, a file being fetched — is
//!   overtaken by the next message of the same chat.
//! - **A 429's wait reaching the chat's lane.** With its rate limiter off (the only way it
//!   takes a base URL, and the way a 429 reaches the caller at all), serenity's `Http`
//!   answers a 429 with an `ErrorResponse` that keeps the status, the URL and Discord's JSON
//!   error — which needs a `code` a 429 body does not have — and drops the `retry_after` of
//!   the body and the `Retry-After` header. The chat would wait a guess, not Discord's wait.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use serenity::all::{
    ChannelId, ClientBuilder, Context, EventHandler, GatewayIntents, HttpBuilder, Message,
};
use serenity::async_trait;
use serenity::http::HttpError;
use switchboard_testkit::FakeDiscord;
use switchboard_testkit::discord::TEST_TOKEN;
use tokio::sync::Notify;

const PATIENCE: Duration = Duration::from_secs(10);

fn http(fake: &FakeDiscord) -> serenity::http::Http {
    HttpBuilder::new(TEST_TOKEN)
        .proxy(fake.api_url())
        .ratelimiter_disabled(true)
        .build()
}

#[tokio::test]
async fn serenitys_http_drops_the_wait_discord_states_with_a_429() {
    let fake = FakeDiscord::start().await.expect("fake Discord");
    let channel = FakeDiscord::dm_channel(42);
    fake.rate_limit(channel, Duration::from_secs(3), 1);
    let err = ChannelId::new(channel)
        .say(&http(&fake), "hello")
        .await
        .expect_err("a 429");
    let serenity::Error::Http(HttpError::UnsuccessfulRequest(response)) = err else {
        panic!("not an unsuccessful request: {err:?}");
    };
    assert_eq!(response.status_code.as_u16(), 429);
    assert_eq!(
        fake.limited_at(channel).len(),
        1,
        "Discord said: retry after 3 s"
    );
    let kept = format!("{response:?}");
    assert!(
        !kept.contains("retry_after") && !kept.to_lowercase().contains("retry-after"),
        "serenity now keeps the wait; send messages through it: {kept}"
    );
}

/// Records the order in which messages were handled; the first waits (as a publish on a
/// full hub would) until the second was seen, or gives up.
struct Handler {
    handled: Arc<Mutex<Vec<String>>>,
    second_seen: Arc<Notify>,
    done: Arc<Notify>,
}

#[async_trait]
impl EventHandler for Handler {
    async fn message(&self, _ctx: Context, message: Message) {
        if message.content == "first" {
            let _ = tokio::time::timeout(PATIENCE, self.second_seen.notified()).await;
        } else {
            self.second_seen.notify_one();
        }
        self.handled
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(message.content);
        self.done.notify_one();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serenitys_client_lets_a_chats_next_message_overtake_one_that_waits() {
    let fake = FakeDiscord::start().await.expect("fake Discord");
    let handled = Arc::new(Mutex::new(Vec::new()));
    let done = Arc::new(Notify::new());
    let handler = Handler {
        handled: handled.clone(),
        second_seen: Arc::new(Notify::new()),
        done: done.clone(),
    };
    let intents = GatewayIntents::DIRECT_MESSAGES | GatewayIntents::MESSAGE_CONTENT;
    let mut client = ClientBuilder::new_with_http(http(&fake), intents)
        .event_handler(handler)
        .await
        .expect("client");
    let shards = client.shard_manager.clone();
    let running = tokio::spawn(async move { client.start().await });
    fake.wait_until(PATIENCE, "serenity connected", FakeDiscord::connected)
        .await;
    fake.dm(42, "first");
    fake.dm(42, "second");
    for _ in 0..2 {
        tokio::time::timeout(PATIENCE, done.notified())
            .await
            .expect("a message handled");
    }
    let order = handled
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .clone();
    shards.shutdown_all().await;
    running.abort();
    assert_eq!(
        order,
        ["second", "first"],
        "serenity now hands a chat's messages on in order; the gateway can move to it"
    );
}
