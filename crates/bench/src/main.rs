//! `switchboard-bench`: what switchboard costs, measured against a release daemon and the
//! testkit's scripted LLM (answering instantly). Writes a JSON result file and prints a
//! Markdown table with the previous run's numbers beside this run's.
//!
//! Usage: `scripts/bench.sh` (builds, raises the fd limit, runs this).

mod cluster;
mod daemon;
mod load;
mod memory;
mod scale;
mod turns;
mod voice;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;
use switchboard_testkit::ScriptedLlm;

#[derive(Parser)]
#[command(about = "Measure switchboard: startup, memory, per-turn overhead, throughput, scale")]
struct Args {
    /// The release daemon binary.
    #[arg(long, default_value = "target/release/switchboard")]
    daemon: PathBuf,
    /// Pin the daemon to these CPUs (`taskset -c` list); run the bench itself on others.
    #[arg(long)]
    daemon_cpus: Option<String>,
    /// Where results are written (the previous file there is the comparison).
    #[arg(long, default_value = "docs/benchmarks/latest.json")]
    out: PathBuf,
    /// Messages per session in the latency runs.
    #[arg(long, default_value_t = 2000)]
    messages: usize,
    /// Sessions on disk in the scale run.
    #[arg(long, default_value_t = 10_000)]
    disk_sessions: usize,
    /// Active sessions in the scale run.
    #[arg(long, default_value_t = 1_000)]
    active_sessions: usize,
    /// Idle WebSocket connections in the scale run.
    #[arg(long, default_value_t = 10_000)]
    idle_connections: usize,
    /// Jobs in the idle scheduler run.
    #[arg(long, default_value_t = 1_000)]
    jobs: usize,
    /// How long idle CPU use is measured.
    #[arg(long, default_value = "60s", value_parser = parse_secs)]
    idle_window: Duration,
    /// Repetitions of each latency run (the median is kept).
    #[arg(long, default_value_t = 3)]
    repeat: usize,
    /// Startup repetitions.
    #[arg(long, default_value_t = 20)]
    starts: usize,
    /// Internal: run only the floor's clients against this LLM URL and print a summary
    /// (the bench starts itself this way, pinned where the daemon would run).
    #[arg(long, hide = true)]
    floor_client: Option<String>,
    /// Internal: sessions of `--floor-client`.
    #[arg(long, hide = true, default_value_t = 1)]
    floor_sessions: usize,
    /// Turns in the platform channels' run.
    #[arg(long, default_value_t = 100)]
    channel_turns: usize,
    /// Corpus sizes (messages) of the memory index run.
    #[arg(long, value_delimiter = ',', default_values_t = [10_000usize, 1_000_000])]
    memory_messages: Vec<usize>,
    /// Queries timed on each corpus of the memory index run.
    #[arg(long, default_value_t = 2_000)]
    memory_queries: usize,
    /// Run the cluster's members with `[memory]` on (compaction keeping what it replaces,
    /// each member's index following the streams).
    #[arg(long)]
    cluster_memory: bool,
    /// Run only these scenarios (default: all).
    #[arg(long, value_enum)]
    only: Vec<Scenario>,
}

#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Scenario {
    Startup,
    Load,
    Disk,
    Idle,
    Telegram,
    Channels,
    /// Turns on Telegram and on Discord against their fakes, one after another in one chat:
    /// the time until the whole answer shows (the draft's closing edit), CPU per turn.
    ChannelTurns,
    /// Memory under load against an LLM that takes its time (a first byte after 500 ms,
    /// then the reply in pieces): with a cap of 16 connections, the default cap, none.
    Slow,
    /// An idle scheduler: memory and CPU per minute turned off, on with no job, and on with
    /// 1,000 jobs (none due while it is measured).
    Jobs,
    /// The cluster on Debian's nats-server (a binary built with `--features cluster`): the
    /// NATS hop per turn against one process, turns/s with one and two workers, failover
    /// after a worker's kill -9, memory per worker.
    Cluster,
    /// An idle stdio MCP server connection (the testkit's `mcp-test-server`, beside the
    /// daemon binary): the daemon's memory and CPU per minute with none and with one.
    Mcp,
    /// What a 30 s voice note adds to a turn against the testkit's transcription server
    /// (typed messages and voice notes alternated in one chat), and what its upload takes.
    Voice,
    /// The memory index (`[memory]`): the daemon idle with it on beside off, and over
    /// generated transcripts of each `--memory-messages` size, the build from scratch, the
    /// index's size per MB of transcript, query p50/p99.
    Memory,
}

