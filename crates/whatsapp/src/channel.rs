//! [`WhatsAppChannel`]: the `Channel` impl — the webhook route on the daemon's listener, its
//! messages taken in order by one intake task, and replies through the shared [`Replies`]
//! over the Graph API.
//!
//! The webhook answers Meta's verify handshake (`GET`, the configured `verify_token`), and
//! takes a notification (`POST`) only when it is signed with the app's secret over its very
//! bytes. Each message in it is noted as the chat's latest (for the read mark and the
//! window), skipped if it came before (Meta sends a notification again until it gets a 200),
//! taken into the channel's inbox — fsynced — and queued for the intake task; only then is
//! the request answered 200. One the inbox cannot take (full), or that comes while the
//! channel is not running, is answered 503, and Meta sends it again later. Sends WhatsApp
//! reports failed afterwards (a status in a later notification) are logged for the operator.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use axum::Router;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde::Deserialize;
use subtle::ConstantTimeEq;
use switchboard_adapter::{
    Admit, AllowList, Arrival, BuildError, BuiltChannel, ChannelParts, ChannelSection, Gate,
    HttpFacts, Inbox, InboxEntry, InboxError, Incoming, Intake, IntakeParts, Remembered, Replies,
    keep,
};
use switchboard_core::{
    Channel, ChannelContext, ChannelName, ChatId, ConfigProblem, CoreError, OutboundMessage, Sent,
};
use tokio::sync::{mpsc, watch};

use crate::config::{WhatsAppSection, WhatsAppSettings};
use crate::convert::{SIGNATURE_HEADER, read, signed};
use crate::graph::{CHANNEL_NAME, Files, Graph, MEDIA, channel_error};

/// The path Meta posts notifications to (and verifies, once, when it is configured).
pub const WEBHOOK_PATH: &str = "/whatsapp/webhook";

/// A notification's body at most (Meta's are a few KiB; a batch stays far below).
const MAX_NOTIFICATION_BYTES: usize = 1024 * 1024;
/// Messages waiting for intake; beyond, the webhook waits (and Meta with it).
const INTAKE_QUEUE: usize = 256;
/// Message ids remembered, to skip notifications Meta sends again.
const SEEN_MESSAGES: usize = 4096;
/// How long a notification waits for the channel to run (it starts, or restarts after a
/// failure) before it is answered 503 — after which Meta waits a while to send it again.
const LIVE_WAIT: Duration = Duration::from_secs(10);

impl ChannelSection for WhatsAppSection {
    fn enabled(&self) -> bool {
        self.enabled
    }

    fn validate(&self, _http: &HttpFacts) -> Result<(), ConfigProblem> {
        if !self.enabled {
            return Ok(());
        }
        self.settings().map(drop)
    }

    fn media(&self) -> switchboard_core::MediaLimits {
        MEDIA
    }

    fn build(&self, parts: &ChannelParts) -> Result<BuiltChannel, BuildError> {
        let channel = WhatsAppChannel::new(self.settings()?, parts)?;
        let router = channel.router();
        let mut built = BuiltChannel::new(Arc::new(channel));
        built.router = Some(router);
        Ok(built)
    }
}

/// The WhatsApp channel. Cloning shares it.
#[derive(Clone)]
pub struct WhatsAppChannel {
    inner: Arc<Inner>,
}

struct Inner {
    settings: WhatsAppSettings,
    graph: Arc<Graph>,
    replies: Replies<Graph>,
    admit: Arc<Admit>,
    /// Taken by `run` (one at a time, under the supervisor).
    intake: tokio::sync::Mutex<Intake>,
    /// Where the webhook hands messages while the channel runs.
    live: watch::Sender<Option<Live>>,
    seen: Remembered<String, ()>,
}

/// The running channel's inbox and intake queue.
#[derive(Clone)]
struct Live {
    inbox: Inbox,
    queue: mpsc::Sender<(Arrival, Option<InboxEntry>)>,
}

