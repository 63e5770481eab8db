//! [`SaidFeed`]: everything one agent's chats said on the cluster, in the order it was
//! stored, for a worker's memory index to follow.
//!
//! The feed is an ordered consumer of the whole sessions stream, started after the last
//! position its reader took, that keeps the agent's subjects (`NAME.sessions.AGENT.…` and
//! `NAME.archive.AGENT.…`: its sessions and the copies kept of them). Not filtered on the
//! server: the servers this runs on (NATS 2.9, Debian's) filter a consumer on one subject
//! within one of the stream's, and the two are needed in the order they were stored (a copy
//! read before what it copies would be read twice). With several agents, each one's feed
//! reads the others' messages and passes them over. Each stored message is a [`Piece`]: a session's own records
//! (starting a generation when it was a rollup), or a piece of a copy with its generation and
//! offset (see `store`). The index takes each piece with its position in one transaction,
//! so a reader killed at any moment resumes exactly after what it holds. A stream made
//! afresh (its sequences begun again) is told by [`SaidFeed::stream_id`].

use async_nats::jetstream::consumer;
use futures::{Stream, StreamExt};
use switchboard_core::AgentName;
use switchboard_sessions::transcript::{Piece, PiecePart};

use crate::cluster::Cluster;
use crate::error::ClusterError;
use crate::store::{GENERATION, OFFSET};

/// One agent's transcripts on the cluster, as a sequence to follow.
#[derive(Clone)]
pub struct SaidFeed {
    cluster: Cluster,
    agent: String,
}

impl std::fmt::Debug for SaidFeed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SaidFeed")
            .field("agent", &self.agent)
            .finish_non_exhaustive()
    }
}

impl SaidFeed {
    /// What `agent`'s chats said on `cluster`.
    pub fn new(cluster: &Cluster, agent: &AgentName) -> Self {
        Self {
            cluster: cluster.clone(),
            agent: agent.to_string(),
        }
    }

    /// The sessions stream's identity (when it was made): positions are of one stream, and
    /// a stream made again begins its sequences again.
    pub async fn stream_id(&self) -> Result<String, ClusterError> {
        let name = self.cluster.names.sessions_stream_name();
        let info = self
            .cluster
            .js
            .get_stream(&name)
            .await
            .map_err(|err| server("read the sessions stream", err))?
            .get_info()
            .await
            .map_err(|err| server("read the sessions stream", err))?;
        Ok(format!("{name}@{}", info.created.unix_timestamp_nanos()))
    }

    /// The pieces stored after position `after`, in order, waiting for new ones as they are
    /// stored; ends with an error when the server is lost for longer than the client's own
    /// reconnecting covers (follow again from the last position taken).
    pub async fn follow(
        &self,
        after: u64,
    ) -> Result<impl Stream<Item = Result<Piece, ClusterError>> + Send + use<>, ClusterError> {
        let deliver_policy = if after == 0 {
            consumer::DeliverPolicy::All
        } else {
            consumer::DeliverPolicy::ByStartSequence {
                start_sequence: after + 1,
            }
        };
        let messages = self
            .cluster
            .js
            .get_stream(self.cluster.names.sessions_stream_name())
            .await
            .map_err(|err| server("read the sessions stream", err))?
            .create_consumer(consumer::pull::OrderedConfig {
                deliver_policy,
                ..Default::default()
            })
            .await
            .map_err(|err| server("follow the sessions stream", err))?
            .messages()
            .await
            .map_err(|err| server("follow the sessions stream", err))?;
        let feed = self.clone();
        Ok(messages.filter_map(move |message| {
            let piece = match message {
                Ok(message) => feed.piece(&message).map(Ok),
                Err(err) => Some(Err(server("follow the sessions stream", err))),
            };
            std::future::ready(piece)
        }))
    }

    /// What a stored message is, when it is one of the agent's transcripts.
    fn piece(&self, message: &async_nats::jetstream::Message) -> Option<Piece> {
        let info = message.info().ok()?;
        let (session, own) = self
            .cluster
            .names
            .said_subject(&self.agent, message.subject.as_str())?;
        let header = |name: &str| {
            message
                .headers
                .as_ref()
                .and_then(|headers| headers.get(name))
                .map(|value| value.as_str().to_owned())
        };
        let part = if own {
            PiecePart::Session {
                starts: header("Nats-Rollup").is_some(),
            }
        } else {
            // An archive written before copies said what they copy is a generation alone.
            let generation = header(GENERATION).and_then(|g| g.parse().ok());
            PiecePart::Kept {
                generation: generation.unwrap_or(info.stream_sequence),
                offset: header(OFFSET)
                    .and_then(|o| o.parse().ok())
                    .filter(|_| generation.is_some())
                    .unwrap_or(0),
                archived: !message.subject.as_str().contains(".history."),
            }
        };
        let millis = info.published.unix_timestamp_nanos() / 1_000_000;
        Some(Piece {
            position: info.stream_sequence,
            session,
            part,
            text: message.payload.to_vec(),
            millis: i64::try_from(millis).unwrap_or(0),
        })
    }
}

fn server(what: &str, err: impl std::fmt::Display) -> ClusterError {
    ClusterError::Server {
        what: what.to_owned(),
        why: err.to_string(),
    }
}