type Results = BTreeMap<String, f64>;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    if let Some(url) = &args.floor_client {
        let floor = load::floor(url, args.floor_sessions, args.messages).await?;
        let summary = load::Summary::of(&floor);
        #[allow(clippy::print_stdout)]
        {
            println!("{}", serde_json::to_string(&summary)?);
        }
        return Ok(());
    }
    let llm = ScriptedLlm::start().await?;
    llm.stop_recording();
    let llm_url = llm.base_url();
    let mut results = Results::new();
    let launcher = daemon::Launcher {
        binary: args.daemon.clone(),
        cpus: args.daemon_cpus.clone(),
    };

    // Binary size.
    let size = std::fs::metadata(&args.daemon)?.len();
    results.insert("binary_mib".into(), size as f64 / (1024.0 * 1024.0));

    let run = |scenario| args.only.is_empty() || args.only.contains(&scenario);
    let bench = Bench {
        args: &args,
        launcher: &launcher,
        llm_url: &llm_url,
    };

    // In this order; the cluster only when asked for by name.
    const EVERY: [Scenario; 12] = [
        Scenario::Startup,
        Scenario::Telegram,
        Scenario::Channels,
        Scenario::ChannelTurns,
        Scenario::Load,
        Scenario::Slow,
        Scenario::Jobs,
        Scenario::Mcp,
        Scenario::Disk,
        Scenario::Idle,
        Scenario::Voice,
        Scenario::Memory,
    ];
    for scenario in EVERY.into_iter().filter(|scenario| run(*scenario)) {
        bench.run(scenario, &mut results).await?;
    }

    if args.only.contains(&Scenario::Cluster) {
        cluster::run(
            &launcher,
            &llm_url,
            &mut results,
            args.messages,
            args.cluster_memory,
        )
        .await?;
    }

    report(&args, &results)
}

/// What every scenario runs with.
struct Bench<'a> {
    args: &'a Args,
    launcher: &'a daemon::Launcher,
    llm_url: &'a str,
}

impl Bench<'_> {
    /// Runs `scenario` (but the cluster, which runs on its own), adding to `results`.
    async fn run(&self, scenario: Scenario, results: &mut Results) -> anyhow::Result<()> {
        match scenario {
            Scenario::Startup => bench_startup(self, results).await,
            Scenario::Telegram => bench_telegram(self, results).await,
            Scenario::Channels => bench_channels(self, results).await,
            Scenario::ChannelTurns => bench_channel_turns(self, results).await,
            Scenario::Load => bench_load(self, results).await,
            Scenario::Slow => bench_slow(self, results).await,
            Scenario::Jobs => bench_jobs(self, results).await,
            Scenario::Mcp => bench_mcp(self, results).await,
            Scenario::Disk => bench_disk(self, results).await,
            Scenario::Idle => bench_idle(self, results).await,
            Scenario::Voice => bench_voice(self, results).await,
            Scenario::Memory => bench_memory(self, results).await,
            Scenario::Cluster => Ok(()),
        }
    }
}

/// Startup.
async fn bench_startup(bench: &Bench<'_>, results: &mut Results) -> anyhow::Result<()> {
    let Bench {
        args,
        launcher,
        llm_url,
    } = bench;
    let mut ready = Vec::new();
    let mut healthz = Vec::new();
    for _ in 0..args.starts {
        let dir = tempfile::tempdir()?;
        let (daemon, times) = daemon::start(launcher, dir.path(), llm_url).await?;
        ready.push(times.ready);
        daemon.stop().await?;
        let dir = tempfile::tempdir()?;
        healthz.push(daemon::time_to_healthz(launcher, dir.path(), llm_url).await?);
    }
    results.insert("start_ready_ms_p50".into(), median_ms(&mut ready));
    results.insert("start_healthz_ms_p50".into(), median_ms(&mut healthz));
    Ok(())
}

