//! The cluster under a nemesis, Jepsen-style: two gateways (WebSocket, and a Telegram bot one
//! of them polls), two workers and a job every 2 s on a real `nats-server`, while chats talk
//! and a seeded nemesis kills workers and the polling gateway with -9, restarts NATS, and
//! pauses a worker (SIGSTOP) past its lease. The clients behave as careful ones do — as the
//! web page does: a web client keeps each message until it is `handled` and sends it again
//! (same id) after a reconnect, to whichever gateway is up, subscribing again after the last
//! frame it had and asking for the conversation so far (a gateway that restarted meanwhile
//! kept nothing of what was said while it was down: the history has it).
//!
//! Then, with every part up again, the invariants:
//! - nothing lost: every message's answer reached its client, live or in the history it asks
//!   for after a reconnect;
//! - nothing answered twice at the client (one `message` per id, one Telegram message per
//!   person's message, none stray);
//! - no hole or duplicate in any stored transcript, nor in any history the model was sent;
//! - each due time run once or recorded skipped, and each run answered once in its chat.
//!
//! Bounded here (a fixed seed, ~30 s of nemesis); `scripts/chaos.sh` runs it longer, over
//! several seeds, through the variables below, and collects the report it prints.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::json;
use switchboard_core::{ChatMessage, SessionKey};
use switchboard_nats::{Cluster, ClusterConfig, NatsStore, Role};
use switchboard_sessions::SessionStore;
use switchboard_testkit::telegram::TEST_TOKEN;
use switchboard_testkit::{FakeTelegram, NatsServer, Reply, ScriptedLlm, last_user_text};
use tokio::time::Instant;

use crate::cluster::{LEASE_SECS, holders, member_config_with, partitions};
use crate::util::{self, Read, WsClient};

/// How a run is set (each from `SWITCHBOARD_CHAOS_<NAME>`, else the bounded default).
#[derive(Clone, Copy, Debug)]
struct Settings {
    seed: u64,
    /// Seconds of nemesis.
    seconds: u64,
    /// Web chats, and messages each.
    web_chats: usize,
    messages: usize,
    /// Telegram people, and messages each.
    people: usize,
    person_messages: usize,
}

impl Settings {
    fn from_env() -> Self {
        let get = |name: &str, default: u64| {
            std::env::var(format!("SWITCHBOARD_CHAOS_{name}"))
                .ok()
                .and_then(|value| value.parse().ok())
                .unwrap_or(default)
        };
        Self {
            seed: get("SEED", 1),
            seconds: get("SECONDS", 30),
            web_chats: get("WEB_CHATS", 6) as usize,
            messages: get("MESSAGES", 12) as usize,
            people: get("PEOPLE", 2) as usize,
            person_messages: get("PERSON_MESSAGES", 8) as usize,
        }
    }
}

/// How much of a session each request shows the model (small, so compaction runs often).
const HISTORY: usize = 10;
/// Web messages a client has out at once.
const WINDOW: usize = 3;
/// How long everything may take to settle once the nemesis stops.
const SETTLE: Duration = Duration::from_secs(240);

/// One member process and how to start it again.
struct Member {
    name: String,
    config: PathBuf,
    child: Option<tokio::process::Child>,
    addr: Option<SocketAddr>,
}

impl Member {
    async fn start(&mut self) {
        let (child, addr) = util::spawn_daemon(&self.config).await;
        self.child = Some(child);
        self.addr = Some(addr);
    }

    async fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.start_kill();
            let _ = child.wait().await;
        }
        self.addr = None;
    }

    fn signal(&self, signal: &str) {
        if let Some(pid) = self.child.as_ref().and_then(tokio::process::Child::id) {
            let _ = std::process::Command::new("kill")
                .args([signal, &pid.to_string()])
                .status();
        }
    }
}

/// What the clients saw.
#[derive(Default)]
struct Ledger {
    /// `message` frames by the id of the message they answer.
    answers: HashMap<String, usize>,
    /// Answers found in a conversation's history after a reconnect, by the text they answer.
    in_history: HashSet<String>,
    /// Ids whose `handled` frame came.
    handled: HashSet<String>,
    /// `message` frames of the jobs' chat.
    ticks: usize,
    /// Reconnects the web clients made.
    reconnects: usize,
}

type Shared<T> = Arc<Mutex<T>>;

