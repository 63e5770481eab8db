//! `[scheduler]`: scheduled work — whether it runs, the time zone cron expressions are read
//! in, and the limits of what a chat may schedule.

use std::time::Duration;

use serde::Deserialize;
use switchboard_agent::scheduler::{SchedulerConfig, zone};
use toml::Spanned;

use switchboard_core::{ChannelName, ChatId};

use crate::config::{Config, ConfigError, Source};

/// `[scheduler]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SchedulerSection {
    /// Whether jobs run (and the agent has its `cron` tool).
    pub enabled: bool,
    /// The IANA zone cron expressions and local times are read in; the system's when unset.
    pub timezone: Option<Spanned<String>>,
    /// How late a run may still start after the daemon was down (seconds).
    pub catch_up_secs: Spanned<u64>,
    /// Jobs one chat may have.
    pub max_jobs_per_chat: Spanned<usize>,
    /// The shortest time between two runs of a job (seconds).
    pub min_interval_secs: Spanned<u64>,
}

impl Default for SchedulerSection {
    fn default() -> Self {
        Self {
            enabled: true,
            timezone: None,
            catch_up_secs: Spanned::new(0..0, 3600),
            max_jobs_per_chat: Spanned::new(0..0, 50),
            min_interval_secs: Spanned::new(0..0, 60),
        }
    }
}

impl SchedulerSection {
    /// Checks the values; errors name `scheduler.<key>` at its line.
    pub(crate) fn validate(&self, source: &Source) -> Result<(), ConfigError> {
        if let Some(tz) = &self.timezone {
            zone(tz.get_ref()).map_err(|why| {
                source.error_at(Some(tz.span()), "scheduler.timezone".into(), why)
            })?;
        }
        if *self.min_interval_secs.get_ref() == 0 {
            return Err(source.error_at(
                Some(self.min_interval_secs.span()),
                "scheduler.min_interval_secs".into(),
                "must be at least 1".into(),
            ));
        }
        if *self.max_jobs_per_chat.get_ref() == 0 {
            return Err(source.error_at(
                Some(self.max_jobs_per_chat.span()),
                "scheduler.max_jobs_per_chat".into(),
                "must be at least 1 (to turn scheduling off, set enabled = false)".into(),
            ));
        }
        Ok(())
    }

    /// The scheduler's settings.
    pub fn settings(&self) -> SchedulerConfig {
        SchedulerConfig {
            timezone: self.timezone.as_ref().map(|tz| tz.get_ref().clone()),
            catch_up: Duration::from_secs(*self.catch_up_secs.get_ref()),
            max_jobs_per_chat: *self.max_jobs_per_chat.get_ref(),
            min_interval: Duration::from_secs(*self.min_interval_secs.get_ref()),
            ..SchedulerConfig::default()
        }
    }
}

/// The chat `text` names, `channel:chat_id` (`telegram:123456`), checked against the
/// channels the config enables.
pub fn chat_target(config: &Config, text: &str) -> Result<(ChannelName, ChatId), String> {
    let enabled: Vec<&str> = [
        ("websocket", config.channels.websocket.enabled),
        ("telegram", config.channels.telegram.enabled),
        ("discord", config.channels.discord.enabled),
    ]
    .into_iter()
    .filter_map(|(name, on)| on.then_some(name))
    .collect();
    let Some((channel, chat)) = text
        .split_once(':')
        .map(|(channel, chat)| (channel.trim(), chat.trim()))
        .filter(|(channel, chat)| !channel.is_empty() && !chat.is_empty())
    else {
        return Err(format!(
            "`{text}` is not a chat: write channel:chat_id, e.g. telegram:123456"
        ));
    };
    if !enabled.contains(&channel) {
        return Err(format!(
            "`{text}`: the config enables no channel `{channel}` (enabled: {})",
            if enabled.is_empty() {
                "none".to_owned()
            } else {
                enabled.join(", ")
            }
        ));
    }
    Ok((ChannelName::from(channel), ChatId::from(chat)))
}