/// Telegram polling the fake Bot API beside the WebSocket channel: start and idle cost.
async fn bench_telegram(bench: &Bench<'_>, results: &mut Results) -> anyhow::Result<()> {
    let Bench {
        args,
        launcher,
        llm_url,
    } = bench;
    let fake = switchboard_testkit::FakeTelegram::start().await?;
    let tables = format!(
        "[channels.telegram]\nenabled = true\ntoken = \"{}\"\napi_url = \"{}\"\n",
        switchboard_testkit::telegram::TEST_TOKEN,
        fake.api_url()
    );
    let mut ready = Vec::new();
    let mut polling = Vec::new();
    for _ in 0..args.starts {
        let dir = tempfile::tempdir()?;
        let polls = fake.polls();
        let started = std::time::Instant::now();
        let (daemon, times) = daemon::start_with(launcher, dir.path(), llm_url, &tables).await?;
        ready.push(times.ready);
        fake.wait_until(Duration::from_secs(10), "a long poll", |f| {
            f.polls() > polls
        })
        .await;
        polling.push(started.elapsed());
        daemon.stop().await?;
    }
    results.insert("telegram_start_ready_ms_p50".into(), median_ms(&mut ready));
    results.insert("telegram_first_poll_ms_p50".into(), median_ms(&mut polling));
    let dir = tempfile::tempdir()?;
    // Counted before the start: the daemon may poll before it reports READY.
    let polls = fake.polls();
    let (daemon, _) = daemon::start_with(launcher, dir.path(), llm_url, &tables).await?;
    fake.wait_until(Duration::from_secs(10), "a long poll", |f| {
        f.polls() > polls
    })
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    results.insert("telegram_rss_idle_mib".into(), mib(daemon.rss_kib()));
    daemon.stop().await?;
    Ok(())
}

/// Every channel at once — WebSocket, Telegram polling, Discord's gateway — each
/// connected to its fake: start and idle cost.
async fn bench_channels(bench: &Bench<'_>, results: &mut Results) -> anyhow::Result<()> {
    let Bench {
        args,
        launcher,
        llm_url,
    } = bench;
    let telegram = switchboard_testkit::FakeTelegram::start().await?;
    let discord = switchboard_testkit::FakeDiscord::start().await?;
    let tables = format!(
        "[channels.telegram]\nenabled = true\ntoken = \"{}\"\napi_url = \"{}\"\n\n\
         [channels.discord]\nenabled = true\ntoken = \"{}\"\napi_url = \"{}\"\n",
        switchboard_testkit::telegram::TEST_TOKEN,
        telegram.api_url(),
        switchboard_testkit::discord::TEST_TOKEN,
        discord.api_url(),
    );
    let mut ready = Vec::new();
    let mut connected = Vec::new();
    for _ in 0..args.starts {
        let dir = tempfile::tempdir()?;
        let identifies = discord.identifies();
        let started = std::time::Instant::now();
        let (daemon, times) = daemon::start_with(launcher, dir.path(), llm_url, &tables).await?;
        ready.push(times.ready);
        discord
            .wait_until(Duration::from_secs(10), "Discord READY", |f| {
                f.identifies() > identifies && f.connected()
            })
            .await;
        connected.push(started.elapsed());
        daemon.stop().await?;
    }
    results.insert("channels_start_ready_ms_p50".into(), median_ms(&mut ready));
    results.insert("discord_connected_ms_p50".into(), median_ms(&mut connected));
    let dir = tempfile::tempdir()?;
    let identifies = discord.identifies();
    let polls = telegram.polls();
    let (daemon, _) = daemon::start_with(launcher, dir.path(), llm_url, &tables).await?;
    discord
        .wait_until(Duration::from_secs(10), "Discord READY", |f| {
            f.identifies() > identifies && f.connected()
        })
        .await;
    telegram
        .wait_until(Duration::from_secs(10), "a long poll", |f| {
            f.polls() > polls
        })
        .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    results.insert("channels_rss_idle_mib".into(), mib(daemon.rss_kib()));
    daemon.stop().await?;
    Ok(())
}

