//! The chats' side of the chaos run: careful clients, as people's clients are — a web client
//! that keeps what it sent until it is handled and picks up where it was after a reconnect,
//! a Telegram person who writes once the last answer shows, and a watcher of the jobs' chat
//! — each noting what it saw in the [`Ledger`].

use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::json;
use switchboard_testkit::FakeTelegram;
use tokio::time::Instant;

use super::{SETTLE, WINDOW};
use crate::util::{Read, WsClient};

/// What the clients saw.
#[derive(Default)]
pub(super) struct Ledger {
    /// `message` frames by the id of the message they answer.
    pub(super) answers: HashMap<String, usize>,
    /// Answers found in a conversation's history after a reconnect, by the text they answer.
    pub(super) in_history: HashSet<String>,
    /// Ids whose `handled` frame came.
    pub(super) handled: HashSet<String>,
    /// `message` frames of the jobs' chat.
    pub(super) ticks: usize,
    /// Reconnects the web clients made.
    pub(super) reconnects: usize,
}

pub(super) type Shared<T> = Arc<Mutex<T>>;

pub(super) fn lock<T>(shared: &Shared<T>) -> std::sync::MutexGuard<'_, T> {
    shared
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Connects to one of the gateways that are up (trying until one answers).
pub(super) async fn connect(
    gateways: &Shared<Vec<SocketAddr>>,
    rng: &mut fastrand::Rng,
) -> WsClient {
    loop {
        let up = lock(gateways).clone();
        if !up.is_empty()
            && let Some(client) = WsClient::try_connect(up[rng.usize(..up.len())]).await
        {
            return client;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// A careful web client of chat `chat`: sends its messages (at most [`WINDOW`] unhandled),
/// keeps each until `handled` (on a cluster: stored on the bus), and after a reconnect
/// subscribes again after the last frame it had, asks for the conversation so far and sends
/// again what was not handled. Returns when every message was handled and its answer seen,
/// live or in a history (asked for again while answers are awaited and nothing comes).
pub(super) async fn web_client(
    chat: String,
    messages: usize,
    pace: Duration,
    gateways: Shared<Vec<SocketAddr>>,
    ledger: Shared<Ledger>,
    seed: u64,
) {
    let mut rng = fastrand::Rng::with_seed(seed);
    let start = Instant::now();
    let id = |n: usize| format!("{chat}-{n:03}");
    let text = |n: usize| format!("{chat} m{n:03}");
    let mut next = 0;
    let mut outbox: Vec<usize> = Vec::new();
    let mut last_seq: Option<u64> = None;
    let mut answered: HashSet<String> = HashSet::new();
    loop {
        let mut client = connect(&gateways, &mut rng).await;
        let mut subscribe = json!({"type": "subscribe", "chat_id": chat});
        if let Some(seq) = last_seq {
            subscribe["after"] = json!(seq);
        }
        let mut alive = client.try_send_json(&subscribe).await;
        alive &= client
            .try_send_json(&json!({"type": "history", "chat_id": chat}))
            .await;
        for n in outbox.clone() {
            let frame =
                json!({"type": "message", "chat_id": chat, "id": id(n), "content": text(n)});
            alive &= client.try_send_json(&frame).await;
        }
        while alive {
            // Spread over the nemesis: message n goes out no sooner than n paces in.
            while outbox.len() < WINDOW
                && next < messages
                && start + pace * next as u32 <= Instant::now()
            {
                let frame = json!({"type": "message", "chat_id": chat, "id": id(next), "content": text(next)});
                alive &= client.try_send_json(&frame).await;
                outbox.push(next);
                next += 1;
            }
            if next == messages && outbox.is_empty() && answered.len() == messages {
                return;
            }
            let wait = if next < messages {
                pace.min(Duration::from_secs(1))
            } else {
                Duration::from_secs(3)
            };
            let frame = match client.read(wait).await {
                Read::Frame(frame) => frame,
                Read::Nothing if next < messages => continue,
                Read::Nothing => {
                    let ask = json!({"type": "history", "chat_id": chat});
                    alive &= client.try_send_json(&ask).await;
                    continue;
                }
                Read::Closed => break,
            };
            if let Some(seq) = frame["seq"].as_u64() {
                last_seq = Some(last_seq.map_or(seq, |last| last.max(seq)));
            }
            let answering = frame["reply_to"].as_str().map(str::to_owned);
            match (frame["type"].as_str(), answering) {
                (Some("message"), Some(answering)) => {
                    if let Some(n) = answering.rsplit('-').next().and_then(|n| n.parse().ok()) {
                        answered.insert(text(n));
                    }
                    *lock(&ledger).answers.entry(answering).or_default() += 1;
                }
                (Some("history"), _) => {
                    let in_history: Vec<String> = frame["messages"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .filter(|said| said["role"] == "assistant")
                        .filter_map(|said| said["content"].as_str()?.strip_prefix("re: "))
                        .map(str::to_owned)
                        .collect();
                    answered.extend(in_history.iter().cloned());
                    lock(&ledger).in_history.extend(in_history);
                }
                (Some("handled"), _) => {
                    let handled = frame["id"].as_str().unwrap_or_default().to_owned();
                    match frame["fate"].as_str() {
                        Some("handled") => {
                            outbox.retain(|n| id(*n) != handled);
                            lock(&ledger).handled.insert(handled);
                        }
                        // The daemon stopped first: sent again, same id.
                        Some("unprocessed") => break,
                        other => panic!("{handled} was {other:?}: {frame}"),
                    }
                }
                _ => {}
            }
        }
        lock(&ledger).reconnects += 1;
    }
}

/// A client subscribed to the jobs' chat, counting the runs' answers until `stop`.
pub(super) async fn jobs_watcher(
    gateways: Shared<Vec<SocketAddr>>,
    ledger: Shared<Ledger>,
    stop: tokio_util::sync::CancellationToken,
) {
    let mut rng = fastrand::Rng::with_seed(7);
    let mut last_seq: Option<u64> = None;
    while !stop.is_cancelled() {
        let mut client = connect(&gateways, &mut rng).await;
        let mut subscribe = json!({"type": "subscribe", "chat_id": "jobs"});
        if let Some(seq) = last_seq {
            subscribe["after"] = json!(seq);
        }
        if !client.try_send_json(&subscribe).await {
            continue;
        }
        while !stop.is_cancelled() {
            let frame = match client.read(Duration::from_millis(500)).await {
                Read::Frame(frame) => frame,
                Read::Nothing => continue,
                Read::Closed => break,
            };
            if let Some(seq) = frame["seq"].as_u64() {
                last_seq = Some(last_seq.map_or(seq, |last| last.max(seq)));
            }
            if frame["type"] == "message" {
                lock(&ledger).ticks += 1;
            }
        }
    }
}

/// Telegram person `person`: each message sent once the answer to the one before shows,
/// and no sooner than a pace after the one before.
pub(super) async fn telegram_person(
    telegram: Arc<FakeTelegram>,
    person: u64,
    messages: usize,
    pace: Duration,
) {
    for n in 0..messages {
        tokio::time::sleep(pace).await;
        telegram.private_text(person, &format!("tg{person} m{n:03}"));
        let deadline = Instant::now() + SETTLE;
        while bot_texts(&telegram, person).len() <= n && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

/// Every message the bot sent `person`, as last edited.
pub(super) fn bot_texts(telegram: &FakeTelegram, person: u64) -> Vec<String> {
    let chat = i64::try_from(person).expect("id");
    let mut ids = Vec::new();
    for sent in telegram.messages_to(chat) {
        if !ids.contains(&sent.message_id) {
            ids.push(sent.message_id);
        }
    }
    ids.into_iter()
        .filter_map(|id| telegram.current_text(chat, id))
        .collect()
}
