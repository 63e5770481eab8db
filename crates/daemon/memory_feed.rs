//! A worker's memory index on a cluster: each agent's chats followed in the cluster's
//! sessions and history streams ([`SaidFeed`]) and taken into the index, so every worker can search every
//! shared chat — its own index of them, as each host has its own disk (the index is a cache,
//! rebuilt from the stream; sharing one would put SQLite on a network filesystem).
//!
//! The index keeps the positions it last took with what it took (one transaction), so
//! following again after a kill, a lost server or a cleared index starts from what the index
//! says, never from what this task remembers.

use std::time::Duration;

use futures::StreamExt;
use switchboard_core::AgentName;
use switchboard_memory::{MemoryIndex, Taking, Untaken};
use switchboard_nats::SaidFeed;
use switchboard_sessions::transcript::Piece;

/// The most pieces taken into the index at once (and so queued for it).
const BATCH: usize = 32;

/// The longest wait before following again after a failure.
const MOST_WAIT: Duration = Duration::from_secs(30);

/// Follows `feed` into `index` for `agent` until the process ends.
pub(crate) async fn follow(feed: SaidFeed, agent: AgentName, index: MemoryIndex) {
    let mut wait = Duration::from_millis(250);
    loop {
        let started = tokio::time::Instant::now();
        let why = Box::pin(follow_once(&feed, &agent, &index)).await;
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
    let streams = match feed.stream_ids().await {
        Ok(streams) => streams,
        Err(err) => return err.to_string(),
    };
    let after = match index.follow(agent, streams).await {
        Ok(after) => after,
        Err(err) => return err,
    };
    let pieces = match Box::pin(feed.follow(after)).await {
        Ok(pieces) => pieces,
        Err(err) => return err.to_string(),
    };
    tracing::debug!(agent = %agent, ?after, "following the cluster's chats for the memory index");
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
        if let Err(err) = take(feed, agent, index, pieces).await {
            return err;
        }
        if let Some(err) = failed {
            return err;
        }
    }
    "following the cluster's streams ended".to_owned()
}

/// Takes `pieces` into the index in order. A piece after a gap in its chat's records has
/// what came between read again from the chat's subject and taken first; when that is gone
/// (a rollup replaced it since, and its copy has it), the piece is taken past the gap.
async fn take(
    feed: &SaidFeed,
    agent: &AgentName,
    index: &MemoryIndex,
    mut pieces: Vec<Piece>,
) -> Result<(), String> {
    let mut filled: Option<u64> = None;
    loop {
        let (taken, session, after) =
            match index.take(agent, pieces.clone(), Taking::Followed).await {
                Ok(()) => return Ok(()),
                Err(Untaken::Failed(err)) => return Err(err),
                Err(Untaken::Missed {
                    taken,
                    session,
                    after,
                }) => (taken, session, after),
            };
        pieces.drain(..taken);
        let Some(piece) = pieces.first() else {
            return Ok(());
        };
        let before = piece.position;
        if filled == Some(before) {
            // Filled once and still a gap: what it missed is gone.
            tracing::debug!(agent = %agent, session, after, before,
                "a chat's records the memory index missed are replaced; their copy has them");
            let past = vec![pieces.remove(0)];
            index
                .take(agent, past, Taking::PastGap)
                .await
                .map_err(untaken)?;
            filled = None;
            continue;
        }
        tracing::debug!(agent = %agent, session, after, before,
            "the memory index missed a chat's records; reading them again");
        let missed = feed
            .missed(&session, after, before)
            .await
            .map_err(|err| err.to_string())?;
        index
            .take(agent, missed, Taking::Filled)
            .await
            .map_err(untaken)?;
        filled = Some(before);
    }
}

fn untaken(err: Untaken) -> String {
    match err {
        Untaken::Failed(err) => err,
        Untaken::Missed { session, after, .. } => {
            format!("the memory index missed records of {session} after position {after}")
        }
    }
}
