//! A cluster on a real `nats-server` (Debian's, with JetStream): the binary started as a
//! gateway and as workers on 127.0.0.1, messages typed into the gateway's WebSocket, replies
//! read there, workers killed with -9.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::Value;
use switchboard_testkit::{NatsServer, Reply, ScriptedLlm, last_user_text};
use tokio::time::Instant;

use crate::util::{self, Extra, WsClient};

/// A member's lease, short so that failover is quick to see.
pub(crate) const LEASE_SECS: f64 = 2.0;

/// The lease of the runs where no member dies: long enough that a busy machine renews it in
/// time (a lease that lapses under load moves its partition, and the turns under way there
/// are run again — answered once, but the model asked twice).
const STEADY_LEASE_SECS: f64 = 10.0;

/// How long the whole of a cluster test may wait for what it expects.
pub(crate) const CLUSTER_PATIENCE: Duration = Duration::from_secs(120);

/// Writes the config of one member (its own directory, as on a host of its own; the
/// workspace made, as a mounted shared volume would be).
pub(crate) fn member_config(
    root: &Path,
    llm: &ScriptedLlm,
    nats: &NatsServer,
    role: &str,
    member: &str,
) -> PathBuf {
    member_config_with(root, llm, nats, role, member, "", "")
}

/// [`member_config`] with [`STEADY_LEASE_SECS`].
fn steady_member(
    root: &Path,
    llm: &ScriptedLlm,
    nats: &NatsServer,
    role: &str,
    member: &str,
) -> PathBuf {
    let config = member_config(root, llm, nats, role, member);
    let text = std::fs::read_to_string(&config).expect("config");
    let steady = text.replace(
        &format!("lease_secs = {LEASE_SECS}"),
        &format!("lease_secs = {STEADY_LEASE_SECS}"),
    );
    std::fs::write(&config, steady).expect("config");
    config
}

/// [`member_config`] with `agent` lines in `[agent]` and `tables` added.
pub(crate) fn member_config_with(
    root: &Path,
    llm: &ScriptedLlm,
    nats: &NatsServer,
    role: &str,
    member: &str,
    agent: &str,
    tables: &str,
) -> PathBuf {
    let dir = root.join(member);
    std::fs::create_dir_all(dir.join("workspace")).expect("workspace");
    let tables = format!(
        "[cluster]\nnats_url = \"{}\"\nname = \"sb\"\npartitions = 8\nrole = \"{role}\"\nmember = \"{member}\"\nlease_secs = {LEASE_SECS}\n\n{tables}",
        nats.url()
    );
    let config = dir.join("config.toml");
    let text = util::config_text_with(
        &llm.base_url(),
        &dir,
        Extra {
            agent,
            tables: &tables,
            ..Extra::default()
        },
    );
    std::fs::write(&config, text).expect("config");
    config
}

/// Replies that name the message they answer.
pub(crate) fn echoing(llm: &ScriptedLlm) {
    llm.respond_with(|request| Reply::text(format!("re: {}", last_user_text(request))));
}

/// Reads `message` frames until `count` arrived; by chat, in the order they came.
pub(crate) async fn replies(client: &mut WsClient, count: usize) -> BTreeMap<String, Vec<String>> {
    replies_noting(client, count, &mut Vec::new()).await
}

/// [`replies`], keeping the `reset` and `status` frames seen meanwhile in `noted`.
pub(crate) async fn replies_noting(
    client: &mut WsClient,
    count: usize,
    noted: &mut Vec<serde_json::Value>,
) -> BTreeMap<String, Vec<String>> {
    let mut by_chat: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut seen = 0;
    let deadline = Instant::now() + CLUSTER_PATIENCE;
    while seen < count {
        let wait = deadline.saturating_duration_since(Instant::now());
        let Some(frame) = client.try_next_frame(wait).await else {
            panic!("{seen} of {count} replies came: {by_chat:?}");
        };
        if frame["type"] == "reset" || frame["type"] == "status" {
            noted.push(frame.clone());
        }
        if frame["type"] == "message" {
            let chat = frame["chat_id"].as_str().unwrap_or_default().to_owned();
            let text = frame["content"].as_str().unwrap_or_default().to_owned();
            by_chat.entry(chat).or_default().push(text);
            seen += 1;
        }
    }
    by_chat
}

