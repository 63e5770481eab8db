//! Replies by mail: [`Smtp`] is the channel's [`Surface`] — each message a mail to the
//! thread's person over SMTP (lettre), `Re:` its subject, `In-Reply-To` the mail it answers
//! and `References` the thread, the person's mail quoted under the first part of an answer,
//! files as attachments — and [`Files`] reads people's attachments back from the mailbox.
//!
//! Errors are mapped for delivery: the server's "try again later" (4xx) holds the chat for
//! `retry_after_secs`; a refusal (5xx) is final, with the server's reason; a server out of
//! reach is `Unavailable`.

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use async_trait::async_trait;
use lettre::message::MessageBuilder;
use lettre::message::header::{ContentType, HeaderName, HeaderValue};
use lettre::message::{Attachment, Mailbox as Address, MultiPart, SinglePart};
use lettre::transport::smtp::authentication::Credentials;
use lettre::transport::smtp::client::{Tls, TlsParameters};
use lettre::{AsyncSmtpTransport, AsyncTransport, Message, Tokio1Executor};
use switchboard_adapter::{
    Chunks, Fetch, FileRef, Form, Measure, Said, Surface, Upload, plain_text,
};
use switchboard_core::{ChatId, CoreError, MediaLimits, MessageId};

use crate::config::{EmailSettings, Security};
use crate::convert::{PartAt, Thread, attachment, domain_of, quoted};
use crate::imap;
use crate::threads::Threads;

/// The channel's name: the prefix of its session keys.
pub const CHANNEL_NAME: &str = "email";

/// The longest mail body sent, in characters (a longer answer goes out in several mails).
pub const MESSAGE_LIMIT: usize = 50_000;

/// What mail takes of files: most providers refuse mails over 25 MB, and base64 makes a
/// file a third larger.
pub(crate) const MEDIA: MediaLimits = MediaLimits {
    image: 18 * 1024 * 1024,
    voice: 18 * 1024 * 1024,
    document: 18 * 1024 * 1024,
    caption: MESSAGE_LIMIT,
};

/// How long one mail's delivery to the SMTP server may take.
const SEND_TIMEOUT: Duration = Duration::from_secs(60);

/// The SMTP server and the bot's address: mails out, errors mapped for delivery.
pub(crate) struct Sender {
    transport: AsyncSmtpTransport<Tokio1Executor>,
    pub(crate) from: Address,
    domain: String,
    retry_after: Duration,
}

impl Sender {
    pub(crate) fn new(settings: &EmailSettings) -> Result<Self, CoreError> {
        let server = &settings.smtp;
        let smtp_error = |err: lettre::transport::smtp::Error| {
            channel_error(format!("the SMTP server {}: {err}", server.host))
        };
        let builder = match server.security {
            Security::Tls => {
                AsyncSmtpTransport::<Tokio1Executor>::relay(&server.host).map_err(smtp_error)?
            }
            Security::StartTls { loopback: false } => {
                AsyncSmtpTransport::<Tokio1Executor>::starttls_relay(&server.host)
                    .map_err(smtp_error)?
            }
            // A server on this host: STARTTLS when it offers it, plain text (never leaving
            // the host) when not.
            Security::StartTls { loopback: true } => {
                let tls = TlsParameters::new(server.host.clone()).map_err(smtp_error)?;
                AsyncSmtpTransport::<Tokio1Executor>::builder_dangerous(&server.host)
                    .tls(Tls::Opportunistic(tls))
            }
        };
        let builder = if settings.smtp_login {
            builder.credentials(Credentials::new(
                settings.username.clone(),
                settings.password.clone(),
            ))
        } else {
            builder
        };
        let transport = builder
            .port(server.port)
            .hello_name(lettre::transport::smtp::extension::ClientId::Domain(
                domain_of(&settings.address).to_owned(),
            ))
            .timeout(Some(SEND_TIMEOUT))
            .build();
        let address = settings
            .address
            .parse()
            .map_err(|err| channel_error(format!("`{}`: {err}", settings.address)))?;
        let name = (!settings.name.is_empty()).then(|| settings.name.clone());
        Ok(Self {
            transport,
            from: Address::new(name, address),
            domain: domain_of(&settings.address).to_owned(),
            retry_after: settings.retry_after,
        })
    }

    /// Whether the SMTP server takes a connection and the login.
    pub(crate) async fn reachable(&self) -> Result<(), CoreError> {
        match self.transport.test_connection().await {
            Ok(true) => Ok(()),
            Ok(false) => Err(unavailable("the SMTP server did not answer".into())),
            Err(err) => Err(self.mapped(&err)),
        }
    }

