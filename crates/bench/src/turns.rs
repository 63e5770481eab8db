//! Turns on the platform channels: a person writes in a private chat on the fake Telegram
//! or the fake Discord, one message after another, and the time until the whole answer
//! shows there (the streamed draft's closing edit) is measured, with the daemon's CPU per
//! turn. Streaming on, the default edit interval (1 s).
//!
//! Two kinds of answer ([`Answer`]): at once (the bench's echoing model), timed from the
//! message; and streamed for longer than the interval, so the draft was edited before the
//! end, timed from the model's end (its body's last byte) — the reply's lag.

use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use switchboard_testkit::{FakeDiscord, FakeTelegram, Reply, ScriptedLlm};

use crate::daemon::{self, Launcher};

/// The person writing (on the allow list).
const PERSON: u64 = 42;
/// How long one answer may take before the run fails.
const PATIENCE: Duration = Duration::from_secs(10);

/// How the model answers each turn.
#[derive(Clone, Copy)]
pub enum Answer<'a> {
    /// At once, echoing (the model at `llm_url`): timed from the message.
    AtOnce,
    /// `words` words streamed `gap` apart by `model` (the daemon's `llm_url`): timed from
    /// the model's end.
    Streamed {
        model: &'a ScriptedLlm,
        words: usize,
        gap: Duration,
    },
}

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
    answer: Answer<'_>,
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
    let run = measure(daemon.pid, answer, warm, turns, async |text, expected| {
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
    answer: Answer<'_>,
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
    let run = measure(daemon.pid, answer, warm, turns, async |text, expected| {
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
    answer: Answer<'_>,
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
        let expected = match answer {
            Answer::AtOnce => format!("echo: {text}"),
            Answer::Streamed { model, words, gap } => {
                let reply = (0..words)
                    .map(|n| format!("word{n}"))
                    .collect::<Vec<_>>()
                    .join(" ");
                model.push(Reply::paced(reply.clone(), gap));
                reply
            }
        };
        let sent = Instant::now();
        turn(&text, &expected).await;
        let shown = Instant::now();
        let from = match answer {
            Answer::AtOnce => sent,
            Answer::Streamed { model, .. } => model.last_finished().unwrap_or(sent),
        };
        if i >= warm {
            hist.record(shown.duration_since(from).as_micros().max(1) as u64)?;
        }
    }
    let used = daemon::cpu_ns_between(&cpu, &daemon::thread_cpu_ns(pid));
    Ok(Turns::of(&hist, used, turns))
}
