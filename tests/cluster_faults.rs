//! The cluster's fencing, end to end: a worker that gets a partition back, and a worker
//! paused past its lease, against a real `nats-server` with the binary as gateway and
//! workers. What the model is sent shows whether a worker answered from a stale session, or
//! a stale worker wrote into one: every request must carry the chat's whole history — each
//! message and each answer once, in order, nothing missing.

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::Value;
use switchboard_core::{ChatMessage, SessionKey};
use switchboard_nats::{Cluster, ClusterConfig, NatsStore, Role};
use switchboard_sessions::SessionStore;
use switchboard_testkit::{NatsServer, Reply, ScriptedLlm, last_user_text};

use crate::cluster::{
    CLUSTER_PATIENCE, holders, member_config, messages_holding, partitions_held, replies,
    wait_until,
};
use crate::util::{self, WsClient};

/// The conversation of a request the model was sent: each message as `role: text`.
fn conversation(request: &Value) -> Vec<String> {
    request["messages"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|message| message["role"] != "system")
        .map(|message| {
            let text = message["content"].as_str().unwrap_or_default();
            format!("{}: {text}", message["role"].as_str().unwrap_or_default())
        })
        .collect()
}

/// Asserts that every request the model was sent holds its chat's history whole: `<chat>
/// m000`, its answer, `<chat> m001`, … up to the message it answers — nothing missing,
/// nothing twice.
fn assert_histories_whole(llm: &ScriptedLlm) {
    let mut stale = Vec::new();
    for request in llm.requests() {
        let said = conversation(&request);
        let last = last_user_text(&request);
        let Some((chat, round)) = last.rsplit_once(" m") else {
            continue;
        };
        let round: usize = round.parse().expect("a round number");
        let mut whole = Vec::new();
        for n in 0..=round {
            whole.push(format!("user: {chat} m{n:03}"));
            if n < round {
                whole.push(format!("assistant: re: {chat} m{n:03}"));
            }
        }
        if said != whole {
            stale.push(said);
        }
    }
    assert!(
        stale.is_empty(),
        "{} requests were sent a history that is not the chat's whole: {stale:?}",
        stale.len()
    );
}

/// The cluster's sessions (of the agent `default`, in the cluster `sb`), as a checker from
/// outside reads them.
pub(crate) async fn stored_sessions(nats: &NatsServer) -> NatsStore {
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
    NatsStore::new(&cluster, &"default".into())
}

/// A session as stored: `role: text` of each message, oldest first.
pub(crate) async fn stored(sessions: &NatsStore, key: &str) -> Vec<String> {
    sessions
        .transcript(&SessionKey::from(key))
        .await
        .expect("read")
        .iter()
        .map(|message| match message {
            ChatMessage::User { content, .. } => format!("user: {content}"),
            ChatMessage::Assistant { content, .. } => format!("assistant: {content}"),
            other => format!("{other:?}"),
        })
        .collect()
}

/// Asserts that the session of each of `chats` chats, as stored on the cluster, holds
/// `rounds` messages and their answers — nothing missing, nothing twice, in order.
async fn assert_transcripts_whole(nats: &NatsServer, chats: usize, rounds: usize) {
    let sessions = stored_sessions(nats).await;
    for chat in 0..chats {
        let chat = format!("chat-{chat}");
        let stored = stored(&sessions, &format!("websocket_{chat}")).await;
        let whole: Vec<String> = (0..rounds)
            .flat_map(|n| {
                [
                    format!("user: {chat} m{n:03}"),
                    format!("assistant: re: {chat} m{n:03}"),
                ]
            })
            .collect();
        assert_eq!(stored, whole, "{chat}: the stored transcript is whole");
    }
}

/// Sends round `round` to each of `chats` chats, the text naming both.
async fn send_named_round(client: &mut WsClient, chats: usize, round: usize) {
    for chat in 0..chats {
        let id = format!("chat-{chat}");
        client.send(&id, &format!("{id} m{round:03}")).await;
    }
}

/// Replies that name the message they answer: `re: <chat> mNNN`.
fn echoing_names(llm: &ScriptedLlm, delay: Duration) {
    llm.respond_with(move |request| {
        Reply::text(format!("re: {}", last_user_text(request))).delayed(delay)
    });
}

