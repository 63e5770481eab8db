//! Email in the conformance suite, on real servers: people's mails are delivered into a
//! real Dovecot (over LMTP, as a mail server delivers them), the agent reads them over IMAP,
//! and its answers are read from the SMTP sink as a mail client shows them (the quote of the
//! person's mail under the first part cut off, as the client folds it). Each person writes
//! in one thread (their chat). Answers are not streamed and there is no "typing…"; strangers
//! get no pairing code (`tests/email.rs` checks they get nothing), and a person's files are
//! in their mail, not downloaded from a platform, so the slow-download and voice-note runs
//! are left out.

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use switchboard_testkit::email::{Compose, MailServers, SentMail};
use tokio::time::Instant;

use super::{ADA, CAROL, Platform, Posted, Received, Shown, Written};
use crate::util::PATIENCE;

/// How long a chat waits after the SMTP server said "try again later" (the suite's 429s
/// are 3 s).
const RETRY_AFTER_SECS: u64 = 3;

pub(crate) struct Email {
    pub(crate) servers: MailServers,
    /// Every mail written, by its Message-ID (delivered again as it was).
    written: Mutex<HashMap<String, Vec<u8>>>,
    next: AtomicU64,
}

/// A person's address.
pub(crate) fn address(person: u64) -> String {
    format!("p{person}@people.test")
}

/// The Message-ID a person's thread with the agent started with.
pub(crate) fn root(person: u64) -> String {
    format!("thread.{person}@people.test")
}

impl Email {
    /// `[channels.email]` against the servers, allowing [`ADA`] and [`CAROL`], with `extra`.
    pub(crate) fn section(&self, extra: &str) -> String {
        self.servers.section(
            &[&address(ADA), &address(CAROL)],
            &format!("retry_after_secs = {RETRY_AFTER_SECS}\n{extra}"),
        )
    }

    /// `person` sends `mail` (in their thread); returns its Message-ID.
    pub(crate) fn send(&self, person: u64, mut mail: Compose) -> Written {
        let id = format!(
            "m{}.{person}@people.test",
            self.next.fetch_add(1, Ordering::SeqCst)
        );
        mail.references = vec![root(person)];
        let raw = mail.write(&id);
        self.written
            .lock()
            .expect("written")
            .insert(id.clone(), raw.clone());
        self.servers.dovecot.deliver(raw);
        Written {
            chat: self.chat_of(person),
            id,
        }
    }

    /// The mails the agent sent to `chat`'s person.
    fn sent(&self, chat: &str) -> Vec<SentMail> {
        let person = [ADA, CAROL, super::STRANGER]
            .into_iter()
            .find(|person| self.chat_of(*person) == chat);
        person.map_or_else(Vec::new, |person| {
            self.servers.smtp.mails_to(&address(person))
        })
    }
}

/// A mail's text as the person reads it: without the quote of their own mail under it.
pub(crate) fn shown(mail: &SentMail) -> String {
    switchboard_email::without_quoted_tail(&mail.text())
        .trim()
        .to_owned()
}

impl Platform for Email {
    const NAME: &'static str = "email";
    const LIMIT: usize = switchboard_email::MESSAGE_LIMIT;
    const DOCUMENT_LIMIT: u64 = 18 * 1024 * 1024;

    async fn start() -> Self {
        Self {
            servers: MailServers::start().await,
            written: Mutex::new(HashMap::new()),
            next: AtomicU64::new(1),
        }
    }

    fn table(&self, _interval: f64, extra: &str) -> String {
        // Nothing is streamed: the suite's `stream = …` is not a key here.
        let extra: Vec<&str> = extra
            .lines()
            .filter(|line| !line.trim_start().starts_with("stream"))
            .collect();
        self.section(&extra.join("\n"))
    }

    fn sessions(&self) -> u64 {
        self.servers.dovecot.logins()
    }

    fn dm(&self, person: u64, text: &str) -> Written {
        self.send(person, Compose::new(&address(person), "Talk", text))
    }

