//! [`SlackChannel`]: Slack over Socket Mode, with slack-morphism's listener and Web API
//! client.
//!
//! One socket (`max_connections_count = 1`), whose envelopes slack-morphism hands to the
//! push callback one at a time, in order, and acknowledges when it returns. The callback
//! takes a message for the agent into the channel's [`Inbox`] — fsynced — before it returns,
//! so an envelope is acknowledged only once its message is durably taken in; one the inbox
//! cannot take (full) is not acknowledged, and Slack sends it again. Envelopes Slack sends
//! again (unacknowledged in time) are known by their event id and skipped. Messages go to
//! one intake task over a bounded queue, in order: the [`Gate`] (a pairing code in a DM for
//! strangers, silence in channels), files fetched from Slack with the bot token, the hub.
//! A `disconnect` from Slack (every few hours) makes slack-morphism reconnect.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use futures::TryStreamExt;
use slack_morphism::prelude::*;
use switchboard_adapter::media;
use switchboard_adapter::{
    Admit, AllowList, Arrival, BuildError, BuiltChannel, ChannelParts, ChannelSection, Chunks,
    Fetch, FileRef, Gate, HttpFacts, Inbox, InboxEntry, InboxError, Incoming, Intake, IntakeParts,
    Remembered, Replies, keep,
};
use switchboard_core::{
    Channel, ChannelContext, ChannelName, ChatId, ConfigProblem, CoreError, OutboundMessage, Sent,
};
use tokio::sync::mpsc;

use crate::config::{ChannelPolicy, SlackSection, SlackSettings};
use crate::convert::incoming;
use crate::outbound::{CHANNEL_NAME, Client, HttpsConnector, Slack, mapped};

/// Messages waiting for intake; beyond, the socket's callback waits (and so does Slack).
const INTAKE_QUEUE: usize = 256;
/// Event ids remembered, to skip envelopes Slack sends again.
const SEEN_EVENTS: usize = 4096;
/// How long a file download may take.
const DOWNLOAD_TIMEOUT: Duration = Duration::from_secs(120);
/// Hosts files are fetched from (besides the API's own, for tests and proxies).
const FILE_HOSTS: [&str; 1] = ["files.slack.com"];

impl ChannelSection for SlackSection {
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
        crate::outbound::MEDIA
    }

    fn build(&self, parts: &ChannelParts) -> Result<BuiltChannel, BuildError> {
        let channel = SlackChannel::new(self.settings()?, parts)?;
        Ok(BuiltChannel::new(Arc::new(channel)))
    }
}

/// The Slack channel.
#[derive(Clone)]
pub struct SlackChannel {
    inner: Arc<Inner>,
}

struct Inner {
    settings: SlackSettings,
    client: Arc<Client>,
    bot: SlackApiToken,
    app: SlackApiToken,
    replies: Replies<Slack>,
    admit: Arc<Admit>,
    intake: tokio::sync::Mutex<Intake>,
}

/// Files fetched from Slack with the bot token.
struct Files {
    downloads: reqwest::Client,
    bot_token: String,
    api_host: Option<String>,
}

/// What the socket's callback needs (slack-morphism's user state).
struct Dispatch {
    queue: mpsc::Sender<(Arrival, Option<InboxEntry>)>,
    inbox: Inbox,
    me: String,
    policy: ChannelPolicy,
    seen: Remembered<String, ()>,
}

