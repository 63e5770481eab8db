//! What a chat is sent while a turn runs, for any platform that can send, edit and show
//! "typing…": the keepalive, the reply streamed into a draft edited in place (best effort:
//! a failed edit is skipped, the final message makes up for it), and the final reply split
//! at the platform's limit — its first part edited into the draft, the rest sent after it,
//! the first replying to the person's message.
//!
//! An adapter implements [`Surface`] (the platform's calls) and hands every outbound
//! message to [`Replies::send`]. A chat's messages come from its delivery lane one at a
//! time, so its state needs no more than an uncontended lock. A final reply that failed
//! part-way (a 429 on its third part) is delivered again by the retry wrapper; the parts
//! that went out are counted, so it resumes instead of repeating them.
//!
//! A rate limit holds the whole chat: once any call to a chat (a draft edit, a part of the
//! reply, "typing…") is answered 429, every call to that chat waits out the platform's
//! `retry_after` (see [`Holds`]) — draft edits and "typing…" are skipped meanwhile, the final
//! reply and notices wait — while other chats go on. Platforms escalate the waits of bots
//! that ignore them.
//!
//! On a cluster, where a standby gateway takes the connection over from one that died, each
//! chat's draft, the parts of its final reply that went out and the last frame delivered are
//! kept in shared state ([`KeptChats`]): the standby edits the same draft on, sends only the
//! parts still missing, and skips the frames the stream offers it again that went out
//! before. A turn that starts again (its worker changed) finishes its draft too.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use dashmap::DashMap;
use switchboard_core::{
    ChatId, CoreError, MediaLimits, MediaStore, MessageId, OutboundFile, OutboundKind,
    OutboundMessage, Sent,
};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::draft::{Draft, Step};
use crate::holds::Holds;
use crate::kept::{Kept, KeptChats};
use crate::split::{Measure, split};

/// A turn that never ends stops showing "typing…" after this.
const TYPING_AT_MOST: Duration = Duration::from_secs(600);

/// What a text is, for platforms that render them differently.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Form {
    /// A streaming preview (may end mid-sentence, mid-Markdown): shown as it is.
    Draft,
    /// (A part of) the final reply: Markdown the platform may render.
    Reply,
    /// An error or a notice from switchboard itself: shown as it is.
    Notice,
}

/// One text going out.
#[derive(Clone, Copy, Debug)]
pub struct Said<'a> {
    /// The text, within the platform's limit.
    pub text: &'a str,
    /// What it is.
    pub form: Form,
    /// The person's message this answers, if it answers one (a platform may let its
    /// author be mentioned, and no one else).
    pub answering: Option<&'a MessageId>,
    /// Whether to show it as a reply to `answering` (the first message of an answer).
    pub as_reply: bool,
}

/// One file going out, as the platform is asked to upload it.
#[derive(Clone, Copy, Debug)]
pub struct Upload<'a> {
    /// The file (its name, type, size, kind).
    pub file: &'a OutboundFile,
    /// Where its bytes are on this host.
    pub path: &'a Path,
    /// Its caption, within the platform's caption limit (a longer one goes out as text
    /// after it).
    pub caption: Option<&'a str>,
    /// The person's message this answers, if it answers one.
    pub answering: Option<&'a MessageId>,
    /// Whether to show it as a reply to `answering`.
    pub as_reply: bool,
}