    /// A new Message-ID of the bot's domain (without angle brackets).
    pub(crate) fn new_id(&self) -> String {
        let millis = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |since| since.as_millis());
        format!("{millis}.{:016x}@{}", fastrand::u64(..), self.domain)
    }

    /// A mail from the bot with the Message-ID `id`, marked as a robot's: `auto-replied`
    /// (an answer) or `auto-generated` (a mail of its own).
    pub(crate) fn builder(
        &self,
        to: Address,
        subject: String,
        id: &str,
        auto: &'static str,
    ) -> MessageBuilder {
        Message::builder()
            .from(self.from.clone())
            .to(to)
            .subject(subject)
            .message_id(Some(format!("<{id}>")))
            .header(AutoSubmitted(auto))
    }

    pub(crate) async fn deliver(&self, message: Message) -> Result<(), CoreError> {
        self.transport
            .send(message)
            .await
            .map(drop)
            .map_err(|err| self.mapped(&err))
    }

    /// An SMTP error, mapped for delivery.
    fn mapped(&self, err: &lettre::transport::smtp::Error) -> CoreError {
        if err.is_transient() {
            tracing::info!(error = %err, "email: the SMTP server said to try again later");
            CoreError::RateLimited {
                retry_after: Some(self.retry_after),
            }
        } else if err.is_permanent() {
            channel_error(format!("the SMTP server refused the mail: {err}"))
        } else {
            unavailable(format!(
                "the SMTP server: {}",
                switchboard_core::error_chain(err)
            ))
        }
    }
}

/// The channel's replies: each in its chat's thread.
pub(crate) struct Smtp {
    pub(crate) sender: Sender,
    pub(crate) threads: Arc<Threads>,
}

impl Smtp {
    /// A mail to `chat`'s thread, answering `answering`; returns it with its Message-ID.
    async fn mail(
        &self,
        chat: &str,
        answering: Option<&MessageId>,
        body: impl FnOnce(&Thread) -> Result<MailBody, CoreError>,
    ) -> Result<(Message, String), CoreError> {
        let thread = self.threads.get(chat).await.ok_or_else(|| {
            channel_error(format!(
                "no mail of the thread `{chat}` is known here: the agent can only answer threads people wrote in"
            ))
        })?;
        let to: lettre::Address = thread
            .to
            .parse()
            .map_err(|err| channel_error(format!("`{}`: {err}", thread.to)))?;
        let name = (!thread.name.is_empty()).then(|| thread.name.clone());
        let id = self.sender.new_id();
        let answers = answering
            .map(|id| id.as_str().to_owned())
            .unwrap_or_else(|| thread.last.clone());
        let mut references = thread.references.clone();
        if !references.contains(&answers) {
            references.push(answers.clone());
        }
        let subject = if thread.subject.is_empty() {
            "Re: your mail".to_owned()
        } else {
            format!("Re: {}", thread.subject)
        };
        let builder = self
            .sender
            .builder(Address::new(name, to), subject, &id, "auto-replied")
            .in_reply_to(format!("<{answers}>"))
            .references(
                references
                    .iter()
                    .map(|id| format!("<{id}>"))
                    .collect::<Vec<_>>()
                    .join(" "),
            );
        let message = match body(&thread)? {
            MailBody::Text(text) => builder.singlepart(SinglePart::plain(text)),
            MailBody::WithFile(text, file) => builder.multipart(
                MultiPart::mixed()
                    .singlepart(SinglePart::plain(text))
                    .singlepart(file),
            ),
        }
        .map_err(|err| channel_error(format!("the mail cannot be written: {err}")))?;
        Ok((message, id))
    }
}

/// A mail's body.
enum MailBody {
    Text(String),
    WithFile(String, SinglePart),
}