/// Turns on the platform channels, streaming, one after another in one chat: answers at
/// once, then answers streamed for 1.5 s (past the first edit), whose lag is timed from the
/// model's end.
async fn bench_channel_turns(bench: &Bench<'_>, results: &mut Results) -> anyhow::Result<()> {
    let Bench {
        args,
        launcher,
        llm_url,
    } = bench;
    let turns = args.channel_turns;
    let at_once = turns::Answer::AtOnce;
    let model = ScriptedLlm::start().await?;
    model.stop_recording();
    let streamed = turns::Answer::Streamed {
        model: &model,
        words: 30,
        gap: Duration::from_millis(50),
    };
    let long_turns = (turns / 5).max(5);
    let model_url = model.base_url();
    for (tag, run) in [
        (
            "telegram",
            turns::telegram(launcher, llm_url, at_once, 10, turns).await?,
        ),
        (
            "discord",
            turns::discord(launcher, llm_url, at_once, 10, turns).await?,
        ),
        (
            "telegram_streamed_lag",
            turns::telegram(launcher, &model_url, streamed, 2, long_turns).await?,
        ),
        (
            "discord_streamed_lag",
            turns::discord(launcher, &model_url, streamed, 2, long_turns).await?,
        ),
    ] {
        results.insert(format!("{tag}_turn_ms_p50"), run.p50_ms);
        results.insert(format!("{tag}_turn_ms_p99"), run.p99_ms);
        results.insert(format!("{tag}_cpu_us_per_turn"), run.cpu_us_per_turn);
    }
    Ok(())
}

/// Footprint and latency against one daemon.
async fn bench_load(bench: &Bench<'_>, results: &mut Results) -> anyhow::Result<()> {
    let Bench {
        args,
        launcher,
        llm_url,
    } = bench;
    let dir = tempfile::tempdir()?;
    let (daemon, _) = daemon::start(launcher, dir.path(), llm_url).await?;
    tokio::time::sleep(Duration::from_millis(500)).await;
    results.insert("rss_idle_mib".into(), mib(daemon.rss_kib()));

    // Warm both paths, then measure: 1 session, then 100 sessions.
    load::floor(llm_url, 1, 200).await?;
    load::through_daemon(daemon.addr, daemon.pid, 1, 200, "warm").await?;
    // Each measurement is repeated and its median kept: this machine's neighbours
    // make single runs vary by a factor of two.
    let mut samples: BTreeMap<String, Vec<f64>> = BTreeMap::new();
    for round in 0..args.repeat {
        for (sessions, messages) in [(1, args.messages), (100, (args.messages / 20).max(50))] {
            let floor = floor(args, llm_url, sessions, messages).await?;
            let tag = format!("r{round}s{sessions}");
            let run =
                load::through_daemon(daemon.addr, daemon.pid, sessions, messages, &tag).await?;
            let mut sample = |name: &str, value: f64| {
                samples
                    .entry(format!("{name}_{sessions}s"))
                    .or_default()
                    .push(value);
            };
            sample("floor_ms_p50", floor.p50);
            sample("floor_ms_p99", floor.p99);
            sample("daemon_ms_p50", run.p(0.5));
            sample("daemon_ms_p99", run.p(0.99));
            sample("overhead_ms_p50", run.p(0.5) - floor.p50);
            sample("overhead_ms_p99", run.p(0.99) - floor.p99);
            sample("turns_per_sec", run.turns_per_sec());
            sample("daemon_cpu_us_per_turn", run.cpu_us_per_turn());
            sample("floor_turns_per_sec", floor.turns_per_sec);
            sample("rss_under_load_mib", mib(run.max_rss_kib));
        }
    }
    for (name, mut values) in samples {
        values.sort_by(f64::total_cmp);
        results.insert(name, values[values.len() / 2]);
    }
    results.insert("rss_after_load_mib".into(), mib(daemon.rss_kib()));
    results.insert("threads_after_load".into(), daemon.threads() as f64);
    daemon.stop().await?;
    Ok(())
}

