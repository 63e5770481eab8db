//! [`SmtpSink`]: an SMTP server on 127.0.0.1 that takes every mail (RFC 5321: EHLO, AUTH
//! PLAIN or LOGIN, MAIL, RCPT, DATA with dot-stuffing, RSET, NOOP, QUIT) and keeps it for
//! the test to read, as the person's mail client would show it ([`SentMail`]). It can say
//! "try again later" (451) to a recipient, and hold mails with attachments mid-delivery.

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use base64::Engine;
use mail_parser::{MessageParser, MimeHeaders};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Notify, watch};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// The largest mail taken.
const MAX_MAIL: usize = 64 * 1024 * 1024;

/// A mail the sink took.
#[derive(Clone, Debug)]
pub struct SentMail {
    /// `MAIL FROM`.
    pub from: String,
    /// `RCPT TO`s.
    pub to: Vec<String>,
    /// Its bytes as sent.
    pub raw: Vec<u8>,
    /// When the sink took it.
    pub at: Instant,
}

/// An attachment of a mail.
#[derive(Clone, Debug)]
pub struct MailFile {
    pub name: String,
    pub mime: String,
    pub bytes: Vec<u8>,
}

impl SentMail {
    fn parsed(&self) -> Option<mail_parser::Message<'_>> {
        MessageParser::default().parse(&self.raw)
    }

    /// A header field's text, as sent.
    pub fn header(&self, name: &str) -> Option<String> {
        self.parsed()?
            .header_raw(name)
            .map(|value| value.trim().to_owned())
    }

    /// Its Message-ID, without angle brackets.
    pub fn message_id(&self) -> String {
        self.parsed()
            .and_then(|mail| mail.message_id().map(str::to_owned))
            .unwrap_or_default()
    }

    /// The Message-ID it answers (`In-Reply-To`), without angle brackets.
    pub fn in_reply_to(&self) -> Option<String> {
        self.parsed()?
            .in_reply_to()
            .as_text()
            .map(|id| id.trim_matches(['<', '>']).to_owned())
    }

    /// Its subject.
    pub fn subject(&self) -> String {
        self.parsed()
            .and_then(|mail| mail.subject().map(str::to_owned))
            .unwrap_or_default()
    }

    /// Its text, as a mail client shows it.
    pub fn text(&self) -> String {
        self.parsed()
            .and_then(|mail| mail.body_text(0).map(|text| text.replace("\r\n", "\n")))
            .unwrap_or_default()
    }

    /// Its attachments.
    pub fn files(&self) -> Vec<MailFile> {
        let Some(mail) = self.parsed() else {
            return Vec::new();
        };
        mail.attachments()
            .map(|part| MailFile {
                name: part.attachment_name().unwrap_or_default().to_owned(),
                mime: part
                    .content_type()
                    .map(|ct| format!("{}/{}", ct.ctype(), ct.subtype().unwrap_or_default()))
                    .unwrap_or_default(),
                bytes: part.contents().to_vec(),
            })
            .collect()
    }
}

#[derive(Default)]
struct State {
    mails: Vec<SentMail>,
    /// "Try again later" still owed to each recipient.
    limits: Vec<(String, u32)>,
    limited_at: Vec<(String, Instant)>,
    logins: u64,
    uploads_started: u64,
}

struct Shared {
    state: Mutex<State>,
    changed: Arc<Notify>,
    /// `Some(keep)` releases the held mails; `None` holds the ones to come.
    hold: watch::Sender<Option<bool>>,
    holding: Mutex<bool>,
    user: String,
    password: String,
}

impl Shared {
    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// A running sink; stopped when dropped.
pub struct SmtpSink {
    port: u16,
    shared: Arc<Shared>,
    stop: CancellationToken,
}

impl SmtpSink {
    /// Starts a sink taking the login `user` / `password`; `changed` is notified at each
    /// mail and refusal.
    pub async fn start(user: &str, password: &str, changed: Arc<Notify>) -> std::io::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let port = listener.local_addr()?.port();
        let shared = Arc::new(Shared {
            state: Mutex::new(State::default()),
            changed,
            hold: watch::channel(Some(true)).0,
            holding: Mutex::new(false),
            user: user.to_owned(),
            password: password.to_owned(),
        });
        let stop = CancellationToken::new();
        tokio::spawn({
            let shared = shared.clone();
            let stop = stop.clone();
            async move {
                loop {
                    tokio::select! {
                        () = stop.cancelled() => return,
                        accepted = listener.accept() => {
                            if let Ok((stream, _)) = accepted {
                                tokio::spawn(serve(stream, shared.clone()));
                            }
                        }
                    }
                }
            }
        });
        Ok(Self { port, shared, stop })
    }