/// Which member holds each partition, read off the cluster's leases bucket.
pub(crate) async fn holders(nats: &NatsServer) -> BTreeMap<String, String> {
    let client = async_nats::connect(nats.url()).await.expect("connect");
    let js = async_nats::jetstream::new(client);
    let leases = js.get_key_value("sb_leases").await.expect("bucket");
    let mut keys = leases.keys().await.expect("keys");
    let mut out = BTreeMap::new();
    while let Some(key) = futures::StreamExt::next(&mut keys).await {
        let key = key.expect("key");
        if let Some(value) = leases.get(&key).await.expect("get") {
            out.insert(key, String::from_utf8_lossy(&value).into_owned());
        }
    }
    out
}

/// How many partitions are held (leases `p.N`; others are connections and duties).
pub(crate) fn partitions(held: &BTreeMap<String, String>) -> usize {
    held.keys().filter(|key| key.starts_with("p.")).count()
}

/// Waits until all 8 partitions are held, `count` of them by each `(member, count)`.
pub(crate) async fn partitions_held(nats: &NatsServer, members: &[(&str, usize)]) {
    wait_until("the partitions held as expected", || async {
        let held = holders(nats).await;
        let partitions: Vec<&String> = held
            .iter()
            .filter(|(key, _)| key.starts_with("p."))
            .map(|(_, member)| member)
            .collect();
        partitions.len() == 8
            && members.iter().all(|(member, count)| {
                partitions
                    .iter()
                    .filter(|held| held.as_str() == *member)
                    .count()
                    == *count
            })
    })
    .await;
}

/// A gateway and two workers, each a process of its own with `config`'s lease, once the
/// partitions are split between the workers: the gateway's address and the processes.
pub(crate) async fn gateway_and_two_workers(
    root: &Path,
    llm: &ScriptedLlm,
    nats: &NatsServer,
    config: fn(&Path, &ScriptedLlm, &NatsServer, &str, &str) -> PathBuf,
) -> (std::net::SocketAddr, [tokio::process::Child; 3]) {
    // One `http.bind` for all three, as one config on one host has: only the gateway binds it.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|free| free.local_addr())
        .expect("a free port")
        .port();
    let member = |role: &str, name: &str| {
        let path = config(root, llm, nats, role, name);
        let text = std::fs::read_to_string(&path).expect("config").replacen(
            "bind = \"127.0.0.1:0\"",
            &format!("bind = \"127.0.0.1:{port}\""),
            1,
        );
        std::fs::write(&path, text).expect("config");
        path
    };
    let (gateway, addr) = util::spawn_daemon(&member("gateway", "gw")).await;
    assert_eq!(addr.port(), port);
    let (w1, serving) = util::spawn_daemon_serving(&member("worker", "w1")).await;
    // A worker's start line names no channel: it serves none, on a port of its own.
    assert_eq!(serving["channels"], "[]", "{serving}");
    assert_ne!(serving["addr"], addr.to_string(), "{serving}");
    let (w2, _) = util::spawn_daemon(&member("worker", "w2")).await;
    partitions_held(nats, &[("w1", 4), ("w2", 4)]).await;
    (addr, [gateway, w1, w2])
}

/// Sends round `round` (its number as the text) to each of `chats` chats.
pub(crate) async fn send_round(client: &mut WsClient, chats: usize, round: usize) {
    for chat in 0..chats {
        client
            .send(&format!("chat-{chat}"), &format!("{round}"))
            .await;
    }
}

