//! `[channels.slack]`: the channel's section of the config file, checked and turned into the
//! [`SlackSettings`] the channel runs with.

use std::time::Duration;

use serde::Deserialize;
use switchboard_adapter::settings::{http_url, seconds, secret};
use switchboard_core::ConfigProblem;
use toml::Spanned;
use url::Url;

/// Which channel messages the agent answers (direct messages are always answered).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ChannelPolicy {
    /// Those that mention the bot, and everything in a thread it was mentioned in.
    Mention,
    /// All of them, in the channels the app was added to.
    All,
    /// None: direct messages only.
    Off,
}

/// `[channels.slack]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SlackSection {
    /// Run the channel.
    pub enabled: bool,
    /// The bot token (`xoxb-…`, OAuth & Permissions), usually `${SLACK_BOT_TOKEN}`.
    pub bot_token: Option<Spanned<String>>,
    /// The app-level token with `connections:write` (`xapp-…`, Basic Information), usually
    /// `${SLACK_APP_TOKEN}`: Socket Mode needs no public URL.
    pub app_token: Option<Spanned<String>>,
    /// Slack user ids (`U…`) that may talk to the agent; others get a pairing code.
    pub allow_from: Vec<String>,
    /// The Web API's root (tests change it).
    pub api_url: Spanned<String>,
    /// `mention` (default), `all` or `off`.
    pub channel_policy: ChannelPolicy,
    /// Stream replies by updating one message in place (`chat.update`).
    pub stream: bool,
    /// Seconds between two updates of a streamed reply.
    pub edit_interval_secs: Spanned<f64>,
    /// Files larger than this are not downloaded (the agent is told so).
    pub max_attachment_bytes: u64,
}

impl Default for SlackSection {
    fn default() -> Self {
        Self {
            enabled: false,
            bot_token: None,
            app_token: None,
            allow_from: Vec::new(),
            api_url: Spanned::new(0..0, "https://slack.com/api".into()),
            channel_policy: ChannelPolicy::Mention,
            stream: true,
            edit_interval_secs: Spanned::new(0..0, 1.0),
            max_attachment_bytes: 20 * 1024 * 1024,
        }
    }
}

/// What the channel runs with.
#[derive(Clone, Debug)]
pub struct SlackSettings {
    pub bot_token: String,
    pub app_token: String,
    pub allow_from: Vec<String>,
    pub api_url: Url,
    pub channel_policy: ChannelPolicy,
    pub stream: bool,
    pub edit_interval: Duration,
    pub max_attachment_bytes: u64,
}

impl SlackSection {
    /// The channel's settings: the tokens read from the environment.
    pub fn settings(&self) -> Result<SlackSettings, ConfigProblem> {
        let bot_token = token(&self.bot_token, "bot_token", "xoxb-", "${SLACK_BOT_TOKEN}")?;
        let app_token = token(&self.app_token, "app_token", "xapp-", "${SLACK_APP_TOKEN}")?;
        Ok(SlackSettings {
            bot_token,
            app_token,
            allow_from: self.allow_from.clone(),
            api_url: http_url(&self.api_url, "api_url")?,
            channel_policy: self.channel_policy,
            stream: self.stream,
            edit_interval: seconds(&self.edit_interval_secs, "edit_interval_secs", 0.2)?,
            max_attachment_bytes: self.max_attachment_bytes,
        })
    }
}

/// A token that must start with `prefix`.
fn token(
    value: &Option<Spanned<String>>,
    key: &str,
    prefix: &str,
    example: &str,
) -> Result<String, ConfigProblem> {
    let token = secret(value.as_ref(), key, example)?;
    let token = token.trim().to_owned();
    if !token.starts_with(prefix) || token.len() < prefix.len() + 10 {
        return Err(ConfigProblem::new(
            value.as_ref().map(Spanned::span),
            key,
            format!("this does not look like a Slack {prefix}… token"),
        ));
    }
    Ok(token)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn section(text: &str) -> SlackSection {
        toml::from_str(text).unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn both_tokens_are_needed_and_checked() {
        let problem = section("enabled = true").settings().err();
        assert_eq!(problem.map(|p| p.key), Some("bot_token".into()));
        let swapped = section(
            "enabled = true\nbot_token = \"xapp-1-0123456789\"\napp_token = \"xoxb-0123456789\"",
        )
        .settings()
        .err();
        assert_eq!(swapped.map(|p| p.key), Some("bot_token".into()));
        let settings = section(
            "enabled = true\nbot_token = \"xoxb-0123456789\"\napp_token = \"xapp-1-0123456789\"",
        )
        .settings()
        .expect("settings");
        assert_eq!(settings.edit_interval, Duration::from_secs(1));
    }
}