impl WhatsAppChannel {
    /// A channel with `settings`, publishing on the parts' hub; files go under its
    /// workspace, its inbox under its state directory, pairing is its pairing.
    pub fn new(settings: WhatsAppSettings, parts: &ChannelParts) -> Result<Self, CoreError> {
        let graph = Arc::new(Graph::new(&settings)?);
        let gate = Gate::new(
            CHANNEL_NAME,
            AllowList::new(&settings.allow_from),
            parts.pairing.clone(),
        );
        let admit = Arc::new(Admit::new(
            IntakeParts {
                channel: CHANNEL_NAME,
                platform: "WhatsApp",
                hub: parts.hub.clone(),
                gate: Arc::new(gate),
                workspace: parts.workspace.clone(),
                max_attachment_bytes: settings.max_attachment_bytes,
                cap_key: "channels.whatsapp.max_attachment_bytes",
            },
            Arc::new(Files {
                graph: graph.clone(),
            }),
        ));
        let inbox_path = parts.state_dir.join(CHANNEL_NAME).join("inbox.jsonl");
        // No edits on WhatsApp: an answer goes out whole, "typing…" shown meanwhile.
        let replies = Replies::new(graph.clone(), false, std::time::Duration::from_secs(1))
            .keeping(parts.kept(CHANNEL_NAME))
            .with_media(parts.media.clone());
        Ok(Self {
            inner: Arc::new(Inner {
                settings,
                graph,
                replies,
                admit: admit.clone(),
                intake: tokio::sync::Mutex::new(Intake::new(admit, inbox_path)),
                live: watch::Sender::new(None),
                seen: Remembered::new(SEEN_MESSAGES),
            }),
        })
    }

    /// The webhook's route.
    pub fn router(&self) -> Router {
        Router::new()
            .route(WEBHOOK_PATH, get(verify).post(notified))
            .layer(DefaultBodyLimit::max(MAX_NOTIFICATION_BYTES))
            .with_state(self.inner.clone())
    }
}

impl Inner {
    /// The running channel's intake, waited for a while if it is not running yet.
    async fn live(&self) -> Option<Live> {
        let mut live = self.live.subscribe();
        let running = tokio::time::timeout(LIVE_WAIT, live.wait_for(Option::is_some)).await;
        match running {
            Ok(Ok(live)) => live.clone(),
            _ => None,
        }
    }

    fn set_live(&self, live: Option<Live>) {
        self.live.send_replace(live);
    }

    /// Takes in one message of a notification: `Err` if the webhook must answer 503.
    async fn take(&self, live: &Live, incoming: Incoming, at: u64) -> Result<(), InboxError> {
        let arrival = match incoming {
            Incoming::Ignore(why) => {
                tracing::debug!(why, "WhatsApp message not for the agent");
                return Ok(());
            }
            Incoming::Message(arrival) => *arrival,
        };
        // The latest message of the chat opens its window and is what "typing…" marks read.
        let newer = self
            .graph
            .last_seen
            .get(&arrival.chat)
            .is_none_or(|(_, seen)| seen <= at);
        if newer {
            self.graph
                .last_seen
                .note(arrival.chat.clone(), (arrival.message.clone(), at));
        }
        let id = arrival.message.clone();
        // Noted as it is looked up, so a repeat that comes while this one is being taken in
        // is skipped too; forgotten if this one is not taken, so Meta's next try is not.
        if !self.seen.note_new(id.clone(), ()) {
            tracing::debug!(message = %id, "WhatsApp: a message sent again was skipped");
            return Ok(());
        }
        let taken = async {
            let entry = keep(&live.inbox, &arrival, "WhatsApp").await?;
            live.queue
                .send((arrival, entry))
                .await
                .map_err(|_| InboxError::Full)
        }
        .await;
        if taken.is_err() {
            self.seen.forget(&id);
        }
        taken
    }
}

#[async_trait]
impl Channel for WhatsAppChannel {
    fn name(&self) -> ChannelName {
        ChannelName::from(CHANNEL_NAME)
    }