/// Asserts that every chat was answered `re: 0` … `re: {rounds - 1}`, each once and in
/// order, and that nothing more comes.
async fn assert_answered_once(
    client: &mut WsClient,
    by_chat: &BTreeMap<String, Vec<String>>,
    chats: usize,
    rounds: usize,
) {
    assert_eq!(by_chat.len(), chats);
    let expected: Vec<String> = (0..rounds).map(|round| format!("re: {round}")).collect();
    for (chat, said) in by_chat {
        assert_eq!(
            said, &expected,
            "{chat}: each message answered once, in order"
        );
    }
    let extra = client.try_next_frame(Duration::from_millis(500)).await;
    assert!(
        extra
            .as_ref()
            .is_none_or(|frame| frame["type"] != "message"),
        "nothing is answered twice: {extra:?}"
    );
}

pub(crate) async fn wait_until<F, Fut>(what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + CLUSTER_PATIENCE;
    while !check().await {
        assert!(
            Instant::now() < deadline,
            "{what}: not within {CLUSTER_PATIENCE:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_gateway_two_workers_answer_every_message_once_in_order() {
    let nats = NatsServer::start();
    let llm = ScriptedLlm::start().await.expect("llm");
    echoing(&llm);
    let root = tempfile::tempdir().expect("tempdir");
    let (addr, _members) = gateway_and_two_workers(root.path(), &llm, &nats, steady_member).await;

    const CHATS: usize = 200;
    const EACH: usize = 5;
    let mut client = WsClient::connect(addr).await;
    for round in 0..EACH {
        send_round(&mut client, CHATS, round).await;
    }
    let by_chat = replies(&mut client, CHATS * EACH).await;
    assert_answered_once(&mut client, &by_chat, CHATS, EACH).await;
    assert_eq!(
        llm.requests().len(),
        CHATS * EACH,
        "one model call per message"
    );
    let _ = Value::Null;
}

/// Every request answered in two steps, each a little slow: a tool call (`list_dir`), then
/// a text naming the message — so that turns are under way when a worker is killed.
fn tool_calling(llm: &ScriptedLlm) {
    llm.strict().respond_with(|request| {
        let last = request["messages"]
            .as_array()
            .and_then(|messages| messages.last())
            .map(|message| message["role"].as_str().unwrap_or_default().to_owned())
            .unwrap_or_default();
        let reply = if last == "tool" {
            Reply::text(format!("re: {}", last_user_text(request)))
        } else {
            Reply::tool("list_dir", serde_json::json!({"path": "."}))
        };
        reply.delayed(Duration::from_millis(150))
    });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_killed_mid_turn_is_taken_over_and_every_message_answered_once() {
    let nats = NatsServer::start();
    let llm = ScriptedLlm::start().await.expect("llm");
    tool_calling(&llm);
    let root = tempfile::tempdir().expect("tempdir");
    let (addr, [_gateway, mut w1, _w2]) =
        gateway_and_two_workers(root.path(), &llm, &nats, member_config).await;

    const CHATS: usize = 30;
    const EACH: usize = 3;
    let mut client = WsClient::connect(addr).await;
    for round in 0..EACH {
        send_round(&mut client, CHATS, round).await;
    }
    // Killed once some answers are out and many turns are under way.
    let mut by_chat = replies(&mut client, CHATS / 2).await;
    w1.start_kill().expect("kill -9");
    w1.wait().await.expect("ended");
    let killed = Instant::now();
    partitions_held(&nats, &[("w2", 8)]).await;
    // Once the dead worker's lease runs out, not after some other wait: a few leases, with
    // room for a loaded machine (6.8 s, 3.4 leases, beside a CI run's other tests).
    let took_over = killed.elapsed();
    assert!(
        took_over < Duration::from_secs_f64(LEASE_SECS * 5.0),
        "taken over in {took_over:?}"
    );
    let seen: usize = by_chat.values().map(Vec::len).sum();
    let mut noted = Vec::new();
    for (chat, said) in replies_noting(&mut client, CHATS * EACH - seen, &mut noted).await {
        by_chat.entry(chat).or_default().extend(said);
    }
    assert_answered_once(&mut client, &by_chat, CHATS, EACH).await;
    // A turn the killed worker had under way starts over on the survivor, which says so
    // after clearing what the chat was shown of it (no stream glued to another).
    let taken_over: Vec<&serde_json::Value> = noted
        .iter()
        .filter(|frame| frame["text"] == switchboard_agent::TAKING_OVER)
        .collect();
    assert!(!taken_over.is_empty(), "no turn was taken over: {noted:?}");
    for status in taken_over {
        let at = noted.iter().position(|frame| frame == status).unwrap_or(0);
        assert!(
            noted[..at]
                .iter()
                .any(|frame| frame["type"] == "reset" && frame["chat_id"] == status["chat_id"]),
            "a reset before {status}: {noted:?}"
        );
    }
    assert!(
        llm.violations().is_empty(),
        "every history valid for a strict provider: {:?}",
        llm.violations()
    );
}

#[test]
fn a_cluster_config_out_of_range_names_its_file_line_and_key() {
    let dir = tempfile::tempdir().expect("tempdir");
    let text = util::config_text_with(
        "http://127.0.0.1:9/v1",
        dir.path(),
        Extra {
            tables: "[cluster]\nnats_url = \"nats://127.0.0.1:4222\"\npartitions = 0\n",
            ..Extra::default()
        },
    );
    let err = switchboard::config::Config::parse(&text, &dir.path().join("config.toml"))
        .expect_err("refused")
        .to_string();
    assert!(err.contains("config.toml:"), "{err}");
    assert!(err.contains("cluster.partitions"), "{err}");
    assert!(err.contains("between 1 and 1024"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_whose_workspace_is_missing_refuses_to_start() {
    let nats = NatsServer::start();
    let llm = ScriptedLlm::start().await.expect("llm");
    let root = tempfile::tempdir().expect("tempdir");
    let config = member_config(root.path(), &llm, &nats, "worker", "w1");
    std::fs::remove_dir(root.path().join("w1/workspace")).expect("unmounted");
    let output = tokio::process::Command::new(util::BINARY)
        .args(["run", "--config"])
        .arg(&config)
        .output()
        .await
        .expect("runs");
    assert!(!output.status.success());
    let said = String::from_utf8_lossy(&output.stderr);
    assert!(said.contains("is missing on this worker"), "{said}");
    assert!(
        !root.path().join("w1/workspace").exists(),
        "not made afresh"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_that_joins_gets_partitions_without_disturbing_running_turns() {
    let nats = NatsServer::start();
    let llm = ScriptedLlm::start().await.expect("llm");
    llm.respond_with(|request| {
        Reply::text(format!("re: {}", last_user_text(request))).delayed(Duration::from_millis(1500))
    });
    let root = tempfile::tempdir().expect("tempdir");
    let (_gateway, addr) =
        util::spawn_daemon(&steady_member(root.path(), &llm, &nats, "gateway", "gw")).await;
    let (_w1, _) =
        util::spawn_daemon(&steady_member(root.path(), &llm, &nats, "worker", "w1")).await;
    partitions_held(&nats, &[("w1", 8)]).await;

    const CHATS: usize = 16;
    let mut client = WsClient::connect(addr).await;
    send_round(&mut client, CHATS, 0).await;
    // Turns are under way on the first worker when the second joins.
    llm.wait_for_requests(CHATS, CLUSTER_PATIENCE).await;
    let (_w2, _) =
        util::spawn_daemon(&steady_member(root.path(), &llm, &nats, "worker", "w2")).await;
    let mut by_chat = replies(&mut client, CHATS).await;
    partitions_held(&nats, &[("w1", 4), ("w2", 4)]).await;
    send_round(&mut client, CHATS, 1).await;
    for (chat, said) in replies(&mut client, CHATS).await {
        by_chat.entry(chat).or_default().extend(said);
    }
    assert_answered_once(&mut client, &by_chat, CHATS, 2).await;
    assert_eq!(
        llm.requests().len(),
        2 * CHATS,
        "no running turn was stopped and run again"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nats_restarted_mid_load_loses_nothing_and_answers_nothing_twice() {
    let mut nats = NatsServer::start();
    let llm = ScriptedLlm::start().await.expect("llm");
    llm.respond_with(|request| {
        Reply::text(format!("re: {}", last_user_text(request))).delayed(Duration::from_millis(100))
    });
    let root = tempfile::tempdir().expect("tempdir");
    let (addr, _members) = gateway_and_two_workers(root.path(), &llm, &nats, member_config).await;

    const CHATS: usize = 50;
    let mut client = WsClient::connect(addr).await;
    send_round(&mut client, CHATS, 0).await;
    let mut by_chat = replies(&mut client, CHATS / 5).await;
    // The server dies mid-load; what it stored is on its disk. Messages typed meanwhile wait
    // in the gateway for it.
    nats.kill();
    send_round(&mut client, CHATS, 1).await;
    nats.resume();
    let seen: usize = by_chat.values().map(Vec::len).sum();
    for (chat, said) in replies(&mut client, 2 * CHATS - seen).await {
        by_chat.entry(chat).or_default().extend(said);
    }
    assert_answered_once(&mut client, &by_chat, CHATS, 2).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_and_doctor_show_the_cluster() {
    let nats = NatsServer::start();
    let llm = ScriptedLlm::start().await.expect("llm");
    echoing(&llm);
    let root = tempfile::tempdir().expect("tempdir");
    let (_w1, _) =
        util::spawn_daemon(&member_config(root.path(), &llm, &nats, "worker", "w1")).await;
    let config = member_config(root.path(), &llm, &nats, "gateway", "gw");
    let doctor = |config: PathBuf| async move {
        let output = tokio::process::Command::new(util::BINARY)
            .args(["doctor", "--config"])
            .arg(config)
            .output()
            .await
            .expect("runs");
        String::from_utf8_lossy(&output.stdout).into_owned()
    };
    wait_until(
        "the worker holds every partition and the scheduler",
        || async {
            let held = holders(&nats).await;
            partitions(&held) == 8 && held.contains_key("duty.scheduler")
        },
    )
    .await;
    // A gateway, which holds no partition, is listed too.
    let (_gw, _) = util::spawn_daemon(&config).await;
    // `status` shows the members, their roles and partitions, and what waits in each.
    let status = async || {
        let status = tokio::process::Command::new(util::BINARY)
            .args(["status", "--config"])
            .arg(root.path().join("w1/config.toml"))
            .output()
            .await
            .expect("runs");
        String::from_utf8_lossy(&status.stdout).into_owned()
    };
    wait_until("the gateway listed", || async {
        status().await.contains("cluster sb: 2 members")
    })
    .await;
    let shown = status().await;
    assert!(
        shown
            .lines()
            .any(|line| line.contains("gw") && line.contains("gateway")),
        "{shown}"
    );
    assert!(
        shown.contains("w1")
            && shown.contains("worker")
            && shown.contains("partitions 0 (0 waiting), 1 (0 waiting)"),
        "{shown}"
    );
    assert!(
        shown.contains("duty.scheduler") && shown.contains("held by w1"),
        "{shown}"
    );
    let said = doctor(config.clone()).await;
    assert!(said.contains("✓ cluster: NATS"), "{said}");
    assert!(said.contains("streams and buckets ready"), "{said}");
    assert!(said.contains("w1: worker"), "{said}");
    assert!(said.contains("8 of 8 partitions held"), "{said}");

    drop(nats);
    let said = doctor(config).await;
    assert!(said.contains("✗ cluster: cannot reach NATS"), "{said}");
}

/// Reads frames until `count` messages in `chat` whose text holds `holding` came; returns
/// their texts.
pub(crate) async fn messages_holding(
    client: &mut WsClient,
    chat: &str,
    holding: &str,
    count: usize,
) -> Vec<String> {
    let mut seen = Vec::new();
    let deadline = Instant::now() + CLUSTER_PATIENCE;
    while seen.len() < count {
        let wait = deadline.saturating_duration_since(Instant::now());
        let Some(frame) = client.try_next_frame(wait).await else {
            panic!(
                "{seen:?}: {} of {count} messages holding {holding:?} came",
                seen.len()
            );
        };
        if frame["type"] == "message"
            && frame["chat_id"] == chat
            && frame["content"]
                .as_str()
                .is_some_and(|text| text.contains(holding))
        {
            seen.push(frame["content"].as_str().unwrap_or_default().to_owned());
        }
    }
    seen
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jobs_are_the_clusters_and_fire_once_across_the_leaders_kill_9() {
    let nats = NatsServer::start();
    let llm = ScriptedLlm::start().await.expect("llm");
    echoing(&llm);
    let root = tempfile::tempdir().expect("tempdir");
    let scheduler = "[scheduler]\nmin_interval_secs = 1\n";
    let config = |role: &str, member: &str| {
        member_config_with(root.path(), &llm, &nats, role, member, "", scheduler)
    };
    let gateway_config = config("gateway", "gw");
    let (_gateway, addr) = util::spawn_daemon(&gateway_config).await;
    let (w1, _) = util::spawn_daemon(&config("worker", "w1")).await;
    let (w2, _) = util::spawn_daemon(&config("worker", "w2")).await;
    partitions_held(&nats, &[("w1", 4), ("w2", 4)]).await;
    let mut client = WsClient::connect(addr).await;
    client.send("chat-a", "hi").await;
    messages_holding(&mut client, "chat-a", "re: hi", 1).await;

    // The operator adds a job on the gateway's host; a worker fires it.
    let (ok, added) = crate::scheduler::cron(
        &gateway_config,
        &[
            "add",
            "--chat",
            "websocket:chat-a",
            "--every",
            "2s",
            "--name",
            "tick",
            "--message",
            "tick",
        ],
    )
    .await;
    assert!(ok && added.starts_with("Added job j1"), "{added}");
    let mut ticks = messages_holding(&mut client, "chat-a", "tick", 2).await;
    let held = holders(&nats).await;
    let leader = held
        .get("duty.scheduler")
        .cloned()
        .expect("a worker fires the jobs");
    let (mut killed, survivor) = match leader.as_str() {
        "w1" => (w1, "w2"),
        "w2" => (w2, "w1"),
        other => panic!("the scheduler's lease is held by {other}"),
    };

    // The worker that fires the jobs is killed: the other takes the duty and the job goes on.
    killed.start_kill().expect("kill -9");
    killed.wait().await.expect("ended");
    ticks.extend(messages_holding(&mut client, "chat-a", "tick", 2).await);
    assert_eq!(
        holders(&nats)
            .await
            .get("duty.scheduler")
            .map(String::as_str),
        Some(survivor)
    );

    // Removed, it stops; every run recorded answered, each once (a run is one due time).
    let (ok, removed) = crate::scheduler::cron(&gateway_config, &["rm", "j1"]).await;
    assert!(ok, "{removed}");
    let deadline = Instant::now() + CLUSTER_PATIENCE;
    let runs = loop {
        let (ok, listed) =
            crate::scheduler::cron(&gateway_config, &["runs", "j1", "--limit", "20"]).await;
        assert!(ok, "{listed}");
        if !listed.contains("pending") {
            break listed;
        }
        assert!(Instant::now() < deadline, "a run stays pending: {listed}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    // Replies of runs still on their way when the job was removed.
    while let Some(frame) = client.try_next_frame(Duration::from_secs(1)).await {
        if frame["type"] == "message"
            && frame["content"]
                .as_str()
                .is_some_and(|t| t.contains("tick"))
        {
            ticks.push(frame["content"].as_str().unwrap_or_default().to_owned());
        }
    }
    let answered = runs
        .lines()
        .filter(|line| line.ends_with("answered"))
        .count();
    assert_eq!(
        answered,
        runs.lines().count() - 1,
        "every run answered: {runs}"
    );
    assert_eq!(
        ticks.len(),
        answered,
        "each run answered once in the chat: {ticks:?}\n{runs}"
    );
}