/// `Auto-Submitted` (RFC 3834): other robots do not answer the agent's mail.
#[derive(Clone)]
struct AutoSubmitted(&'static str);

impl lettre::message::header::Header for AutoSubmitted {
    fn name() -> HeaderName {
        HeaderName::new_from_ascii_str("Auto-Submitted")
    }

    fn parse(_text: &str) -> Result<Self, Box<dyn std::error::Error + Send + Sync>> {
        Ok(Self("auto-generated"))
    }

    fn display(&self) -> HeaderValue {
        HeaderValue::new(Self::name(), self.0.to_owned())
    }
}

#[async_trait]
impl Surface for Smtp {
    type Place = String;
    const CHANNEL: &'static str = CHANNEL_NAME;
    const PLATFORM: &'static str = "email";

    fn place(&self, chat: &ChatId) -> Result<String, CoreError> {
        let chat = chat.as_str();
        if !chat.is_empty() && chat.bytes().all(|b| b.is_ascii_hexdigit()) {
            Ok(chat.to_owned())
        } else {
            Err(channel_error(format!("`{chat}` is not a mail thread")))
        }
    }

    fn limit(&self) -> (usize, Measure) {
        (MESSAGE_LIMIT, Measure::Chars)
    }

    fn typing_every(&self) -> Duration {
        // Mail shows no "typing…": the renewals do nothing.
        Duration::from_secs(3600)
    }

    async fn send(&self, chat: &String, said: Said<'_>) -> Result<String, CoreError> {
        let text = match said.form {
            Form::Reply => plain_text(said.text),
            Form::Draft | Form::Notice => said.text.to_owned(),
        };
        let (mail, id) = self
            .mail(chat, said.answering, |thread| {
                let quotes = said.as_reply
                    && said
                        .answering
                        .is_none_or(|answering| answering.as_str() == thread.last);
                Ok(MailBody::Text(if quotes {
                    quoted(&text, thread)
                } else {
                    text
                }))
            })
            .await?;
        self.sender.deliver(mail).await?;
        Ok(id)
    }

    async fn edit(&self, _chat: &String, _message: &str, _said: Said<'_>) -> Result<(), CoreError> {
        // Not reached: the channel does not stream (a sent mail cannot be changed).
        Err(channel_error("a sent mail cannot be changed".into()))
    }

    async fn typing(&self, _chat: &String) -> Result<(), CoreError> {
        Ok(())
    }

    fn media(&self) -> MediaLimits {
        MEDIA
    }

    async fn send_file(&self, chat: &String, upload: Upload<'_>) -> Result<String, CoreError> {
        let name = upload.file.name.clone();
        let bytes = tokio::fs::read(upload.path)
            .await
            .map_err(|err| channel_error(format!("cannot read {name}: {err}")))?;
        let kind = ContentType::parse(&upload.file.mime)
            .unwrap_or(ContentType::parse("application/octet-stream").expect("a MIME type"));
        let caption = upload.caption.map(plain_text).unwrap_or_default();
        let (mail, id) = self
            .mail(chat, upload.answering, move |_| {
                Ok(MailBody::WithFile(
                    caption,
                    Attachment::new(name).body(bytes, kind),
                ))
            })
            .await?;
        self.sender.deliver(mail).await?;
        Ok(id)
    }
}

/// People's attachments, read again from the mailbox (the inbox keeps only where they are).
pub(crate) struct Files {
    pub(crate) settings: EmailSettings,
}

#[async_trait]
impl Fetch for Files {
    async fn fetch(&self, file: &FileRef) -> Result<Chunks, String> {
        let at = PartAt::decode(&file.url).ok_or("not a place in the mailbox")?;
        let mut mailbox = imap::connect(&self.settings, &self.settings.mailbox, true)
            .await
            .map_err(|err| format!("the mailbox cannot be read: {err}"))?;
        if mailbox.validity != at.validity {
            mailbox.logout().await;
            return Err(
                "the mailbox was rebuilt since the mail came (its UIDVALIDITY changed)".into(),
            );
        }
        let fetched = mailbox
            .fetch(at.uid, self.settings.max_mail_bytes)
            .await
            .map_err(|err| format!("the mail cannot be read: {err}"));
        mailbox.logout().await;
        let raw = match fetched? {
            Ok(Some(raw)) => raw,
            Ok(None) => return Err("the mail is no longer in the mailbox".into()),
            Err(size) => return Err(format!("the mail is {size} bytes, over the cap")),
        };
        let bytes = attachment(&raw, at.index).ok_or("the mail has no such attachment")?;
        Ok(Box::pin(futures::stream::once(async move {
            Ok(axum::body::Bytes::from(bytes))
        })))
    }
}

pub(crate) fn channel_error(message: String) -> CoreError {
    CoreError::Channel {
        channel: CHANNEL_NAME.into(),
        message,
    }
}

pub(crate) fn unavailable(message: String) -> CoreError {
    CoreError::Unavailable {
        channel: CHANNEL_NAME.into(),
        message,
    }
}