/// Asserts that no further answer comes.
async fn assert_nothing_more(client: &mut WsClient) {
    let extra = client.try_next_frame(Duration::from_millis(500)).await;
    assert!(
        extra
            .as_ref()
            .is_none_or(|frame| frame["type"] != "message"),
        "nothing is answered twice: {extra:?}"
    );
}

/// Every chat answered `re: <chat> m000` … once each, in order.
fn assert_named_answers(by_chat: &BTreeMap<String, Vec<String>>, chats: usize, rounds: usize) {
    assert_eq!(by_chat.len(), chats, "{by_chat:?}");
    for (chat, said) in by_chat {
        let expected: Vec<String> = (0..rounds).map(|n| format!("re: {chat} m{n:03}")).collect();
        assert_eq!(
            said, &expected,
            "{chat}: each message answered once, in order"
        );
    }
}

/// The rolling restart that used to send the model a history with holes: the second worker
/// answers the first round alone, the first joins and answers three rounds of its half, and
/// is killed; the second takes its partitions back, and must read their sessions again
/// rather than answer from what it held in memory before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partition_taken_back_is_answered_from_the_whole_history() {
    let nats = NatsServer::start();
    let llm = ScriptedLlm::start().await.expect("llm");
    echoing_names(&llm, Duration::ZERO);
    let root = tempfile::tempdir().expect("tempdir");
    let config = |role: &str, member: &str| member_config(root.path(), &llm, &nats, role, member);
    let (_gateway, addr) = util::spawn_daemon(&config("gateway", "gw")).await;
    let (_w2, _) = util::spawn_daemon(&config("worker", "w2")).await;
    partitions_held(&nats, &[("w2", 8)]).await;

    const CHATS: usize = 16;
    let mut client = WsClient::connect(addr).await;
    send_named_round(&mut client, CHATS, 0).await;
    let mut by_chat = replies(&mut client, CHATS).await;

    let (mut w1, _) = util::spawn_daemon(&config("worker", "w1")).await;
    partitions_held(&nats, &[("w1", 4), ("w2", 4)]).await;
    for round in 1..=3 {
        send_named_round(&mut client, CHATS, round).await;
    }
    for (chat, said) in replies(&mut client, 3 * CHATS).await {
        by_chat.entry(chat).or_default().extend(said);
    }

    w1.start_kill().expect("kill -9");
    w1.wait().await.expect("ended");
    partitions_held(&nats, &[("w2", 8)]).await;
    send_named_round(&mut client, CHATS, 4).await;
    for (chat, said) in replies(&mut client, CHATS).await {
        by_chat.entry(chat).or_default().extend(said);
    }
    assert_named_answers(&by_chat, CHATS, 5);
    assert_nothing_more(&mut client).await;
    assert_histories_whole(&llm);
    assert_transcripts_whole(&nats, CHATS, 5).await;
    assert_eq!(
        llm.requests().len(),
        5 * CHATS,
        "one model call per message"
    );
}

/// Stops (SIGSTOP) or continues (SIGCONT) a member's process.
fn signal(child: &tokio::process::Child, signal: &str) {
    let pid = child.id().expect("running").to_string();
    let status = std::process::Command::new("kill")
        .args([signal, &pid])
        .status()
        .expect("kill runs");
    assert!(status.success(), "kill {signal} {pid}");
}

