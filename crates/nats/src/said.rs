//! [`SaidFeed`]: everything one agent's chats said on the cluster, for a worker's memory
//! index to follow.
//!
//! What was said is in two streams: the chats' records with the conversations `/new` closed
//! (the sessions stream: `NAME.sessions.AGENT.…`, `NAME.archive.AGENT.…`) and the generations
//! compaction replaced (the history stream: `NAME.history.AGENT.…`). The feed follows both
//! with an ordered consumer each, from after the last position its reader took of each, and
//! gives their pieces as they come, in no order between the two (the index places each by
//! its generation and offset, see `switchboard_memory`'s `pieces`). The history consumer is
//! filtered on the server to the agent's subjects; the sessions consumer reads the whole
//! stream and keeps the agent's: the servers this runs on (NATS 2.9, Debian's) filter a
//! consumer on one subject within one of the stream's, and the records and the archives are
//! needed in the order they were stored (a conversation is closed after what it said). With
//! several agents, each one's feed reads the others' records and passes them over.
//!
//! Each stored message is a [`Piece`]: a session's own records (starting a generation when
//! it was a rollup), or a piece of a copy with its generation and offset (see `store`). A
//! stream made afresh (its sequences begun again) is told by [`SaidFeed::stream_ids`].

use std::time::Duration;

use async_nats::jetstream::{consumer, stream};
use futures::{Stream, StreamExt};
use switchboard_core::{AgentName, SessionKey};
use switchboard_sessions::transcript::{Piece, PiecePart, Source};

use crate::cluster::Cluster;
use crate::error::ClusterError;
use crate::names::Said;
use crate::store::{GENERATION, OFFSET};

/// How long reading a chat's missed records again may take.
const MISSED_TIME: Duration = Duration::from_secs(10);

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

    /// The two streams' identities (when each was made), the sessions stream's and the
    /// history stream's: positions are of one stream, and a stream made again begins its
    /// sequences again.
    pub async fn stream_ids(&self) -> Result<[String; 2], ClusterError> {
        let names = &self.cluster.names;
        Ok([
            self.stream_id(names.sessions_stream_name()).await?,
            self.stream_id(names.history_stream_name()).await?,
        ])
    }

    async fn stream_id(&self, name: String) -> Result<String, ClusterError> {
        let info = self
            .cluster
            .js
            .get_stream(&name)
            .await
            .map_err(|err| server(&format!("read the stream {name}"), err))?
            .get_info()
            .await
            .map_err(|err| server(&format!("read the stream {name}"), err))?;
        Ok(format!("{name}@{}", info.created.unix_timestamp_nanos()))
    }

    /// The pieces stored after positions `after` (of the sessions stream, of the history
    /// stream), waiting for new ones as they are stored; ends with an error when the server
    /// is lost for longer than the client's own reconnecting covers (follow again from the
    /// last positions taken).
    ///
    /// The sessions consumer reads every message of its stream, so a position it jumps over
    /// is a message removed (a rollup replaced it) — or one NATS 2.9 passed it over: that
    /// server moves every consumer of a stream past what a rollup purges, other subjects'
    /// messages included (nats-server #3838, fixed in 2.9.15). So what is jumped over is read
    /// again by direct gets and given first, in order.
    pub async fn follow(
        &self,
        after: [u64; 2],
    ) -> Result<impl Stream<Item = Result<Piece, ClusterError>> + Send + use<>, ClusterError> {
        let names = &self.cluster.names;
        let stream = self.sessions_stream("read the sessions stream").await?;
        let messages = self
            .messages(names.sessions_stream_name(), String::new(), after[0])
            .await?;
        let sessions = futures::stream::unfold(
            Jumps {
                feed: self.clone(),
                stream,
                messages,
                last: after[0],
                queue: std::collections::VecDeque::new(),
            },
            Jumps::next,
        );
        let feed = self.clone();
        let history = self
            .messages(
                names.history_stream_name(),
                names.history_of(&self.agent),
                after[1],
            )
            .await?
            .filter_map(move |message| {
                let piece = match message {
                    Ok(message) => feed.piece(Source::History, &message).map(Ok),
                    Err(err) => Some(Err(server("follow the history stream", err))),
                };
                std::future::ready(piece)
            });
        Ok(futures::stream::select(sessions, history))
    }

    /// What the sessions stream holds for chat `session` after position `after` and before
    /// `before`, read again from the chat's subject: the records a follower missed (nothing
    /// when a rollup replaced them since; their copy has them).
    pub async fn missed(
        &self,
        session: &str,
        after: u64,
        before: u64,
    ) -> Result<Vec<Piece>, ClusterError> {
        let names = &self.cluster.names;
        let stream = self.sessions_stream("read a chat's records again").await?;
        let subject = names.session_subject(&self.agent, &SessionKey::from(session));
        self.between(&stream, &subject, after, before).await
    }

    /// The sessions stream's handle, for `doing` (what a failure is told as).
    async fn sessions_stream(&self, doing: &str) -> Result<stream::Stream, ClusterError> {
        self.cluster
            .js
            .get_stream(self.cluster.names.sessions_stream_name())
            .await
            .map_err(|err| server(doing, err))
    }

    /// The agent's pieces on `filter` of the sessions `stream` after position `after` and
    /// before `before`, one direct get each (the next message on `filter` from a position).
    async fn between(
        &self,
        stream: &stream::Stream,
        filter: &str,
        after: u64,
        before: u64,
    ) -> Result<Vec<Piece>, ClusterError> {
        let what = "read the sessions stream again";
        let read = async {
            let mut pieces = Vec::new();
            let mut from = after + 1;
            while from < before {
                let message = match stream.direct_get_next_for_subject(filter, Some(from)).await {
                    Ok(message) => message,
                    Err(err) if err.kind() == stream::DirectGetErrorKind::NotFound => break,
                    Err(err) => return Err(server(what, err)),
                };
                if message.sequence >= before {
                    break;
                }
                from = message.sequence + 1;
                let stored = Stored {
                    subject: message.subject.as_str(),
                    position: message.sequence,
                    nanos: message.time.unix_timestamp_nanos(),
                    headers: Some(&message.headers),
                    payload: &message.payload,
                };
                pieces.extend(self.piece_of(Source::Sessions, &stored));
            }
            Ok(pieces)
        };
        tokio::time::timeout(MISSED_TIME, read).await.map_err(|_| {
            server(
                what,
                format!("no answer within {} s", MISSED_TIME.as_secs()),
            )
        })?
    }

    /// The messages of stream `name` on `filter` (empty: all) after position `after`.
    async fn messages(
        &self,
        name: String,
        filter: String,
        after: u64,
    ) -> Result<consumer::pull::Ordered, ClusterError> {
        let deliver_policy = if after == 0 {
            consumer::DeliverPolicy::All
        } else {
            consumer::DeliverPolicy::ByStartSequence {
                start_sequence: after + 1,
            }
        };
        let what = format!("follow the stream {name}");
        self.cluster
            .js
            .get_stream(&name)
            .await
            .map_err(|err| server(&what, err))?
            .create_consumer(consumer::pull::OrderedConfig {
                deliver_policy,
                filter_subject: filter,
                ..Default::default()
            })
            .await
            .map_err(|err| server(&what, err))?
            .messages()
            .await
            .map_err(|err| server(&what, err))
    }

    /// What a message a consumer delivered is, when it is one of the agent's transcripts.
    fn piece(&self, source: Source, message: &async_nats::jetstream::Message) -> Option<Piece> {
        let info = message.info().ok()?;
        let stored = Stored {
            subject: message.subject.as_str(),
            position: info.stream_sequence,
            nanos: info.published.unix_timestamp_nanos(),
            headers: message.headers.as_ref(),
            payload: &message.payload,
        };
        self.piece_of(source, &stored)
    }

    /// What a stored message is, when it is one of the agent's transcripts.
    fn piece_of(&self, source: Source, stored: &Stored<'_>) -> Option<Piece> {
        let (session, said) = self
            .cluster
            .names
            .said_subject(&self.agent, stored.subject)?;
        let header = |name: &str| {
            stored
                .headers
                .and_then(|headers| headers.get(name))
                .map(|value| value.as_str().to_owned())
        };
        let part = if said == Said::Session {
            PiecePart::Session {
                starts: header("Nats-Rollup").is_some(),
            }
        } else {
            // An archive written before copies said what they copy is a generation alone.
            let generation = header(GENERATION).and_then(|g| g.parse().ok());
            PiecePart::Kept {
                generation: generation.unwrap_or(stored.position),
                offset: header(OFFSET)
                    .and_then(|o| o.parse().ok())
                    .filter(|_| generation.is_some())
                    .unwrap_or(0),
                archived: said == Said::Archive,
            }
        };
        Some(Piece {
            source,
            position: stored.position,
            previous: header("Nats-Expected-Last-Subject-Sequence").and_then(|p| p.parse().ok()),
            session,
            part,
            text: stored.payload.to_vec(),
            millis: i64::try_from(stored.nanos / 1_000_000).unwrap_or(0),
        })
    }
}

