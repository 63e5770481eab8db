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

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use slack_morphism::prelude::*;
use switchboard_adapter::media::{self, Incoming as IncomingFile};
use switchboard_adapter::{
    AllowList, BuildError, BuiltChannel, ChannelParts, ChannelSection, Gate, HttpFacts, Inbox,
    InboxEntry, InboxError, PerChat, Remembered, Replies, Sender, Verdict, say,
};
use switchboard_core::{
    Bus, Channel, ChannelContext, ChannelName, ChatId, ConfigProblem, CoreError, InboundMessage,
    MessageId, OutboundMessage, Sent,
};
use tokio::sync::mpsc;

use crate::config::{ChannelPolicy, SlackSection, SlackSettings};
use crate::convert::{FileRef, Incoming, Received, incoming};
use crate::outbound::{CHANNEL_NAME, Client, HttpsConnector, Slack, mapped};

/// Messages waiting for intake; beyond, the socket's callback waits (and so does Slack).
const INTAKE_QUEUE: usize = 256;
/// Event ids remembered, to skip envelopes Slack sends again.
const SEEN_EVENTS: usize = 4096;
/// Chats remembered for the `message` tool.
const MAX_KNOWN_CHATS: usize = 10_000;
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

/// What the channel's intake task keeps across runs.
struct Intake {
    per_chat: PerChat,
    inbox: Option<Inbox>,
    inbox_path: PathBuf,
}

/// A message as the inbox keeps it.
#[derive(Serialize, Deserialize)]
struct Kept {
    received: Received,
}

/// Admitting a message: who may talk, its files, the hub.
struct Admit {
    hub: Arc<dyn Bus>,
    gate: Gate,
    chats: Remembered<String, Option<String>>,
    downloads: reqwest::Client,
    bot_token: String,
    api_host: Option<String>,
    workspace: PathBuf,
    max_attachment_bytes: u64,
}

/// What the socket's callback needs (slack-morphism's user state).
struct Dispatch {
    queue: mpsc::Sender<(Received, Option<InboxEntry>)>,
    inbox: Inbox,
    me: String,
    policy: ChannelPolicy,
    seen: Remembered<String, ()>,
}

impl SlackChannel {
    /// A channel with `settings`, publishing on the parts' hub; files go under its
    /// workspace, its inbox under its state directory, pairing is its pairing.
    pub fn new(settings: SlackSettings, parts: &ChannelParts) -> Result<Self, CoreError> {
        let hub = parts.hub.clone();
        let state_dir = parts.state_dir.as_path();
        let workspace = parts.workspace.as_path();
        let pairing = parts.pairing.clone();
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
        let admit = Arc::new(Admit {
            hub,
            gate: Gate::new(CHANNEL_NAME, AllowList::new(&settings.allow_from), pairing),
            chats: Remembered::new(MAX_KNOWN_CHATS),
            downloads,
            bot_token: settings.bot_token.clone(),
            api_host: settings.api_url.host_str().map(str::to_owned),
            workspace: workspace.to_path_buf(),
            max_attachment_bytes: settings.max_attachment_bytes,
        });
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
                admit,
                intake: tokio::sync::Mutex::new(Intake {
                    per_chat: PerChat::default(),
                    inbox: None,
                    inbox_path: state_dir.join(CHANNEL_NAME).join("inbox.jsonl"),
                }),
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
        let inbox = intake.open_inbox(&self.inner.admit).await?;
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
                    let Some((received, entry)) = message else { break };
                    intake.admit(&self.inner.admit, received, entry).await;
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
        let seen = self.inner.admit.chats.get(chat.as_str());
        match seen {
            None => false,
            Some(None) => true,
            Some(Some(person)) => self.inner.admit.gate.allows(&person, None).await,
        }
    }
}

impl Intake {
    /// Opens the inbox (once: a restarted run keeps it) and admits again what it holds from
    /// an earlier daemon, in order.
    async fn open_inbox(&mut self, admit: &Arc<Admit>) -> Result<Inbox, CoreError> {
        if let Some(inbox) = &self.inbox {
            return Ok(inbox.clone());
        }
        let (inbox, taken) = Inbox::opened(&self.inbox_path)
            .await
            .map_err(|err| channel_error(err.to_string()))?;
        if !taken.is_empty() {
            tracing::info!(
                messages = taken.len(),
                "Slack: taking up messages a previous run did not handle"
            );
        }
        for waiting in taken {
            match serde_json::from_value::<Kept>(waiting.body) {
                Ok(kept) => self.admit(admit, kept.received, Some(waiting.entry)).await,
                Err(err) => {
                    tracing::warn!(error = %err, "Slack: an inbox message that cannot be read was skipped");
                    waiting.entry.settle();
                }
            }
        }
        self.inbox = Some(inbox.clone());
        Ok(inbox)
    }

