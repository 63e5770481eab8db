//! Scale: many sessions on disk with some active, and many idle WebSocket connections.

use std::io::Write;
use std::net::SocketAddr;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::Context;
use futures::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio_tungstenite::tungstenite::Message;

/// Writes `count` session files of `messages` messages of about `bytes` bytes each, as the
/// daemon's store would (chat ids `disk-<n>`).
pub fn write_sessions(
    state_dir: &Path,
    count: usize,
    messages: usize,
    bytes: usize,
) -> anyhow::Result<()> {
    let dir = state_dir.join("sessions");
    std::fs::create_dir_all(&dir)?;
    let filler = "lorem ipsum dolor sit amet ".repeat(bytes / 27 + 1);
    for session in 0..count {
        let path = dir.join(format!("websocket_disk-{session}.jsonl"));
        let mut file = std::io::BufWriter::new(std::fs::File::create(path)?);
        for i in 0..messages {
            let role = if i % 2 == 0 { "user" } else { "assistant" };
            let content = &filler[..bytes];
            writeln!(file, "{}", json!({"role": role, "content": content}))?;
        }
        file.flush()?;
    }
    // Write the files back now, or the kernel does it during the measurement.
    std::process::Command::new("sync").status()?;
    Ok(())
}

/// Writes `count` scheduled jobs through the job store the daemon reads, 50 to a chat (the
/// default cap), none due within a day: a third daily cron jobs in Berlin, a third every day,
/// a third one-shot reminders in 20 hours.
pub async fn write_jobs(state_dir: &Path, count: usize) -> anyhow::Result<()> {
    use std::sync::Arc;

    use switchboard_core::{ChannelName, ChatId};
    use switchboard_scheduler::{
        Jobs, NewJob, Schedule, SchedulerConfig, SessionMode, StateJobStore, SystemClock,
    };
    use switchboard_sessions::FileState;
    std::fs::create_dir_all(state_dir)?;
    let jobs = Jobs::new(
        Arc::new(StateJobStore::new(Arc::new(FileState::new(state_dir)))),
        Arc::new(SystemClock),
        SchedulerConfig::default(),
    );
    let now = jiff::Timestamp::now();
    for n in 0..count {
        let schedule = match n % 3 {
            0 => Schedule::cron("0 9 * * *", "Europe/Berlin"),
            1 => Schedule::every("1 day", now),
            _ => Schedule::after("20h", now),
        }
        .map_err(anyhow::Error::msg)?;
        jobs.add(NewJob {
            name: Some(format!("job {n}")),
            message: format!("Scheduled task number {n}: summarise what changed."),
            schedule,
            chat: (
                ChannelName::from("websocket"),
                ChatId::from(format!("jobs-{}", n / 50).as_str()),
            ),
            session: SessionMode::Chat,
            catch_up: None,
            created_by: None,
            agent: None,
            owner: None,
        })
        .await
        .map_err(anyhow::Error::msg)?;
    }
    std::process::Command::new("sync").status()?;
    Ok(())
}

/// Sends one message to each of `active` on-disk sessions over `connections` sockets, so
/// their sessions are loaded; waits for every turn to finish.
pub async fn activate(
    addr: SocketAddr,
    active: usize,
    connections: usize,
) -> anyhow::Result<Duration> {
    let started = Instant::now();
    let per = active.div_ceil(connections);
    let mut tasks = Vec::new();
    for c in 0..connections {
        let chats: Vec<usize> = (c * per..((c + 1) * per).min(active)).collect();
        tasks.push(tokio::spawn(async move {
            let (mut socket, _) = tokio_tungstenite::connect_async(format!("ws://{addr}/ws")).await?;
            socket.next().await.context("ready")??;
            for chat in &chats {
                let frame = json!({"type": "message", "chat_id": format!("disk-{chat}"), "content": "hello again"});
                socket.send(Message::text(frame.to_string())).await?;
            }
            let mut done = 0;
            while done < chats.len() {
                let Message::Text(text) = socket.next().await.context("closed")?? else { continue };
                let frame: Value = serde_json::from_str(text.as_str())?;
                match frame["type"].as_str() {
                    Some("done") => done += 1,
                    Some("error") => anyhow::bail!("error frame: {frame}"),
                    _ => {}
                }
            }
            let _ = socket.close(None).await;
            anyhow::Ok(())
        }));
    }
    for task in tasks {
        task.await??;
    }
    Ok(started.elapsed())
}

/// Opens `count` WebSocket connections (each waits for `ready`) and keeps them open.
pub async fn open_idle(
    addr: SocketAddr,
    count: usize,
) -> anyhow::Result<
    Vec<
        tokio_tungstenite::WebSocketStream<
            tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>,
        >,
    >,
> {
    let mut sockets = Vec::with_capacity(count);
    for batch in (0..count).collect::<Vec<_>>().chunks(250) {
        let opened = futures::future::join_all(batch.iter().map(|_| async move {
            let (mut socket, _) =
                tokio_tungstenite::connect_async(format!("ws://{addr}/ws")).await?;
            socket.next().await.context("ready")??;
            anyhow::Ok(socket)
        }))
        .await;
        for socket in opened {
            sockets.push(socket.context("opening idle connections (raise `ulimit -n`?)")?);
        }
    }
    Ok(sockets)
}
