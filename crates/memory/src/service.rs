//! [`MemoryIndex`]: the daemon's memory search — every agent's index, kept up to date on a
//! thread of its own and searched on another, so neither a long first pass nor a search
//! holds up the runtime's threads or each other (SQLite's write-ahead log lets the reader read
//! while the writer writes).
//!
//! The writer starts with a pass over everything (which also repairs what a kill cut short),
//! then waits for word of a chat written ([`MemoryIndex::touched`]); what arrives while it
//! works is taken together, each chat read once.

use std::collections::{BTreeMap, HashSet};
use std::path::PathBuf;
use std::sync::mpsc;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use switchboard_core::{AgentName, Memory, MemoryError, MemoryHit, MemoryQuery, SessionKey};
use switchboard_sessions::transcript::Piece;

use crate::db::{Counts, IndexError, Pass, Sources};
use crate::index::Index;
use crate::pieces::Taking;
use crate::search::Reader;

/// How long a search may wait for the reader.
const SEARCH_TIME: Duration = Duration::from_secs(10);

/// Where one agent's index and what it covers are.
#[derive(Clone, Debug)]
pub struct Home {
    /// The agent.
    pub agent: AgentName,
    /// Its state directory (sessions in `sessions/`, the index in `memory/index.sqlite3`).
    pub state_dir: PathBuf,
    /// Its workspace (memory files).
    pub workspace: PathBuf,
    /// Whether its sessions are a cluster's (followed in its streams), not files here.
    pub shared: bool,
}

impl Home {
    /// The database of its index.
    pub fn database(&self) -> PathBuf {
        self.state_dir.join("memory").join("index.sqlite3")
    }

    /// What its index covers.
    pub fn sources(&self) -> Sources {
        Sources {
            sessions: (!self.shared).then(|| self.state_dir.join("sessions")),
            workspace: self.workspace.clone(),
        }
    }
}

/// How an agent's index stands, for `/healthz` and `switchboard doctor`.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct Standing {
    /// `indexing` (the first pass runs), `ready`, or `failed`.
    pub state: &'static str,
    /// Entries (messages and memory-file chunks) it holds.
    pub entries: u64,
    /// The last error, when the last write failed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// Why [`MemoryIndex::take`] stopped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Untaken {
    /// The piece after the first `taken` came after a gap in `session`'s records: what was
    /// stored for it after position `after` was not taken.
    Missed {
        /// How many of the pieces were taken before it.
        taken: usize,
        /// The chat.
        session: String,
        /// The position of its records last taken.
        after: u64,
    },
    /// Taking failed: follow again.
    Failed(String),
}

enum Write {
    Touched(AgentName, SessionKey),
    Archived(AgentName, SessionKey),
    Flushed(tokio::sync::oneshot::Sender<()>),
    Follow(
        AgentName,
        [String; 2],
        tokio::sync::oneshot::Sender<Result<[u64; 2], String>>,
    ),
    Take(
        AgentName,
        Vec<Piece>,
        Taking,
        tokio::sync::oneshot::Sender<Result<(), Untaken>>,
    ),
    Failed(AgentName, String),
}

struct Search {
    agent: AgentName,
    query: MemoryQuery,
    reply: tokio::sync::oneshot::Sender<Result<Vec<MemoryHit>, MemoryError>>,
}

/// Every agent's memory index, as the daemon runs it.
#[derive(Clone)]
pub struct MemoryIndex {
    writes: mpsc::Sender<Write>,
    searches: mpsc::Sender<Search>,
    standing: Arc<Mutex<BTreeMap<AgentName, Standing>>>,
}

impl std::fmt::Debug for MemoryIndex {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryIndex").finish_non_exhaustive()
    }
}