fn lock<T>(shared: &Shared<T>) -> std::sync::MutexGuard<'_, T> {
    shared
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Connects to one of the gateways that are up (trying until one answers).
async fn connect(gateways: &Shared<Vec<SocketAddr>>, rng: &mut fastrand::Rng) -> WsClient {
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
async fn web_client(
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
async fn jobs_watcher(
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
async fn telegram_person(
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
fn bot_texts(telegram: &FakeTelegram, person: u64) -> Vec<String> {
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

/// `role: text` of each message of a conversation.
fn said(messages: &[ChatMessage]) -> Vec<String> {
    messages
        .iter()
        .map(|message| match message {
            ChatMessage::User { content, .. } => format!("user: {content}"),
            ChatMessage::Assistant { content, .. } => format!("assistant: {content}"),
            other => format!("{other:?}"),
        })
        .collect()
}

/// The whole conversation of a chat whose messages are `texts`: each, then its answer.
fn whole(texts: &[String]) -> Vec<String> {
    texts
        .iter()
        .flat_map(|text| [format!("user: {text}"), format!("assistant: re: {text}")])
        .collect()
}

/// Whether `part` is a run of `whole` with nothing missing or twice, starting at a user
/// message (a window of it, as a history limit cuts one).
fn is_window(part: &[String], whole: &[String]) -> bool {
    part.is_empty()
        || whole
            .windows(part.len())
            .any(|window| window == part && part[0].starts_with("user: "))
}

/// What a run came to.
#[derive(Debug, Default)]
struct Report {
    actions: Vec<String>,
    failovers_ms: Vec<u128>,
    sent: usize,
    lost: usize,
    twice: usize,
    telegram_sent: usize,
    telegram_wrong: usize,
    transcripts_bad: usize,
    histories_bad: usize,
    runs: usize,
    runs_answered: usize,
    runs_skipped: usize,
    due_holes: usize,
    ticks: usize,
    reconnects: usize,
}

impl Report {
    fn line(&self, settings: &Settings) -> String {
        let failover = match (
            self.failovers_ms.iter().min(),
            self.failovers_ms.iter().max(),
        ) {
            (Some(min), Some(max)) => {
                format!("{:.1}–{:.1} s", *min as f64 / 1000.0, *max as f64 / 1000.0)
            }
            _ => "-".into(),
        };
        format!(
            "seed {} · {} s of nemesis ({} actions: {}) · web {} messages: {} lost, {} answered twice, {} reconnects · telegram {} messages: {} wrong · transcripts with a hole or twice: {} · histories the model was sent with a hole or twice: {} · due times {}: {} answered, {} skipped, {} missing or twice, {} answers seen live at the chat · failover {}",
            settings.seed,
            settings.seconds,
            self.actions.len(),
            self.actions.join(", "),
            self.sent,
            self.lost,
            self.twice,
            self.reconnects,
            self.telegram_sent,
            self.telegram_wrong,
            self.transcripts_bad,
            self.histories_bad,
            self.runs,
            self.runs_answered,
            self.runs_skipped,
            self.due_holes,
            self.ticks,
            failover,
        )
    }

    fn clean(&self) -> bool {
        self.lost == 0
            && self.twice == 0
            && self.telegram_wrong == 0
            && self.transcripts_bad == 0
            && self.histories_bad == 0
            && self.due_holes == 0
            && self.ticks <= self.runs_answered
    }
}

/// The nemesis's moves.
#[derive(Clone, Copy, Debug)]
enum Move {
    KillWorker,
    KillPollingGateway,
    RestartNats,
    PauseWorker,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cluster_loses_nothing_and_does_nothing_twice_under_a_nemesis() {
    let settings = Settings::from_env();
    let report = run(settings).await;
    let line = report.line(&settings);
    eprintln!("chaos: {line}");
    if let Ok(path) = std::env::var("SWITCHBOARD_CHAOS_REPORT") {
        use std::io::Write;
        if let Ok(mut file) = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
        {
            let _ = writeln!(file, "{line}");
        }
    }
    assert!(report.clean(), "{line}");
}

async fn run(settings: Settings) -> Report {
    let mut rng = fastrand::Rng::with_seed(settings.seed);
    let mut nats = NatsServer::start();
    let llm = ScriptedLlm::start().await.expect("llm");
    llm.respond_with(|request| {
        Reply::paced(
            format!("re: {}", last_user_text(request)),
            Duration::from_millis(40),
        )
        .delayed(Duration::from_millis(100))
    });
    let telegram = Arc::new(FakeTelegram::start().await.expect("fake Telegram"));
    let people: Vec<u64> = (0..settings.people as u64).map(|n| 5001 + n).collect();
    let allowed: Vec<String> = people.iter().map(|p| format!("\"{p}\"")).collect();
    let telegram_table = format!(
        "[channels.telegram]\nenabled = true\ntoken = \"{TEST_TOKEN}\"\napi_url = \"{}\"\nallow_from = [{}]\npoll_timeout_secs = 1\nedit_interval_secs = 0.2\n\n[scheduler]\nmin_interval_secs = 1\n",
        telegram.api_url(),
        allowed.join(", ")
    );
    let root = tempfile::tempdir().expect("tempdir");
    let agent = format!("history_limit = {HISTORY}");
    let member = |role: &str, name: &str| Member {
        name: name.to_owned(),
        config: member_config_with(
            root.path(),
            &llm,
            &nats,
            role,
            name,
            &agent,
            &telegram_table,
        ),
        child: None,
        addr: None,
    };
    let mut gateways = [member("gateway", "gw1"), member("gateway", "gw2")];
    let mut workers = [member("worker", "w1"), member("worker", "w2")];
    for part in gateways.iter_mut().chain(workers.iter_mut()) {
        part.start().await;
    }
    let up: Shared<Vec<SocketAddr>> =
        Arc::new(Mutex::new(gateways.iter().filter_map(|g| g.addr).collect()));
    settle(&nats).await;
    // Every `every` seconds, so that the runs of the whole nemesis stay within those a job
    // keeps (20): each due time can be accounted for.
    let every = (settings.seconds / 12).max(3);
    let (ok, added) = crate::scheduler::cron(
        &gateways[0].config,
        &[
            "add",
            "--chat",
            "websocket:jobs",
            "--every",
            &format!("{every}s"),
            "--name",
            "tick",
            "--message",
            "tick",
        ],
    )
    .await;
    assert!(ok, "{added}");

    // The chats talk while the nemesis works.
    let ledger: Shared<Ledger> = Arc::default();
    let stop_watching = tokio_util::sync::CancellationToken::new();
    let watcher = tokio::spawn(jobs_watcher(
        up.clone(),
        ledger.clone(),
        stop_watching.clone(),
    ));
    let chats: Vec<String> = (0..settings.web_chats).map(|n| format!("ws{n}")).collect();
    let nemesis = Duration::from_secs(settings.seconds);
    let web_pace = nemesis / settings.messages.max(1) as u32;
    let person_pace = nemesis / settings.person_messages.max(1) as u32 / 2;
    let mut talking = Vec::new();
    for (n, chat) in chats.iter().enumerate() {
        talking.push(tokio::spawn(web_client(
            chat.clone(),
            settings.messages,
            web_pace,
            up.clone(),
            ledger.clone(),
            settings.seed * 1000 + n as u64,
        )));
    }
    for person in &people {
        talking.push(tokio::spawn(telegram_person(
            telegram.clone(),
            *person,
            settings.person_messages,
            person_pace,
        )));
    }

    let mut report = Report::default();
    let until = Instant::now() + Duration::from_secs(settings.seconds);
    let lease = Duration::from_secs_f64(LEASE_SECS);
    while Instant::now() < until {
        tokio::time::sleep(Duration::from_millis(rng.u64(1500..3500))).await;
        let moves = [
            Move::KillWorker,
            Move::KillPollingGateway,
            Move::RestartNats,
            Move::PauseWorker,
        ];
        let chosen = moves[rng.usize(..moves.len())];
        match chosen {
            Move::KillWorker => {
                let worker = &mut workers[rng.usize(..2)];
                worker.kill().await;
                let killed = Instant::now();
                let name = worker.name.clone();
                report.actions.push(format!("kill -9 {name}"));
                // Its partitions are the other's within the lease (it comes back after).
                let deadline = killed + SETTLE;
                loop {
                    let held = holders(&nats).await;
                    let by_others = held
                        .iter()
                        .filter(|(key, member)| key.starts_with("p.") && **member != name)
                        .count();
                    if by_others == 8 || Instant::now() > deadline {
                        break;
                    }
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                report.failovers_ms.push(killed.elapsed().as_millis());
                worker.start().await;
            }
            Move::KillPollingGateway => {
                let polling = holders(&nats).await.get("channel.telegram").cloned();
                let Some(gateway) = gateways
                    .iter_mut()
                    .find(|g| Some(&g.name) == polling.as_ref())
                else {
                    continue;
                };
                let dead = gateway.addr;
                gateway.kill().await;
                lock(&up).retain(|addr| Some(*addr) != dead);
                report
                    .actions
                    .push(format!("kill -9 {} (polling)", gateway.name));
                tokio::time::sleep(lease).await;
                gateway.start().await;
                lock(&up).extend(gateway.addr);
            }
            Move::RestartNats => {
                nats.kill();
                report.actions.push("restart NATS".into());
                tokio::time::sleep(Duration::from_millis(rng.u64(300..1500))).await;
                nats.resume();
            }
            Move::PauseWorker => {
                let worker = &workers[rng.usize(..2)];
                worker.signal("-STOP");
                report
                    .actions
                    .push(format!("pause {} past its lease", worker.name));
                tokio::time::sleep(lease.mul_f64(2.5)).await;
                worker.signal("-CONT");
            }
        }
    }

    // The job stops with the nemesis; everything up again; everyone's messages answered.
    let (ok, removed) = crate::scheduler::cron(&gateways[0].config, &["rm", "j1"]).await;
    assert!(ok, "{removed}");
    for part in gateways.iter_mut().chain(workers.iter_mut()) {
        let exited = part
            .child
            .as_mut()
            .is_none_or(|child| child.try_wait().ok().flatten().is_some());
        if exited {
            part.kill().await;
            part.start().await;
        }
    }
    *lock(&up) = gateways.iter().filter_map(|g| g.addr).collect();
    let deadline = Instant::now() + SETTLE;
    for task in talking {
        let left = deadline.saturating_duration_since(Instant::now());
        tokio::time::timeout(left, task)
            .await
            .expect("every message is handled once everything is up again")
            .expect("a client ran to its end");
    }
    let runs = settled_runs(&gateways[0].config).await;
    // The answers to runs still on their way when the job was removed.
    tokio::time::sleep(Duration::from_secs(3)).await;
    stop_watching.cancel();
    let _ = watcher.await;

    check(
        &settings,
        &report_ledger(&ledger, &mut report, &chats, &settings),
        &mut report,
    );
    check_telegram(&telegram, &people, &settings, &mut report);
    check_transcripts(&nats, &chats, &people, &settings, &mut report).await;
    check_histories(&llm, &mut report);
    check_runs(&runs, every, &mut report);
    report.ticks = lock(&ledger).ticks;
    report
}

/// Waits until both workers hold the partitions and a gateway polls Telegram.
async fn settle(nats: &NatsServer) {
    let deadline = Instant::now() + SETTLE;
    loop {
        let held = holders(nats).await;
        if partitions(&held) == 8 && held.contains_key("channel.telegram") {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the cluster did not settle: {held:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The job's runs once none is pending: `(due, outcome)`, oldest first.
async fn settled_runs(config: &Path) -> Vec<(String, String)> {
    let deadline = Instant::now() + SETTLE;
    loop {
        let (ok, listed) = crate::scheduler::cron(config, &["runs", "j1", "--limit", "1000"]).await;
        assert!(ok, "{listed}");
        let mut runs: Vec<(String, String)> = listed
            .lines()
            .skip(1)
            .filter_map(|line| {
                let words: Vec<&str> = line.split_whitespace().collect();
                Some((
                    words.first()?.to_string(),
                    words.get(3)?.trim_end_matches(':').to_owned(),
                ))
            })
            .collect();
        runs.reverse();
        if runs.iter().all(|(_, outcome)| outcome != "pending") || Instant::now() > deadline {
            return runs;
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

/// The web clients' ids, for the checks.
fn report_ledger(
    ledger: &Shared<Ledger>,
    report: &mut Report,
    chats: &[String],
    settings: &Settings,
) -> BTreeMap<String, (usize, bool)> {
    let ledger = lock(ledger);
    report.reconnects = ledger.reconnects;
    let mut answers = BTreeMap::new();
    for chat in chats {
        for n in 0..settings.messages {
            let id = format!("{chat}-{n:03}");
            let live = ledger.answers.get(&id).copied().unwrap_or(0);
            let later = ledger.in_history.contains(&format!("{chat} m{n:03}"));
            answers.insert(id, (live, later));
        }
    }
    answers
}

/// Nothing lost, nothing twice, at the web clients: each answer came once live, or was in
/// the history the client asked for after a reconnect.
fn check(_: &Settings, answers: &BTreeMap<String, (usize, bool)>, report: &mut Report) {
    report.sent = answers.len();
    for (id, (live, later)) in answers {
        match live {
            0 if *later => {}
            0 => {
                report.lost += 1;
                eprintln!("chaos: {id} was never answered at its client");
            }
            1 => {}
            n => {
                report.twice += 1;
                eprintln!("chaos: {id} was answered {n} times at its client");
            }
        }
    }
}

/// Each person's messages answered once, in order, one bot message each (no stray draft).
fn check_telegram(
    telegram: &FakeTelegram,
    people: &[u64],
    settings: &Settings,
    report: &mut Report,
) {
    for person in people {
        let expected: Vec<String> = (0..settings.person_messages)
            .map(|n| format!("re: tg{person} m{n:03}"))
            .collect();
        report.telegram_sent += expected.len();
        let got = bot_texts(telegram, *person);
        if got != expected {
            report.telegram_wrong += 1;
            eprintln!("chaos: telegram {person} got {got:?}");
        }
    }
}

/// Every stored transcript a window of its chat's whole conversation.
async fn check_transcripts(
    nats: &NatsServer,
    chats: &[String],
    people: &[u64],
    settings: &Settings,
    report: &mut Report,
) {
    let cluster = Cluster::connect(ClusterConfig {
        nats_url: nats.url(),
        auth: Default::default(),
        tls: None,
        name: "sb".into(),
        partitions: 8,
        role: Role::Gateway,
        lease: Duration::from_secs(10),
        member: "checker".into(),
    })
    .await
    .expect("connects");
    let store = NatsStore::new(&cluster, &"default".into());
    let mut sessions: Vec<(SessionKey, Vec<String>)> = chats
        .iter()
        .map(|chat| {
            let texts = (0..settings.messages)
                .map(|n| format!("{chat} m{n:03}"))
                .collect();
            (
                SessionKey::from(format!("websocket_{chat}").as_str()),
                texts,
            )
        })
        .collect();
    sessions.extend(people.iter().map(|person| {
        let texts = (0..settings.person_messages)
            .map(|n| format!("tg{person} m{n:03}"))
            .collect();
        (
            SessionKey::from(format!("telegram_{person}").as_str()),
            texts,
        )
    }));
    for (key, texts) in sessions {
        let stored = said(&store.transcript(&key).await.expect("read"));
        let whole = whole(&texts);
        let ends_whole = stored.last() == whole.last();
        if !is_window(&stored, &whole) || !ends_whole {
            report.transcripts_bad += 1;
            eprintln!("chaos: {key} is stored as {stored:?}");
        }
    }
}

/// Every history the model was sent a window of its chat's conversation, ending in the
/// message it answers.
fn check_histories(llm: &ScriptedLlm, report: &mut Report) {
    for request in llm.requests() {
        let conversation: Vec<String> = request["messages"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|message| message["role"] == "user" || message["role"] == "assistant")
            .map(|message| {
                let text = message["content"].as_str().unwrap_or_default();
                format!("{}: {text}", message["role"].as_str().unwrap_or_default())
            })
            .collect();
        let last = last_user_text(&request);
        let Some((chat, round)) = last.rsplit_once(" m") else {
            continue; // a scheduled run's
        };
        let Ok(round) = round.parse::<usize>() else {
            continue;
        };
        let texts: Vec<String> = (0..=round).map(|n| format!("{chat} m{n:03}")).collect();
        let mut whole = whole(&texts);
        whole.pop(); // the answer it asks for
        if !is_window(&conversation, &whole) || conversation.last() != whole.last() {
            report.histories_bad += 1;
            eprintln!("chaos: the model was sent {conversation:?}");
        }
    }
}

/// Every due time from the first to the last accounted for, once (`every` seconds apart).
fn check_runs(runs: &[(String, String)], every: u64, report: &mut Report) {
    report.runs = runs.len();
    report.runs_answered = runs.iter().filter(|(_, o)| o == "answered").count();
    report.runs_skipped = runs.iter().filter(|(_, o)| o == "skipped").count();
    let dues: Vec<jiff::Timestamp> = runs
        .iter()
        .filter_map(|(due, _)| due.parse().ok())
        .collect();
    for pair in dues.windows(2) {
        if pair[1].duration_since(pair[0]) != jiff::SignedDuration::from_secs(every as i64) {
            report.due_holes += 1;
            eprintln!("chaos: due times {} then {}", pair[0], pair[1]);
        }
    }
    for (due, outcome) in runs {
        if outcome != "answered" && outcome != "skipped" {
            report.due_holes += 1;
            eprintln!("chaos: the run due {due} ended {outcome}");
        }
    }
}
