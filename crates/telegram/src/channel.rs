//! [`TelegramChannel`]: the `Channel` impl — start (`getMe`), then long polling with the
//! typed Bot API (not teloxide's dispatcher, which confirms updates before they are
//! handled), or a webhook on the daemon's HTTP listener; sending goes to `outbound`.
//!
//! Polling asks `getUpdates` with the [`Cursor`]'s offset, so an update is confirmed only
//! once the agent is done with it; the offset is kept in the state directory, so a restart
//! neither repeats nor loses updates. A poll that brings nothing new while updates are in
//! flight waits for one to settle before asking again (Telegram answers such polls at once).
//! A watchdog ends `run` when no poll completed for `watchdog_secs`, so the supervisor
//! restarts the channel (and `/healthz` shows it) rather than letting polling stall silently.

use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::Duration;

use async_trait::async_trait;
use axum::Router;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use subtle::ConstantTimeEq;
use switchboard_adapter::{
    AllowList, BuildError, BuiltChannel, ChannelParts, ChannelSection, Gate, HttpFacts, PerChat,
    Remembered, Replies,
};
use switchboard_core::{
    Channel, ChannelContext, ChannelName, ConfigProblem, CoreError, Fate, OutboundMessage, Sent,
    StateStore,
};
use teloxide::Bot;
use teloxide::payloads::{GetUpdatesSetters, SetWebhookSetters};
use teloxide::prelude::Requester;
use teloxide::types::{AllowedUpdate, Update};
use tokio::sync::{Notify, oneshot};
use tokio::time::Instant;

use crate::api::{self, CALL_TIMEOUT, CHANNEL_NAME};
use crate::config::{Mode, TelegramSection, TelegramSettings};
use crate::convert::Me;
use crate::cursor::Cursor;
use crate::intake::Intake;
use crate::outbound::Telegram;

/// The path Telegram posts updates to in webhook mode.
pub const WEBHOOK_PATH: &str = "/telegram/webhook";
/// The header carrying the webhook's secret.
const SECRET_HEADER: &str = "x-telegram-bot-api-secret-token";
/// How long a webhook request waits for its update to be handled before it answers 503
/// (Telegram sends it again later; the journal keeps that from answering twice).
const WEBHOOK_WAIT: Duration = Duration::from_secs(25);
/// The longest wait before polling again after a failed poll.
const MAX_BACKOFF: Duration = Duration::from_secs(30);

/// The Telegram channel. Cloning shares it.
#[derive(Clone)]
pub struct TelegramChannel {
    inner: Arc<Inner>,
}

struct Inner {
    settings: TelegramSettings,
    bot: Bot,
    intake: Intake,
    replies: Replies<Telegram>,
    /// The bot, once `getMe` answered (each start asks again).
    me: RwLock<Option<Me>>,
    /// Which updates may be confirmed. Held only to take or settle one, never across an
    /// await; settled from the tasks that handle the updates.
    cursor: Mutex<Cursor>,
    /// Woken when an update settles, so a poll loop waiting on one goes on.
    settled: Notify,
    /// Where the offset is kept ([`OFFSET_KEY`]).
    state: Arc<dyn StateStore>,
}

impl ChannelSection for TelegramSection {
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
        crate::api::MEDIA
    }

    fn build(&self, parts: &ChannelParts) -> Result<BuiltChannel, BuildError> {
        let channel = TelegramChannel::new(self.settings()?, parts)?;
        let router = channel.router();
        Ok(BuiltChannel {
            router,
            ..BuiltChannel::new(Arc::new(channel))
        })
    }
}