    async fn check(&self) -> Result<Option<String>, CoreError> {
        Ok(Some(format!("number {}", self.inner.graph.whoami().await?)))
    }

    async fn run(&self, ctx: ChannelContext) -> Result<(), CoreError> {
        let me = self.inner.graph.whoami().await?;
        let mut intake = self.inner.intake.lock().await;
        let inbox = intake
            .open_inbox()
            .await
            .map_err(|err| channel_error(err.to_string()))?;
        let (queue, mut messages) = mpsc::channel(INTAKE_QUEUE);
        self.inner.set_live(Some(Live { inbox, queue }));
        tracing::info!(number = %me, path = WEBHOOK_PATH, "WhatsApp: taking the webhook's messages");
        loop {
            tokio::select! {
                () = ctx.intake.cancelled() => break,
                message = messages.recv() => {
                    let Some((arrival, entry)) = message else { break };
                    intake.admit(arrival, entry).await;
                }
            }
        }
        // What is queued and not admitted stays in the inbox for the next start.
        self.inner.set_live(None);
        ctx.shutdown.cancelled().await;
        Ok(())
    }

    async fn send(&self, message: OutboundMessage) -> Result<Sent, CoreError> {
        self.inner.replies.send(message).await
    }

    async fn may_notify(&self, chat: &ChatId) -> bool {
        self.inner.admit.may_notify(chat).await
    }
}

/// Meta's verify handshake's query.
#[derive(Deserialize)]
struct Handshake {
    #[serde(rename = "hub.mode")]
    mode: Option<String>,
    #[serde(rename = "hub.verify_token")]
    token: Option<String>,
    #[serde(rename = "hub.challenge")]
    challenge: Option<String>,
}

/// `GET /whatsapp/webhook`: Meta's verify handshake — the challenge echoed for the right
/// token, 403 for anything else.
async fn verify(State(inner): State<Arc<Inner>>, Query(handshake): Query<Handshake>) -> Response {
    let expected = inner.settings.verify_token.as_bytes();
    let presented = handshake.token.as_deref().unwrap_or_default().as_bytes();
    let subscribe = handshake.mode.as_deref() == Some("subscribe");
    match handshake.challenge {
        Some(challenge) if subscribe && bool::from(presented.ct_eq(expected)) => {
            tracing::info!("WhatsApp: the webhook was verified");
            challenge.into_response()
        }
        _ => {
            tracing::info!(
                "WhatsApp webhook: a handshake without the right verify token was refused"
            );
            StatusCode::FORBIDDEN.into_response()
        }
    }
}

/// `POST /whatsapp/webhook`: a signed notification, its messages taken in before it is
/// answered 200.
async fn notified(State(inner): State<Arc<Inner>>, headers: HeaderMap, body: Bytes) -> StatusCode {
    let signature = headers.get(SIGNATURE_HEADER).map(|value| value.as_bytes());
    if !signed(&inner.settings.app_secret, signature, &body) {
        tracing::info!("WhatsApp webhook: a request not signed with the app secret was refused");
        return StatusCode::UNAUTHORIZED;
    }
    let notification = match read(&body, &inner.settings.phone_number_id) {
        Ok(notification) => notification,
        Err(err) => {
            tracing::warn!(error = %err, "WhatsApp webhook: a notification that cannot be read");
            // Meta would send it again and again: take it as done.
            return StatusCode::OK;
        }
    };
    for (to, why) in &notification.failed {
        tracing::warn!(to = %to, why = %why, "WhatsApp: a message sent earlier was not delivered");
    }
    if notification.messages.is_empty() {
        return StatusCode::OK;
    }
    let Some(live) = inner.live().await else {
        return StatusCode::SERVICE_UNAVAILABLE;
    };
    for (incoming, at) in notification.messages {
        if let Err(err) = inner.take(&live, incoming, at).await {
            tracing::info!(error = %err, "WhatsApp webhook: a message not taken yet (Meta sends it again)");
            return StatusCode::SERVICE_UNAVAILABLE;
        }
    }
    StatusCode::OK
}
