//! [`DiscordChannel`]: the `Channel` impl — the gateway connection (kept, resumed, closed
//! cleanly on shutdown), its events taken in order by one intake task, and replies through
//! the shared [`Replies`] over REST.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use switchboard_adapter::{
    Admit, AllowList, BuildError, BuiltChannel, ChannelParts, ChannelSection, Gate, HttpFacts,
    Intake as Admission, IntakeParts, Replies,
};
use switchboard_core::{
    Channel, ChannelContext, ChannelName, ChatId, ConfigProblem, CoreError, OutboundMessage, Sent,
};
use tokio::sync::mpsc;

use crate::config::{DiscordSection, DiscordSettings};
use crate::convert::Scope;
use crate::gateway::{Ended, Gateway};
use crate::intake::{Commands, Files, Intake};
use crate::model;
use crate::rest::{Authors, CHANNEL_NAME, Discord, MAX_KNOWN_AUTHORS, Rest};

/// Events waiting for intake at most; beyond, the gateway waits (and Discord with it).
const EVENT_QUEUE: usize = 256;
/// The pause before connecting again after a connection dropped.
const RECONNECT_AFTER: Duration = Duration::from_secs(1);

/// The Discord channel. Cloning shares it.
#[derive(Clone)]
pub struct DiscordChannel {
    inner: Arc<Inner>,
}

struct Inner {
    gateway: Gateway,
    replies: Replies<Discord>,
    admit: Arc<Admit>,
    /// Taken by `run` (one at a time, under the supervisor).
    intake: tokio::sync::Mutex<Intake>,
}

/// The intents the channel asks for: server and direct messages, with their text.
pub fn intents() -> u64 {
    model::GUILD_MESSAGES | model::DIRECT_MESSAGES | model::MESSAGE_CONTENT
}

impl ChannelSection for DiscordSection {
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
        crate::rest::MEDIA
    }

    fn build(&self, parts: &ChannelParts) -> Result<BuiltChannel, BuildError> {
        let channel = DiscordChannel::new(self.settings()?, parts)?;
        Ok(BuiltChannel::new(Arc::new(channel)))
    }
}

impl DiscordChannel {
    /// A channel with `settings`, publishing on the parts' hub; files go under its
    /// workspace, its inbox under its state directory, where its session may be resumed in
    /// its state, pairing is its pairing.
    pub fn new(settings: DiscordSettings, parts: &ChannelParts) -> Result<Self, CoreError> {
        let rest = Rest::new(&settings.api_url, &settings.token)?;
        let authors = Arc::new(Authors::new(MAX_KNOWN_AUTHORS));
        let gate = Arc::new(Gate::new(
            CHANNEL_NAME,
            AllowList::new(&settings.allow_from),
            parts.pairing.clone(),
        ));
        let files = Files {
            rest: rest.clone(),
            authors: authors.clone(),
        };
        let admit = Arc::new(Admit::new(
            IntakeParts {
                channel: CHANNEL_NAME,
                platform: "Discord",
                hub: parts.hub.clone(),
                gate: gate.clone(),
                workspace: parts.workspace.clone(),
                max_attachment_bytes: settings.max_attachment_bytes,
                cap_key: "channels.discord.max_attachment_bytes",
            },
            Arc::new(files),
        ));
        let inbox_path = parts.state_dir.join(CHANNEL_NAME).join("inbox.jsonl");
        let intake = Intake {
            admission: Admission::new(admit.clone(), inbox_path),
            commands: Arc::new(Commands {
                rest: rest.clone(),
                hub: parts.hub.clone(),
                gate,
            }),
            scope: Scope {
                me: 0,
                policy: Some(settings.guild_policy),
                guilds: settings.guilds.clone(),
                channels: settings.channels.clone(),
            },
            slash_commands: settings.slash_commands,
        };
        let surface = Discord {
            rest: rest.clone(),
            authors,
        };
        Ok(Self {
            inner: Arc::new(Inner {
                gateway: Gateway::new(rest, settings.token.clone(), intents(), parts.state.clone()),
                replies: Replies::new(Arc::new(surface), settings.stream, settings.edit_interval)
                    .keeping(parts.kept(CHANNEL_NAME))
                    .with_media(parts.media.clone()),
                admit,
                intake: tokio::sync::Mutex::new(intake),
            }),
        })
    }
}

#[async_trait]
impl Channel for DiscordChannel {
    fn name(&self) -> ChannelName {
        ChannelName::from(CHANNEL_NAME)
    }

    async fn check(&self) -> Result<Option<String>, CoreError> {
        let me = self.inner.gateway.whoami().await?;
        Ok(Some(format!("bot {me}")))
    }

    async fn run(&self, ctx: ChannelContext) -> Result<(), CoreError> {
        let (events, mut queue) = mpsc::channel(EVENT_QUEUE);
        let mut intake = self.inner.intake.lock().await;
        // What a previous run took in but did not see handled goes first.
        intake
            .admission
            .open_inbox()
            .await
            .map_err(|err| crate::rest::channel_error(err.to_string()))?;
        let take = async {
            while let Some(event) = queue.recv().await {
                intake.take(event).await;
            }
        };
        let connect = async move {
            let announced = std::sync::atomic::AtomicBool::new(false);
            let live = || {
                if !announced.swap(true, std::sync::atomic::Ordering::Relaxed) {
                    tracing::info!("Discord: connected");
                }
            };
            loop {
                match self
                    .inner
                    .gateway
                    .connect(&events, &ctx.intake, &live)
                    .await?
                {
                    Ended::Stopped => return Ok::<(), CoreError>(()),
                    Ended::Reconnect => {
                        tokio::select! {
                            () = ctx.intake.cancelled() => return Ok(()),
                            () = tokio::time::sleep(RECONNECT_AFTER.mul_f64(0.5 + fastrand::f64())) => {}
                        }
                    }
                }
            }
        };
        let (connected, ()) = tokio::join!(connect, take);
        connected?;
        // Intake stopped; replies still go out until the channel's end.
        ctx.shutdown.cancelled().await;
        Ok(())
    }

    async fn send(&self, message: OutboundMessage) -> Result<Sent, CoreError> {
        self.inner.replies.send(message).await
    }

    /// A direct message's person must still be allowed (on `allow_from` or approved); a
    /// server channel was let in by an allowed member (revoking them does not close it).
    /// A chat not seen since the daemon started is refused: it cannot be told apart.
    async fn may_notify(&self, chat: &ChatId) -> bool {
        self.inner.admit.may_notify(chat).await
    }
}
