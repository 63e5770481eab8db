//! [`SignalChannel`]: the `Channel` impl — signal-cli's event stream (`GET /api/v1/events`,
//! server-sent events) followed by one task, its messages taken in order, and replies
//! through the shared [`Replies`] over its JSON-RPC.
//!
//! Nothing received is lost: each message is taken into the channel's inbox (fsynced) before
//! its event's id is kept (in the state store, `signal.event`), and a stream that breaks —
//! signal-cli restarted, the connection dropped, the daemon killed — is followed again with
//! that id as `Last-Event-ID`, so signal-cli sends what came after it (of the 1,000 events it
//! keeps). An event sent again is a message the inbox or the session's journal already has:
//! answered once.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use eventsource_stream::Eventsource;
use futures::StreamExt;
use switchboard_adapter::{
    Admit, AllowList, BuildError, BuiltChannel, ChannelParts, ChannelSection, Gate, HttpFacts,
    Inbox, Incoming, Intake, IntakeParts, Replies, keep,
};
use switchboard_core::{
    Channel, ChannelContext, ChannelName, ChatId, ConfigProblem, CoreError, OutboundMessage, Sent,
    StateStore,
};

use crate::config::{SignalSection, SignalSettings};
use crate::convert::read;
use crate::events::{Cap, MAX_EVENT_BYTES};
use crate::rpc::{CHANNEL_NAME, Files, MEDIA, Rpc, channel_error, unavailable};

/// The key the last event taken in is kept under.
pub const EVENT_KEY: &str = "signal.event";
/// The pause before following the stream again after it broke.
const RECONNECT_AFTER: Duration = Duration::from_secs(1);

impl ChannelSection for SignalSection {
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
        let channel = SignalChannel::new(self.settings()?, parts)?;
        Ok(BuiltChannel::new(Arc::new(channel)))
    }
}

/// The Signal channel. Cloning shares it.
#[derive(Clone)]
pub struct SignalChannel {
    inner: Arc<Inner>,
}

struct Inner {
    settings: SignalSettings,
    rpc: Arc<Rpc>,
    replies: Replies<Rpc>,
    admit: Arc<Admit>,
    state: Arc<dyn StateStore>,
    events: reqwest::Client,
    /// Taken by `run` (one at a time, under the supervisor).
    intake: tokio::sync::Mutex<Intake>,
}

impl SignalChannel {
    /// A channel with `settings`, publishing on the parts' hub; files go under its
    /// workspace, its inbox under its state directory, pairing is its pairing.
    pub fn new(settings: SignalSettings, parts: &ChannelParts) -> Result<Self, CoreError> {
        let rpc = Arc::new(Rpc::new(&settings)?);
        let gate = Gate::new(
            CHANNEL_NAME,
            AllowList::new(&settings.allow_from),
            parts.pairing.clone(),
        );
        let admit = Arc::new(Admit::new(
            IntakeParts {
                channel: CHANNEL_NAME,
                platform: "Signal",
                hub: parts.hub.clone(),
                gate: Arc::new(gate),
                workspace: parts.workspace.clone(),
                max_attachment_bytes: settings.max_attachment_bytes,
                cap_key: "channels.signal.max_attachment_bytes",
            },
            Arc::new(Files { rpc: rpc.clone() }),
        ));
        let inbox_path = parts.state_dir.join(CHANNEL_NAME).join("inbox.jsonl");
        let replies = Replies::new(rpc.clone(), false, Duration::from_secs(1))
            .keeping(parts.kept(CHANNEL_NAME))
            .with_media(parts.media.clone());
        let events = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(10))
            .tcp_keepalive(Duration::from_secs(30))
            .build()
            .map_err(|err| channel_error(format!("cannot start the HTTP client: {err}")))?;
        Ok(Self {
            inner: Arc::new(Inner {
                settings,
                rpc,
                replies,
                admit: admit.clone(),
                state: parts.state.clone(),
                events,
                intake: tokio::sync::Mutex::new(Intake::new(admit, inbox_path)),
            }),
        })
    }
}

impl Inner {
    /// The id of the last event taken in, kept by an earlier run.
    async fn kept_event(&self) -> Option<String> {
        match self.state.get(EVENT_KEY).await {
            Ok(Some(stored)) => String::from_utf8(stored.bytes)
                .ok()
                .filter(|id| !id.is_empty()),
            Ok(None) => None,
            Err(err) => {
                tracing::warn!(error = %err, "Signal: the kept event id could not be read; following from signal-cli's newest");
                None
            }
        }
    }