    /// Its address as `[channels.email] smtp` names it.
    pub fn url(&self) -> String {
        format!("smtp://127.0.0.1:{}", self.port)
    }

    /// Every mail taken, oldest first.
    pub fn mails(&self) -> Vec<SentMail> {
        self.shared.state().mails.clone()
    }

    /// The mails to `address`, oldest first.
    pub fn mails_to(&self, address: &str) -> Vec<SentMail> {
        let address = address.to_lowercase();
        self.mails()
            .into_iter()
            .filter(|mail| mail.to.iter().any(|to| to.to_lowercase() == address))
            .collect()
    }

    /// The next `times` mails to `address` are told to try again later (451).
    pub fn rate_limit(&self, address: &str, times: u32) {
        self.shared
            .state()
            .limits
            .push((address.to_lowercase(), times));
    }

    /// When mails to `address` were told to try again later.
    pub fn limited_at(&self, address: &str) -> Vec<Instant> {
        let address = address.to_lowercase();
        self.shared
            .state()
            .limited_at
            .iter()
            .filter(|(to, _)| *to == address)
            .map(|(_, at)| *at)
            .collect()
    }

    /// How many logins it took.
    pub fn logins(&self) -> u64 {
        self.shared.state().logins
    }

    /// Holds the mails with attachments that come from now on, once their data is in,
    /// until released.
    pub fn hold_uploads(&self) {
        *self
            .shared
            .holding
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = true;
        self.shared.hold.send_replace(None);
    }

    /// Lets the held mails go: taken (`keep`), or their connections closed unanswered.
    pub fn release_uploads(&self, keep: bool) {
        *self
            .shared
            .holding
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = false;
        self.shared.hold.send_replace(Some(keep));
    }

    /// How many mails with attachments arrived (held ones too).
    pub fn uploads_started(&self) -> u64 {
        self.shared.state().uploads_started
    }
}

