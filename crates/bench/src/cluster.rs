//! The cluster (`--only cluster`): the NATS hop's cost per turn against the bus of one
//! process under the same load, turns/s with one and two workers, failover (kill -9 of a
//! worker → the first answer by the survivor), and memory per worker; with `[memory]` on
//! (`--cluster-memory`), how long a member that starts after the load takes to index it.
//! Needs a release binary built with `--features cluster` and Debian's `nats-server`.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::Context;
use futures::{SinkExt, StreamExt};
use serde_json::{Value, json};
use switchboard_testkit::NatsServer;
use tokio_tungstenite::tungstenite::Message;

use crate::daemon::{self, Daemon, Launcher};
use crate::load;
use crate::{Results, mib};

/// Lease of the failover run, the default's.
const LEASE_SECS: f64 = 10.0;

/// The members' config: `[cluster]`, and `[memory]` on every member when `memory`.
#[derive(Clone, Copy)]
struct Members<'a> {
    nats: &'a NatsServer,
    memory: bool,
}

impl Members<'_> {
    fn tables(&self, role: &str, name: &str) -> String {
        let mut tables = format!(
            "[cluster]\nnats_url = \"{}\"\nname = \"bench\"\nrole = \"{role}\"\nmember = \"{name}\"\nlease_secs = {LEASE_SECS:.1}\n",
            self.nats.url()
        );
        if self.memory {
            tables.push_str("[memory]\nenabled = true\n");
        }
        tables
    }
}

async fn start(
    launcher: &Launcher,
    root: &Path,
    llm_url: &str,
    members: Members<'_>,
    role: &str,
    name: &str,
) -> anyhow::Result<Daemon> {
    let dir = root.join(name);
    std::fs::create_dir_all(dir.join("workspace"))?;
    let (daemon, _) =
        daemon::start_with(launcher, &dir, llm_url, &members.tables(role, name)).await?;
    Ok(daemon)
}

/// Which member holds each partition.
async fn holders(nats: &NatsServer) -> anyhow::Result<BTreeMap<u32, String>> {
    let client = async_nats::connect(nats.url()).await?;
    let leases = async_nats::jetstream::new(client)
        .get_key_value("bench_leases")
        .await?;
    let mut keys = leases.keys().await?;
    let mut out = BTreeMap::new();
    while let Some(key) = keys.next().await {
        let key = key?;
        if let (Some(number), Some(value)) = (
            key.strip_prefix("p.").and_then(|n| n.parse().ok()),
            leases.get(&key).await?,
        ) {
            out.insert(number, String::from_utf8_lossy(&value).into_owned());
        }
    }
    Ok(out)
}

