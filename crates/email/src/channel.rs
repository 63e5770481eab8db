//! [`EmailChannel`]: the `Channel` impl — one task reading the mailbox (what came since the
//! last UID taken in, then IDLE until more comes), its mails taken in order, and replies
//! through the shared [`Replies`] over SMTP.
//!
//! Nothing received is lost: each mail is taken into the channel's inbox (fsynced) before
//! its UID is kept (in the state store, `email/uid`, with the folder's UIDVALIDITY), and
//! only then marked read. A connection that breaks, or a daemon killed, reads again after
//! the kept UID; a mail read again is one the inbox or the session's journal already has:
//! answered once. The first start (no UID kept) — or a folder whose UIDVALIDITY changed —
//! takes the unread mails.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use switchboard_adapter::{
    Admit, AllowList, BuildError, BuiltChannel, ChannelParts, ChannelSection, Gate, HttpFacts,
    Inbox, Intake, IntakeParts, Replies, keep,
};
use switchboard_core::{
    Channel, ChannelContext, ChannelName, ChatId, ConfigProblem, CoreError, OutboundMessage, Sent,
    StateStore,
};

use crate::config::{EmailSection, EmailSettings};
use crate::convert::{Mail, Reader, read, read_header};
use crate::imap::{self, IDLE_FOR, Mailbox};
use crate::surface::{CHANNEL_NAME, Files, MEDIA, Sender, Smtp, channel_error, unavailable};
use crate::threads::Threads;
use crate::tool::EmailTool;

/// The key the last UID taken in is kept under (`<uidvalidity>:<uid>`).
pub const UID_KEY: &str = "email/uid";
/// The pause before connecting again after the connection broke.
const RECONNECT_AFTER: Duration = Duration::from_secs(2);

impl ChannelSection for EmailSection {
    fn enabled(&self) -> bool {
        self.enabled
    }

    fn validate(&self, _http: &HttpFacts) -> Result<(), ConfigProblem> {
        if !self.enabled {
            return Ok(());
        }
        self.settings().map(drop)
    }

    fn media(&self) -> switchboard_core::MediaLimits {
        MEDIA
    }

    fn build(&self, parts: &ChannelParts) -> Result<BuiltChannel, BuildError> {
        let channel = EmailChannel::new(self.settings()?, parts)?;
        Ok(BuiltChannel::new(Arc::new(channel)))
    }

    fn tools(&self) -> Vec<Arc<dyn switchboard_tools::Tool>> {
        if !self.tool {
            return Vec::new();
        }
        let built = self
            .settings()
            .map_err(|problem| problem.message)
            .and_then(|settings| EmailTool::new(settings).map_err(|err| err.to_string()));
        match built {
            Ok(tool) => vec![Arc::new(tool)],
            Err(why) => {
                tracing::warn!(why, "email: the `email` tool is left out");
                Vec::new()
            }
        }
    }
}

/// The email channel. Cloning shares it.
#[derive(Clone)]
pub struct EmailChannel {
    inner: Arc<Inner>,
}

struct Inner {
    settings: EmailSettings,
    smtp: Arc<Smtp>,
    threads: Arc<Threads>,
    replies: Replies<Smtp>,
    admit: Arc<Admit>,
    state: Arc<dyn StateStore>,
    /// Taken by `run` (one at a time, under the supervisor).
    intake: tokio::sync::Mutex<Intake>,
}

impl EmailChannel {
    /// A channel with `settings`, publishing on the parts' hub; attachments go under its
    /// workspace, its inbox under its state directory.
    pub fn new(settings: EmailSettings, parts: &ChannelParts) -> Result<Self, CoreError> {
        let threads = Arc::new(Threads::new(parts.state.clone()));
        let smtp = Arc::new(Smtp {
            sender: Sender::new(&settings)?,
            threads: threads.clone(),
        });
        let gate = Gate::new(
            CHANNEL_NAME,
            AllowList::new(&settings.allow_from),
            parts.pairing.clone(),
        );
        let admit = Arc::new(Admit::new(
            IntakeParts {
                channel: CHANNEL_NAME,
                platform: "email",
                hub: parts.hub.clone(),
                gate: Arc::new(gate),
                workspace: parts.workspace.clone(),
                max_attachment_bytes: settings.max_attachment_bytes,
                cap_key: "channels.email.max_attachment_bytes",
            },
            Arc::new(Files {
                settings: settings.clone(),
            }),
        ));
        let inbox_path = parts.state_dir.join(CHANNEL_NAME).join("inbox.jsonl");
        let replies = Replies::new(smtp.clone(), false, Duration::from_secs(1))
            .keeping(parts.kept(CHANNEL_NAME))
            .with_media(parts.media.clone());
        Ok(Self {
            inner: Arc::new(Inner {
                settings,
                smtp,
                threads,
                replies,
                admit: admit.clone(),
                state: parts.state.clone(),
                intake: tokio::sync::Mutex::new(Intake::new(admit, inbox_path)),
            }),
        })
    }
}

impl Inner {
    /// The last UID taken in by an earlier run, if the folder is still the one it was
    /// taken from (`validity`).
    async fn kept_uid(&self, validity: u32) -> Option<u32> {
        let stored = match self.state.get(UID_KEY).await {
            Ok(stored) => stored?,
            Err(err) => {
                tracing::warn!(error = %err, "email: the last UID taken in could not be read; taking the unread mails");
                return None;
            }
        };
        let text = String::from_utf8(stored.bytes).ok()?;
        let (kept_validity, uid) = text.split_once(':')?;
        if kept_validity.parse::<u32>().ok()? != validity {
            tracing::warn!(
                folder = self.settings.mailbox,
                "email: the folder was rebuilt (its UIDVALIDITY changed); taking its unread mails"
            );
            return None;
        }
        uid.parse().ok()
    }

