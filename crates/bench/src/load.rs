//! Load: N sessions × M messages through the daemon's WebSocket, and the same request
//! pattern straight against the scripted LLM (the floor).

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context;
use futures::{SinkExt, StreamExt};
use hdrhistogram::Histogram;
use serde_json::{Value, json};
use switchboard_agent::DEFAULT_SYSTEM_PROMPT;
use tokio::sync::Barrier;
use tokio_tungstenite::tungstenite::Message;

use crate::daemon::{cpu_us, rss_kib};

/// What one load run measured.
pub struct LoadResult {
    /// Round trips in microseconds.
    pub latency_us: Histogram<u64>,
    pub turns: u64,
    pub elapsed: Duration,
    /// Highest RSS of the daemon seen during the run (0 for the floor).
    pub max_rss_kib: u64,
    /// CPU time the daemon used during the run, in microseconds (0 for the floor).
    pub cpu_us: u64,
}

impl LoadResult {
    pub fn turns_per_sec(&self) -> f64 {
        self.turns as f64 / self.elapsed.as_secs_f64()
    }

    /// The daemon's CPU time per turn, in microseconds.
    pub fn cpu_us_per_turn(&self) -> f64 {
        self.cpu_us as f64 / self.turns.max(1) as f64
    }

    pub fn p(&self, quantile: f64) -> f64 {
        self.latency_us.value_at_quantile(quantile) as f64 / 1000.0
    }
}

/// The numbers of a run that travel between bench processes.
#[derive(serde::Serialize, serde::Deserialize)]
pub struct Summary {
    pub p50: f64,
    pub p99: f64,
    pub turns_per_sec: f64,
}

impl Summary {
    pub fn of(result: &LoadResult) -> Self {
        Self {
            p50: result.p(0.5),
            p99: result.p(0.99),
            turns_per_sec: result.turns_per_sec(),
        }
    }
}

fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 60_000_000, 3).expect("valid bounds")
}

/// Samples a process's RSS every 20 ms until stopped; returns the highest value.
fn sample_rss(pid: Option<u32>) -> (Arc<AtomicBool>, tokio::task::JoinHandle<u64>) {
    let stop = Arc::new(AtomicBool::new(false));
    let flag = stop.clone();
    let task = tokio::spawn(async move {
        let Some(pid) = pid else { return 0 };
        let mut max = 0;
        while !flag.load(Ordering::Relaxed) {
            max = max.max(rss_kib(pid));
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        max
    });
    (stop, task)
}

/// `sessions` WebSocket clients, one chat each, each sending `messages` messages one after
/// another; a round trip is send → the turn's `message` frame.
pub async fn through_daemon(
    addr: SocketAddr,
    pid: u32,
    sessions: usize,
    messages: usize,
    tag: &str,
) -> anyhow::Result<LoadResult> {
    let barrier = Arc::new(Barrier::new(sessions + 1));
    let mut tasks = Vec::new();
    for session in 0..sessions {
        let barrier = barrier.clone();
        let chat = format!("{tag}-{session}");
        tasks.push(tokio::spawn(async move {
            let (mut socket, _) = tokio_tungstenite::connect_async(format!("ws://{addr}/ws"))
                .await
                .context("connect")?;
            socket.next().await.context("ready frame")??;
            barrier.wait().await;
            let mut hist = histogram();
            for i in 0..messages {
                let frame = json!({"type": "message", "chat_id": chat, "content": format!("message number {i}")});
                let sent = Instant::now();
                socket.send(Message::text(frame.to_string())).await?;
                let mut replied = None;
                loop {
                    let message = socket.next().await.context("socket closed")??;
                    let Message::Text(text) = message else { continue };
                    let frame: Value = serde_json::from_str(text.as_str())?;
                    match frame["type"].as_str() {
                        Some("message") => replied = Some(sent.elapsed()),
                        Some("error") => anyhow::bail!("error frame: {frame}"),
                        Some("done") => break,
                        _ => {}
                    }
                }
                let rtt = replied.context("no message frame before done")?;
                hist.record(rtt.as_micros().max(1) as u64)?;
            }
            let _ = socket.close(None).await;
            anyhow::Ok(hist)
        }));
    }
    barrier.wait().await;
    let (stop, sampler) = sample_rss(Some(pid));
    let cpu_before = cpu_us(pid);
    let started = Instant::now();
    let mut latency_us = histogram();
    for task in tasks {
        latency_us.add(task.await??)?;
    }
    let elapsed = started.elapsed();
    let cpu = cpu_us(pid).saturating_sub(cpu_before);
    stop.store(true, Ordering::Relaxed);
    Ok(LoadResult {
        turns: latency_us.len(),
        latency_us,
        elapsed,
        max_rss_kib: sampler.await?,
        cpu_us: cpu,
    })
}

/// The floor: the requests the daemon would make (system prompt, history growing to 50
/// messages, streamed), sent straight to the scripted LLM by `sessions` clients.
pub async fn floor(llm_url: &str, sessions: usize, messages: usize) -> anyhow::Result<LoadResult> {
    let url = format!("{llm_url}/chat/completions");
    let client = reqwest::Client::builder().tcp_nodelay(true).build()?;
    let barrier = Arc::new(Barrier::new(sessions + 1));
    let bytes = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for _ in 0..sessions {
        let (client, url, barrier, bytes) =
            (client.clone(), url.clone(), barrier.clone(), bytes.clone());
        tasks.push(tokio::spawn(async move {
            let mut history: Vec<Value> = Vec::new();
            let mut hist = histogram();
            barrier.wait().await;
            for i in 0..messages {
                let text = format!("message number {i}");
                let mut request_messages =
                    vec![json!({"role": "system", "content": DEFAULT_SYSTEM_PROMPT})];
                request_messages.extend(history.iter().cloned());
                request_messages.push(json!({"role": "user", "content": text}));
                let body = json!({"model": "scripted", "messages": request_messages, "stream": true,
                    "stream_options": {"include_usage": true}});
                let sent = Instant::now();
                let response = client.post(&url).json(&body).send().await?;
                let mut stream = response.bytes_stream();
                while let Some(chunk) = stream.next().await {
                    bytes.fetch_add(chunk?.len() as u64, Ordering::Relaxed);
                }
                hist.record(sent.elapsed().as_micros().max(1) as u64)?;
                history.push(json!({"role": "user", "content": text}));
                history.push(json!({"role": "assistant", "content": format!("echo: {text}")}));
                if history.len() > 50 {
                    history.drain(..2);
                }
            }
            anyhow::Ok(hist)
        }));
    }
    barrier.wait().await;
    let started = Instant::now();
    let mut latency_us = histogram();
    for task in tasks {
        latency_us.add(task.await??)?;
    }
    Ok(LoadResult {
        turns: latency_us.len(),
        latency_us,
        elapsed: started.elapsed(),
        max_rss_kib: 0,
        cpu_us: 0,
    })
}
