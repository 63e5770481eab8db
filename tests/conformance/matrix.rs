//! Matrix in the conformance suite, on a real homeserver: Synapse, with people who have
//! Matrix clients of their own (matrix-sdk) writing to the bot in encrypted direct chats,
//! and the bot's answers read where they would see them — decrypted by their client, edits
//! applied. The bot reaches Synapse through the testkit's proxy, which keeps what a fake
//! keeps (each write and edit of a room, "typing…", uploads, downloads) and makes the
//! suite's faults: 429s, held uploads, slow downloads, a sync made again from an earlier
//! token (the homeserver delivering a message again).
//!
//! Event ids are the homeserver's, known only once a message is sent; what a person writes
//! is sent in order by their own task (once the bot has joined their chat), so the suite's
//! ids are the test's own (`m1`, `m2`, …), each paired with its event once sent.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::json;
use switchboard_testkit::matrix::matrix_sdk::ruma::OwnedRoomId;
use switchboard_testkit::matrix::{Person, Proxy, Seen, Synapse};
use tokio::sync::{Notify, mpsc};
use tokio::time::Instant;

use super::{ADA, CAROL, Platform, Posted, Received, STRANGER, Shown, Written};

/// How long the suite waits on Matrix: keys are exchanged before the first message of a
/// chat is readable.
pub(crate) const PATIENCE: Duration = Duration::from_secs(30);

/// The bot's password on the test homeserver.
pub(crate) const BOT_PASSWORD: &str = "bot-password";

/// What a person's task sends, in order.
enum Job {
    Text(String, String),
    File(String, String, Vec<u8>),
    Voice(String, Vec<u8>, u32),
}

pub(crate) struct Matrix {
    pub(crate) synapse: Synapse,
    pub(crate) proxy: Arc<Proxy>,
    pub(crate) bot: String,
    people: HashMap<u64, Arc<Person>>,
    rooms: HashMap<u64, OwnedRoomId>,
    queues: HashMap<u64, mpsc::UnboundedSender<Job>>,
    /// The suite's ids and the events they were sent as.
    events: Arc<Mutex<HashMap<String, String>>>,
    /// Ids to be delivered again once sent.
    again: Arc<Mutex<HashSet<String>>>,
    /// The files the bot sent, downloaded by the person's client, by event.
    downloads: Arc<Mutex<HashMap<String, Option<Vec<u8>>>>>,
    changed: Arc<Notify>,
    next: AtomicU64,
}

/// A person's name on the homeserver.
fn name(person: u64) -> &'static str {
    match person {
        ADA => "ada",
        CAROL => "carol",
        _ => "stranger",
    }
}

impl Matrix {
    /// `[channels.matrix]` through the proxy, allowing [`ADA`] and [`CAROL`], with `extra`.
    pub(crate) fn section(&self, extra: &str) -> String {
        format!(
            "[channels.matrix]\nenabled = true\nhomeserver = \"{}\"\nuser = \"{}\"\npassword = \"{BOT_PASSWORD}\"\nallow_from = [\"{}\", \"{}\"]\n{extra}\n",
            self.proxy.url(),
            self.bot,
            self.people[&ADA].id,
            self.people[&CAROL].id,
        )
    }

    /// `person`'s client.
    pub(crate) fn person(&self, person: u64) -> &Person {
        &self.people[&person]
    }

    /// Queues `job` for `person`'s task; returns the suite's id of it.
    fn write(&self, person: u64, job: impl FnOnce(String) -> Job) -> Written {
        let id = format!("m{}", self.next.fetch_add(1, Ordering::SeqCst));
        let _ = self.queues[&person].send(job(id.clone()));
        Written {
            chat: self.chat_of(person),
            id,
        }
    }

    /// The suite's id of `event` (an event no one of the suite wrote keeps its own).
    fn local(&self, event: &str) -> String {
        self.events
            .lock()
            .expect("events")
            .iter()
            .find(|(_, sent)| *sent == event)
            .map_or_else(|| event.to_owned(), |(local, _)| local.clone())
    }

    /// The event `written` was sent as, once sent.
    pub(crate) fn event(&self, written: &Written) -> Option<String> {
        self.events
            .lock()
            .expect("events")
            .get(&written.id)
            .cloned()
    }

    /// What the bot wrote in `chat`, as the person of the chat's client read it.
    fn bot_wrote(&self, chat: &str) -> Vec<Seen> {
        self.people
            .values()
            .find(|person| {
                self.rooms
                    .iter()
                    .any(|(who, room)| room.as_str() == chat && self.people[who].id == person.id)
            })
            .map_or_else(Vec::new, |person| person.seen_from(chat, &self.bot))
    }
}