/// A worker paused past its lease while its turns are under way: the other takes its
/// partitions and answers those messages; when the paused one wakes, it neither sends its
/// own answers nor writes them into the sessions — every message answered once at the
/// client, and the next round is answered from whole histories.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_paused_past_its_lease_wakes_without_answering_or_writing_anything() {
    let nats = NatsServer::start();
    let llm = ScriptedLlm::start().await.expect("llm");
    echoing_names(&llm, Duration::from_millis(800));
    let root = tempfile::tempdir().expect("tempdir");
    let config = |role: &str, member: &str| member_config(root.path(), &llm, &nats, role, member);
    let (_gateway, addr) = util::spawn_daemon(&config("gateway", "gw")).await;
    let (paused, _) = util::spawn_daemon(&config("worker", "w1")).await;
    let (_w2, _) = util::spawn_daemon(&config("worker", "w2")).await;
    partitions_held(&nats, &[("w1", 4), ("w2", 4)]).await;

    const CHATS: usize = 16;
    let mut client = WsClient::connect(addr).await;
    send_named_round(&mut client, CHATS, 0).await;
    // Both workers' turns are under way (each waits on the model) when one is paused.
    llm.wait_for_requests(CHATS, CLUSTER_PATIENCE).await;
    signal(&paused, "-STOP");
    partitions_held(&nats, &[("w2", 8)]).await;
    let mut by_chat = replies(&mut client, CHATS).await;
    // Awake again, with its answers to messages the other worker answered in hand; it
    // learns it lost its partitions, and takes half of them again.
    signal(&paused, "-CONT");
    partitions_held(&nats, &[("w1", 4), ("w2", 4)]).await;
    send_named_round(&mut client, CHATS, 1).await;
    for (chat, said) in replies(&mut client, CHATS).await {
        by_chat.entry(chat).or_default().extend(said);
    }
    assert_named_answers(&by_chat, CHATS, 2);
    assert_nothing_more(&mut client).await;
    assert_histories_whole(&llm);
    assert_transcripts_whole(&nats, CHATS, 2).await;
}