impl TelegramChannel {
    /// A channel with `settings`, publishing on the parts' hub; files go under its
    /// workspace, the offset in its state, pairing is its pairing.
    pub fn new(settings: TelegramSettings, parts: &ChannelParts) -> Result<Self, CoreError> {
        let hub = parts.hub.clone();
        let state = parts.state.clone();
        let workspace = parts.workspace.as_path();
        let pairing = parts.pairing.clone();
        let client = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(10))
            // Long enough for a long poll; other calls have their own timeout.
            .timeout(settings.poll_timeout + Duration::from_secs(20))
            .tcp_nodelay(true)
            .build()
            .map_err(|err| CoreError::Channel {
                channel: CHANNEL_NAME.into(),
                message: format!("cannot start the HTTP client: {err}"),
            })?;
        let bot =
            Bot::with_client(settings.token.clone(), client).set_api_url(settings.api_url.clone());
        Ok(Self {
            inner: Arc::new(Inner {
                intake: Intake {
                    bot: bot.clone(),
                    hub,
                    policy: settings.group_policy,
                    gate: Gate::new(CHANNEL_NAME, AllowList::new(&settings.allow_from), pairing),
                    workspace: workspace.to_path_buf(),
                    max_attachment_bytes: settings.max_attachment_bytes,
                    usernames: Remembered::new(crate::intake::MAX_KNOWN_USERNAMES),
                },
                replies: Replies::new(
                    Arc::new(Telegram { bot: bot.clone() }),
                    settings.stream,
                    settings.edit_interval,
                )
                .keeping(parts.kept(CHANNEL_NAME))
                .with_media(parts.media.clone()),
                bot,
                settings,
                me: RwLock::new(None),
                cursor: Mutex::new(Cursor::new(None, std::time::Instant::now())),
                settled: Notify::new(),
                state,
            }),
        })
    }

    /// The webhook route, in webhook mode.
    pub fn router(&self) -> Option<Router> {
        (self.inner.settings.mode == Mode::Webhook).then(|| {
            Router::new()
                .route(WEBHOOK_PATH, post(webhook))
                .layer(DefaultBodyLimit::max(1024 * 1024))
                .with_state(self.inner.clone())
        })
    }
}

