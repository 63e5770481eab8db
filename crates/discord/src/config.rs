//! `[channels.discord]`: the channel's section of the config file, checked and turned into
//! the [`DiscordSettings`] the channel runs with.

use std::time::Duration;

use serde::Deserialize;
use switchboard_adapter::settings::{http_url, seconds, secret};
use switchboard_core::ConfigProblem;
use toml::Spanned;

/// Which server (guild) messages the agent answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum GuildPolicy {
    /// Those that mention the bot, reply to it, or are commands.
    Mention,
    /// All of them (in the allowed channels).
    All,
    /// None: direct messages only.
    Off,
}

/// `[channels.discord]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct DiscordSection {
    /// Run the channel.
    pub enabled: bool,
    /// The bot token from the developer portal, usually `${DISCORD_BOT_TOKEN}`.
    pub token: Option<Spanned<String>>,
    /// User ids that may talk to the agent; others get a pairing code in a DM.
    pub allow_from: Vec<String>,
    /// Server ids the agent answers in (empty: any server it is in).
    pub guilds: Vec<String>,
    /// Channel (or thread) ids the agent answers in, in servers (empty: any).
    pub channels: Vec<String>,
    /// The REST API's root (tests change it); the gateway's address is asked of it.
    pub api_url: Spanned<String>,
    /// `mention` (default), `all` or `off`.
    pub guild_policy: GuildPolicy,
    /// Stream replies by editing one message in place.
    pub stream: bool,
    /// Seconds between two edits of a streamed reply.
    pub edit_interval_secs: Spanned<f64>,
    /// Register the chat commands (`/new`, `/stop`, `/status`, `/model`, …) as slash commands at start.
    pub slash_commands: bool,
    /// Attachments larger than this are not downloaded (the agent is told so).
    pub max_attachment_bytes: u64,
}

impl Default for DiscordSection {
    fn default() -> Self {
        Self {
            enabled: false,
            token: None,
            allow_from: Vec::new(),
            guilds: Vec::new(),
            channels: Vec::new(),
            api_url: Spanned::new(0..0, "https://discord.com".into()),
            guild_policy: GuildPolicy::Mention,
            stream: true,
            edit_interval_secs: Spanned::new(0..0, 1.0),
            slash_commands: true,
            max_attachment_bytes: 20 * 1024 * 1024,
        }
    }
}

/// What the channel runs with.
#[derive(Clone, Debug)]
pub struct DiscordSettings {
    /// The bot token.
    pub token: String,
    /// Who may talk.
    pub allow_from: Vec<String>,
    /// Servers answered in (empty: any).
    pub guilds: Vec<u64>,
    /// Server channels answered in (empty: any).
    pub channels: Vec<u64>,
    /// The REST API's root.
    pub api_url: url::Url,
    /// Which server messages are answered.
    pub guild_policy: GuildPolicy,
    /// Stream replies.
    pub stream: bool,
    /// Between two edits of a streamed reply.
    pub edit_interval: Duration,
    /// Register slash commands.
    pub slash_commands: bool,
    /// Attachments larger than this are not downloaded.
    pub max_attachment_bytes: u64,
}

impl DiscordSection {
    /// The channel's settings: the token read from the environment.
    pub fn settings(&self) -> Result<DiscordSettings, ConfigProblem> {
        let token = secret(self.token.as_ref(), "token", "${DISCORD_BOT_TOKEN}")?;
        let token = token.trim().trim_start_matches("Bot ").to_owned();
        if token.len() < 20 || token.contains(char::is_whitespace) {
            let span = self.token.as_ref().map(Spanned::span);
            return Err(ConfigProblem::new(
                span,
                "token",
                "this does not look like a bot token (the developer portal's Bot page, \"Reset Token\")",
            ));
        }
        Ok(DiscordSettings {
            token,
            allow_from: self.allow_from.clone(),
            guilds: ids(&self.guilds, "guilds")?,
            channels: ids(&self.channels, "channels")?,
            api_url: http_url(&self.api_url, "api_url")?,
            guild_policy: self.guild_policy,
            stream: self.stream,
            edit_interval: seconds(&self.edit_interval_secs, "edit_interval_secs", 0.2)?,
            slash_commands: self.slash_commands,
            max_attachment_bytes: self.max_attachment_bytes,
        })
    }
}

/// Discord ids (snowflakes), written as strings as Discord shows them.
fn ids(values: &[String], key: &str) -> Result<Vec<u64>, ConfigProblem> {
    values
        .iter()
        .map(|value| {
            value.trim().parse::<u64>().map_err(|_| {
                ConfigProblem::new(
                    None,
                    key,
                    format!("`{value}` is not a Discord id (a number such as \"123456789012345678\"; Developer Mode → Copy ID)"),
                )
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use switchboard_adapter::{ChannelSection, HttpFacts};

    use super::*;

    fn facts() -> HttpFacts {
        HttpFacts {
            bind: ([127, 0, 0, 1], 8080).into(),
            allowed_hosts: Vec::new(),
        }
    }

    fn section(text: &str) -> DiscordSection {
        toml::from_str(text).unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn a_disabled_section_needs_nothing_and_an_enabled_one_a_token() {
        assert!(section("").validate(&facts()).is_ok());
        let problem = section("enabled = true").validate(&facts()).err();
        assert_eq!(problem.map(|p| p.key), Some("token".into()));
        let short = section("enabled = true\ntoken = \"abc\"")
            .validate(&facts())
            .err();
        assert!(short.is_some_and(|p| p.span.is_some() && p.message.contains("bot token")));
    }

    #[test]
    fn ids_must_be_numbers() {
        let text =
            "enabled = true\ntoken = \"MTIzNDU2Nzg5MDEyMzQ1Njc4.abc.def\"\nguilds = [\"x1\"]";
        let problem = section(text).validate(&facts()).err();
        assert!(problem.is_some_and(|p| p.key == "guilds" && p.message.contains("`x1`")));
        let text =
            "enabled = true\ntoken = \"Bot MTIzNDU2Nzg5MDEyMzQ1Njc4.abc.def\"\nchannels = [\"42\"]";
        let settings = section(text).settings().unwrap_or_else(|e| panic!("{e:?}"));
        assert_eq!(settings.channels, vec![42]);
        assert!(!settings.token.starts_with("Bot "));
    }
}
