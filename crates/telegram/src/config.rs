//! `[channels.telegram]`: the channel's section of the config file, checked and turned into
//! the [`TelegramSettings`] the channel runs with.

use std::time::Duration;

use serde::Deserialize;
use switchboard_adapter::settings::{http_url as url, seconds, secret};
use switchboard_core::ConfigProblem;
use toml::Spanned;

/// How updates arrive.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// The channel asks Telegram (`getUpdates`, long polling).
    Polling,
    /// Telegram posts updates to the daemon's HTTP listener (`/telegram/webhook`).
    Webhook,
}

/// Which group messages the agent answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum GroupPolicy {
    /// Those that mention the bot, reply to it, or are commands.
    Mention,
    /// All of them.
    All,
    /// None: private chats only.
    Off,
}

/// `[channels.telegram]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TelegramSection {
    /// Run the channel.
    pub enabled: bool,
    /// The bot token from @BotFather, usually `${TELEGRAM_BOT_TOKEN}`.
    pub token: Option<Spanned<String>>,
    /// User ids and @usernames that may talk to the agent; others get a pairing code.
    pub allow_from: Vec<String>,
    /// The Bot API's root (tests and self-hosted Bot API servers change it).
    pub api_url: Spanned<String>,
    /// `polling` or `webhook`.
    pub mode: Spanned<Mode>,
    /// The public URL Telegram posts updates to in webhook mode; it must reach this
    /// daemon's `/telegram/webhook`.
    pub webhook_url: Option<Spanned<String>>,
    /// The secret Telegram sends with every webhook request, usually
    /// `${TELEGRAM_WEBHOOK_SECRET}` (1–256 of `A-Z a-z 0-9 _ -`).
    pub webhook_secret: Option<Spanned<String>>,
    /// `mention` (default), `all` or `off`.
    pub group_policy: GroupPolicy,
    /// Stream replies by editing a draft message.
    pub stream: bool,
    /// Seconds between two edits of a draft.
    pub edit_interval_secs: Spanned<f64>,
    /// Seconds a `getUpdates` long poll waits for updates.
    pub poll_timeout_secs: Spanned<u32>,
    /// Seconds without a completed `getUpdates` after which polling restarts.
    pub watchdog_secs: Spanned<f64>,
    /// Attachments larger than this are not downloaded (the agent is told so).
    pub max_attachment_bytes: u64,
}

impl Default for TelegramSection {
    fn default() -> Self {
        Self {
            enabled: false,
            token: None,
            allow_from: Vec::new(),
            api_url: Spanned::new(0..0, "https://api.telegram.org".into()),
            mode: Spanned::new(0..0, Mode::Polling),
            webhook_url: None,
            webhook_secret: None,
            group_policy: GroupPolicy::Mention,
            stream: true,
            edit_interval_secs: Spanned::new(0..0, 1.0),
            poll_timeout_secs: Spanned::new(0..0, 25),
            watchdog_secs: Spanned::new(0..0, 120.0),
            max_attachment_bytes: 20 * 1024 * 1024,
        }
    }
}

/// What the channel runs with.
#[derive(Clone, Debug)]
pub struct TelegramSettings {
    /// The bot token.
    pub token: String,
    /// Who may talk.
    pub allow_from: Vec<String>,
    /// The Bot API's root.
    pub api_url: reqwest::Url,
    /// How updates arrive, with the webhook's public URL and secret.
    pub mode: Mode,
    /// In webhook mode.
    pub webhook_url: Option<reqwest::Url>,
    /// In webhook mode.
    pub webhook_secret: Option<String>,
    /// Which group messages are answered.
    pub group_policy: GroupPolicy,
    /// Stream replies into a draft.
    pub stream: bool,
    /// Between two draft edits.
    pub edit_interval: Duration,
    /// A long poll's wait.
    pub poll_timeout: Duration,
    /// Polling restarts after this long without a completed `getUpdates`.
    pub watchdog: Duration,
    /// Attachments larger than this are not downloaded.
    pub max_attachment_bytes: u64,
}

impl TelegramSection {
    /// The channel's settings: the token and secret read from the environment.
    pub fn settings(&self) -> Result<TelegramSettings, ConfigProblem> {
        let token = secret(self.token.as_ref(), "token", "${TELEGRAM_BOT_TOKEN}")?;
        if !token.contains(':') {
            let span = self.token.as_ref().map(Spanned::span);
            return Err(ConfigProblem::new(
                span,
                "token",
                "this does not look like a bot token (BotFather's look like 123456:ABC-DEF…)",
            ));
        }
        let api_url = url(&self.api_url, "api_url")?;
        let (webhook_url, webhook_secret) = match self.mode.get_ref() {
            Mode::Polling => (None, None),
            Mode::Webhook => {
                let Some(raw) = &self.webhook_url else {
                    return Err(ConfigProblem::new(
                        Some(self.mode.span()),
                        "webhook_url",
                        "webhook mode needs the public URL Telegram posts to, e.g. \
                         webhook_url = \"https://example.com/telegram/webhook\"",
                    ));
                };
                let parsed = url(raw, "webhook_url")?;
                let secret = secret(
                    self.webhook_secret.as_ref(),
                    "webhook_secret",
                    "${TELEGRAM_WEBHOOK_SECRET}",
                )?;
                let valid = (1..=256).contains(&secret.len())
                    && secret
                        .bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
                if !valid {
                    let span = self.webhook_secret.as_ref().map(Spanned::span);
                    return Err(ConfigProblem::new(
                        span,
                        "webhook_secret",
                        "must be 1 to 256 characters of A-Z, a-z, 0-9, _ and -",
                    ));
                }
                (Some(parsed), Some(secret))
            }
        };
        let edit_interval = seconds(&self.edit_interval_secs, "edit_interval_secs", 0.1)?;
        let watchdog = seconds(&self.watchdog_secs, "watchdog_secs", 1.0)?;
        let poll = *self.poll_timeout_secs.get_ref();
        if !(1..=50).contains(&poll) {
            return Err(ConfigProblem::new(
                Some(self.poll_timeout_secs.span()),
                "poll_timeout_secs",
                format!("must be from 1 to 50 seconds, got {poll}"),
            ));
        }
        let poll_timeout = Duration::from_secs(u64::from(poll));
        if watchdog <= poll_timeout {
            return Err(ConfigProblem::new(
                Some(self.watchdog_secs.span()),
                "watchdog_secs",
                format!("must be longer than poll_timeout_secs ({poll})"),
            ));
        }
        Ok(TelegramSettings {
            token,
            allow_from: self.allow_from.clone(),
            api_url,
            mode: *self.mode.get_ref(),
            webhook_url,
            webhook_secret,
            group_policy: self.group_policy,
            stream: self.stream,
            edit_interval,
            poll_timeout,
            watchdog,
            max_attachment_bytes: self.max_attachment_bytes,
        })
    }
}