    /// Follows the event stream from after `last` until it ends or breaks.
    async fn follow(
        &self,
        intake: &mut Intake,
        inbox: &Inbox,
        me: &str,
        last: &mut Option<String>,
    ) -> Result<(), CoreError> {
        let url = self
            .settings
            .url
            .join("api/v1/events")
            .map_err(|err| channel_error(format!("channels.signal.url: {err}")))?;
        let mut request = self.events.get(url).header("accept", "text/event-stream");
        if let Some(last) = last.as_deref() {
            request = request.header("last-event-id", last);
        }
        let response = request
            .send()
            .await
            .and_then(reqwest::Response::error_for_status)
            .map_err(|err| {
                unavailable(format!(
                    "signal-cli's events: {}",
                    switchboard_core::error_chain(&err)
                ))
            })?;
        tracing::info!(account = me, "Signal: following signal-cli's events");
        let mut cap = Cap::new(MAX_EVENT_BYTES);
        let mut events = response
            .bytes_stream()
            .map(move |chunk| {
                chunk.map(|chunk| {
                    let cut = cap.cut;
                    let passed = cap.pass(&chunk);
                    if cap.cut > cut {
                        tracing::warn!(
                            max = MAX_EVENT_BYTES,
                            "Signal: an event over the cap was cut and its message skipped"
                        );
                    }
                    axum::body::Bytes::from(passed)
                })
            })
            .eventsource();
        while let Some(event) = events.next().await {
            let event = event
                .map_err(|err| unavailable(format!("signal-cli's event stream broke: {err}")))?;
            if !event.data.is_empty() {
                self.take(intake, inbox, me, &event.data).await?;
            }
            if !event.id.is_empty() && last.as_deref() != Some(event.id.as_str()) {
                if let Err(err) = self
                    .state
                    .put(EVENT_KEY, event.id.clone().into_bytes())
                    .await
                {
                    tracing::warn!(error = %err, "Signal: the last event id could not be kept (a restart gets it again; the journal answers it once)");
                }
                *last = Some(event.id);
            }
        }
        Err(unavailable("signal-cli ended its event stream".into()))
    }

    /// Takes in one event's message: into the inbox, then admitted in order.
    async fn take(
        &self,
        intake: &mut Intake,
        inbox: &Inbox,
        me: &str,
        data: &str,
    ) -> Result<(), CoreError> {
        let arrival = match read(data, Some(me), self.settings.groups) {
            Ok(Incoming::Message(arrival)) => *arrival,
            Ok(Incoming::Ignore(why)) => {
                tracing::debug!(why, "Signal event not for the agent");
                return Ok(());
            }
            Err(err) => {
                tracing::warn!(error = %err, "Signal: an event that cannot be read was skipped");
                return Ok(());
            }
        };
        if let Ok(timestamp) = arrival.message.parse() {
            self.rpc
                .latest
                .note(arrival.chat.clone(), (arrival.sender.clone(), timestamp));
        }
        self.rpc
            .authors
            .note(arrival.message.clone(), arrival.sender.clone());
        // A full inbox: not taken now; the stream is followed again from before it.
        let entry = keep(inbox, &arrival, "Signal")
            .await
            .map_err(|err| unavailable(format!("a message could not be taken in yet: {err}")))?;
        intake.admit(arrival, entry).await;
        Ok(())
    }
}

#[async_trait]
impl Channel for SignalChannel {
    fn name(&self) -> ChannelName {
        ChannelName::from(CHANNEL_NAME)
    }

    async fn check(&self) -> Result<Option<String>, CoreError> {
        Ok(Some(format!("account {}", self.inner.rpc.whoami().await?)))
    }

    async fn run(&self, ctx: ChannelContext) -> Result<(), CoreError> {
        let inner = &self.inner;
        let me = inner.rpc.whoami().await?;
        let mut intake = inner.intake.lock().await;
        let inbox = intake
            .open_inbox()
            .await
            .map_err(|err| channel_error(err.to_string()))?;
        let mut last = inner.kept_event().await;
        loop {
            tokio::select! {
                () = ctx.intake.cancelled() => break,
                ended = inner.follow(&mut intake, &inbox, &me, &mut last) => {
                    if let Err(err) = ended {
                        tracing::info!(error = %err, "Signal: following the events again");
                    }
                    tokio::select! {
                        () = ctx.intake.cancelled() => break,
                        () = tokio::time::sleep(RECONNECT_AFTER) => {}
                    }
                }
            }
        }
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