/// A platform's calls, as [`Replies`] makes them. Errors are mapped for delivery: a rate
/// limit is [`CoreError::RateLimited`] with the platform's wait.
#[async_trait]
pub trait Surface: Send + Sync + 'static {
    /// Where a chat's messages go, parsed from its id.
    type Place: Clone + Send + Sync + 'static;

    /// The channel's name (`telegram`), for errors.
    const CHANNEL: &'static str;

    /// The platform's name as people write it (`Telegram`), for what the model and the
    /// person read.
    const PLATFORM: &'static str;

    /// The place of `chat`, or why it is not one of this platform's chats.
    fn place(&self, chat: &ChatId) -> Result<Self::Place, CoreError>;

    /// The longest message and how the platform measures it.
    fn limit(&self) -> (usize, Measure);

    /// How often "typing…" is renewed.
    fn typing_every(&self) -> Duration;

    /// Sends a new message; returns its id.
    async fn send(&self, place: &Self::Place, said: Said<'_>) -> Result<String, CoreError>;

    /// Replaces the text of the message `message`.
    async fn edit(
        &self,
        place: &Self::Place,
        message: &str,
        said: Said<'_>,
    ) -> Result<(), CoreError>;

    /// Shows "typing…" once.
    async fn typing(&self, place: &Self::Place) -> Result<(), CoreError>;

    /// What the platform takes of files (none, by default).
    fn media(&self) -> MediaLimits {
        MediaLimits::NONE
    }

    /// Uploads a file as a message of its kind (a picture, a voice message, a document);
    /// returns the message's id once the platform took it. Only called for a file within
    /// [`Surface::media`].
    async fn send_file(
        &self,
        _place: &Self::Place,
        upload: Upload<'_>,
    ) -> Result<String, CoreError> {
        Err(CoreError::Channel {
            channel: Self::CHANNEL.into(),
            message: format!(
                "{} cannot be sent files here ({})",
                Self::PLATFORM,
                upload.file.name
            ),
        })
    }
}

/// One chat's state while a turn runs.
struct ChatOut {
    /// The draft of the reply streaming in, once text came.
    draft: Option<Draft>,
    /// The draft's clock starts with the turn.
    started: Instant,
    /// Parts of the final reply already delivered.
    delivered_parts: usize,
    /// Cancels the turn's "typing…" keepalive.
    typing: Option<CancellationToken>,
    /// The turn it is of: the id of the inbound message whose turn it is.
    turn: Option<MessageId>,
    /// Frames of the chat up to this stream position went out before (kept by whichever
    /// gateway held the connection then): skipped when the stream offers them again.
    kept_until: u64,
    /// Whether what is kept of the chat was read (once per turn; with shared state only).
    recalled: bool,
    /// The turn's whole reply went out (here, or — as kept — from another gateway): what
    /// comes of the turn later is the same turn run again elsewhere, and is not shown.
    finished: bool,
}

impl ChatOut {
    fn new() -> Self {
        Self {
            draft: None,
            started: Instant::now(),
            delivered_parts: 0,
            typing: None,
            turn: None,
            kept_until: 0,
            recalled: false,
            finished: false,
        }
    }

    /// What to keep of the chat now that the frame at `cursor` went out.
    fn kept(&self, cursor: u64) -> Kept {
        Kept {
            cursor,
            turn: self.turn.as_ref().map(|turn| turn.as_str().to_owned()),
            draft: self
                .draft
                .as_ref()
                .and_then(|draft| draft.message().map(str::to_owned)),
            delivered: self.delivered_parts,
            done: false,
        }
    }
}

impl Drop for ChatOut {
    fn drop(&mut self) {
        if let Some(typing) = self.typing.take() {
            typing.cancel();
        }
    }
}

/// Sends a channel's outbound messages through its [`Surface`].
pub struct Replies<S: Surface> {
    surface: Arc<S>,
    stream: bool,
    edit_interval: Duration,
    /// Chats with a turn running. An entry is made by the turn's first message and removed
    /// by its `Done`; the lock is uncontended (one lane per chat).
    chats: DashMap<ChatId, Arc<tokio::sync::Mutex<ChatOut>>>,
    /// Chats the platform asked to slow down.
    holds: Arc<Holds>,
    /// Where each chat's delivery is kept for a standby gateway (a cluster's); `None` alone.
    kept: Option<KeptChats>,
    /// Where files' bytes wait; `None`: the channel sends no files.
    media: Option<Arc<dyn MediaStore>>,
    /// The file of each chat that went up while the text after it (a long caption's rest)
    /// has not all gone out: its key and message id, so a retry sends only that text.
    uploaded: DashMap<ChatId, (String, String)>,
}

