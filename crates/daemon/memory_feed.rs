//! A worker's memory index on a cluster: each agent's chats followed in the cluster's
//! sessions stream ([`SaidFeed`]) and taken into the index, so every worker can search every
//! shared chat — its own index of them, as each host has its own disk (the index is a cache,
//! rebuilt from the stream; sharing one would put SQLite on a network filesystem).
//!
//! The index keeps the position it last took with what it took (one transaction), so
//! following again after a kill, a lost server or a cleared index starts from what the index
//! says, never from what this task remembers.

use std::time::Duration;

use futures::StreamExt;
use switchboard_core::AgentName;
use switchboard_memory::MemoryIndex;
use switchboard_nats::SaidFeed;

/// The most pieces taken into the index at once (and so queued for it).
const BATCH: usize = 32;

/// The longest wait before following again after a failure.
const MOST_WAIT: Duration = Duration::from_secs(30);

/// Follows `feed` into `index` for `agent` until the process ends.
pub(crate) async fn follow(feed: SaidFeed, agent: AgentName, index: MemoryIndex) {
    let mut wait = Duration::from_millis(250);
    loop {
        let started = tokio::time::Instant::now();
        let why = follow_once(&feed, &agent, &index).await;
        if why == STOPPED {
            return;
        }
        tracing::warn!(agent = %agent, error = %why,
            "following the cluster's chats for the memory index stopped; following again");
        index.failed(&agent, why);
        if started.elapsed() > MOST_WAIT {
            wait = Duration::from_millis(250);
        }
        tokio::time::sleep(wait).await;
        wait = (wait * 2).min(MOST_WAIT);
    }
}

const STOPPED: &str = "the memory index stopped";

/// Follows from where the index stands until something fails; says what.
async fn follow_once(feed: &SaidFeed, agent: &AgentName, index: &MemoryIndex) -> String {
    let stream = match feed.stream_id().await {
        Ok(stream) => stream,
        Err(err) => return err.to_string(),
    };
    let after = match index.follow(agent, stream).await {
        Ok(after) => after,
        Err(err) => return err,
    };
    let pieces = match feed.follow(after).await {
        Ok(pieces) => pieces,
        Err(err) => return err.to_string(),
    };
    tracing::debug!(agent = %agent, after, "following the cluster's chats for the memory index");
    let mut batches = std::pin::pin!(pieces.ready_chunks(BATCH));
    while let Some(batch) = batches.next().await {
        let mut pieces = Vec::with_capacity(batch.len());
        let mut failed = None;
        for piece in batch {
            match piece {
                Ok(piece) => pieces.push(piece),
                Err(err) => {
                    failed = Some(err.to_string());
                    break;
                }
            }
        }
        if let Err(err) = index.take(agent, pieces).await {
            return err;
        }
        if let Some(err) = failed {
            return err;
        }
    }
    "the sessions stream ended".to_owned()
}
