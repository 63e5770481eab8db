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
//! - each due time run once or recorded skipped, and each run answered once in its chat;
//!   the job runs again once the faults stop (a claim a lapsed leader made is not left
//!   pending).
//!
//! Bounded here (a fixed seed, ~30 s of nemesis); `scripts/chaos.sh` runs it longer, over
//! several seeds, through the variables below, and collects the report it prints.

mod checks;
mod clients;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use switchboard_testkit::telegram::TEST_TOKEN;
use switchboard_testkit::{FakeTelegram, NatsServer, Reply, ScriptedLlm, last_user_text};
use tokio::time::Instant;

use crate::cluster::{LEASE_SECS, holders, member_config_with, partitions};
use crate::cluster_faults::{listed_runs, settled_runs};
use crate::util;
use checks::{
    check, check_histories, check_memory, check_runs, check_telegram, check_transcripts,
    report_ledger,
};
use clients::{Ledger, Shared, jobs_watcher, lock, telegram_person, web_client};

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
    memory_bad: usize,
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
            "seed {} · {} s of nemesis ({} actions: {}) · web {} messages: {} lost, {} answered twice, {} reconnects · telegram {} messages: {} wrong · transcripts with a hole or twice: {} · histories the model was sent with a hole or twice: {} · chats a member's memory index finds a message of missing or twice: {} · due times {}: {} answered, {} skipped, {} missing or twice, {} answers seen live at the chat · failover {}",
            settings.seed,
            settings.seconds,
            self.actions.len(),
            self.actions_counted(),
            self.sent,
            self.lost,
            self.twice,
            self.reconnects,
            self.telegram_sent,
            self.telegram_wrong,
            self.transcripts_bad,
            self.histories_bad,
            self.memory_bad,
            self.runs,
            self.runs_answered,
            self.runs_skipped,
            self.due_holes,
            self.ticks,
            failover,
        )
    }

    /// The nemesis's actions, counted by kind.
    fn actions_counted(&self) -> String {
        let kinds = [
            ("kill -9 w", "workers killed"),
            ("(polling)", "polling gateways killed"),
            ("restart NATS", "NATS restarts"),
            ("pause", "workers paused past their lease"),
        ];
        kinds
            .iter()
            .map(|(mark, name)| {
                let count = self
                    .actions
                    .iter()
                    .filter(|action| action.contains(mark))
                    .count();
                format!("{count} {name}")
            })
            .collect::<Vec<_>>()
            .join(", ")
    }

    fn clean(&self) -> bool {
        self.lost == 0
            && self.twice == 0
            && self.telegram_wrong == 0
            && self.transcripts_bad == 0
            && self.histories_bad == 0
            && self.memory_bad == 0
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
    let report = Box::pin(run(settings)).await;
    let line = report.line(&settings);
    if !report.clean() {
        eprintln!(
            "chaos: the nemesis, in order: {}",
            report.actions.join(", ")
        );
    }
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
        "[channels.telegram]\nenabled = true\ntoken = \"{TEST_TOKEN}\"\napi_url = \"{}\"\nallow_from = [{}]\npoll_timeout_secs = 1\nedit_interval_secs = 0.2\n\n[scheduler]\nmin_interval_secs = 1\n\n[memory]\nenabled = true\n",
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

    // Everything up again; the job runs again — a due time after the nemesis answered,
    // so no claim a lapsed leader made is left waiting — and then stops; everyone's
    // messages answered.
    let calm = jiff::Timestamp::now();
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
    let deadline = Instant::now() + SETTLE;
    loop {
        let runs = listed_runs(&gateways[0].config, "j1").await;
        let again = runs.iter().any(|(due, outcome)| {
            outcome == "answered" && due.parse::<jiff::Timestamp>().is_ok_and(|due| due > calm)
        });
        if again {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the job did not run again once the nemesis stopped: {runs:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let (ok, removed) = crate::scheduler::cron(&gateways[0].config, &["rm", "j1"]).await;
    assert!(ok, "{removed}");
    *lock(&up) = gateways.iter().filter_map(|g| g.addr).collect();
    let deadline = Instant::now() + SETTLE;
    for task in talking {
        let left = deadline.saturating_duration_since(Instant::now());
        tokio::time::timeout(left, task)
            .await
            .expect("every message is handled once everything is up again")
            .expect("a client ran to its end");
    }
    let runs = settled_runs(&gateways[0].config, "j1").await;
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
    let members: Vec<&std::path::Path> = gateways
        .iter()
        .chain(workers.iter())
        .map(|member| member.config.as_path())
        .collect();
    check_memory(&members, &chats, &people, &settings, &mut report).await;
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