impl MemoryIndex {
    /// Opens (or builds) every agent's index and starts its two threads; the first pass
    /// runs on the writer. Fails when a database cannot be made.
    pub fn start(homes: &[Home]) -> Result<Self, IndexError> {
        let mut indexes = Vec::with_capacity(homes.len());
        let mut standing = BTreeMap::new();
        for home in homes {
            indexes.push((
                home.agent.clone(),
                Index::open(&home.database(), home.sources())?,
            ));
            standing.insert(
                home.agent.clone(),
                Standing {
                    state: "indexing",
                    ..Standing::default()
                },
            );
        }
        let standing = Arc::new(Mutex::new(standing));
        let (writes, write_jobs) = mpsc::channel();
        let (searches, search_jobs) = mpsc::channel();
        let databases: BTreeMap<AgentName, PathBuf> = homes
            .iter()
            .map(|home| (home.agent.clone(), home.database()))
            .collect();
        let writer_standing = standing.clone();
        spawn("memory-index", move || {
            write_loop(indexes, &write_jobs, &writer_standing);
        })?;
        spawn("memory-search", move || {
            search_loop(&databases, &search_jobs)
        })?;
        Ok(Self {
            writes,
            searches,
            standing,
        })
    }

    /// Word that `key` of `agent` was written: the index reads what is new of it.
    pub fn touched(&self, agent: &AgentName, key: &SessionKey) {
        let _ = self.writes.send(Write::Touched(agent.clone(), key.clone()));
    }

    /// Word that `/new` closed the conversation of `key`.
    pub fn archived(&self, agent: &AgentName, key: &SessionKey) {
        let _ = self
            .writes
            .send(Write::Archived(agent.clone(), key.clone()));
    }

    /// Waits until everything sent before is in the index.
    pub async fn flushed(&self) {
        let (tx, rx) = tokio::sync::oneshot::channel();
        if self.writes.send(Write::Flushed(tx)).is_ok() {
            let _ = rx.await;
        }
    }

