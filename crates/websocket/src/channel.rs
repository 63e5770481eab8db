//! [`WebSocketChannel`]: the `Channel` impl, the subscriber table and the `/ws` route.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use axum::Router;
use axum::extract::ws::rejection::WebSocketUpgradeRejection;
use axum::extract::ws::{Utf8Bytes, WebSocketUpgrade};
use axum::extract::{Query, Request, State};
use axum::http::{HeaderMap, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use dashmap::DashMap;
use serde::Deserialize;
use switchboard_adapter::{BuildError, BuiltChannel, ChannelParts, ChannelSection, HttpFacts};
use switchboard_core::{
    Bus, Channel, ChannelContext, ChannelName, ConfigProblem, CoreError, MediaLimits, MediaStore,
    OutboundMessage, Sent, Transcripts,
};
use tokio::sync::mpsc::error::TrySendError;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::config::{CHANNEL_NAME, WsConfig, WsSection};
use crate::connection;
use crate::conversations::Conversations;
use crate::live::LiveChats;
use crate::page;
use crate::protocol::ServerFrame;
use crate::subscribers::Shared;
use crate::upload;
use switchboard_http::{Auth, BEARER_PROTOCOL, check_host};

/// Initial read buffer of a socket.
const READ_BUFFER: usize = 1024;
/// Frames are buffered up to this before a write; each batch is flushed anyway.
const WRITE_BUFFER: usize = 64 * 1024;

/// The WebSocket channel. Cloning shares the same state.
#[derive(Clone)]
pub struct WebSocketChannel {
    shared: Arc<Shared>,
}

#[derive(Deserialize)]
struct TokenQuery {
    token: Option<String>,
}

/// How long the sockets get, once the channel stops, to send what is queued for them.
const CLOSE_DEADLINE: Duration = Duration::from_secs(5);

impl ChannelSection for WsSection {
    fn enabled(&self) -> bool {
        self.enabled
    }

    fn validate(&self, http: &HttpFacts) -> Result<(), ConfigProblem> {
        self.check(http.bind)
    }

    /// The page fetches files from this server: any kept file, with a caption of a few
    /// thousand characters.
    fn media(&self) -> MediaLimits {
        let max = switchboard_core::MAX_MEDIA_BYTES;
        MediaLimits {
            image: max,
            voice: max,
            document: max,
            caption: 4096,
        }
    }

    fn build(&self, parts: &ChannelParts) -> Result<BuiltChannel, BuildError> {
        let mut settings = self.settings(parts.http.allowed_hosts.clone())?;
        settings.workspace = Some(parts.workspace.clone());
        settings.state_dir = Some(parts.state_dir.clone());
        let mut channel =
            WebSocketChannel::new(settings, parts.hub.clone()).with_files(parts.media.clone());
        if let Some(transcripts) = &parts.transcripts {
            channel = channel.with_history(transcripts.clone());
        }
        let sockets = channel.clone();
        Ok(BuiltChannel {
            router: Some(channel.router()),
            gauges: vec![(
                "websocket_connections",
                Box::new(move || sockets.connections()),
            )],
            channel: Arc::new(channel),
        })
    }
}

impl WebSocketChannel {
    /// A channel publishing inbound messages on `hub`.
    pub fn new(config: WsConfig, hub: Arc<dyn Bus>) -> Self {
        let list = config
            .state_dir
            .as_ref()
            .map(|dir| dir.join(CHANNEL_NAME).join("conversations.json"));
        Self {
            shared: Arc::new(Shared {
                live: LiveChats::default(),
                conversations: Conversations::new(list),
                config,
                hub,
                history: None,
                subscribers: DashMap::new(),
                held: DashMap::new(),
                next_seq: AtomicU64::new(start_seq()),
                next_conn: AtomicU64::new(1),
                open: AtomicUsize::new(0),
                closing: CancellationToken::new(),
                connections: TaskTracker::new(),
                files: None,
            }),
        }
    }

    /// Offers files sent to its chats, kept in `media`, at signed links. (Before the
    /// channel is shared.)
    pub fn with_files(mut self, media: Arc<dyn MediaStore>) -> Self {
        if let Some(shared) = Arc::get_mut(&mut self.shared) {
            shared.files = Some(crate::files::Files {
                links: crate::files::Links::new(&shared.config.auth),
                media,
            });
        }
        self
    }

    /// Answers `history` requests from `source`. (Before the channel is shared.)
    pub fn with_history(mut self, source: Arc<dyn Transcripts>) -> Self {
        if let Some(shared) = Arc::get_mut(&mut self.shared) {
            shared.history = Some(source);
        }
        self
    }

    /// The routes of this channel: `GET /ws` and the web chat page at `GET /`. Without
    /// auth, they answer only loopback Host names (and the configured ones).
    pub fn router(&self) -> Router {
        Router::new()
            .route("/ws", get(upgrade))
            .route("/upload", post(upload::upload))
            .route("/files/{*key}", get(crate::files::serve))
            .route("/", get(page::chat_page))
            .route("/assets/{*path}", get(page::asset))
            .route("/favicon.ico", get(|| async { StatusCode::NO_CONTENT }))
            .layer(axum::middleware::from_fn_with_state(
                self.shared.clone(),
                host_guard,
            ))
            .with_state(self.shared.clone())
    }

    /// How many sockets are open.
    pub fn connections(&self) -> usize {
        self.shared.open.load(Ordering::Relaxed)
    }

    /// Closes every socket: each sends what is queued for it, then a going-away close
    /// frame. Used last in shutdown, after the final replies were handed over. Waits up to
    /// `deadline` for every socket to finish; returns whether all did.
    pub async fn close(&self, deadline: std::time::Duration) -> bool {
        self.shared.closing.cancel();
        self.shared.connections.close();
        tokio::time::timeout(deadline, self.shared.connections.wait())
            .await
            .is_ok()
    }
}

/// Where a process's own frame numbers start: its start's microseconds since the Unix epoch.
fn start_seq() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(1, |since| {
            u64::try_from(since.as_micros()).unwrap_or(u64::MAX / 2)
        })
}

