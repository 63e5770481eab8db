//! `[channels.matrix]`: the channel's section of the config file, checked and turned into the
//! [`MatrixSettings`] the channel runs with.

use std::time::Duration;

use serde::Deserialize;
use switchboard_adapter::settings::{http_url, seconds, secret};
use switchboard_core::{ConfigProblem, expand_env};
use toml::Spanned;
use url::Url;

/// `[channels.matrix]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct MatrixSection {
    /// Run the channel.
    pub enabled: bool,
    /// The bot account's homeserver (`https://matrix.example.org`, as its client API is
    /// reached).
    pub homeserver: Option<Spanned<String>>,
    /// The bot's Matrix id (`@bot:example.org`).
    pub user: Option<Spanned<String>>,
    /// Its password (`${MATRIX_PASSWORD}`): the channel logs in once, as a device of its own,
    /// and keeps that session.
    pub password: Option<Spanned<String>>,
    /// Or an access token of a device made for it (`${MATRIX_TOKEN}`).
    pub access_token: Option<Spanned<String>>,
    /// The device's name, as the person's other sessions list it.
    pub device_name: String,
    /// Matrix ids (`@ada:example.org`) that may talk to the agent and invite it to rooms;
    /// others get a pairing code in a direct chat, and their invites are declined.
    pub allow_from: Vec<String>,
    /// A thread is a chat of its own (else it belongs to its room's chat).
    pub threads: bool,
    /// Stream answers: one message, edited as the answer comes (else the whole answer is
    /// sent once it is done, "typing…" shown meanwhile).
    pub stream: bool,
    /// How often a streaming answer's message is edited, at most.
    pub edit_interval_secs: Spanned<f64>,
    /// Files larger than this are not fetched (the agent is told so).
    pub max_attachment_bytes: u64,
}

impl Default for MatrixSection {
    fn default() -> Self {
        Self {
            enabled: false,
            homeserver: None,
            user: None,
            password: None,
            access_token: None,
            device_name: "switchboard".into(),
            allow_from: Vec::new(),
            threads: true,
            stream: true,
            edit_interval_secs: Spanned::new(0..0, 1.0),
            max_attachment_bytes: 20 * 1024 * 1024,
        }
    }
}

/// How the channel proves who it is.
#[derive(Clone)]
pub enum Login {
    Password(String),
    Token(String),
}

impl std::fmt::Debug for Login {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Password(_) => "Password(..)",
            Self::Token(_) => "Token(..)",
        })
    }
}

/// What the channel runs with.
#[derive(Clone, Debug)]
pub struct MatrixSettings {
    pub homeserver: Url,
    pub user: String,
    pub login: Login,
    pub device_name: String,
    pub allow_from: Vec<String>,
    pub threads: bool,
    pub stream: bool,
    pub edit_interval: Duration,
    pub max_attachment_bytes: u64,
}

/// Whether `id` reads as a Matrix user id: `@localpart:server`.
pub(crate) fn is_user_id(id: &str) -> bool {
    id.strip_prefix('@')
        .and_then(|rest| rest.split_once(':'))
        .is_some_and(|(local, server)| !local.is_empty() && !server.is_empty())
}

impl MatrixSection {
    /// The channel's settings.
    pub fn settings(&self) -> Result<MatrixSettings, ConfigProblem> {
        let homeserver = match &self.homeserver {
            Some(url) => http_url(url, "homeserver")?,
            None => {
                return Err(ConfigProblem::new(
                    None,
                    "homeserver",
                    "is required when the channel is enabled, e.g. homeserver = \"https://matrix.example.org\"",
                ));
            }
        };
        let user = secret(self.user.as_ref(), "user", "@bot:example.org")?;
        if !is_user_id(&user) {
            return Err(ConfigProblem::new(
                self.user.as_ref().map(Spanned::span),
                "user",
                format!("`{user}` is not a Matrix id (@bot:example.org)"),
            ));
        }
        let login = match (&self.password, &self.access_token) {
            (Some(_), Some(token)) => {
                return Err(ConfigProblem::new(
                    Some(token.span()),
                    "access_token",
                    "set either password or access_token, not both",
                ));
            }
            (Some(password), None) => Login::Password(expand(password, "password")?),
            (None, Some(token)) => Login::Token(expand(token, "access_token")?),
            (None, None) => {
                return Err(ConfigProblem::new(
                    None,
                    "password",
                    "is required when the channel is enabled (or access_token), e.g. password = \"${MATRIX_PASSWORD}\"",
                ));
            }
        };
        if let Some(stranger) = self.allow_from.iter().find(|id| !is_user_id(id.trim())) {
            return Err(ConfigProblem::new(
                None,
                "allow_from",
                format!("`{stranger}` is not a Matrix id (@ada:example.org)"),
            ));
        }
        Ok(MatrixSettings {
            homeserver,
            user,
            login,
            device_name: self.device_name.clone(),
            allow_from: self
                .allow_from
                .iter()
                .map(|id| id.trim().to_owned())
                .collect(),
            threads: self.threads,
            stream: self.stream,
            edit_interval: seconds(&self.edit_interval_secs, "edit_interval_secs", 0.1)?,
            max_attachment_bytes: self.max_attachment_bytes,
        })
    }
}

fn expand(value: &Spanned<String>, key: &str) -> Result<String, ConfigProblem> {
    expand_env(value.get_ref())
        .map_err(|unresolved| ConfigProblem::new(Some(value.span()), key, unresolved.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn section(text: &str) -> MatrixSection {
        toml::from_str(text).expect("reads")
    }

    #[test]
    fn a_section_names_its_server_its_user_and_one_way_to_log_in() {
        let base = "enabled = true\nhomeserver = \"https://matrix.example.org\"\nuser = \"@bot:example.org\"\n";
        let key = |text: &str| section(text).settings().err().map(|p| p.key);
        assert_eq!(key(base), Some("password".into()));
        assert_eq!(
            key(&format!("{base}password = \"a\"\naccess_token = \"b\"")),
            Some("access_token".into())
        );
        assert_eq!(
            key(
                "enabled = true\nhomeserver = \"matrix.example.org\"\nuser = \"@bot:x\"\npassword = \"a\""
            ),
            Some("homeserver".into())
        );
        assert_eq!(
            key(&format!(
                "{}password = \"a\"",
                base.replace("@bot:example.org", "bot")
            )),
            Some("user".into())
        );
        assert_eq!(
            key(&format!("{base}password = \"a\"\nallow_from = [\"ada\"]")),
            Some("allow_from".into())
        );
        let settings = section(&format!("{base}access_token = \"syt_x\""))
            .settings()
            .expect("settings");
        assert!(matches!(settings.login, Login::Token(ref token) if token == "syt_x"));
        assert!(settings.threads);
        assert_eq!(format!("{:?}", settings.login), "Token(..)");
    }
}