async fn settled(nats: &NatsServer, workers: &[&str]) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let held = holders(nats).await?;
        let share = 16 / workers.len();
        if held.len() == 16
            && workers
                .iter()
                .all(|w| held.values().filter(|m| m == w).count() == share)
        {
            return Ok(());
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "the partitions did not settle: {held:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

pub async fn run(
    launcher: &Launcher,
    llm_url: &str,
    results: &mut Results,
    messages: usize,
    memory: bool,
) -> anyhow::Result<()> {
    let turns = messages.min(500);
    // The bus of one process: the same daemon, alone.
    {
        let dir = tempfile::tempdir()?;
        let (alone, _) = daemon::start(launcher, dir.path(), llm_url).await?;
        load::through_daemon(alone.addr, alone.pid, 1, 50, "warm").await?;
        let one = load::through_daemon(alone.addr, alone.pid, 1, turns, "alone").await?;
        let many =
            load::through_daemon(alone.addr, alone.pid, 32, turns / 10, "alone-many").await?;
        results.insert("cluster_alone_turn_ms_p50".into(), one.p(0.5));
        results.insert("cluster_alone_turn_ms_p99".into(), one.p(0.99));
        results.insert("cluster_alone_turns_per_sec".into(), many.turns_per_sec());
        alone.stop().await?;
    }
    let nats = NatsServer::start();
    let members = Members {
        nats: &nats,
        memory,
    };
    let root = tempfile::tempdir()?;
    let gateway = start(launcher, root.path(), llm_url, members, "gateway", "gw").await?;
    let w1 = start(launcher, root.path(), llm_url, members, "worker", "w1").await?;
    settled(&nats, &["w1"]).await?;
    results.insert("cluster_worker_rss_idle_mib".into(), mib(w1.rss_kib()));
    results.insert(
        "cluster_gateway_rss_idle_mib".into(),
        mib(gateway.rss_kib()),
    );
    load::through_daemon(gateway.addr, gateway.pid, 1, 50, "warm").await?;
    let one = load::through_daemon(gateway.addr, gateway.pid, 1, turns, "one").await?;
    let many = load::through_daemon(gateway.addr, gateway.pid, 32, turns / 10, "one-many").await?;
    results.insert("cluster_turn_ms_p50".into(), one.p(0.5));
    results.insert("cluster_turn_ms_p99".into(), one.p(0.99));
    results.insert(
        "cluster_1_worker_turns_per_sec".into(),
        many.turns_per_sec(),
    );
    results.insert("cluster_worker_rss_loaded_mib".into(), mib(w1.rss_kib()));

    let w2 = start(launcher, root.path(), llm_url, members, "worker", "w2").await?;
    settled(&nats, &["w1", "w2"]).await?;
    let two = load::through_daemon(gateway.addr, gateway.pid, 32, turns / 10, "two-many").await?;
    results.insert(
        "cluster_2_workers_turns_per_sec".into(),
        two.turns_per_sec(),
    );

    if memory {
        catch_up(launcher, root.path(), llm_url, members, &gateway, results).await?;
    }

    // Failover: kill -9 the first worker, then ask in a chat of one of its partitions.
    let killed = failover(&nats, &gateway, w1).await?;
    results.insert("cluster_failover_s".into(), killed.elapsed().as_secs_f64());
    results.insert("cluster_lease_s".into(), LEASE_SECS);
    w2.stop().await?;
    gateway.stop().await?;
    Ok(())
}

/// A member that starts after the load (a gateway, `[memory]` on): from its start until its
/// index holds what the first gateway's holds, every chat of the load read from the streams.
async fn catch_up(
    launcher: &Launcher,
    root: &Path,
    llm_url: &str,
    members: Members<'_>,
    first: &Daemon,
    results: &mut Results,
) -> anyhow::Result<()> {
    let mut held = daemon::memory_entries(first.addr).await?;
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let now = daemon::memory_entries(first.addr).await?;
        if now == held && now > 0 {
            break;
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "the gateway's index never settled"
        );
        held = now;
    }
    let started = Instant::now();
    let late = start(launcher, root, llm_url, members, "gateway", "late").await?;
    loop {
        let now = daemon::memory_entries(late.addr).await?;
        if now >= held {
            break;
        }
        anyhow::ensure!(
            started.elapsed() < Duration::from_secs(300),
            "the late member's index never caught up: {now} of {held} entries"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    results.insert(
        "cluster_memory_catch_up_s".into(),
        started.elapsed().as_secs_f64(),
    );
    #[allow(clippy::cast_precision_loss)]
    results.insert("cluster_memory_entries".into(), held as f64);
    late.stop().await?;
    Ok(())
}

/// Kills the first worker with -9 and asks in a chat of one of its partitions; when it died
/// (the answer has come once this returns).
async fn failover(nats: &NatsServer, gateway: &Daemon, w1: Daemon) -> anyhow::Result<Instant> {
    let held = holders(nats).await?;
    let chat = (0..10_000)
        .map(|n| format!("failover-{n}"))
        .find(|chat| {
            let key = format!("websocket_{chat}");
            let partition = switchboard_nats::partition_of(&key.as_str().into(), 16);
            held.get(&partition).is_some_and(|m| m == "w1")
        })
        .context("a chat of the first worker")?;
    let (mut socket, _) =
        tokio_tungstenite::connect_async(format!("ws://{}/ws", gateway.addr)).await?;
    socket.next().await.context("ready")??;
    let killed = Instant::now();
    w1.kill();
    socket
        .send(Message::text(
            json!({"type": "message", "chat_id": chat, "content": "still there?"}).to_string(),
        ))
        .await?;
    loop {
        let frame = tokio::time::timeout(Duration::from_secs(60), socket.next())
            .await
            .context("no answer within 60 s of the kill")?
            .context("closed")??;
        let Message::Text(text) = frame else { continue };
        let frame: Value = serde_json::from_str(text.as_str())?;
        if frame["type"] == "message" {
            break;
        }
    }
    Ok(killed)
}