/// Memory under load against a slow server: 100 sessions at once, each turn waiting
/// half a second for its first byte. Connections (and their buffers) are what grows.
async fn bench_slow(bench: &Bench<'_>, results: &mut Results) -> anyhow::Result<()> {
    let launcher = bench.launcher;
    let slow = ScriptedLlm::start().await?;
    slow.stop_recording();
    slow.respond_with(|request| {
        let text = switchboard_testkit::last_user_text(request);
        switchboard_testkit::Reply::paced(
            format!("echo: {text} (slowly)"),
            Duration::from_millis(20),
        )
        .delayed(Duration::from_millis(500))
    });
    for (tag, llm) in [
        ("cap16", "max_connections = 16"),
        ("default", ""),
        ("uncapped", "max_connections = 1024"),
    ] {
        let dir = tempfile::tempdir()?;
        let (daemon, _) =
            daemon::start_with_llm(launcher, dir.path(), &slow.base_url(), llm).await?;
        let run = load::through_daemon(daemon.addr, daemon.pid, 100, 10, tag).await?;
        results.insert(
            format!("slow_llm_rss_under_load_mib_{tag}"),
            mib(run.max_rss_kib),
        );
        results.insert(
            format!("slow_llm_rss_after_mib_{tag}"),
            mib(daemon.rss_kib()),
        );
        results.insert(format!("slow_llm_turns_per_sec_{tag}"), run.turns_per_sec());
        results.insert(
            format!("slow_llm_most_connections_{tag}"),
            slow.most_in_flight() as f64,
        );
        slow.reset_most_in_flight();
        daemon.stop().await?;
    }
    Ok(())
}

/// An idle scheduler, without jobs and with `--jobs` of them.
async fn bench_jobs(bench: &Bench<'_>, results: &mut Results) -> anyhow::Result<()> {
    let Bench {
        args,
        launcher,
        llm_url,
    } = bench;
    let off = "[scheduler]\nenabled = false\n";
    for (tag, count, tables) in [("off", 0, off), ("none", 0, ""), ("many", args.jobs, "")] {
        let dir = tempfile::tempdir()?;
        scale::write_jobs(&dir.path().join("state"), count).await?;
        let (daemon, _) = daemon::start_with(launcher, dir.path(), llm_url, tables).await?;
        // The loop's first look reads every job; then it only watches the file.
        let (rss, per_minute) = daemon.idle_cost(args.idle_window).await;
        results.insert(format!("jobs_idle_rss_mib_{tag}"), mib(rss));
        results.insert(format!("jobs_idle_cpu_ms_per_min_{tag}"), per_minute);
        daemon.stop().await?;
    }
    Ok(())
}

/// An idle MCP server connection.
async fn bench_mcp(bench: &Bench<'_>, results: &mut Results) -> anyhow::Result<()> {
    let Bench {
        args,
        launcher,
        llm_url,
    } = bench;
    let server = args.daemon.with_file_name("mcp-test-server");
    anyhow::ensure!(
        server.exists(),
        "{} is missing: cargo build --release -p switchboard-testkit --bin mcp-test-server",
        server.display()
    );
    // The server starts in the daemon's workspace: a relative path would miss it.
    let server = std::fs::canonicalize(server)?;
    let one = format!("[mcp.servers.test]\ncommand = \"{}\"\n", server.display());
    for (tag, tables) in [("none", String::new()), ("one", one)] {
        let dir = tempfile::tempdir()?;
        let (daemon, _) = daemon::start_with(launcher, dir.path(), llm_url, &tables).await?;
        if tag == "one" {
            daemon::wait_for_mcp_tools(daemon.addr, Duration::from_secs(10)).await?;
        }
        let (rss, per_minute) = daemon.idle_cost(args.idle_window).await;
        results.insert(format!("mcp_idle_rss_mib_{tag}"), mib(rss));
        results.insert(format!("mcp_idle_cpu_ms_per_min_{tag}"), per_minute);
        daemon.stop().await?;
    }
    Ok(())
}

