//! `[channels.email]`: the channel's section of the config file, checked and turned into the
//! [`EmailSettings`] the channel runs with.

use std::time::Duration;

use serde::Deserialize;
use switchboard_adapter::settings::{seconds, secret};
use switchboard_core::ConfigProblem;
use toml::Spanned;
use url::Url;

/// `[channels.email]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct EmailSection {
    /// Run the channel.
    pub enabled: bool,
    /// The mailbox's IMAP server: `imaps://imap.example.com` (TLS, port 993) or
    /// `imap://host:143` (STARTTLS; plain text only to a server on this host).
    pub imap: Option<Spanned<String>>,
    /// The SMTP server replies go through: `smtps://smtp.example.com` (TLS, port 465) or
    /// `smtp://host:587` (STARTTLS; plain text only to a server on this host).
    pub smtp: Option<Spanned<String>>,
    /// The login at both servers.
    pub username: Option<Spanned<String>>,
    /// Its password (an app password), usually `${EMAIL_PASSWORD}`.
    pub password: Option<Spanned<String>>,
    /// The address replies come from (the username when it is an address).
    pub address: Option<Spanned<String>>,
    /// The name shown beside it.
    pub name: String,
    /// The folder read for mail to the agent.
    pub mailbox: String,
    /// Addresses that may write to the agent, or `@example.com` for a whole domain. Nobody
    /// else is answered (no pairing codes by mail: a sender can be forged).
    pub allow_from: Vec<String>,
    /// Attachments larger than this are not saved (the agent is told so).
    pub max_attachment_bytes: u64,
    /// Mails larger than this (attachments and all) are not read.
    pub max_mail_bytes: u64,
    /// How long a chat waits when the SMTP server says to try again later (4xx).
    pub retry_after_secs: Spanned<f64>,
    /// Give the agent the `email` tool: search and read the mailbox, send to `allow_from`.
    pub tool: bool,
    /// Log in to the SMTP server (off for a relay on this host that takes mail without).
    pub smtp_login: bool,
    /// The receiving server whose `Authentication-Results` must vouch for a sender (DMARC or
    /// DKIM passed for the `From` domain): `mx.google.com` at Gmail. Without it, `From` is
    /// taken as it says.
    pub verified_by: Option<String>,
}

impl Default for EmailSection {
    fn default() -> Self {
        Self {
            enabled: false,
            imap: None,
            smtp: None,
            username: None,
            password: None,
            address: None,
            name: "switchboard".into(),
            mailbox: "INBOX".into(),
            allow_from: Vec::new(),
            max_attachment_bytes: 20 * 1024 * 1024,
            max_mail_bytes: 40 * 1024 * 1024,
            retry_after_secs: Spanned::new(0..0, 60.0),
            tool: true,
            smtp_login: true,
            verified_by: None,
        }
    }
}

/// How a connection is secured.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Security {
    /// TLS from the first byte (`imaps://`, `smtps://`).
    Tls,
    /// Plain text upgraded with STARTTLS (`imap://`, `smtp://`); refused when the server
    /// does not offer it, unless `loopback`: then it is used when offered.
    StartTls { loopback: bool },
}

/// A server: its host, port and security.
#[derive(Clone, Debug)]
pub struct Server {
    pub host: String,
    pub port: u16,
    pub security: Security,
}

/// What the channel runs with.
#[derive(Clone, Debug)]
pub struct EmailSettings {
    pub imap: Server,
    pub smtp: Server,
    pub username: String,
    pub password: String,
    /// The bot's address, lower case.
    pub address: String,
    pub name: String,
    pub mailbox: String,
    /// Addresses (lower case) and `@domain`s.
    pub allow_from: Vec<String>,
    pub max_attachment_bytes: u64,
    pub max_mail_bytes: u64,
    pub retry_after: Duration,
    pub smtp_login: bool,
    pub verified_by: Option<String>,
}