impl Inner {
    fn me(&self) -> Option<Me> {
        self.me
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// A Bot API failure naming where the API was called (`channels.telegram.api_url`): a
    /// wrong address is the usual cause of one that keeps failing.
    fn at_api(&self, err: CoreError) -> CoreError {
        match err {
            CoreError::Unavailable { channel, message } => CoreError::Unavailable {
                channel,
                message: format!(
                    "{message} (channels.telegram.api_url = {})",
                    switchboard_core::without_userinfo(self.settings.api_url.as_str())
                ),
            },
            other => other,
        }
    }

    fn cursor(&self) -> std::sync::MutexGuard<'_, Cursor> {
        self.cursor.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Asks Telegram who the bot is (every start: a wrong token fails here, clearly).
    async fn start(&self) -> Result<Me, CoreError> {
        let me = tokio::time::timeout(CALL_TIMEOUT, self.bot.get_me().into_future())
            .await
            .map_err(|_| CoreError::Unavailable {
                channel: CHANNEL_NAME.into(),
                message: "getMe did not answer in time".into(),
            })
            .map_err(|err| self.at_api(err))?
            .map_err(|err| self.at_api(api::core_error(err)))?;
        let me = Me {
            id: me.user.id.0,
            username: me.user.username.clone().unwrap_or_default(),
        };
        *self.me.write().unwrap_or_else(PoisonError::into_inner) = Some(me.clone());
        tracing::info!(bot = %me.username, "Telegram: connected");
        self.offer_commands().await;
        Ok(me)
    }

    /// Sets the bot's command menu to the chat commands ([`COMMANDS`]); a failure costs only
    /// the menu (typed commands work), so it is logged.
    ///
    /// [`COMMANDS`]: switchboard_core::COMMANDS
    async fn offer_commands(&self) {
        let commands = switchboard_core::COMMANDS
            .iter()
            .map(|spec| teloxide::types::BotCommand::new(spec.name, spec.summary));
        let call = self.bot.set_my_commands(commands).into_future();
        match tokio::time::timeout(CALL_TIMEOUT, call).await {
            Ok(Ok(_)) => tracing::debug!("Telegram: the command menu is set"),
            Ok(Err(err)) => {
                tracing::warn!(error = %err, "Telegram: the command menu was not set (typed commands still work)");
            }
            Err(_) => tracing::warn!("Telegram: setMyCommands did not answer in time"),
        }
    }

    async fn poll(self: &Arc<Self>, ctx: &ChannelContext, me: &Me) -> Result<(), CoreError> {
        let call = tokio::time::timeout(CALL_TIMEOUT, self.bot.delete_webhook().into_future());
        call.await
            .map_err(|_| CoreError::Unavailable {
                channel: CHANNEL_NAME.into(),
                message: "deleteWebhook did not answer in time".into(),
            })
            .map_err(|err| self.at_api(err))?
            .map_err(|err| self.at_api(api::core_error(err)))?;
        // Where the last poller (this process before a restart, or another gateway of the
        // cluster before it died) left off.
        let (base, since) = saved_offset(&*self.state).await;
        self.cursor().catch_up(base, since);
        let poll = self.settings.poll_timeout;
        let mut last_ok = Instant::now();
        let mut backoff = Duration::from_millis(500);
        let mut saved = self.cursor().confirmed();
        let mut per_chat = PerChat::default();
        let mut failing = false;
        loop {
            if last_ok.elapsed() > self.settings.watchdog {
                return Err(CoreError::Unavailable {
                    channel: CHANNEL_NAME.into(),
                    message: format!(
                        "no getUpdates completed for {:?}; polling restarts",
                        self.settings.watchdog
                    ),
                });
            }
            let mut request = self
                .bot
                .get_updates()
                .timeout(u32::try_from(poll.as_secs()).unwrap_or(25))
                .allowed_updates([AllowedUpdate::Message]);
            if let Some(offset) = self.cursor().offset(std::time::Instant::now()) {
                request = request.offset(i32::try_from(offset).unwrap_or(i32::MAX));
            }
            let answer = tokio::select! {
                () = ctx.intake.cancelled() => return Ok(()),
                answer = tokio::time::timeout(poll + Duration::from_secs(15), request.into_future()) => answer,
            };
            let updates = match answer {
                Ok(Ok(updates)) => updates,
                Ok(Err(err)) => {
                    let err = self.at_api(api::core_error(err));
                    let wait = match &err {
                        CoreError::RateLimited {
                            retry_after: Some(wait),
                        } => *wait,
                        _ => backoff,
                    };
                    tracing::warn!(error = %err, wait_ms = wait.as_millis() as u64, "getUpdates failed");
                    if err.is_transient() && !matches!(err, CoreError::RateLimited { .. }) {
                        ctx.trouble.failing(&err);
                        failing = true;
                    }
                    backoff = (backoff * 2).min(MAX_BACKOFF);
                    tokio::select! {
                        () = ctx.intake.cancelled() => return Ok(()),
                        () = tokio::time::sleep(wait) => continue,
                    }
                }
                Err(_) => {
                    tracing::warn!("getUpdates did not answer in time");
                    ctx.trouble.failing(self.at_api(CoreError::Unavailable {
                        channel: CHANNEL_NAME.into(),
                        message: "getUpdates did not answer in time".into(),
                    }));
                    failing = true;
                    continue;
                }
            };
            if std::mem::take(&mut failing) {
                tracing::info!("Telegram: getUpdates works again");
                ctx.trouble.recovered();
            }
            last_ok = Instant::now();
            backoff = Duration::from_millis(500);
            let new = self.take_in(&updates, me, &mut per_chat).await;
            let offset = self.cursor().confirmed();
            if offset != saved {
                self.save_offset(offset).await;
                saved = offset;
            }
            if new == 0 && !updates.is_empty() {
                // Only updates still in flight came back: wait for one to settle.
                tokio::select! {
                    () = ctx.intake.cancelled() => return Ok(()),
                    () = self.settled.notified() => {}
                    () = tokio::time::sleep(Duration::from_secs(1)) => {}
                }
            }
        }
    }

    /// Takes in the updates not taken before, each chat's in order (one with files beside
    /// other chats'); how many were new.
    async fn take_in(
        self: &Arc<Self>,
        updates: &[Update],
        me: &Me,
        per_chat: &mut PerChat,
    ) -> usize {
        let mut new = 0;
        for update in updates {
            let id = update.id.0;
            if !self.cursor().take(id, std::time::Instant::now()) {
                continue;
            }
            new += 1;
            let inner = self.clone();
            let settle = move |fate: Fate| inner.settle(id, fate);
            let Some(received) = self.intake.read(update, me) else {
                settle(Fate::Dropped);
                continue;
            };
            // A message with files is fetched beside other chats' messages.
            let chat = received.chat.clone();
            let quick = received.files.is_empty();
            let inner = self.clone();
            let work = async move { inner.intake.admit(received, settle).await };
            per_chat.run(&chat, quick, work).await;
        }
        new
    }

    fn settle(&self, id: u32, fate: Fate) {
        self.cursor().settle(id, fate);
        self.settled.notify_waiters();
    }

    /// Keeps the offset (atomically), so a restart starts where this left off.
    async fn save_offset(&self, offset: Option<u32>) {
        let Some(offset) = offset else { return };
        let written = self
            .state
            .put(OFFSET_KEY, offset.to_string().into_bytes())
            .await;
        if let Err(err) = written {
            tracing::warn!(error = %err,
                "could not keep the Telegram offset (updates may be fetched again after a restart; none is answered twice)");
        }
    }

    async fn set_webhook(&self) -> Result<(), CoreError> {
        let (Some(url), Some(secret)) = (&self.settings.webhook_url, &self.settings.webhook_secret)
        else {
            return Ok(());
        };
        let request = self
            .bot
            .set_webhook(url.clone())
            .secret_token(secret.clone())
            .allowed_updates([AllowedUpdate::Message])
            .max_connections(40);
        tokio::time::timeout(CALL_TIMEOUT, request.into_future())
            .await
            .map_err(|_| CoreError::Unavailable {
                channel: CHANNEL_NAME.into(),
                message: "setWebhook did not answer in time".into(),
            })?
            .map_err(api::core_error)?;
        tracing::info!(%url, "Telegram: webhook set");
        Ok(())
    }
}

#[async_trait]
impl Channel for TelegramChannel {
    fn name(&self) -> ChannelName {
        ChannelName::from(CHANNEL_NAME)
    }