impl<S: Surface> Replies<S> {
    /// Replies through `surface`; with `stream`, drafts edited at most once per
    /// `edit_interval`.
    pub fn new(surface: Arc<S>, stream: bool, edit_interval: Duration) -> Self {
        Self {
            surface,
            stream,
            edit_interval,
            chats: DashMap::new(),
            holds: Arc::default(),
            kept: None,
            media: None,
            uploaded: DashMap::new(),
        }
    }

    /// Sends files, whose bytes wait in `media`.
    pub fn with_media(mut self, media: Arc<dyn MediaStore>) -> Self {
        self.media = Some(media);
        self
    }

    /// Keeps each chat's delivery in `kept` (when there is one), for a standby gateway to go
    /// on from: see [`ChannelParts::kept`](crate::ChannelParts::kept).
    pub fn keeping(mut self, kept: Option<KeptChats>) -> Self {
        self.kept = kept;
        self
    }

    /// The surface.
    pub fn surface(&self) -> &Arc<S> {
        &self.surface
    }

    /// Delivers one outbound message; the platform's id of the (last) message it made.
    pub async fn send(&self, message: OutboundMessage) -> Result<Sent, CoreError> {
        let place = self.surface.place(&message.chat_id)?;
        // Which turn it is of (a scheduled run's answers no message, and is still its run's).
        let turn = message.turn.as_ref().or(message.reply_to.as_ref());
        if let OutboundKind::Done(_) = &message.kind {
            self.done(&message, turn).await;
            return Ok(Sent::accepted());
        }
        if let Some(sent) = self.send_apart(&message, &place).await {
            return sent;
        }
        let state = self
            .chats
            .entry(message.chat_id.clone())
            .or_insert_with(|| Arc::new(tokio::sync::Mutex::new(ChatOut::new())))
            .clone();
        let mut out = state.lock().await;
        let chat = &message.chat_id;
        self.recall(&mut out, chat, turn).await;
        if message
            .cursor
            .is_some_and(|cursor| cursor <= out.kept_until)
        {
            // It went out before, from the gateway that held the connection then.
            return Ok(Sent::accepted());
        }
        self.in_turn(&mut out, &message, place, turn).await
    }

    /// The turn is over: its state dropped (and "typing…" stopped), and kept as done.
    async fn done(&self, message: &OutboundMessage, turn: Option<&MessageId>) {
        let chat = &message.chat_id;
        let ended = self.chats.remove(chat);
        let (Some(kept), Some(cursor)) = (&self.kept, message.cursor) else {
            return;
        };
        let (until, mut done) = match ended {
            Some((_, out)) => {
                let out = out.lock().await;
                (out.kept_until, out.kept(cursor))
            }
            None => {
                let until = kept.get(chat).await.map_or(0, |kept| kept.cursor);
                (until, Kept::default())
            }
        };
        if cursor > until {
            done.cursor = cursor;
            done.turn = turn.map(|turn| turn.as_str().to_owned());
            done.done = true;
            kept.put(chat, &done).await;
        }
    }

    /// What is sent apart from a turn's draft — an error, a notice, a question, a post — or
    /// not shown at all; `None` for a piece of the turn's answer.
    async fn send_apart(
        &self,
        message: &OutboundMessage,
        place: &S::Place,
    ) -> Option<Result<Sent, CoreError>> {
        let chat = &message.chat_id;
        let answering = message.reply_to.as_ref();
        let (text, answers) = match &message.kind {
            OutboundKind::Error(text) => (format!("⚠️ {text}"), answering),
            OutboundKind::Notice(text) => (format!("ℹ️ {text}"), None),
            // A message of its own, kept apart from the draft: the turn waits on it.
            OutboundKind::Question { text, .. } => (format!("❓ {text}"), answering),
            OutboundKind::Post(text) => {
                // Outside any turn: its own parts, never the chat's draft.
                let mut own = ChatOut::new();
                let place = place.clone();
                return Some(self.deliver_reply(&mut own, chat, place, None, text).await);
            }
            OutboundKind::File(file) => {
                let place = place.clone();
                return Some(self.deliver_file(chat, place, answering, file).await);
            }
            // What a voice note said, quoted, as a reply to it (within the limit).
            OutboundKind::Transcript(text) => {
                let quoted = quote(text, self.surface.limit());
                let said = Said {
                    text: &quoted,
                    form: Form::Reply,
                    answering,
                    as_reply: answering.is_some(),
                };
                let sent = self.holds.call(chat, self.surface.send(place, said)).await;
                return Some(sent.map(Sent::as_id));
            }
            OutboundKind::Status(_) | OutboundKind::Tool(_) => return Some(Ok(Sent::accepted())),
            OutboundKind::Delta(_) if !self.stream => return Some(Ok(Sent::accepted())),
            _ => return None,
        };
        let loud = !matches!(message.kind, OutboundKind::Notice(_));
        let said = notice(&text, answers, loud);
        Some(
            self.holds
                .call(chat, self.surface.send(place, said))
                .await
                .map(Sent::as_id),
        )
    }