impl EmailSection {
    /// The channel's settings: the password read from the environment.
    pub fn settings(&self) -> Result<EmailSettings, ConfigProblem> {
        let imap = server(self.imap.as_ref(), "imap", ("imaps", 993), ("imap", 143))?;
        let smtp = server(self.smtp.as_ref(), "smtp", ("smtps", 465), ("smtp", 587))?;
        let username = secret(self.username.as_ref(), "username", "agent@example.com")?;
        let password = secret(self.password.as_ref(), "password", "${EMAIL_PASSWORD}")?;
        let address = match &self.address {
            Some(address) => address_of(address.get_ref()).ok_or_else(|| {
                ConfigProblem::new(
                    Some(address.span()),
                    "address",
                    format!("`{}` is not an email address", address.get_ref()),
                )
            })?,
            None => address_of(&username).ok_or_else(|| {
                ConfigProblem::new(
                    None,
                    "address",
                    "is required when the username is not an address, e.g. address = \"agent@example.com\"",
                )
            })?,
        };
        if self.mailbox.trim().is_empty() || self.mailbox.contains(['"', '\r', '\n']) {
            return Err(ConfigProblem::new(
                None,
                "mailbox",
                "is an IMAP folder's name (INBOX, Agent)",
            ));
        }
        Ok(EmailSettings {
            imap,
            smtp,
            username,
            password,
            address,
            name: self.name.trim().to_owned(),
            mailbox: self.mailbox.trim().to_owned(),
            allow_from: self
                .allow_from
                .iter()
                .map(|who| who.trim().to_lowercase())
                .collect(),
            max_attachment_bytes: self.max_attachment_bytes,
            max_mail_bytes: self.max_mail_bytes,
            retry_after: seconds(&self.retry_after_secs, "retry_after_secs", 1.0)?,
            smtp_login: self.smtp_login,
            verified_by: self
                .verified_by
                .as_deref()
                .map(str::trim)
                .filter(|server| !server.is_empty())
                .map(str::to_owned),
        })
    }
}

/// `text` as a bare address, lower case, when it is one.
pub(crate) fn address_of(text: &str) -> Option<String> {
    let text = text.trim();
    let (local, domain) = text.split_once('@')?;
    let plain = |part: &str| {
        !part.is_empty()
            && !part
                .chars()
                .any(|c| c.is_whitespace() || matches!(c, '<' | '>' | '@' | ',' | '"'))
    };
    (plain(local) && plain(domain) && domain.contains('.') || domain == "localhost")
        .then(|| text.to_lowercase())
}

/// A server's URL: `secure` is the TLS scheme with its port, `plain` the STARTTLS one.
fn server(
    value: Option<&Spanned<String>>,
    key: &str,
    secure: (&str, u16),
    plain: (&str, u16),
) -> Result<Server, ConfigProblem> {
    let Some(value) = value else {
        return Err(ConfigProblem::new(
            None,
            key,
            format!(
                "is required when the channel is enabled, e.g. {key} = \"{}://{key}.example.com\"",
                secure.0
            ),
        ));
    };
    let problem = || {
        ConfigProblem::new(
            Some(value.span()),
            key,
            format!(
                "`{}` is not a {}:// or {}:// address (TLS, or STARTTLS)",
                value.get_ref(),
                secure.0,
                plain.0
            ),
        )
    };
    let url = Url::parse(value.get_ref()).map_err(|_| problem())?;
    let host = url
        .host_str()
        .filter(|host| !host.is_empty())
        .ok_or_else(problem)?;
    let host = host
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_owned();
    let loopback = host == "localhost"
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback());
    let (security, port) = match url.scheme() {
        scheme if scheme == secure.0 => (Security::Tls, secure.1),
        scheme if scheme == plain.0 => (Security::StartTls { loopback }, plain.1),
        _ => return Err(problem()),
    };
    Ok(Server {
        port: url.port().unwrap_or(port),
        host,
        security,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn section(text: &str) -> EmailSection {
        toml::from_str(text).expect("reads")
    }

    const BASE: &str = "enabled = true\nimap = \"imaps://imap.example.com\"\nsmtp = \"smtp://smtp.example.com\"\nusername = \"Agent@Example.com\"\npassword = \"pw\"\n";

    #[test]
    fn servers_are_tls_or_starttls_with_their_ports() {
        let settings = section(BASE).settings().expect("settings");
        assert_eq!(
            (settings.imap.port, settings.imap.security),
            (993, Security::Tls)
        );
        assert_eq!(
            (settings.smtp.port, settings.smtp.security),
            (587, Security::StartTls { loopback: false })
        );
        assert_eq!(settings.address, "agent@example.com");
        let local = section(&BASE.replace("imaps://imap.example.com", "imap://127.0.0.1:1143"))
            .settings()
            .expect("settings");
        assert_eq!(
            (local.imap.port, local.imap.security),
            (1143, Security::StartTls { loopback: true })
        );
    }

    #[test]
    fn a_bad_server_or_address_names_its_key() {
        let bad = section(&BASE.replace("imaps://imap.example.com", "https://x"))
            .settings()
            .err();
        assert_eq!(bad.map(|p| p.key), Some("imap".into()));
        let no_address = section(&BASE.replace("Agent@Example.com", "agent"))
            .settings()
            .err();
        assert_eq!(no_address.map(|p| p.key), Some("address".into()));
        let missing = section("enabled = true").settings().err();
        assert_eq!(missing.map(|p| p.key), Some("imap".into()));
    }
}