/// Scale: sessions on disk, some active.
async fn bench_disk(bench: &Bench<'_>, results: &mut Results) -> anyhow::Result<()> {
    let Bench {
        args,
        launcher,
        llm_url,
    } = bench;
    let dir = tempfile::tempdir()?;
    scale::write_sessions(&dir.path().join("state"), args.disk_sessions, 50, 200)?;
    let (daemon, _) = daemon::start(launcher, dir.path(), llm_url).await?;
    let took = scale::activate(daemon.addr, args.active_sessions, 10).await?;
    results.insert("scale_activate_secs".into(), took.as_secs_f64());
    results.insert("scale_rss_mib".into(), mib(daemon.rss_kib()));
    results.insert("scale_threads".into(), daemon.threads() as f64);
    let one = load::through_daemon(daemon.addr, daemon.pid, 1, 200, "disk-0").await?;
    results.insert("scale_turn_ms_p50".into(), one.p(0.5));
    results.insert("scale_turn_ms_p99".into(), one.p(0.99));
    daemon.stop().await?;
    Ok(())
}

/// Scale: idle WebSocket connections.
async fn bench_idle(bench: &Bench<'_>, results: &mut Results) -> anyhow::Result<()> {
    let Bench {
        args,
        launcher,
        llm_url,
    } = bench;
    let dir = tempfile::tempdir()?;
    let (daemon, _) = daemon::start(launcher, dir.path(), llm_url).await?;
    let base = daemon.rss_kib();
    let sockets = scale::open_idle(daemon.addr, args.idle_connections).await?;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let rss = daemon.rss_kib();
    results.insert("idle_ws_rss_mib".into(), mib(rss));
    results.insert(
        "idle_ws_kib_per_conn".into(),
        (rss - base.min(rss)) as f64 / args.idle_connections as f64,
    );
    drop(sockets);
    daemon.stop().await?;
    Ok(())
}

/// What a 30 s voice note adds to a turn (see `voice.rs`).
async fn bench_voice(bench: &Bench<'_>, results: &mut Results) -> anyhow::Result<()> {
    let launcher = bench.launcher;
    // One reply to both kinds of turn, so they differ only in the hearing: the shared echo
    // would answer a voice note's longer line with more words, and a reply written in more
    // pieces meets the scripted server's Nagle and the daemon's delayed ACK (+40 ms).
    let llm = ScriptedLlm::start().await?;
    llm.stop_recording();
    llm.respond_with(|_| switchboard_testkit::Reply::text("Noted."));
    let llm_url = llm.base_url();
    let audio = switchboard_testkit::FakeAudio::start().await?;
    let dir = tempfile::tempdir()?;
    let tables = format!(
        "[transcription]\nenabled = true\nbase_url = \"{}\"\n",
        audio.base_url()
    );
    let (daemon, _) = daemon::start_with(launcher, dir.path(), &llm_url, &tables).await?;
    // Warm both paths, then measure.
    voice::run(daemon.addr, 3, 30.0).await?;
    let mut run = voice::run(daemon.addr, 30, 30.0).await?;
    daemon.stop().await?;
    let median = |samples: &mut Vec<f64>| {
        samples.sort_by(f64::total_cmp);
        samples[samples.len() / 2]
    };
    let typed = median(&mut run.typed_ms);
    let voice = median(&mut run.voice_ms);
    results.insert("voice_note_bytes".into(), run.note_bytes as f64);
    results.insert("voice_typed_turn_ms_p50".into(), typed);
    results.insert("voice_30s_turn_ms_p50".into(), voice);
    results.insert("voice_30s_added_ms_p50".into(), voice - typed);
    results.insert("voice_30s_upload_ms_p50".into(), median(&mut run.upload_ms));
    Ok(())
}