    async fn keep_uid(&self, validity: u32, uid: u32) {
        let kept = format!("{validity}:{uid}").into_bytes();
        if let Err(err) = self.state.put(UID_KEY, kept).await {
            tracing::warn!(error = %err, "email: the last UID could not be kept (a restart reads the mail again; the journal answers it once)");
        }
    }

    /// Reads the mailbox until the connection breaks: what came since the last UID taken
    /// in, then waits for more.
    async fn follow(&self, intake: &mut Intake, inbox: &Inbox) -> Result<(), CoreError> {
        let settings = &self.settings;
        let mut mailbox = imap::connect(settings, &settings.mailbox, false).await?;
        let validity = mailbox.validity;
        let mut last = self.kept_uid(validity).await;
        tracing::info!(
            address = settings.address,
            folder = settings.mailbox,
            "email: reading the mailbox"
        );
        loop {
            // What was announced before this search is found by it.
            mailbox.announced();
            for uid in mailbox.after(last).await? {
                self.take(&mut mailbox, intake, inbox, uid).await?;
                self.keep_uid(validity, uid).await;
                last = Some(uid);
            }
            // A mail that came while they were taken in was told of in a command's answer:
            // IDLE would not tell of it again.
            if mailbox.announced() {
                continue;
            }
            mailbox = mailbox.wait(IDLE_FOR).await?;
        }
    }

    /// Takes in the mail `uid`: into the inbox, then admitted in order, then marked read.
    async fn take(
        &self,
        mailbox: &mut Mailbox,
        intake: &mut Intake,
        inbox: &Inbox,
        uid: u32,
    ) -> Result<(), CoreError> {
        let settings = &self.settings;
        let reader = Reader {
            me: &settings.address,
            verified_by: settings.verified_by.as_deref(),
        };
        let read = match mailbox.fetch(uid, settings.max_mail_bytes).await? {
            Ok(Some(raw)) => read(reader, &raw, mailbox.validity, uid),
            Ok(None) => return Ok(()),
            Err(size) => {
                tracing::warn!(
                    uid,
                    size,
                    max = settings.max_mail_bytes,
                    "email: a mail over channels.email.max_mail_bytes was not read"
                );
                let notice = format!(
                    "[A mail of {size} bytes came, over the {} bytes this agent reads (channels.email.max_mail_bytes): it was not read. Tell the person.]",
                    settings.max_mail_bytes
                );
                match mailbox.header(uid).await? {
                    Some(header) => read_header(reader, &header, mailbox.validity, uid, notice),
                    None => return Ok(()),
                }
            }
        };
        let Mail { arrival, thread } = match read {
            Ok(mail) => mail,
            Err(why) => {
                tracing::debug!(uid, why, "email: a mail not for the agent");
                return Ok(());
            }
        };
        self.threads.note(&arrival.chat, thread).await;
        // A full inbox: not taken now; the mailbox is read again from before it.
        let entry = keep(inbox, &arrival, "email")
            .await
            .map_err(|err| unavailable(format!("a mail could not be taken in yet: {err}")))?;
        intake.admit(arrival, entry).await;
        if let Err(err) = mailbox.mark_seen(uid).await {
            tracing::info!(uid, error = %err, "email: a mail taken in could not be marked read");
        }
        Ok(())
    }
}

#[async_trait]
impl Channel for EmailChannel {
    fn name(&self) -> ChannelName {
        ChannelName::from(CHANNEL_NAME)
    }

    async fn check(&self) -> Result<Option<String>, CoreError> {
        let settings = &self.inner.settings;
        let mailbox = imap::connect(settings, &settings.mailbox, true).await?;
        let holds = mailbox.exists;
        mailbox.logout().await;
        self.inner.smtp.sender.reachable().await?;
        Ok(Some(format!(
            "{}: {} holds {holds} mails; SMTP {} answers",
            settings.address, settings.mailbox, settings.smtp.host
        )))
    }

    async fn run(&self, ctx: ChannelContext) -> Result<(), CoreError> {
        let inner = &self.inner;
        let mut intake = inner.intake.lock().await;
        let inbox = intake
            .open_inbox()
            .await
            .map_err(|err| channel_error(err.to_string()))?;
        loop {
            tokio::select! {
                () = ctx.intake.cancelled() => break,
                ended = inner.follow(&mut intake, &inbox) => {
                    match ended {
                        // A refused login, a folder that is not there: the supervisor
                        // shows it and tries again later.
                        Err(err) if !err.is_transient() => return Err(err),
                        Err(err) => tracing::info!(error = %err, "email: reading the mailbox again"),
                        Ok(()) => {}
                    }
                    tokio::select! {
                        () = ctx.intake.cancelled() => break,
                        () = tokio::time::sleep(RECONNECT_AFTER) => {}
                    }
                }
            }
        }
        ctx.shutdown.cancelled().await;
        Ok(())
    }

    async fn send(&self, message: OutboundMessage) -> Result<Sent, CoreError> {
        self.inner.replies.send(message).await
    }

    async fn may_notify(&self, chat: &ChatId) -> bool {
        self.inner.admit.may_notify(chat).await
    }
}