impl Drop for SmtpSink {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

/// One client's session.
async fn serve(stream: TcpStream, shared: Arc<Shared>) {
    let _ = session(stream, &shared).await;
}

async fn session(stream: TcpStream, shared: &Shared) -> std::io::Result<()> {
    let (read, mut write) = stream.into_split();
    let mut read = BufReader::new(read);
    write.write_all(b"220 sink.test ESMTP ready\r\n").await?;
    let mut from = String::new();
    let mut to: Vec<String> = Vec::new();
    loop {
        let mut line = String::new();
        if read.read_line(&mut line).await? == 0 {
            return Ok(());
        }
        let command = line.trim_end().to_owned();
        let upper = command.to_ascii_uppercase();
        if upper.starts_with("EHLO") || upper.starts_with("HELO") {
            write
                .write_all(b"250-sink.test\r\n250-AUTH PLAIN LOGIN\r\n250-SIZE 67108864\r\n250 8BITMIME\r\n")
                .await?;
        } else if upper.starts_with("AUTH PLAIN") {
            let given = match command.split_whitespace().nth(2) {
                Some(given) => given.to_owned(),
                None => {
                    write.write_all(b"334 \r\n").await?;
                    read_line(&mut read).await?
                }
            };
            let decoded = base64::engine::general_purpose::STANDARD
                .decode(given.trim())
                .unwrap_or_default();
            let parts: Vec<&[u8]> = decoded.split(|b| *b == 0).collect();
            let ok = parts.len() == 3
                && parts[1] == shared.user.as_bytes()
                && parts[2] == shared.password.as_bytes();
            login(&mut write, shared, ok).await?;
        } else if upper.starts_with("AUTH LOGIN") {
            write.write_all(b"334 VXNlcm5hbWU6\r\n").await?;
            let user = read_line(&mut read).await?;
            write.write_all(b"334 UGFzc3dvcmQ6\r\n").await?;
            let password = read_line(&mut read).await?;
            let decode = |text: &str| {
                base64::engine::general_purpose::STANDARD
                    .decode(text.trim())
                    .unwrap_or_default()
            };
            let ok = decode(&user) == shared.user.as_bytes()
                && decode(&password) == shared.password.as_bytes();
            login(&mut write, shared, ok).await?;
        } else if upper.starts_with("MAIL FROM:") {
            from = address_in(&command);
            to.clear();
            write.write_all(b"250 2.1.0 Ok\r\n").await?;
        } else if upper.starts_with("RCPT TO:") {
            let rcpt = address_in(&command).to_lowercase();
            if limited(shared, &rcpt) {
                write
                    .write_all(b"451 4.7.1 Too many mails to this recipient, try again later\r\n")
                    .await?;
            } else {
                to.push(rcpt);
                write.write_all(b"250 2.1.5 Ok\r\n").await?;
            }
        } else if upper == "DATA" {
            write
                .write_all(b"354 End data with <CR><LF>.<CR><LF>\r\n")
                .await?;
            let raw = data(&mut read).await?;
            let mail = SentMail {
                from: from.clone(),
                to: std::mem::take(&mut to),
                raw,
                at: Instant::now(),
            };
            if !mail.files().is_empty() {
                shared.state().uploads_started += 1;
                shared.changed.notify_waiters();
                if !held(shared).await {
                    // As if the connection broke before the server had it all.
                    return Ok(());
                }
            }
            let mail = SentMail {
                at: Instant::now(),
                ..mail
            };
            shared.state().mails.push(mail);
            shared.changed.notify_waiters();
            write.write_all(b"250 2.0.0 Ok: queued\r\n").await?;
        } else if upper == "RSET" {
            from.clear();
            to.clear();
            write.write_all(b"250 2.0.0 Ok\r\n").await?;
        } else if upper == "NOOP" {
            write.write_all(b"250 2.0.0 Ok\r\n").await?;
        } else if upper == "QUIT" {
            write.write_all(b"221 2.0.0 Bye\r\n").await?;
            return Ok(());
        } else {
            write.write_all(b"502 5.5.2 Not understood\r\n").await?;
        }
    }
}

async fn login(
    write: &mut tokio::net::tcp::OwnedWriteHalf,
    shared: &Shared,
    ok: bool,
) -> std::io::Result<()> {
    if ok {
        shared.state().logins += 1;
        write
            .write_all(b"235 2.7.0 Authentication successful\r\n")
            .await
    } else {
        write
            .write_all(b"535 5.7.8 Authentication credentials invalid\r\n")
            .await
    }
}

/// Whether a mail to `rcpt` is told to try again later (counting it).
fn limited(shared: &Shared, rcpt: &str) -> bool {
    let mut state = shared.state();
    let Some(owed) = state
        .limits
        .iter_mut()
        .find(|(to, times)| to == rcpt && *times > 0)
    else {
        return false;
    };
    owed.1 -= 1;
    state.limited_at.push((rcpt.to_owned(), Instant::now()));
    drop(state);
    shared.changed.notify_waiters();
    true
}

/// Waits while uploads are held; whether the mail is kept.
async fn held(shared: &Shared) -> bool {
    if !*shared
        .holding
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
    {
        return true;
    }
    let mut released = shared.hold.subscribe();
    loop {
        if let Some(keep) = *released.borrow_and_update() {
            return keep;
        }
        if tokio::time::timeout(Duration::from_secs(120), released.changed())
            .await
            .is_err()
        {
            return true;
        }
    }
}

async fn read_line(
    read: &mut BufReader<tokio::net::tcp::OwnedReadHalf>,
) -> std::io::Result<String> {
    let mut line = String::new();
    read.read_line(&mut line).await?;
    Ok(line.trim_end().to_owned())
}

/// The mail's bytes up to the lone `.`, unstuffed.
async fn data(read: &mut BufReader<tokio::net::tcp::OwnedReadHalf>) -> std::io::Result<Vec<u8>> {
    let mut raw = Vec::new();
    loop {
        let mut line = Vec::new();
        if (&mut *read)
            .take(1 << 20)
            .read_until(b'\n', &mut line)
            .await?
            == 0
        {
            return Err(std::io::Error::other("the connection closed in DATA"));
        }
        if line == b".\r\n" || line == b".\n" {
            return Ok(raw);
        }
        let line = if line.starts_with(b"..") {
            &line[1..]
        } else {
            &line[..]
        };
        raw.extend_from_slice(line);
        if raw.len() > MAX_MAIL {
            return Err(std::io::Error::other("a mail over the sink's cap"));
        }
    }
}

/// The address in `MAIL FROM:<a@b> …` / `RCPT TO:<a@b>`.
fn address_in(command: &str) -> String {
    let after = command.split_once(':').map_or("", |(_, rest)| rest);
    after
        .trim()
        .trim_start_matches('<')
        .split(['>', ' '])
        .next()
        .unwrap_or_default()
        .to_owned()
}