/// The runs `switchboard cron runs JOB` lists once none is pending (or the cluster's
/// patience ran out): each due time (to the second) and the word its outcome starts with,
/// oldest first.
pub(crate) async fn settled_runs(config: &std::path::Path, job: &str) -> Vec<(String, String)> {
    let deadline = tokio::time::Instant::now() + CLUSTER_PATIENCE;
    loop {
        let runs = listed_runs(config, job).await;
        let pending = runs.iter().any(|(_, outcome)| outcome == "pending");
        if !pending || tokio::time::Instant::now() > deadline {
            return runs;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The runs `switchboard cron runs JOB` lists now: each due time (to the second) and the
/// word its outcome starts with, oldest first.
pub(crate) async fn listed_runs(config: &std::path::Path, job: &str) -> Vec<(String, String)> {
    let (ok, listed) = crate::scheduler::cron(config, &["runs", job, "--limit", "20"]).await;
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
    runs
}

/// A job every 2 s, while the worker that fires the jobs is paused past its lease: the other
/// takes the duty, and the paused one, awake, fires nothing more. Every due time from the
/// first to the last is accounted for — answered once at the chat, or recorded skipped with
/// why (folded while nobody fired, or the run before still going) — none twice, none lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_due_time_runs_once_or_is_recorded_skipped_when_the_jobs_leader_is_paused() {
    let nats = NatsServer::start();
    let llm = ScriptedLlm::start().await.expect("llm");
    echoing_names(&llm, Duration::ZERO);
    let root = tempfile::tempdir().expect("tempdir");
    let scheduler = "[scheduler]\nmin_interval_secs = 1\n";
    let config = |role: &str, member: &str| {
        crate::cluster::member_config_with(root.path(), &llm, &nats, role, member, "", scheduler)
    };
    let gateway_config = config("gateway", "gw");
    let (_gateway, addr) = util::spawn_daemon(&gateway_config).await;
    let (w1, _) = util::spawn_daemon(&config("worker", "w1")).await;
    let (w2, _) = util::spawn_daemon(&config("worker", "w2")).await;
    partitions_held(&nats, &[("w1", 4), ("w2", 4)]).await;
    let mut client = WsClient::connect(addr).await;
    client.send("chat-a", "hi").await;
    messages_holding(&mut client, "chat-a", "re: hi", 1).await;
    let args = [
        "add",
        "--chat",
        "websocket:chat-a",
        "--every",
        "2s",
        "--name",
        "tick",
        "--message",
        "tick",
    ];
    let (ok, added) = crate::scheduler::cron(&gateway_config, &args).await;
    assert!(ok && added.starts_with("Added job j1"), "{added}");
    let mut ticks = messages_holding(&mut client, "chat-a", "tick", 2).await;

    let leader = holders(&nats)
        .await
        .get("duty.scheduler")
        .cloned()
        .expect("a leader");
    let (paused, other) = match leader.as_str() {
        "w1" => (&w1, "w2"),
        _ => (&w2, "w1"),
    };
    signal(paused, "-STOP");
    wait_until("the other worker fires the jobs", || async {
        holders(&nats)
            .await
            .get("duty.scheduler")
            .map(String::as_str)
            == Some(other)
    })
    .await;
    ticks.extend(messages_holding(&mut client, "chat-a", "tick", 2).await);
    signal(paused, "-CONT");
    ticks.extend(messages_holding(&mut client, "chat-a", "tick", 2).await);

    let (ok, removed) = crate::scheduler::cron(&gateway_config, &["rm", "j1"]).await;
    assert!(ok, "{removed}");
    let runs = settled_runs(&gateway_config, "j1").await;
    assert!(
        runs.iter().all(|(_, outcome)| outcome != "pending"),
        "a run stays pending: {runs:?}"
    );
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
    let dues: Vec<jiff::Timestamp> = runs
        .iter()
        .map(|(due, _)| due.parse().expect("a due time"))
        .collect();
    for pair in dues.windows(2) {
        assert_eq!(
            pair[1].duration_since(pair[0]),
            jiff::SignedDuration::from_secs(2),
            "every due time accounted for, each once: {runs:?}"
        );
    }
    assert!(
        runs.iter()
            .all(|(_, outcome)| outcome == "answered" || outcome == "skipped"),
        "{runs:?}"
    );
    let answered = runs
        .iter()
        .filter(|(_, outcome)| outcome == "answered")
        .count();
    assert_eq!(
        ticks.len(),
        answered,
        "each run answered once in the chat: {ticks:?}\n{runs:?}"
    );
}

/// Stops a member as systemd does (SIGTERM) and waits until it has exited.
async fn stop(child: &mut tokio::process::Child) {
    signal(child, "-TERM");
    tokio::time::timeout(CLUSTER_PATIENCE, child.wait())
        .await
        .expect("it stops in time")
        .expect("ended");
}

/// A rolling restart of both workers while the chats talk: each worker in turn stopped
/// (SIGTERM: it lets its turns end and gives its partitions up) and started again. Every
/// message is answered once, in order; every history the model was sent and every stored
/// transcript is whole — the worker that gets its partitions back reads their sessions
/// again instead of answering from what it held before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rolling_restart_of_both_workers_under_load_leaves_every_transcript_whole() {
    let nats = NatsServer::start();
    let llm = ScriptedLlm::start().await.expect("llm");
    echoing_names(&llm, Duration::from_millis(50));
    let root = tempfile::tempdir().expect("tempdir");
    let config = |role: &str, member: &str| member_config(root.path(), &llm, &nats, role, member);
    let (_gateway, addr) = util::spawn_daemon(&config("gateway", "gw")).await;
    let (mut w1, _) = util::spawn_daemon(&config("worker", "w1")).await;
    let (mut w2, _) = util::spawn_daemon(&config("worker", "w2")).await;
    partitions_held(&nats, &[("w1", 4), ("w2", 4)]).await;

    const CHATS: usize = 12;
    const ROUNDS: usize = 6;
    let mut client = WsClient::connect(addr).await;
    let mut by_chat: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for round in 0..ROUNDS {
        send_named_round(&mut client, CHATS, round).await;
        // Restarts while the rounds are under way: w1 after the first, w2 after the third.
        match round {
            1 => {
                stop(&mut w1).await;
                w1 = util::spawn_daemon(&config("worker", "w1")).await.0;
                partitions_held(&nats, &[("w1", 4), ("w2", 4)]).await;
            }
            3 => {
                stop(&mut w2).await;
                w2 = util::spawn_daemon(&config("worker", "w2")).await.0;
                partitions_held(&nats, &[("w1", 4), ("w2", 4)]).await;
            }
            _ => {}
        }
        for (chat, said) in replies(&mut client, CHATS).await {
            by_chat.entry(chat).or_default().extend(said);
        }
    }
    assert_named_answers(&by_chat, CHATS, ROUNDS);
    assert_nothing_more(&mut client).await;
    assert_histories_whole(&llm);
    assert_transcripts_whole(&nats, CHATS, ROUNDS).await;
    drop((w1, w2));
}
