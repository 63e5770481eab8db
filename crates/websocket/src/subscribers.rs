//! The subscriber table: which sockets receive each chat's frames, and the frames kept a
//! while for a chat whose sockets are gone — the state the channel, its routes and every
//! connection share.

use std::collections::{HashSet, VecDeque};
use std::sync::atomic::{AtomicU64, AtomicUsize};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use axum::extract::ws::Utf8Bytes;
use dashmap::DashMap;
use switchboard_core::{Bus, ChatId, Transcripts};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::config::WsConfig;
use crate::conversations::Conversations;
use crate::live::LiveChats;

/// A frame queued for a socket. Boxed: the queue allocates its slots 32 at a time, so the
/// slot size is paid by every idle socket.
pub(crate) type Frame = Box<Utf8Bytes>;

/// A socket that receives a chat's frames.
#[derive(Clone)]
pub(crate) struct Subscriber {
    pub conn: u64,
    /// The socket's send queue; its send task owns the receiver.
    pub tx: mpsc::Sender<Frame>,
    /// Cancelled to drop the socket at once because it fell too far behind.
    pub kill: CancellationToken,
}

/// State shared by the channel, the route and every connection.
pub(crate) struct Shared {
    pub config: WsConfig,
    pub hub: Arc<dyn Bus>,
    /// Answers `history` requests (none: the chat's history is empty).
    pub history: Option<Arc<dyn Transcripts>>,
    /// Sockets by chat. Guards are held only for non-blocking sends, never across awaits.
    pub subscribers: DashMap<ChatId, Vec<Subscriber>>,
    /// Frames for chats with no socket, kept a while for a socket that reconnects (a page
    /// reloaded mid-answer). Locked only while a `subscribers` guard of the same chat is
    /// held, so a frame is either held and then replayed, or delivered — never lost between.
    pub held: DashMap<ChatId, Held>,
    /// The `seq` of the next frame that comes without a cursor of the bus's (one process):
    /// counted from the start's microseconds since the Unix epoch, so a client's last `seq`
    /// from before a restart is below every frame after it.
    pub next_seq: AtomicU64,
    pub next_conn: AtomicU64,
    pub open: AtomicUsize,
    /// Cancelled by [`WebSocketChannel::close`]: each socket sends what is queued,
    /// then a going-away close frame.
    pub closing: CancellationToken,
    /// Every connection task, so closing can wait until each socket has flushed.
    pub connections: TaskTracker,
    /// Whether each chat has a turn running and what it waits on (for `history`).
    pub live: LiveChats,
    /// The web page's list of conversations.
    pub conversations: Conversations,
    /// Files sent to chats, and their links; `None`: files are not offered.
    pub files: Option<crate::files::Files>,
}

/// How long frames are kept for a chat with no socket.
const HOLD_FOR: Duration = Duration::from_secs(120);
/// The most bytes of frames kept per chat (the oldest go first).
const HELD_BYTES: usize = 64 * 1024;
/// The most chats with frames kept at once.
const HELD_CHATS: usize = 256;

/// A chat's frames kept while no socket is on it, each with its `seq`.
pub(crate) struct Held {
    frames: VecDeque<(u64, Utf8Bytes)>,
    bytes: usize,
    since: Instant,
}

impl Shared {
    /// Puts `subscriber` on `chat` (once per socket). The first socket back on a chat gets
    /// what was kept for it — only the frames after `after`, the last its client has (none
    /// twice when it comes from another server of a cluster) — before anything newer.
    pub(crate) fn subscribe(
        &self,
        chats: &Mutex<HashSet<ChatId>>,
        subscriber: &Subscriber,
        chat: ChatId,
        after: Option<u64>,
    ) {
        let mut chats = chats.lock().unwrap_or_else(PoisonError::into_inner);
        if chats.insert(chat.clone()) {
            let mut sockets = self.subscribers.entry(chat.clone()).or_default();
            if sockets.is_empty()
                && let Some((_, held)) = self.held.remove(&chat)
                && held.since.elapsed() < HOLD_FOR
            {
                let missed = held
                    .frames
                    .into_iter()
                    .filter(|(seq, _)| after.is_none_or(|after| *seq > after));
                for (_, frame) in missed {
                    let _ = subscriber.tx.try_send(Box::new(frame));
                }
            }
            sockets.push(subscriber.clone());
        }
    }

    /// Keeps frame `seq` for a chat with no socket (bounded; see [`Held`]). Called with the
    /// chat's `subscribers` shard locked.
    pub(crate) fn hold(&self, chat: &ChatId, seq: u64, frame: Utf8Bytes) {
        if frame.len() > HELD_BYTES {
            return;
        }
        if !self.held.contains_key(chat) && self.held.len() >= HELD_CHATS {
            self.held.retain(|_, held| held.since.elapsed() < HOLD_FOR);
            if self.held.len() >= HELD_CHATS {
                tracing::debug!(chat = %chat, "too many chats without a socket; frame dropped");
                return;
            }
        }
        let mut held = self.held.entry(chat.clone()).or_insert_with(|| Held {
            frames: VecDeque::new(),
            bytes: 0,
            since: Instant::now(),
        });
        if held.since.elapsed() >= HOLD_FOR {
            *held = Held {
                frames: VecDeque::new(),
                bytes: 0,
                since: Instant::now(),
            };
        }
        held.bytes += frame.len();
        held.frames.push_back((seq, frame));
        while held.bytes > HELD_BYTES {
            let Some((_, oldest)) = held.frames.pop_front() else {
                break;
            };
            held.bytes -= oldest.len();
        }
    }

    pub(crate) fn unsubscribe(&self, conn: u64, chat: &ChatId) {
        self.subscribers.remove_if_mut(chat, |_, subscribers| {
            subscribers.retain(|s| s.conn != conn);
            subscribers.is_empty()
        });
    }
}