impl SlackChannel {
    /// A channel with `settings`, publishing on the parts' hub; files go under its
    /// workspace, its inbox under its state directory, pairing is its pairing.
    pub fn new(settings: SlackSettings, parts: &ChannelParts) -> Result<Self, CoreError> {
        let https = hyper_rustls::HttpsConnectorBuilder::new()
            .with_webpki_roots()
            .https_or_http()
            .enable_http1()
            .enable_http2()
            .build();
        let api = settings.api_url.as_str().trim_end_matches('/');
        let connector: SlackClientHyperConnector<HttpsConnector> =
            SlackClientHyperConnector::with_connector(https).with_slack_api_url(api);
        let client = Arc::new(SlackClient::new(connector));
        let bot = SlackApiToken::new(SlackApiTokenValue(settings.bot_token.clone()));
        let app = SlackApiToken::new(SlackApiTokenValue(settings.app_token.clone()));
        let downloads = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(10))
            .timeout(DOWNLOAD_TIMEOUT)
            .build()
            .map_err(|err| channel_error(format!("cannot start the HTTP client: {err}")))?;
        let files = Files {
            downloads,
            bot_token: settings.bot_token.clone(),
            api_host: settings.api_url.host_str().map(str::to_owned),
        };
        let gate = Gate::new(
            CHANNEL_NAME,
            AllowList::new(&settings.allow_from),
            parts.pairing.clone(),
        );
        let admit = Arc::new(Admit::new(
            IntakeParts {
                channel: CHANNEL_NAME,
                platform: "Slack",
                hub: parts.hub.clone(),
                gate: Arc::new(gate),
                workspace: parts.workspace.clone(),
                max_attachment_bytes: settings.max_attachment_bytes,
                cap_key: "channels.slack.max_attachment_bytes",
            },
            Arc::new(files),
        ));
        let inbox_path = parts.state_dir.join(CHANNEL_NAME).join("inbox.jsonl");
        let surface = Slack {
            client: client.clone(),
            token: bot.clone(),
        };
        Ok(Self {
            inner: Arc::new(Inner {
                replies: Replies::new(Arc::new(surface), settings.stream, settings.edit_interval)
                    .keeping(parts.kept(CHANNEL_NAME))
                    .with_media(parts.media.clone()),
                settings,
                client,
                bot,
                app,
                admit: admit.clone(),
                intake: tokio::sync::Mutex::new(Intake::new(admit, inbox_path)),
            }),
        })
    }

    /// The bot's user id, as Slack knows it by the token (`auth.test`).
    async fn whoami(&self) -> Result<SlackApiAuthTestResponse, CoreError> {
        let session = self.inner.client.open_session(&self.inner.bot);
        session.auth_test().await.map_err(|err| match mapped(err) {
            CoreError::Channel { message, .. } if message.contains("invalid_auth") => {
                channel_error(
                    "Slack refused the bot token (invalid_auth); check channels.slack.bot_token"
                        .into(),
                )
            }
            other => other,
        })
    }
}

#[async_trait]
impl Channel for SlackChannel {
    fn name(&self) -> ChannelName {
        ChannelName::from(CHANNEL_NAME)
    }

    async fn check(&self) -> Result<Option<String>, CoreError> {
        let me = self.whoami().await?;
        Ok(Some(format!(
            "bot {} in {}",
            me.user.unwrap_or_default(),
            me.team
        )))
    }

    async fn run(&self, ctx: ChannelContext) -> Result<(), CoreError> {
        let me = self.whoami().await?.user_id.0;
        let mut intake = self.inner.intake.lock().await;
        let inbox = intake
            .open_inbox()
            .await
            .map_err(|err| channel_error(err.to_string()))?;
        let (queue, mut messages) = mpsc::channel(INTAKE_QUEUE);
        let dispatch = Arc::new(Dispatch {
            queue,
            inbox,
            me,
            policy: self.inner.settings.channel_policy,
            seen: Remembered::new(SEEN_EVENTS),
        });
        let environment = Arc::new(
            SlackClientEventsListenerEnvironment::new(self.inner.client.clone())
                .with_error_handler(on_error)
                .with_user_state(dispatch),
        );
        let callbacks = SlackSocketModeListenerCallbacks::new().with_push_events(on_push);
        let config = SlackClientSocketModeConfig::new().with_max_connections_count(1);
        let listener = SlackClientSocketModeListener::new(&config, environment, callbacks);
        listener.listen_for(&self.inner.app).await.map_err(|err| {
            match mapped(err) {
                CoreError::Channel { message, .. } if message.contains("invalid_auth") => {
                    channel_error(
                        "Slack refused the app token (invalid_auth); check channels.slack.app_token \
                         (an xapp- token with connections:write, Socket Mode on)"
                            .into(),
                    )
                }
                other => other,
            }
        })?;
        listener.start().await;
        tracing::info!("Slack: connected");
        loop {
            tokio::select! {
                () = ctx.intake.cancelled() => break,
                message = messages.recv() => {
                    let Some((arrival, entry)) = message else { break };
                    intake.admit(arrival, entry).await;
                }
            }
        }
        listener.shutdown().await;
        // Intake stopped; replies still go out until the channel's end.
        ctx.shutdown.cancelled().await;
        Ok(())
    }

