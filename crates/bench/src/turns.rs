//! Turns on the platform channels: a person writes in a private chat on the fake Telegram
//! or the fake Discord, one message after another, and the time until the whole answer
//! shows there (the streamed draft's closing edit) is measured, with the daemon's CPU per
//! turn. Streaming on, the default edit interval (1 s).

use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use switchboard_testkit::{FakeDiscord, FakeTelegram};

use crate::daemon::{self, Launcher};

/// The person writing (on the allow list).
const PERSON: u64 = 42;
/// How long one answer may take before the run fails.
const PATIENCE: Duration = Duration::from_secs(10);

/// What a run measured.
pub struct Turns {
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub cpu_us_per_turn: f64,
}

impl Turns {
    fn of(hist: &Histogram<u64>, cpu_ns: u64, turns: usize) -> Self {
        Self {
            p50_ms: hist.value_at_quantile(0.5) as f64 / 1000.0,
            p99_ms: hist.value_at_quantile(0.99) as f64 / 1000.0,
            cpu_us_per_turn: cpu_ns as f64 / 1000.0 / turns as f64,
        }
    }
}

fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 60_000_000, 3).expect("bounds")
}

/// `turns` turns in one Telegram chat (after `warm` unmeasured ones).
pub async fn telegram(
    launcher: &Launcher,
    llm_url: &str,
    warm: usize,
    turns: usize,
) -> anyhow::Result<Turns> {
    let fake = FakeTelegram::start().await?;
    let tables = format!(
        "[channels.telegram]\nenabled = true\ntoken = \"{}\"\napi_url = \"{}\"\n\
         allow_from = [\"{PERSON}\"]\n",
        switchboard_testkit::telegram::TEST_TOKEN,
        fake.api_url()
    );
    let dir = tempfile::tempdir()?;
    let polls = fake.polls();
    let (daemon, _) = daemon::start_with(launcher, dir.path(), llm_url, &tables).await?;
    fake.wait_until(PATIENCE, "a long poll", |f| f.polls() > polls)
        .await;
    let chat = i64::try_from(PERSON)?;
    let run = measure(daemon.pid, warm, turns, async |text, expected| {
        let id = fake.private_text(PERSON, text);
        fake.wait_until(PATIENCE, "the whole answer", |f| {
            f.messages_to(chat)
                .iter()
                .filter(|m| m.reply_to == Some(id))
                .any(|m| f.current_text(chat, m.message_id).as_deref() == Some(expected))
        })
        .await;
    })
    .await?;
    daemon.stop().await?;
    Ok(run)
}

/// `turns` turns in one Discord DM (after `warm` unmeasured ones).
pub async fn discord(
    launcher: &Launcher,
    llm_url: &str,
    warm: usize,
    turns: usize,
) -> anyhow::Result<Turns> {
    let fake = FakeDiscord::start().await?;
    let tables = format!(
        "[channels.discord]\nenabled = true\ntoken = \"{}\"\napi_url = \"{}\"\n\
         allow_from = [\"{PERSON}\"]\n",
        switchboard_testkit::discord::TEST_TOKEN,
        fake.api_url()
    );
    let dir = tempfile::tempdir()?;
    let identifies = fake.identifies();
    let (daemon, _) = daemon::start_with(launcher, dir.path(), llm_url, &tables).await?;
    fake.wait_until(PATIENCE, "Discord READY", |f| {
        f.identifies() > identifies && f.connected()
    })
    .await;
    let channel = FakeDiscord::dm_channel(PERSON);
    let run = measure(daemon.pid, warm, turns, async |text, expected| {
        let id = fake.dm(PERSON, text);
        fake.wait_until(PATIENCE, "the whole answer", |f| {
            f.messages_to(channel)
                .iter()
                .filter(|m| m.reply_to == Some(id))
                .any(|m| f.current_text(channel, m.message_id).as_deref() == Some(expected))
        })
        .await;
    })
    .await?;
    daemon.stop().await?;
    Ok(run)
}

/// Runs `warm` then `turns` turns, one after another: `turn(text, expected)` writes `text`
/// and returns once `expected` (the whole answer) shows. The daemon's CPU is read around the
/// measured ones.
async fn measure(
    pid: u32,
    warm: usize,
    turns: usize,
    turn: impl AsyncFn(&str, &str),
) -> anyhow::Result<Turns> {
    let mut hist = histogram();
    let mut cpu = daemon::thread_cpu_ns(pid);
    for i in 0..warm + turns {
        if i == warm {
            cpu = daemon::thread_cpu_ns(pid);
        }
        let text = format!("message number {i}");
        let expected = format!("echo: {text}");
        let sent = Instant::now();
        turn(&text, &expected).await;
        if i >= warm {
            hist.record(sent.elapsed().as_micros().max(1) as u64)?;
        }
    }
    let used = daemon::cpu_ns_between(&cpu, &daemon::thread_cpu_ns(pid));
    Ok(Turns::of(&hist, used, turns))
}