    /// A piece of a turn's answer, with the chat's state: its start, a delta of its draft, a
    /// reset of it, its whole reply.
    async fn in_turn(
        &self,
        out: &mut ChatOut,
        message: &OutboundMessage,
        place: S::Place,
        turn: Option<&MessageId>,
    ) -> Result<Sent, CoreError> {
        let chat = &message.chat_id;
        let answering = message.reply_to.as_ref();
        let cursor = message.cursor.unwrap_or_default();
        match &message.kind {
            OutboundKind::TurnStarted => {
                self.turn_started(out, chat, place, turn);
                Ok(Sent::accepted())
            }
            // A piece of a turn this chat's state is not of — one whose start was not seen
            // here and that was not kept as running (a worker that lost its partition while
            // paused, waking to send what it had) — is a fragment of a turn that ended or moved
            // on: it would be a draft nothing finishes.
            OutboundKind::Delta(_) | OutboundKind::DraftReset if out.turn.as_ref() != turn => {
                Ok(Sent::accepted())
            }
            OutboundKind::Delta(piece) => {
                let now = out.started.elapsed();
                let (limit, measure) = self.surface.limit();
                let draft = out
                    .draft
                    .get_or_insert_with(|| Draft::new(self.edit_interval, limit, measure));
                let step = draft.push(piece, now);
                let sends = matches!(step, Step::Send(_));
                self.draft_step(out, step, chat, place, answering).await;
                if sends && let Some(kept) = &self.kept {
                    kept.put(chat, &out.kept(cursor)).await;
                }
                Ok(Sent::accepted())
            }
            OutboundKind::DraftReset => {
                if let Some(draft) = &mut out.draft {
                    draft.reset();
                }
                Ok(Sent::accepted())
            }
            OutboundKind::Message(text) => {
                let delivered = self.deliver_reply(out, chat, place, answering, text).await;
                if delivered.is_ok() {
                    out.turn = turn.cloned();
                    out.finished = true;
                }
                if let Some(kept) = &self.kept {
                    kept.put(chat, &out.kept(cursor)).await;
                }
                delivered
            }
            _ => Ok(Sent::accepted()),
        }
    }

    /// A turn started: the chat's state begins anew (typing…). The same turn started again
    /// (its worker changed) has its draft finished, not left behind beside a new one.
    fn turn_started(
        &self,
        out: &mut ChatOut,
        chat: &ChatId,
        place: S::Place,
        turn: Option<&MessageId>,
    ) {
        let again = out.turn.as_ref() == turn;
        let mut draft = out.draft.take().filter(|_| again);
        if let Some(draft) = &mut draft {
            draft.reset();
        }
        let (kept_until, recalled) = (out.kept_until, out.recalled);
        *out = ChatOut::new();
        out.draft = draft;
        out.turn = turn.cloned();
        out.kept_until = kept_until;
        out.recalled = recalled;
        out.typing = Some(self.typing(chat.clone(), place));
    }