    fn dm_file(&self, person: u64, caption: &str, bytes: Vec<u8>) -> Written {
        let mut mail = Compose::new(&address(person), "Talk", caption);
        mail.files
            .push(("notes.bin".into(), "application/octet-stream".into(), bytes));
        self.send(person, mail)
    }

    fn dm_voice(&self, _person: u64, _bytes: Vec<u8>, _seconds: u32) -> Written {
        unreachable!("mail has no voice notes: the suite's voice runs are left out")
    }

    fn deliver_again(&self, written: &Written) {
        let raw = self.written.lock().expect("written")[&written.id].clone();
        self.servers.dovecot.deliver(raw);
    }

    fn chat_of(&self, person: u64) -> String {
        switchboard_email::thread_chat(&root(person))
    }

    fn posted(&self, chat: &str) -> Vec<Posted> {
        self.sent(chat)
            .into_iter()
            .filter(|mail| mail.files().is_empty())
            .map(|mail| Posted {
                id: mail.message_id(),
                text: shown(&mail),
                reply_to: mail.in_reply_to(),
                at: mail.at,
            })
            .collect()
    }

    fn files(&self, chat: &str) -> Vec<Received> {
        self.sent(chat)
            .into_iter()
            .flat_map(|mail| {
                let caption = Some(shown(&mail)).filter(|text| !text.is_empty());
                mail.files().into_iter().map(move |file| Received {
                    // A mail client shows a picture in the mail, the rest as files.
                    shown: if switchboard_core::ImagePart::shown_type(&file.mime) {
                        Shown::Picture
                    } else {
                        Shown::Document
                    },
                    name: file.name,
                    bytes: file.bytes,
                    caption: caption.clone(),
                })
            })
            .collect()
    }

    fn hold_uploads(&self) {
        self.servers.smtp.hold_uploads();
    }

    fn release_uploads(&self, keep: bool) {
        self.servers.smtp.release_uploads(keep);
    }

    fn uploads_started(&self) -> u64 {
        self.servers.smtp.uploads_started()
    }

    fn writes(&self, chat: &str, message: Option<&str>) -> Vec<Instant> {
        self.sent(chat)
            .into_iter()
            .filter(|mail| message.is_none_or(|m| mail.message_id() == m))
            .map(|mail| mail.at)
            .collect()
    }

    fn typing(&self, _chat: &str) -> Option<usize> {
        None
    }

    fn rate_limit(&self, chat: &str, retry_after: Duration, times: u32) {
        assert_eq!(
            retry_after,
            Duration::from_secs(RETRY_AFTER_SECS),
            "SMTP says no wait: the channel's retry_after_secs is the suite's"
        );
        let person = [ADA, CAROL]
            .into_iter()
            .find(|person| self.chat_of(*person) == chat)
            .expect("a person's chat");
        self.servers.smtp.rate_limit(&address(person), times);
    }

    fn limited_at(&self, chat: &str) -> Vec<Instant> {
        [ADA, CAROL]
            .into_iter()
            .find(|person| self.chat_of(*person) == chat)
            .map_or_else(Vec::new, |person| {
                self.servers.smtp.limited_at(&address(person))
            })
    }

    fn taken_in(&self, state_dir: &std::path::Path, written: &Written) -> bool {
        // Read again after the last UID kept, until kept in the channel's inbox.
        std::fs::read_to_string(state_dir.join("email/inbox.jsonl"))
            .is_ok_and(|inbox| inbox.contains(&format!("\"message\":\"{}\"", written.id)))
    }

    fn set_file_delay(&self, _delay: Duration) {
        unreachable!("a mail's files come with it: the slow-download run is left out")
    }

    fn files_served(&self) -> Vec<Instant> {
        Vec::new()
    }

    async fn wait(&self, what: &str, check: impl Fn(&Self) -> bool) {
        self.servers
            .wait_until(PATIENCE, what, || check(self))
            .await;
    }
}

suite!(Email, mail);
