//! Mail for the email channel's tests, on real servers: [`MailServers`] is a real Dovecot
//! (the agent's mailbox over IMAP, mail delivered into it over LMTP) and an SMTP sink the
//! agent's replies go to, read as a person's mail client shows them. [`Compose`] writes the
//! mails people send.

mod dovecot;
mod smtp;

use std::sync::Arc;
use std::time::Duration;

use base64::Engine;
pub use dovecot::{Dovecot, PASSWORD, USER};
pub use smtp::{MailFile, SentMail, SmtpSink};
use tokio::sync::Notify;

/// The agent's mailbox (Dovecot) and its outgoing server (the sink).
pub struct MailServers {
    pub dovecot: Dovecot,
    pub smtp: SmtpSink,
    changed: Arc<Notify>,
}

impl MailServers {
    /// Starts both.
    ///
    /// # Panics
    /// When Dovecot is not installed or a server does not start.
    pub async fn start() -> Self {
        let changed = Arc::new(Notify::new());
        let dovecot = Dovecot::start(changed.clone()).await;
        let smtp = SmtpSink::start(USER, PASSWORD, changed.clone())
            .await
            .expect("the SMTP sink");
        Self {
            dovecot,
            smtp,
            changed,
        }
    }

    /// `[channels.email]` against them, allowing `allow_from`, with `extra` lines.
    pub fn section(&self, allow_from: &[&str], extra: &str) -> String {
        let allow: Vec<String> = allow_from.iter().map(|who| format!("{who:?}")).collect();
        format!(
            "[channels.email]\nenabled = true\nimap = \"{}\"\nsmtp = \"{}\"\nusername = \"{USER}\"\npassword = \"{PASSWORD}\"\nallow_from = [{}]\n{extra}\n",
            self.dovecot.imap_url(),
            self.smtp.url(),
            allow.join(", ")
        )
    }

    /// Waits until `check` holds (looked at each time either server records something).
    ///
    /// # Panics
    /// When it does not within `timeout`.
    pub async fn wait_until(&self, timeout: Duration, what: &str, check: impl Fn() -> bool) {
        let context = || {
            let sent: Vec<String> = self
                .smtp
                .mails()
                .iter()
                .map(|mail| format!("to {:?}: {:?}", mail.to, mail.text()))
                .collect();
            format!("sent: {sent:#?}\nDovecot's log: {}", self.dovecot.log())
        };
        crate::wait_on(&self.changed, timeout, what, check, context).await;
    }
}

/// A mail a person writes.
#[derive(Clone, Debug)]
pub struct Compose {
    pub from: String,
    pub name: String,
    pub subject: String,
    pub text: String,
    /// HTML instead of text.
    pub html: bool,
    /// The Message-IDs it follows (`References`; the last is `In-Reply-To`).
    pub references: Vec<String>,
    /// Attachments: name, MIME type, bytes.
    pub files: Vec<(String, String, Vec<u8>)>,
    /// Other header fields (`Auto-Submitted: auto-replied`).
    pub headers: Vec<String>,
}

impl Compose {
    /// A plain mail from `from` with `text`.
    pub fn new(from: &str, subject: &str, text: &str) -> Self {
        Self {
            from: from.to_owned(),
            name: String::new(),
            subject: subject.to_owned(),
            text: text.to_owned(),
            html: false,
            references: Vec::new(),
            files: Vec::new(),
            headers: Vec::new(),
        }
    }

    /// The mail with the Message-ID `id` (without angle brackets), as its bytes.
    pub fn write(&self, id: &str) -> Vec<u8> {
        let mut head = String::new();
        let from = if self.name.is_empty() {
            self.from.clone()
        } else {
            format!("{} <{}>", self.name, self.from)
        };
        head.push_str(&format!(
            "From: {from}\r\nTo: {USER}\r\nSubject: {}\r\n",
            self.subject
        ));
        head.push_str("Date: Thu, 03 Dec 2026 10:00:00 +0000\r\n");
        head.push_str(&format!("Message-ID: <{id}>\r\nMIME-Version: 1.0\r\n"));
        if let Some(last) = self.references.last() {
            let all: Vec<String> = self.references.iter().map(|id| format!("<{id}>")).collect();
            head.push_str(&format!(
                "In-Reply-To: <{last}>\r\nReferences: {}\r\n",
                all.join(" ")
            ));
        }
        for header in &self.headers {
            head.push_str(header);
            head.push_str("\r\n");
        }
        let kind = if self.html { "text/html" } else { "text/plain" };
        let text = self.text.replace('\n', "\r\n");
        if self.files.is_empty() {
            head.push_str(&format!(
                "Content-Type: {kind}; charset=utf-8\r\n\r\n{text}\r\n"
            ));
            return head.into_bytes();
        }
        let boundary = "=-switchboard-test-boundary";
        head.push_str(&format!(
            "Content-Type: multipart/mixed; boundary=\"{boundary}\"\r\n\r\n--{boundary}\r\nContent-Type: {kind}; charset=utf-8\r\n\r\n{text}\r\n"
        ));
        for (name, mime, bytes) in &self.files {
            let encoded = base64::engine::general_purpose::STANDARD.encode(bytes);
            head.push_str(&format!(
                "--{boundary}\r\nContent-Type: {mime}; name=\"{name}\"\r\nContent-Disposition: attachment; filename=\"{name}\"\r\nContent-Transfer-Encoding: base64\r\n\r\n"
            ));
            for line in encoded.as_bytes().chunks(76) {
                head.push_str(std::str::from_utf8(line).unwrap_or_default());
                head.push_str("\r\n");
            }
        }
        head.push_str(&format!("--{boundary}--\r\n"));
        head.into_bytes()
    }
}