/// Refuses requests whose Host is not a loopback name when auth is off (DNS rebinding).
async fn host_guard(State(shared): State<Arc<Shared>>, request: Request, next: Next) -> Response {
    if matches!(shared.config.auth, Auth::None)
        && let Err(reason) = check_host(request.headers(), &shared.config.allowed_hosts)
    {
        tracing::info!(reason, host = ?request.headers().get(axum::http::header::HOST),
            "refused a request for another host");
        return (StatusCode::FORBIDDEN, reason).into_response();
    }
    next.run(request).await
}

async fn upgrade(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    Query(query): Query<TokenQuery>,
    ws: Result<WebSocketUpgrade, WebSocketUpgradeRejection>,
) -> Response {
    // The credentials first: a page may ask with a plain GET whether its token is right
    // (401) before it opens a socket, which cannot tell it why it was refused.
    if let Err(reason) = shared.config.auth.check(&headers, query.token.as_deref()) {
        tracing::info!(reason, "refused a WebSocket connection");
        return (StatusCode::UNAUTHORIZED, reason).into_response();
    }
    let ws = match ws {
        Ok(ws) => ws,
        Err(rejection) => return rejection.into_response(),
    };
    if !shared.hub.is_accepting() || shared.closing.is_cancelled() {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            "switchboard is shutting down",
        )
            .into_response();
    }
    let limit = shared.config.max_frame_bytes;
    let connections = shared.connections.clone();
    ws.protocols([BEARER_PROTOCOL])
        // Checked when a frame's header arrives, before its payload is read: a client
        // cannot make the reader hold more than this, however much it announces.
        .max_frame_size(limit)
        .max_message_size(limit)
        // tungstenite allocates its read buffer up front (128 KiB by default): most frames
        // are small, and 10,000 idle sockets must not cost 1.3 GB. Larger frames grow it.
        .read_buffer_size(READ_BUFFER)
        .write_buffer_size(WRITE_BUFFER)
        .on_upgrade(move |socket| connections.track_future(connection::serve(socket, shared)))
}

#[async_trait]
impl Channel for WebSocketChannel {
    fn name(&self) -> ChannelName {
        ChannelName::from(CHANNEL_NAME)
    }

    fn scope(&self) -> switchboard_core::ChannelScope {
        switchboard_core::ChannelScope::Process
    }

    async fn run(&self, ctx: ChannelContext) -> Result<(), CoreError> {
        // Connections arrive through the daemon's HTTP listener; nothing to poll here. The
        // channel stops last, once the final replies were handed over: every socket sends
        // what was queued for it, then its close frame, and is waited for — exiting before
        // that would cut the final replies off.
        ctx.shutdown.cancelled().await;
        if !self.close(CLOSE_DEADLINE).await {
            tracing::warn!("some WebSocket connections did not close in time");
        }
        Ok(())
    }

    async fn send(&self, message: OutboundMessage) -> Result<Sent, CoreError> {
        let chat = message.chat_id.clone();
        let seq = message
            .cursor
            .unwrap_or_else(|| self.shared.next_seq.fetch_add(1, Ordering::Relaxed));
        // Noted before it is sent: a `history` frame's `seq` covers every frame noted.
        self.shared.live.note(&chat, &message.kind, seq);
        let now = crate::files::now();
        let link = |file: &switchboard_core::OutboundFile| {
            Some(self.shared.files.as_ref()?.links.url(file, now))
        };
        let frame: Utf8Bytes = ServerFrame::outbound_json(message, seq, link).into();
        let subscribers = match self.shared.subscribers.get(&chat) {
            Some(subscribers) => subscribers,
            None => {
                // No socket: keep the frame for one that comes back — under the chat's
                // shard lock, so a socket subscribing now either sees it held or gets it.
                match self.shared.subscribers.entry(chat.clone()) {
                    dashmap::Entry::Vacant(_vacant) => {
                        self.shared.hold(&chat, seq, frame);
                        return Ok(Sent::accepted());
                    }
                    dashmap::Entry::Occupied(occupied) => occupied.into_ref().downgrade(),
                }
            }
        };
        for subscriber in subscribers.iter() {
            match subscriber.tx.try_send(Box::new(frame.clone())) {
                Ok(()) | Err(TrySendError::Closed(_)) => {}
                Err(TrySendError::Full(_)) => {
                    tracing::warn!(conn = subscriber.conn, chat = %chat,
                        "WebSocket client too slow; closing it");
                    subscriber.kill.cancel();
                }
            }
        }
        Ok(Sent::accepted())
    }
}