    async fn check(&self) -> Result<Option<String>, CoreError> {
        let me = self.inner.start().await?;
        Ok(Some(format!("bot @{}", me.username)))
    }

    async fn run(&self, ctx: ChannelContext) -> Result<(), CoreError> {
        let me = tokio::select! {
            () = ctx.intake.cancelled() => return wait(&ctx).await,
            me = self.inner.start() => me?,
        };
        match self.inner.settings.mode {
            Mode::Polling => self.inner.poll(&ctx, &me).await?,
            Mode::Webhook => self.inner.set_webhook().await?,
        }
        wait(&ctx).await
    }

    async fn send(&self, message: OutboundMessage) -> Result<Sent, CoreError> {
        self.inner.replies.send(message).await
    }

    /// A private chat's id is its person's: they must still be allowed (on `allow_from`
    /// by id or by the username they wrote with, or approved). A group was let in by an allowed member; revoking that member
    /// does not close it to the agent (remove the bot from the group).
    async fn may_notify(&self, chat: &switchboard_core::ChatId) -> bool {
        let id = chat.as_str();
        if id.starts_with('-') {
            return true;
        }
        self.inner.intake.allows(id).await
    }
}

/// The offset a previous run kept, and when it was kept: the [`Cursor`] stops trusting it
/// after [`RENUMBERED_AFTER`](crate::cursor::RENUMBERED_AFTER) without updates (Telegram renumbers after a week). Without it,
/// the first poll gets every unconfirmed update, and the sessions' journals ignore the ones
/// already answered.
async fn saved_offset(state: &dyn StateStore) -> (Option<u32>, std::time::Instant) {
    let now = std::time::Instant::now();
    let stored = match state.get(OFFSET_KEY).await {
        Ok(Some(stored)) => stored,
        Ok(None) => return (None, now),
        Err(err) => {
            tracing::warn!(error = %err, "the kept Telegram offset could not be read; polling from Telegram's oldest unconfirmed update");
            return (None, now);
        }
    };
    let age = stored.written.elapsed().unwrap_or_default();
    let offset = std::str::from_utf8(&stored.bytes)
        .ok()
        .and_then(|text| text.trim().parse().ok());
    match now.checked_sub(age) {
        Some(since) => (offset, since),
        None => (None, now),
    }
}

/// The key the offset is kept under (in one process, `<state_dir>/telegram.offset`).
pub const OFFSET_KEY: &str = "telegram.offset";

/// After intake stopped, waits for the channel's own end (outbound still goes out).
async fn wait(ctx: &ChannelContext) -> Result<(), CoreError> {
    ctx.shutdown.cancelled().await;
    Ok(())
}

/// `POST /telegram/webhook`: checks Telegram's secret, takes the update, and answers once
/// it was handled — or 503 after [`WEBHOOK_WAIT`], and Telegram sends it again.
async fn webhook(State(inner): State<Arc<Inner>>, headers: HeaderMap, body: Bytes) -> StatusCode {
    let expected = inner.settings.webhook_secret.as_deref().unwrap_or_default();
    let presented = headers
        .get(SECRET_HEADER)
        .map(|v| v.as_bytes())
        .unwrap_or_default();
    if expected.is_empty() || !bool::from(presented.ct_eq(expected.as_bytes())) {
        tracing::info!("Telegram webhook: a request without the right secret was refused");
        return StatusCode::UNAUTHORIZED;
    }
    let update: Update = match serde_json::from_slice(&body) {
        Ok(update) => update,
        Err(err) => {
            tracing::warn!(error = %err, "Telegram webhook: an update that cannot be read");
            // Telegram would send it again and again: take it as done.
            return StatusCode::OK;
        }
    };
    let Some(me) = inner.me() else {
        return StatusCode::SERVICE_UNAVAILABLE;
    };
    let (tx, rx) = oneshot::channel();
    inner
        .intake
        .take(&update, &me, move |fate| {
            let _ = tx.send(fate);
        })
        .await;
    match tokio::time::timeout(WEBHOOK_WAIT, rx).await {
        Ok(Ok(Fate::Handled | Fate::Dropped)) => StatusCode::OK,
        _ => StatusCode::SERVICE_UNAVAILABLE,
    }
}