/// The memory index: the daemon idle with `[memory]` on (an empty index) beside off, then
/// each corpus size's build, size and queries.
async fn bench_memory(bench: &Bench<'_>, results: &mut Results) -> anyhow::Result<()> {
    for (name, tables) in [("off", ""), ("on", "[memory]\nenabled = true\n")] {
        let dir = tempfile::tempdir()?;
        let (daemon, _) =
            daemon::start_with(bench.launcher, dir.path(), bench.llm_url, tables).await?;
        tokio::time::sleep(Duration::from_secs(3)).await;
        results.insert(format!("memory_{name}_rss_idle_mib"), mib(daemon.rss_kib()));
        results.insert(
            format!("memory_{name}_rss_anon_idle_mib"),
            mib(daemon.rss_anon_kib()),
        );
        results.insert(format!("memory_{name}_threads"), daemon.threads() as f64);
        daemon.stop().await?;
    }
    for &messages in &bench.args.memory_messages {
        let dir = tempfile::tempdir()?;
        let queries = bench.args.memory_queries;
        let mut run = tokio::task::spawn_blocking({
            let dir = dir.path().to_owned();
            move || memory::run(&dir, messages, queries)
        })
        .await??;
        let size = if messages >= 1_000_000 {
            format!("{}m", messages / 1_000_000)
        } else {
            format!("{}k", messages / 1000)
        };
        run.query_us.sort_by(f64::total_cmp);
        let at = |q: f64| run.query_us[((run.query_us.len() - 1) as f64 * q) as usize];
        let transcript_mib = run.transcript_bytes as f64 / (1024.0 * 1024.0);
        results.insert(format!("memory_{size}_transcript_mib"), transcript_mib);
        results.insert(
            format!("memory_{size}_index_mib"),
            run.index_bytes as f64 / (1024.0 * 1024.0),
        );
        results.insert(
            format!("memory_{size}_index_per_transcript_mib"),
            run.index_bytes as f64 / run.transcript_bytes as f64,
        );
        results.insert(format!("memory_{size}_build_s"), run.build_secs);
        results.insert(
            format!("memory_{size}_build_mib_per_s"),
            transcript_mib / run.build_secs,
        );
        results.insert(format!("memory_{size}_query_us_p50"), at(0.5));
        results.insert(format!("memory_{size}_query_us_p99"), at(0.99));
    }
    Ok(())
}

/// The floor: the daemon's request pattern sent straight to the LLM by a client that runs
/// where the daemon would (on `--daemon-cpus`, as a second bench process), so both runs put
/// the same work on the same cores.
async fn floor(
    args: &Args,
    llm_url: &str,
    sessions: usize,
    messages: usize,
) -> anyhow::Result<load::Summary> {
    let Some(cpus) = &args.daemon_cpus else {
        return Ok(load::Summary::of(
            &load::floor(llm_url, sessions, messages).await?,
        ));
    };
    let me = std::env::current_exe()?;
    let output = tokio::process::Command::new("taskset")
        .args(["-c", cpus])
        .arg(me)
        .args(["--floor-client", llm_url])
        .args(["--floor-sessions", &sessions.to_string()])
        .args(["--messages", &messages.to_string()])
        .output()
        .await?;
    anyhow::ensure!(
        output.status.success(),
        "floor client failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    Ok(serde_json::from_slice(&output.stdout)?)
}

fn median_ms(samples: &mut [Duration]) -> f64 {
    samples.sort();
    samples[samples.len() / 2].as_secs_f64() * 1000.0
}

fn parse_secs(text: &str) -> Result<Duration, String> {
    text.trim_end_matches('s')
        .parse::<u64>()
        .map(Duration::from_secs)
        .map_err(|_| format!("`{text}`: seconds, e.g. 60s"))
}

fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

/// Prints the table and writes the results, comparing with the previous file.
fn report(args: &Args, results: &Results) -> anyhow::Result<()> {
    let previous: Results = std::fs::read_to_string(&args.out)
        .ok()
        .and_then(|text| serde_json::from_str(&text).ok())
        .unwrap_or_default();
    let mut table =
        String::from("| metric | this run | previous | change |\n|---|---:|---:|---:|\n");
    for (name, value) in results {
        let (before, change) = match previous.get(name) {
            Some(before) if *before != 0.0 => (
                format!("{before:.3}"),
                format!("{:+.1}%", (value - before) / before * 100.0),
            ),
            _ => ("–".into(), "–".into()),
        };
        table.push_str(&format!("| {name} | {value:.3} | {before} | {change} |\n"));
    }
    if let Some(parent) = args.out.parent() {
        std::fs::create_dir_all(parent)?;
    }
    std::fs::write(&args.out, serde_json::to_string_pretty(results)?)?;
    #[allow(clippy::print_stdout)]
    {
        println!("{table}");
    }
    Ok(())
}