    /// Admits a message in order within its chat (beside other chats' when it has files).
    async fn admit(&mut self, admit: &Arc<Admit>, received: Received, entry: Option<InboxEntry>) {
        let chat = received.chat.clone();
        let quick = received.files.is_empty();
        let admit = admit.clone();
        let work = async move { admit.admit(received, entry).await };
        self.per_chat.run(&chat, quick, work).await;
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
        let received = match incoming(event, &self.me, self.policy) {
            Incoming::Ignore(why) => {
                tracing::debug!(event = %id, why, "Slack event not for the agent");
                return Ok(());
            }
            Incoming::Message(received) => *received,
        };
        let body = serde_json::to_value(Kept {
            received: received.clone(),
        })?;
        let entry = match self.inbox.keep(body).await {
            Ok(entry) => Some(entry),
            // Not acknowledged: Slack sends it again, once there is room.
            Err(err @ InboxError::Full) => return Err(Box::new(err)),
            Err(err) => {
                tracing::warn!(error = %err, "Slack: a message not kept in the inbox (it is handled, but not taken up again after a crash)");
                None
            }
        };
        if self.queue.send((received, entry)).await.is_err() {
            // The run ended: the inbox has it for the next.
            return Err("the Slack channel is stopping".into());
        }
        Ok(())
    }
}

impl Admit {
    async fn admit(&self, received: Received, entry: Option<InboxEntry>) {
        let verdict = self
            .gate
            .verdict(Sender {
                id: &received.sender,
                username: None,
                name: &received.sender,
                private: received.private,
            })
            .await;
        let chat = ChatId::from(received.chat.as_str());
        match verdict {
            Verdict::Allowed => return self.publish(received, entry).await,
            Verdict::Pair(text) => {
                tracing::info!(sender = %received.sender, "Slack: an unknown sender got a pairing code");
                let reply_to = Some(MessageId::from(received.message.as_str()));
                say(&self.hub, CHANNEL_NAME, &chat, reply_to, text).await;
            }
            Verdict::Ignore => {
                tracing::debug!(sender = %received.sender, %chat, "Slack: a message from a sender who may not talk");
            }
        }
        // Not for the agent: nothing to take up again.
        if let Some(entry) = entry {
            entry.settle();
        }
    }

    async fn publish(&self, received: Received, entry: Option<InboxEntry>) {
        let mut content = received.text.clone();
        let mut attachments = Vec::new();
        for file in &received.files {
            match self.save(&received, file).await {
                // Recordings in Slack are its audio clips: heard, and answered in voice.
                Ok(attachment) => {
                    let voice = attachment.is_audio();
                    attachments.push(switchboard_core::Attachment {
                        voice,
                        ..attachment
                    });
                }
                Err(why) => media::not_saved(&mut content, CHANNEL_NAME, &file.name, &why),
            }
        }
        let person = received.private.then(|| received.sender.clone());
        self.chats.note(received.chat.clone(), person);
        let mut message = InboundMessage::text(
            CHANNEL_NAME.into(),
            received.chat.as_str().into(),
            received.sender.as_str().into(),
            content,
        );
        message.id = Some(MessageId::from(received.message.as_str()));
        message.attachments = attachments;
        // Settled once its fate is known; one left unprocessed stays for the next start.
        message.ack = entry.map(InboxEntry::ack);
        if let Err(err) = self.hub.publish_inbound(message).await {
            tracing::info!(error = %err, "a Slack message was not taken");
        }
    }

    /// Saves one file, fetched with the bot token from Slack (or the configured API host).
    async fn save(
        &self,
        received: &Received,
        file: &FileRef,
    ) -> Result<switchboard_core::Attachment, String> {
        let incoming = IncomingFile {
            channel: CHANNEL_NAME,
            chat: &received.chat,
            message: &received.message,
            name: &file.name,
            mime: file.mime.as_deref(),
            max_bytes: self.max_attachment_bytes,
            cap_key: "channels.slack.max_attachment_bytes",
        };
        if file.size > self.max_attachment_bytes {
            return Err(incoming.too_large());
        }
        let url = media::file_url(&file.url, &FILE_HOSTS, self.api_host.as_deref(), "Slack")?;
        let response = self
            .downloads
            .get(url)
            .bearer_auth(&self.bot_token)
            .send()
            .await
            .and_then(reqwest::Response::error_for_status)
            .map_err(|err| format!("it could not be fetched: {err}"))?;
        media::save(&self.workspace, incoming, response.bytes_stream()).await
    }
}

pub(crate) fn channel_error(message: String) -> CoreError {
    CoreError::Channel {
        channel: CHANNEL_NAME.into(),
        message,
    }
}