    /// Reads what is kept of `chat` once per turn (with shared state): frames up to the kept
    /// cursor went out before; and when `turn` is the one kept, its draft is edited on and
    /// only the parts of its reply still missing are sent.
    async fn recall(&self, out: &mut ChatOut, chat: &ChatId, turn: Option<&MessageId>) {
        let Some(kept) = &self.kept else {
            return;
        };
        if out.recalled {
            return;
        }
        out.recalled = true;
        let Some(record) = kept.get(chat).await else {
            return;
        };
        out.kept_until = record.cursor;
        if record.turn.as_deref() != turn.map(MessageId::as_str) {
            return;
        }
        out.turn = turn.cloned();
        out.delivered_parts = record.delivered;
        out.finished = record.done;
        if let Some(message) = record.draft {
            let (limit, measure) = self.surface.limit();
            let mut draft = Draft::new(self.edit_interval, limit, measure);
            draft.sent(message, String::new(), out.started.elapsed());
            out.draft = Some(draft);
        }
    }

    /// Carries out what the draft asks for. Best effort: a draft that could not be sent or
    /// edited (or was skipped while the chat is held) is caught up by the next step or by
    /// the final reply.
    async fn draft_step(
        &self,
        out: &mut ChatOut,
        step: Step,
        chat: &ChatId,
        place: S::Place,
        answering: Option<&MessageId>,
    ) {
        if self.holds.until(chat).is_some() {
            return;
        }
        // A write counts from when the platform answered it: the next one is sent an
        // interval after that, so writes are an interval apart as the platform sees them.
        let result = match step {
            Step::Wait => return,
            Step::Send(text) => {
                let said = Said {
                    text: &text,
                    form: Form::Draft,
                    answering,
                    as_reply: true,
                };
                self.surface.send(&place, said).await.map(|id| {
                    let done = out.started.elapsed();
                    if let Some(draft) = &mut out.draft {
                        draft.sent(id, text.clone(), done);
                    }
                })
            }
            Step::Edit { message, text } => {
                let said = Said {
                    text: &text,
                    form: Form::Draft,
                    answering,
                    as_reply: false,
                };
                self.surface.edit(&place, &message, said).await.map(|()| {
                    let done = out.started.elapsed();
                    if let Some(draft) = &mut out.draft {
                        draft.edited(text.clone(), done);
                    }
                })
            }
        };
        if let Err(err) = result {
            self.holds.note(chat, &err);
            tracing::debug!(error = %err, "a draft update failed");
        }
    }

    /// Delivers the final reply: split at the limit, the first part edited into the draft
    /// if there is one, the others sent after it. The id is the last part's (none when
    /// every part went out before).
    async fn deliver_reply(
        &self,
        out: &mut ChatOut,
        chat: &ChatId,
        place: S::Place,
        answering: Option<&MessageId>,
        text: &str,
    ) -> Result<Sent, CoreError> {
        let holds = &self.holds;
        let (limit, measure) = self.surface.limit();
        let mut parts = split(text, limit, measure);
        if parts.is_empty() {
            parts.push("…".into());
        }
        let mut last = Sent::accepted();
        for (index, part) in parts.iter().enumerate().skip(out.delivered_parts) {
            let said = Said {
                text: part,
                form: Form::Reply,
                answering,
                as_reply: index == 0 && answering.is_some(),
            };
            let draft_message = out
                .draft
                .as_ref()
                .and_then(|draft| draft.message().map(str::to_owned));
            match (index, draft_message) {
                // At once, however recently the draft was edited (the draft module says why).
                (0, Some(message)) => {
                    let edit = Said {
                        as_reply: false,
                        ..said
                    };
                    last = match holds
                        .call(chat, self.surface.edit(&place, &message, edit))
                        .await
                    {
                        Ok(()) => Sent::as_id(message),
                        // The draft is gone (deleted by someone): the part goes out anew.
                        Err(CoreError::Channel { message: why, .. }) => {
                            tracing::info!(%why, "the draft could not be edited; the reply is sent anew");
                            Sent::as_id(holds.call(chat, self.surface.send(&place, said)).await?)
                        }
                        Err(err) => return Err(err),
                    };
                }
                _ => {
                    last = Sent::as_id(holds.call(chat, self.surface.send(&place, said)).await?);
                }
            }
            out.delivered_parts = index + 1;
        }
        Ok(last)
    }