/// Sends `person`'s jobs in order, once the bot has joined their chat.
#[allow(clippy::too_many_arguments)]
async fn send_in_order(
    person: Arc<Person>,
    room: OwnedRoomId,
    bot: String,
    mut jobs: mpsc::UnboundedReceiver<Job>,
    events: Arc<Mutex<HashMap<String, String>>>,
    again: Arc<Mutex<HashSet<String>>>,
    proxy_again: mpsc::UnboundedSender<String>,
    changed: Arc<Notify>,
) {
    let mut joined = false;
    while let Some(job) = jobs.recv().await {
        if !joined {
            person
                .wait_joined(&room, &bot, Duration::from_secs(60))
                .await;
            joined = true;
        }
        let (id, event) = match job {
            Job::Text(id, text) => {
                let event = person
                    .send(&room, json!({"msgtype": "m.text", "body": text}))
                    .await;
                (id, event)
            }
            Job::File(id, caption, bytes) => {
                let event = person
                    .send_file(
                        &room,
                        "notes.bin",
                        "application/octet-stream",
                        bytes,
                        Some(&caption),
                    )
                    .await;
                (id, event)
            }
            Job::Voice(id, bytes, seconds) => (id, person.send_voice(&room, bytes, seconds).await),
        };
        events
            .lock()
            .expect("events")
            .insert(id.clone(), event.clone());
        if again.lock().expect("again").remove(&id) {
            let _ = proxy_again.send(event);
        }
        changed.notify_waiters();
    }
}

impl Platform for Matrix {
    const NAME: &'static str = "matrix";
    const LIMIT: usize = switchboard_matrix::MESSAGE_LIMIT;
    const DOCUMENT_LIMIT: u64 = 50 * 1024 * 1024;
    // The other chat's answer is its first encrypted exchange (keys claimed and shared both
    // ways, on a homeserver in Python): seconds on a loaded machine.
    const RETRY_AFTER: Duration = Duration::from_secs(10);

    async fn start() -> Self {
        // TEST_LOG=matrix_sdk=debug,… shows the SDKs' logs; without it they stay quiet, or
        // the people's clients' errors while Synapse restarts bury a failure's message.
        if let Ok(filter) = std::env::var("TEST_LOG") {
            let _ = tracing_subscriber::fmt()
                .with_env_filter(filter)
                .with_test_writer()
                .try_init();
        }
        let changed = Arc::new(Notify::new());
        let synapse = Synapse::start().await;
        let proxy = Arc::new(Proxy::start(synapse.url(), changed.clone()).await);
        let bot = synapse.register("bot", BOT_PASSWORD).await;
        let mut people = HashMap::new();
        let mut rooms = HashMap::new();
        for person in [ADA, CAROL, STRANGER] {
            let client = Arc::new(Person::join(&synapse, name(person), changed.clone()).await);
            rooms.insert(person, client.direct_chat(&bot).await);
            people.insert(person, client);
        }
        let events = Arc::new(Mutex::new(HashMap::new()));
        let again = Arc::new(Mutex::new(HashSet::new()));
        let (proxy_again, mut to_deliver) = mpsc::unbounded_channel::<String>();
        let mut queues = HashMap::new();
        for person in [ADA, CAROL, STRANGER] {
            let (queue, jobs) = mpsc::unbounded_channel();
            queues.insert(person, queue);
            tokio::spawn(send_in_order(
                people[&person].clone(),
                rooms[&person].clone(),
                bot.clone(),
                jobs,
                events.clone(),
                again.clone(),
                proxy_again.clone(),
                changed.clone(),
            ));
        }
        let platform = Self {
            synapse,
            proxy,
            bot,
            people,
            rooms,
            queues,
            events,
            again,
            downloads: Arc::new(Mutex::new(HashMap::new())),
            changed,
            next: AtomicU64::new(1),
        };
        // Events sent after the suite asked for them again: asked of the proxy once known.
        let pending = platform.proxy.clone();
        tokio::spawn(async move {
            while let Some(event) = to_deliver.recv().await {
                pending.deliver_again(&event);
            }
        });
        platform
    }

    fn table(&self, interval: f64, extra: &str) -> String {
        self.section(&format!("edit_interval_secs = {interval}\n{extra}"))
    }

    fn sessions(&self) -> u64 {
        self.proxy.syncs()
    }

    fn dm(&self, person: u64, text: &str) -> Written {
        self.write(person, |id| Job::Text(id, text.to_owned()))
    }

    fn dm_file(&self, person: u64, caption: &str, bytes: Vec<u8>) -> Written {
        self.write(person, |id| Job::File(id, caption.to_owned(), bytes))
    }

    fn dm_voice(&self, person: u64, bytes: Vec<u8>, seconds: u32) -> Written {
        self.write(person, |id| Job::Voice(id, bytes, seconds))
    }

    fn deliver_again(&self, written: &Written) {
        match self.event(written) {
            Some(event) => self.proxy.deliver_again(&event),
            None => {
                self.again.lock().expect("again").insert(written.id.clone());
                // Sent meanwhile: its event is known now.
                if let Some(event) = self.event(written)
                    && self.again.lock().expect("again").remove(&written.id)
                {
                    self.proxy.deliver_again(&event);
                }
            }
        }
    }