/// A stored message, as a consumer or a direct get gives it.
struct Stored<'a> {
    subject: &'a str,
    position: u64,
    /// When it was stored, in Unix nanoseconds.
    nanos: i128,
    headers: Option<&'a async_nats::HeaderMap>,
    payload: &'a [u8],
}

/// The sessions consumer's messages as pieces, with what it jumped over read again first.
struct Jumps {
    feed: SaidFeed,
    stream: stream::Stream,
    messages: consumer::pull::Ordered,
    /// The position of the last message delivered.
    last: u64,
    queue: std::collections::VecDeque<Piece>,
}

impl Jumps {
    async fn next(mut self) -> Option<(Result<Piece, ClusterError>, Self)> {
        loop {
            if let Some(piece) = self.queue.pop_front() {
                return Some((Ok(piece), self));
            }
            let message = match self.messages.next().await? {
                Ok(message) => message,
                Err(err) => return Some((Err(server("follow the sessions stream", err)), self)),
            };
            let Ok(info) = message.info() else {
                continue;
            };
            let position = info.stream_sequence;
            if position > self.last + 1 {
                let filter = self.feed.cluster.names.any_subject();
                match self
                    .feed
                    .between(&self.stream, &filter, self.last, position)
                    .await
                {
                    Ok(jumped) => {
                        if !jumped.is_empty() {
                            tracing::debug!(
                                after = self.last,
                                before = position,
                                found = jumped.len(),
                                "the sessions consumer jumped over stored messages"
                            );
                        }
                        self.queue.extend(jumped);
                    }
                    Err(err) => return Some((Err(err), self)),
                }
            }
            self.last = self.last.max(position);
            self.queue
                .extend(self.feed.piece(Source::Sessions, &message));
        }
    }
}

fn server(what: &str, err: impl std::fmt::Display) -> ClusterError {
    ClusterError::Server {
        what: what.to_owned(),
        why: err.to_string(),
    }
}