    async fn send(&self, message: OutboundMessage) -> Result<Sent, CoreError> {
        self.inner.replies.send(message).await
    }

    /// A direct message's person must still be allowed; a channel was let in by an allowed
    /// member. A chat not seen since the daemon started is refused.
    async fn may_notify(&self, chat: &ChatId) -> bool {
        self.inner.admit.may_notify(chat).await
    }
}

/// slack-morphism's push callback: an envelope is acknowledged when this returns `Ok`.
async fn on_push(
    event: SlackPushEventCallback,
    _client: Arc<Client>,
    states: SlackClientEventsUserState,
) -> UserCallbackResult<()> {
    let dispatch = states
        .read()
        .await
        .get_user_state::<Arc<Dispatch>>()
        .cloned();
    match dispatch {
        Some(dispatch) => dispatch.take(event).await,
        None => Ok(()),
    }
}

/// slack-morphism's error handler: a callback that failed leaves its envelope unacknowledged.
fn on_error(
    err: Box<dyn std::error::Error + Send + Sync>,
    _client: Arc<Client>,
    _states: SlackClientEventsUserState,
) -> HttpStatusCode {
    tracing::warn!(error = %err, "Slack: an event was not taken (Slack sends it again)");
    HttpStatusCode::SERVICE_UNAVAILABLE
}

impl Dispatch {
    async fn take(&self, event: SlackPushEventCallback) -> UserCallbackResult<()> {
        let id = event.event_id.0.clone();
        // Noted as it is looked up, so a retry that comes while this one is still being
        // taken in (Slack's `retry_attempt`, on another envelope) is skipped too; forgotten
        // again if this one is not taken, so Slack's next retry is.
        if !self.seen.note_new(id.clone(), ()) {
            tracing::debug!(event = %id, "Slack: an event sent again was skipped");
            return Ok(());
        }
        let taken = self.take_new(&id, &event).await;
        if taken.is_err() {
            self.seen.forget(&id);
        }
        taken
    }

    /// Takes in an event not seen before.
    async fn take_new(&self, id: &str, event: &SlackPushEventCallback) -> UserCallbackResult<()> {
        let arrival = match incoming(event, &self.me, self.policy) {
            Incoming::Ignore(why) => {
                tracing::debug!(event = %id, why, "Slack event not for the agent");
                return Ok(());
            }
            Incoming::Message(arrival) => *arrival,
        };
        // A full inbox is not acknowledged: Slack sends it again, once there is room.
        let entry = keep(&self.inbox, &arrival, "Slack")
            .await
            .map_err(|err: InboxError| Box::new(err))?;
        if self.queue.send((arrival, entry)).await.is_err() {
            // The run ended: the inbox has it for the next.
            return Err("the Slack channel is stopping".into());
        }
        Ok(())
    }
}

#[async_trait]
impl Fetch for Files {
    /// Fetched with the bot token from Slack (or the configured API host).
    async fn fetch(&self, file: &FileRef) -> Result<Chunks, String> {
        let url = media::file_url(&file.url, &FILE_HOSTS, self.api_host.as_deref(), "Slack")?;
        let response = self
            .downloads
            .get(url)
            .bearer_auth(&self.bot_token)
            .send()
            .await
            .and_then(reqwest::Response::error_for_status)
            .map_err(|err| format!("it could not be fetched: {err}"))?;
        Ok(Box::pin(
            response.bytes_stream().map_err(|err| err.to_string()),
        ))
    }
}

pub(crate) fn channel_error(message: String) -> CoreError {
    CoreError::Channel {
        channel: CHANNEL_NAME.into(),
        message,
    }
}
