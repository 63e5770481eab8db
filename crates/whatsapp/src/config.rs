//! `[channels.whatsapp]`: the channel's section of the config file, checked and turned into
//! the [`WhatsAppSettings`] the channel runs with.

use std::time::Duration;

use serde::Deserialize;
use switchboard_adapter::settings::{http_url, secret};
use switchboard_core::ConfigProblem;
use toml::Spanned;
use url::Url;

/// `[channels.whatsapp]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct WhatsAppSection {
    /// Run the channel.
    pub enabled: bool,
    /// A system user's access token with `whatsapp_business_messaging`, usually
    /// `${WHATSAPP_ACCESS_TOKEN}`.
    pub access_token: Option<Spanned<String>>,
    /// The app's secret (App settings → Basic): every webhook request is signed with it.
    pub app_secret: Option<Spanned<String>>,
    /// The verify token typed into the webhook's settings at Meta, answered in its handshake.
    pub verify_token: Option<Spanned<String>>,
    /// The business phone number's id (WhatsApp → API Setup), not the number itself.
    pub phone_number_id: Option<Spanned<String>>,
    /// Phone numbers (international, digits only: `4915112345678`) that may talk to the
    /// agent; others get a pairing code.
    pub allow_from: Vec<String>,
    /// The Graph API's root, with its version (tests change it).
    pub api_url: Spanned<String>,
    /// Mark each message read (blue ticks) and show "typing…" while its answer is made.
    pub read_receipts: bool,
    /// Files larger than this are not downloaded (the agent is told so).
    pub max_attachment_bytes: u64,
}

impl Default for WhatsAppSection {
    fn default() -> Self {
        Self {
            enabled: false,
            access_token: None,
            app_secret: None,
            verify_token: None,
            phone_number_id: None,
            allow_from: Vec::new(),
            api_url: Spanned::new(0..0, "https://graph.facebook.com/v21.0".into()),
            read_receipts: true,
            max_attachment_bytes: 20 * 1024 * 1024,
        }
    }
}

/// What the channel runs with.
#[derive(Clone, Debug)]
pub struct WhatsAppSettings {
    pub access_token: String,
    pub app_secret: String,
    pub verify_token: String,
    pub phone_number_id: String,
    pub allow_from: Vec<String>,
    pub api_url: Url,
    pub read_receipts: bool,
    pub max_attachment_bytes: u64,
    /// How long after a person's last message the business may write freely (WhatsApp's
    /// customer service window).
    pub window: Duration,
}

impl WhatsAppSection {
    /// The channel's settings: the secrets read from the environment.
    pub fn settings(&self) -> Result<WhatsAppSettings, ConfigProblem> {
        let access_token = secret(
            self.access_token.as_ref(),
            "access_token",
            "${WHATSAPP_ACCESS_TOKEN}",
        )?;
        let app_secret = secret(
            self.app_secret.as_ref(),
            "app_secret",
            "${WHATSAPP_APP_SECRET}",
        )?;
        let verify_token = secret(
            self.verify_token.as_ref(),
            "verify_token",
            "${WHATSAPP_VERIFY_TOKEN}",
        )?;
        let phone_number_id = secret(
            self.phone_number_id.as_ref(),
            "phone_number_id",
            "106540352242922",
        )?;
        let digits = |value: &str| !value.is_empty() && value.bytes().all(|b| b.is_ascii_digit());
        if !digits(phone_number_id.trim()) {
            return Err(ConfigProblem::new(
                self.phone_number_id.as_ref().map(Spanned::span),
                "phone_number_id",
                "is the phone number's id from WhatsApp → API Setup (digits), not the number",
            ));
        }
        if verify_token.trim().len() < 8 {
            return Err(ConfigProblem::new(
                self.verify_token.as_ref().map(Spanned::span),
                "verify_token",
                "must be at least 8 characters (any you choose; type the same at Meta)",
            ));
        }
        let allow_from = self
            .allow_from
            .iter()
            .map(|number| {
                number
                    .trim()
                    .trim_start_matches('+')
                    .replace([' ', '-'], "")
            })
            .collect::<Vec<_>>();
        if let Some(bad) = allow_from.iter().find(|number| !digits(number)) {
            return Err(ConfigProblem::new(
                None,
                "allow_from",
                format!(
                    "`{bad}` is not a phone number (digits with the country code: 4915112345678)"
                ),
            ));
        }
        Ok(WhatsAppSettings {
            access_token: access_token.trim().to_owned(),
            app_secret: app_secret.trim().to_owned(),
            verify_token: verify_token.trim().to_owned(),
            phone_number_id: phone_number_id.trim().to_owned(),
            allow_from,
            api_url: http_url(&self.api_url, "api_url")?,
            read_receipts: self.read_receipts,
            max_attachment_bytes: self.max_attachment_bytes,
            window: Duration::from_secs(24 * 3600),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn section(text: &str) -> WhatsAppSection {
        toml::from_str(text).unwrap_or_else(|e| panic!("{e}"))
    }

    const WHOLE: &str = "enabled = true\naccess_token = \"EAAG-token\"\napp_secret = \"s3cr3t\"\nverify_token = \"a-verify-token\"\nphone_number_id = \"1065403\"\n";

    #[test]
    fn every_secret_is_needed_and_the_ids_are_checked() {
        let problem = section("enabled = true").settings().err();
        assert_eq!(problem.map(|p| p.key), Some("access_token".into()));
        let number = section(&WHOLE.replace("\"1065403\"", "\"+49 151 1234\""))
            .settings()
            .err();
        assert_eq!(number.map(|p| p.key), Some("phone_number_id".into()));
        let allowed = section(&format!("{WHOLE}allow_from = [\"+49 151-1234\", \"ada\"]"))
            .settings()
            .err();
        assert_eq!(allowed.map(|p| p.key), Some("allow_from".into()));
        let settings = section(&format!("{WHOLE}allow_from = [\"+49 151-1234\"]"))
            .settings()
            .expect("settings");
        assert_eq!(settings.allow_from, ["491511234"]);
        assert_eq!(settings.window, Duration::from_secs(86_400));
    }
}