    fn platform_id(&self, written: &Written) -> Option<String> {
        self.event(written)
    }

    fn chat_of(&self, person: u64) -> String {
        self.rooms[&person].to_string()
    }

    fn posted(&self, chat: &str) -> Vec<Posted> {
        let seen = self.bot_wrote(chat);
        let texts = seen
            .iter()
            .filter(|message| {
                message.edits().is_none()
                    && matches!(
                        message.content["msgtype"].as_str(),
                        Some("m.text" | "m.notice")
                    )
            })
            .map(|message| {
                // Its text now: the latest edit's.
                let text = seen
                    .iter()
                    .rfind(|edit| edit.edits() == Some(message.event.as_str()))
                    .map_or(&message.content["body"], |edit| {
                        &edit.content["m.new_content"]["body"]
                    });
                Posted {
                    id: message.event.clone(),
                    text: text.as_str().unwrap_or_default().to_owned(),
                    reply_to: message.reply_to().map(|event| self.local(event)),
                    at: message.at,
                }
            });
        texts.collect()
    }

    fn files(&self, chat: &str) -> Vec<Received> {
        let seen = self.bot_wrote(chat);
        let Some(person) = self
            .rooms
            .iter()
            .find(|(_, room)| room.as_str() == chat)
            .map(|(who, _)| self.people[who].clone())
        else {
            return Vec::new();
        };
        let mut files = Vec::new();
        for message in seen {
            let shown = match message.content["msgtype"].as_str() {
                Some("m.image") => Shown::Picture,
                Some("m.audio") => Shown::Voice,
                Some("m.file") => Shown::Document,
                _ => continue,
            };
            let mut downloads = self.downloads.lock().expect("downloads");
            match downloads.get(&message.event) {
                Some(Some(bytes)) => {
                    let name = message.content["filename"]
                        .as_str()
                        .or(message.content["body"].as_str())
                        .unwrap_or_default()
                        .to_owned();
                    let body = message.content["body"].as_str().unwrap_or_default();
                    files.push(Received {
                        shown,
                        caption: (body != name).then(|| body.to_owned()),
                        name,
                        bytes: bytes.clone(),
                    });
                }
                Some(None) => {}
                None => {
                    downloads.insert(message.event.clone(), None);
                    let (person, downloads, changed) =
                        (person.clone(), self.downloads.clone(), self.changed.clone());
                    tokio::spawn(async move {
                        let bytes = person.download(&message.content).await;
                        downloads
                            .lock()
                            .expect("downloads")
                            .insert(message.event.clone(), Some(bytes));
                        changed.notify_waiters();
                    });
                }
            }
        }
        files
    }

    fn hold_uploads(&self) {
        self.proxy.hold_uploads();
    }

    fn release_uploads(&self, keep: bool) {
        self.proxy.release_uploads(keep);
    }

    fn uploads_started(&self) -> u64 {
        self.proxy.uploads_started()
    }

    fn writes(&self, chat: &str, message: Option<&str>) -> Vec<Instant> {
        self.proxy
            .writes(chat)
            .into_iter()
            .filter(|write| message.is_none_or(|m| write.event == m || write.edits() == Some(m)))
            .map(|write| write.at)
            .collect()
    }

    fn typing(&self, chat: &str) -> Option<usize> {
        Some(self.proxy.typing(chat))
    }

    fn rate_limit(&self, chat: &str, retry_after: Duration, times: u32) {
        self.proxy.rate_limit(chat, retry_after, times);
    }

    fn limited_at(&self, chat: &str) -> Vec<Instant> {
        self.proxy.limited_at(chat)
    }

    fn taken_in(&self, state_dir: &std::path::Path, written: &Written) -> bool {
        // The homeserver sends it again after the kept token until it is in the inbox.
        self.event(written).is_some_and(|event| {
            std::fs::read_to_string(state_dir.join("matrix/inbox.jsonl"))
                .is_ok_and(|inbox| inbox.contains(&format!("\"message\":\"{event}\"")))
        })
    }

    fn set_file_delay(&self, delay: Duration) {
        self.proxy.set_file_delay(delay);
    }

    fn files_served(&self) -> Vec<Instant> {
        self.proxy.files_served()
    }

    async fn wait(&self, what: &str, check: impl Fn(&Self) -> bool) {
        let deadline = Instant::now() + PATIENCE;
        loop {
            let changed = self.changed.notified();
            if check(self) {
                return;
            }
            if tokio::time::timeout_at(deadline, changed).await.is_err() {
                assert!(
                    check(self),
                    "{what} did not happen within {PATIENCE:?}; the bot posted: {:?}",
                    self.rooms
                        .values()
                        .map(|room| self.bot_wrote(room.as_str()))
                        .collect::<Vec<_>>()
                );
                return;
            }
        }
    }
}

suite!(Matrix);