    /// Where to follow the cluster's two streams (`streams`: the sessions stream's and the
    /// history stream's identities) for `agent`'s chats from: after the positions its index
    /// last took (0: from the start; streams it never followed are taken from the start, what
    /// was taken of others forgotten).
    pub async fn follow(
        &self,
        agent: &AgentName,
        streams: [String; 2],
    ) -> Result<[u64; 2], String> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        self.writes
            .send(Write::Follow(agent.clone(), streams, tx))
            .map_err(|_| "the memory index stopped".to_owned())?;
        rx.await
            .map_err(|_| "the memory index stopped".to_owned())?
    }

    /// Takes pieces of the cluster's streams into `agent`'s index, in order, and waits until
    /// they are in; stops at a piece after a gap in its chat's records
    /// ([`Untaken::Missed`]: fill it, then take the rest), or fails (follow again, from
    /// [`follow`](Self::follow)).
    pub async fn take(
        &self,
        agent: &AgentName,
        pieces: Vec<Piece>,
        taking: Taking,
    ) -> Result<(), Untaken> {
        let stopped = || Untaken::Failed("the memory index stopped".to_owned());
        let (tx, rx) = tokio::sync::oneshot::channel();
        self.writes
            .send(Write::Take(agent.clone(), pieces, taking, tx))
            .map_err(|_| stopped())?;
        rx.await.map_err(|_| stopped())?
    }

    /// Word that following `agent`'s chats failed (shown in `/healthz` until a write lands).
    pub fn failed(&self, agent: &AgentName, error: String) {
        let _ = self.writes.send(Write::Failed(agent.clone(), error));
    }

    /// How each agent's index stands.
    pub fn standing(&self) -> BTreeMap<AgentName, Standing> {
        self.standing
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

#[async_trait::async_trait]
impl Memory for MemoryIndex {
    async fn search(
        &self,
        agent: &AgentName,
        query: MemoryQuery,
    ) -> Result<Vec<MemoryHit>, MemoryError> {
        let (reply, answer) = tokio::sync::oneshot::channel();
        let job = Search {
            agent: agent.clone(),
            query,
            reply,
        };
        if self.searches.send(job).is_err() {
            return Err(MemoryError::Index("the search thread stopped".into()));
        }
        match tokio::time::timeout(SEARCH_TIME, answer).await {
            Ok(Ok(result)) => result,
            Ok(Err(_)) => Err(MemoryError::Index("the search thread stopped".into())),
            Err(_) => Err(MemoryError::Index(format!(
                "no answer within {} s",
                SEARCH_TIME.as_secs()
            ))),
        }
    }
}

fn spawn(name: &str, work: impl FnOnce() + Send + 'static) -> Result<(), IndexError> {
    std::thread::Builder::new()
        .name(name.to_owned())
        // SQLite asks little of a stack; FTS5 parses a query recursively, so some room.
        .stack_size(512 * 1024)
        .spawn(work)
        .map(drop)
        .map_err(|source| IndexError::Io {
            path: PathBuf::from(name),
            source,
        })
}

fn write_loop(
    mut indexes: Vec<(AgentName, Index)>,
    jobs: &mpsc::Receiver<Write>,
    standing: &Mutex<BTreeMap<AgentName, Standing>>,
) {
    // How an index stands after a write: its entries counted once after the first pass,
    // then kept by what each pass added and dropped (a count of a large index is not free).
    let note = |agent: &AgentName, index: &Index, result: Result<Pass, IndexError>| {
        let mut standing = standing.lock().unwrap_or_else(PoisonError::into_inner);
        let entry = standing.entry(agent.clone()).or_default();
        match result {
            Ok(pass) => {
                if entry.state == "ready" {
                    entry.entries =
                        (entry.entries + pass.added as u64).saturating_sub(pass.dropped as u64);
                } else if let Ok(counts) = index.counts() {
                    entry.entries = counts.entries;
                }
                entry.state = "ready";
                entry.error = None;
            }
            Err(err) => {
                tracing::error!(agent = %agent, error = %err, "the memory index could not be brought up to date");
                entry.state = if entry.state == "ready" {
                    "ready"
                } else {
                    "failed"
                };
                entry.error = Some(err.to_string());
            }
        }
    };
    for (agent, index) in &mut indexes {
        let started = std::time::Instant::now();
        let result = index.sync_all(|_| {});
        if let Ok(pass) = &result {
            tracing::info!(agent = %agent, files = pass.files, added = pass.added,
                dropped = pass.dropped, ms = started.elapsed().as_millis() as u64,
                "the memory index is up to date");
        }
        note(agent, index, result);
    }
    while let Ok(first) = jobs.recv() {
        let batch: Vec<Write> = std::iter::once(first).chain(jobs.try_iter()).collect();
        let mut read: HashSet<(AgentName, SessionKey)> = HashSet::new();
        let mut agents: HashSet<AgentName> = HashSet::new();
        let mut flushed = Vec::new();
        for job in batch {
            match job {
                Write::Touched(agent, key) => {
                    let Some((_, index)) = indexes.iter_mut().find(|(a, _)| *a == agent) else {
                        continue;
                    };
                    if read.insert((agent.clone(), key.clone())) {
                        let result = index.sync_session(&key);
                        note(&agent, index, result);
                        agents.insert(agent);
                    }
                }
                Write::Archived(agent, key) => {
                    let Some((_, index)) = indexes.iter_mut().find(|(a, _)| *a == agent) else {
                        continue;
                    };
                    let result = index.archive_session(&key).map(|()| Pass::default());
                    note(&agent, index, result);
                    read.remove(&(agent, key));
                }
                Write::Flushed(reply) => flushed.push(reply),
                Write::Follow(agent, streams, reply) => {
                    let Some((_, index)) = indexes.iter_mut().find(|(a, _)| *a == agent) else {
                        let _ = reply.send(Err(format!("no memory index for {agent}")));
                        continue;
                    };
                    let streams = [streams[0].as_str(), streams[1].as_str()];
                    let _ = reply.send(index.follow(streams).map_err(|err| err.to_string()));
                }
                Write::Take(agent, pieces, taking, reply) => {
                    let Some((_, index)) = indexes.iter_mut().find(|(a, _)| *a == agent) else {
                        let _ = reply
                            .send(Err(Untaken::Failed(format!("no memory index for {agent}"))));
                        continue;
                    };
                    let mut taken = Pass::default();
                    let mut answer = Ok(());
                    for (at, piece) in pieces.iter().enumerate() {
                        match index.take(piece, taking) {
                            Ok(pass) => {
                                taken.added += pass.added;
                                taken.files += pass.files;
                            }
                            Err(IndexError::Missed { session, after }) => {
                                answer = Err(Untaken::Missed {
                                    taken: at,
                                    session,
                                    after,
                                });
                                break;
                            }
                            Err(err) => {
                                let unfollowed = matches!(err, IndexError::Unfollowed);
                                answer = Err(Untaken::Failed(err.to_string()));
                                if !unfollowed {
                                    note(&agent, index, Err(err));
                                }
                                break;
                            }
                        }
                    }
                    if !matches!(answer, Err(Untaken::Failed(_))) {
                        note(&agent, index, Ok(taken));
                    }
                    let _ = reply.send(answer);
                }
                Write::Failed(agent, error) => {
                    let mut standing = standing.lock().unwrap_or_else(PoisonError::into_inner);
                    standing.entry(agent).or_default().error = Some(error);
                }
            }
        }
        // A turn that wrote a chat may have written the memory files too.
        for (agent, index) in indexes.iter_mut().filter(|(a, _)| agents.contains(a)) {
            let mut pass = Pass::default();
            let result = index.sync_notes(&mut pass).map(|()| pass);
            note(agent, index, result);
        }
        for reply in flushed {
            let _ = reply.send(());
        }
    }
}

fn search_loop(databases: &BTreeMap<AgentName, PathBuf>, jobs: &mpsc::Receiver<Search>) {
    let mut readers: BTreeMap<AgentName, Reader> = BTreeMap::new();
    while let Ok(job) = jobs.recv() {
        let result = match databases.get(&job.agent) {
            None => Err(MemoryError::Index(format!(
                "the agent {} has no memory index",
                job.agent
            ))),
            Some(path) => {
                if !readers.contains_key(&job.agent) {
                    match Reader::open(path) {
                        Ok(reader) => {
                            readers.insert(job.agent.clone(), reader);
                        }
                        Err(err) => {
                            let _ = job.reply.send(Err(MemoryError::Index(err.to_string())));
                            continue;
                        }
                    }
                }
                match readers.get(&job.agent) {
                    Some(reader) => reader.search(&job.query),
                    None => Err(MemoryError::Index("no reader".into())),
                }
            }
        };
        let _ = job.reply.send(result);
    }
}

/// Builds `home`'s index again from its transcripts and memory files, in this process
/// (`switchboard memory reindex`): safe beside a running daemon, whose writer reads on from
/// what this one committed. `progress` hears of each file done.
pub fn reindex(home: &Home, progress: impl FnMut(&Pass)) -> Result<Counts, IndexError> {
    let mut index = Index::open(&home.database(), home.sources())?;
    index.clear()?;
    index.sync_all(progress)?;
    index.settle()?;
    index.counts()
}

/// Brings `home`'s index up to date and searches it, in this process (`switchboard memory
/// search`).
pub fn search_now(home: &Home, query: &MemoryQuery) -> Result<Vec<MemoryHit>, MemoryError> {
    let mut index = Index::open(&home.database(), home.sources())
        .map_err(|err| MemoryError::Index(err.to_string()))?;
    index
        .sync_all(|_| {})
        .map_err(|err| MemoryError::Index(err.to_string()))?;
    Reader::open(&home.database())
        .map_err(|err| MemoryError::Index(err.to_string()))?
        .search(query)
}

/// What `home`'s index holds (`switchboard memory stats`), without changing it; `None`
/// when it was never built.
pub fn counts(home: &Home) -> Result<Option<Counts>, IndexError> {
    let path = home.database();
    if !path.exists() {
        return Ok(None);
    }
    Reader::open(&path)?.counts().map(Some)
}