    /// Delivers a file: checked against what the platform takes, uploaded (once, even when
    /// the text after it is retried), its caption with it — or, when the caption is longer
    /// than the platform shows with a file, the caption's text right after it.
    async fn deliver_file(
        &self,
        chat: &ChatId,
        place: S::Place,
        answering: Option<&MessageId>,
        file: &OutboundFile,
    ) -> Result<Sent, CoreError> {
        let refused = |message: String| CoreError::Channel {
            channel: S::CHANNEL.into(),
            message,
        };
        let Some(media) = &self.media else {
            return Err(refused(format!(
                "{} cannot be sent files here ({})",
                S::PLATFORM,
                file.name
            )));
        };
        let limits = self.surface.media();
        if let Some(why) = limits.refusal(S::PLATFORM, file.kind, file.bytes) {
            return Err(refused(why));
        }
        let caption = file
            .caption
            .as_deref()
            .map(str::trim)
            .filter(|c| !c.is_empty());
        let fits = caption.is_none_or(|c| c.chars().count() <= limits.caption);
        let done = self
            .uploaded
            .get(chat)
            .filter(|entry| entry.0 == file.key)
            .map(|entry| entry.1.clone());
        let id = match done {
            Some(id) => id,
            None => {
                let path = media
                    .local(&file.key)
                    .await
                    .map_err(|err| refused(err.to_string()))?;
                let upload = Upload {
                    file,
                    path: &path,
                    caption: caption.filter(|_| fits),
                    answering,
                    as_reply: answering.is_some(),
                };
                let id = self
                    .holds
                    .call(chat, self.surface.send_file(&place, upload))
                    .await?;
                if fits {
                    return Ok(Sent::as_id(id));
                }
                self.uploaded
                    .insert(chat.clone(), (file.key.clone(), id.clone()));
                id
            }
        };
        if let Some(text) = caption {
            let mut own = ChatOut::new();
            self.deliver_reply(&mut own, chat, place, None, text)
                .await?;
        }
        self.uploaded
            .remove_if(chat, |_, entry| entry.0 == file.key);
        Ok(Sent::as_id(id))
    }

    /// Shows "typing…" until the token is cancelled (or [`TYPING_AT_MOST`] passed); not
    /// while the chat is held.
    fn typing(&self, chat: ChatId, place: S::Place) -> CancellationToken {
        let stop = CancellationToken::new();
        let surface = self.surface.clone();
        let holds = self.holds.clone();
        let token = stop.clone();
        tokio::spawn(async move {
            let until = Instant::now() + TYPING_AT_MOST;
            let every = surface.typing_every();
            while Instant::now() < until {
                if holds.until(&chat).is_none() {
                    tokio::select! {
                        () = token.cancelled() => return,
                        result = surface.typing(&place) => {
                            if let Err(err) = result {
                                holds.note(&chat, &err);
                                tracing::debug!(error = %err, "\"typing…\" failed");
                            }
                        }
                    }
                }
                tokio::select! {
                    () = token.cancelled() => return,
                    () = tokio::time::sleep(every) => {}
                }
            }
        });
        stop
    }
}

/// A transcript as a Markdown quote (`> 🎙️ …`), cut to fit one message of `limit`.
fn quote(text: &str, (limit, measure): (usize, Measure)) -> String {
    let quoted: String = std::iter::once(format!("> 🎙️ {}", text.lines().next().unwrap_or("")))
        .chain(text.lines().skip(1).map(|line| format!("> {line}")))
        .collect::<Vec<_>>()
        .join("\n");
    // Room for the quote marks a split adds; a longer transcript is cut with an ellipsis.
    match split(&quoted, limit.saturating_sub(16).max(1), measure)
        .into_iter()
        .next()
    {
        Some(first) if first.len() < quoted.len() => format!("{}…", first.trim_end()),
        Some(first) => first,
        None => quoted,
    }
}

fn notice<'a>(text: &'a str, answering: Option<&'a MessageId>, as_reply: bool) -> Said<'a> {
    Said {
        text,
        form: Form::Notice,
        answering,
        as_reply,
    }
}

#[cfg(test)]
mod tests;
