//! `[channels.signal]`: the channel's section of the config file, checked and turned into the
//! [`SignalSettings`] the channel runs with.

use serde::Deserialize;
use switchboard_adapter::settings::http_url;
use switchboard_core::ConfigProblem;
use toml::Spanned;
use url::Url;

/// `[channels.signal]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SignalSection {
    /// Run the channel.
    pub enabled: bool,
    /// Where `signal-cli daemon --http` listens.
    pub url: Spanned<String>,
    /// The bot's number as signal-cli knows it (`+4915112345678`); needed when the daemon
    /// serves several accounts, checked against it otherwise.
    pub account: Option<Spanned<String>>,
    /// Numbers (`+4915112345678`) or Signal's ids (UUIDs) that may talk to the agent; others
    /// get a pairing code.
    pub allow_from: Vec<String>,
    /// Answer in groups the bot is in (only people allowed to talk are answered there).
    pub groups: bool,
    /// Send read receipts, and show "typing…" while an answer is made.
    pub read_receipts: bool,
    /// Files larger than this are not fetched (the agent is told so).
    pub max_attachment_bytes: u64,
}

impl Default for SignalSection {
    fn default() -> Self {
        Self {
            enabled: false,
            url: Spanned::new(0..0, "http://127.0.0.1:8080".into()),
            account: None,
            allow_from: Vec::new(),
            groups: false,
            read_receipts: true,
            max_attachment_bytes: 20 * 1024 * 1024,
        }
    }
}

/// What the channel runs with.
#[derive(Clone, Debug)]
pub struct SignalSettings {
    pub url: Url,
    pub account: Option<String>,
    pub allow_from: Vec<String>,
    pub groups: bool,
    pub read_receipts: bool,
    pub max_attachment_bytes: u64,
}

impl SignalSection {
    /// The channel's settings.
    pub fn settings(&self) -> Result<SignalSettings, ConfigProblem> {
        let account = match &self.account {
            Some(account) => {
                let number = account.get_ref().trim();
                if !number.starts_with('+') || !number[1..].bytes().all(|b| b.is_ascii_digit()) {
                    return Err(ConfigProblem::new(
                        Some(account.span()),
                        "account",
                        "is the bot's number with its country code, as signal-cli registered it (+4915112345678)",
                    ));
                }
                Some(number.to_owned())
            }
            None => None,
        };
        Ok(SignalSettings {
            url: http_url(&self.url, "url")?,
            account,
            allow_from: self
                .allow_from
                .iter()
                .map(|who| who.trim().to_owned())
                .collect(),
            groups: self.groups,
            read_receipts: self.read_receipts,
            max_attachment_bytes: self.max_attachment_bytes,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_account_is_a_number_and_the_url_an_address() {
        let section = |text: &str| -> SignalSection { toml::from_str(text).expect("reads") };
        let bad = section("enabled = true\naccount = \"4915\"")
            .settings()
            .err();
        assert_eq!(bad.map(|p| p.key), Some("account".into()));
        let url = section("enabled = true\nurl = \"localhost:8080\"")
            .settings()
            .err();
        assert_eq!(url.map(|p| p.key), Some("url".into()));
        let settings = section("enabled = true\naccount = \"+4915100\"")
            .settings()
            .expect("settings");
        assert_eq!(settings.account.as_deref(), Some("+4915100"));
        assert!(!settings.groups);
    }
}
