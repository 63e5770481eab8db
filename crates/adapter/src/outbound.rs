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

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use dashmap::DashMap;
use switchboard_core::{ChatId, CoreError, MessageId, OutboundKind, OutboundMessage};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::draft::{Draft, Step};
use crate::split::{Measure, split};

/// A turn that never ends stops showing "typing…" after this.
const TYPING_AT_MOST: Duration = Duration::from_secs(600);
/// How long a chat is held after a rate limit that states no wait.
const UNSTATED_WAIT: Duration = Duration::from_secs(5);

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

/// A platform's calls, as [`Replies`] makes them. Errors are mapped for delivery: a rate
/// limit is [`CoreError::RateLimited`] with the platform's wait.
#[async_trait]
pub trait Surface: Send + Sync + 'static {
    /// Where a chat's messages go, parsed from its id.
    type Place: Clone + Send + Sync + 'static;

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
}

impl ChatOut {
    fn new() -> Self {
        Self {
            draft: None,
            started: Instant::now(),
            delivered_parts: 0,
            typing: None,
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

/// The chats a platform asked to slow down, each until when. Every call to a held chat
/// waits (or, if it is best effort, is skipped) until then. An entry lives until the next
/// call to its chat finds it past, or until a later hold prunes it.
#[derive(Default)]
struct Holds(DashMap<ChatId, Instant>);

impl Holds {
    /// Holds over this many chats make the next hold prune the ones that are past.
    const PRUNE_AT: usize = 64;

    /// When `chat`'s hold ends, if it is held.
    fn until(&self, chat: &ChatId) -> Option<Instant> {
        let until = *self.0.get(chat)?;
        if until > Instant::now() {
            return Some(until);
        }
        self.0.remove_if(chat, |_, until| *until <= Instant::now());
        None
    }

    /// Waits until `chat` is not held.
    async fn wait(&self, chat: &ChatId) {
        while let Some(until) = self.until(chat) {
            tokio::time::sleep_until(until).await;
        }
    }

    /// Holds `chat` for what `err` asks, if it is a rate limit.
    fn note(&self, chat: &ChatId, err: &CoreError) {
        let CoreError::RateLimited { retry_after } = err else {
            return;
        };
        let wait = retry_after.unwrap_or(UNSTATED_WAIT);
        tracing::info!(%chat, wait_ms = wait.as_millis() as u64,
            "the platform is rate limiting this chat; every call to it waits");
        if self.0.len() >= Self::PRUNE_AT {
            let now = Instant::now();
            self.0.retain(|_, until| *until > now);
        }
        let until = Instant::now() + wait;
        self.0
            .entry(chat.clone())
            .and_modify(|held| *held = (*held).max(until))
            .or_insert(until);
    }

    /// Runs `call` to `chat` once its hold is over, and holds the chat if it is rate limited.
    async fn call<T>(
        &self,
        chat: &ChatId,
        call: impl Future<Output = Result<T, CoreError>>,
    ) -> Result<T, CoreError> {
        self.wait(chat).await;
        let result = call.await;
        if let Err(err) = &result {
            self.note(chat, err);
        }
        result
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
        }
    }

    /// The surface.
    pub fn surface(&self) -> &Arc<S> {
        &self.surface
    }

    /// Delivers one outbound message.
    pub async fn send(&self, message: OutboundMessage) -> Result<(), CoreError> {
        let place = self.surface.place(&message.chat_id)?;
        let chat = &message.chat_id;
        let answering = message.reply_to.as_ref();
        let holds = &self.holds;
        match &message.kind {
            OutboundKind::Done(_) => {
                // The turn is over: drop its state (and stop "typing…").
                self.chats.remove(&message.chat_id);
                return Ok(());
            }
            OutboundKind::Error(text) => {
                let text = format!("⚠️ {text}");
                let said = notice(&text, answering, true);
                return holds
                    .call(chat, self.surface.send(&place, said))
                    .await
                    .map(drop);
            }
            OutboundKind::Notice(text) => {
                let text = format!("ℹ️ {text}");
                let said = notice(&text, None, false);
                return holds
                    .call(chat, self.surface.send(&place, said))
                    .await
                    .map(drop);
            }
            OutboundKind::Question { text, .. } => {
                // A message of its own, kept apart from the draft: the turn waits on it.
                let text = format!("❓ {text}");
                let said = notice(&text, answering, true);
                return holds
                    .call(chat, self.surface.send(&place, said))
                    .await
                    .map(drop);
            }
            OutboundKind::Post(text) => {
                // Outside any turn: its own parts, never the chat's draft.
                let mut own = ChatOut::new();
                return self.deliver_reply(&mut own, chat, place, None, text).await;
            }
            OutboundKind::Status(_) | OutboundKind::Tool(_) => return Ok(()),
            OutboundKind::Delta(_) if !self.stream => return Ok(()),
            _ => {}
        }
        let state = self
            .chats
            .entry(message.chat_id.clone())
            .or_insert_with(|| Arc::new(tokio::sync::Mutex::new(ChatOut::new())))
            .clone();
        let mut out = state.lock().await;
        match message.kind {
            OutboundKind::TurnStarted => {
                *out = ChatOut::new();
                out.typing = Some(self.typing(chat.clone(), place));
                Ok(())
            }
            OutboundKind::Delta(piece) => {
                let now = out.started.elapsed();
                let (limit, measure) = self.surface.limit();
                let draft = out
                    .draft
                    .get_or_insert_with(|| Draft::new(self.edit_interval, limit, measure));
                let step = draft.push(&piece, now);
                self.draft_step(&mut out, step, chat, place, answering)
                    .await;
                Ok(())
            }
            OutboundKind::DraftReset => {
                if let Some(draft) = &mut out.draft {
                    draft.reset();
                }
                Ok(())
            }
            OutboundKind::Message(text) => {
                self.deliver_reply(&mut out, chat, place, answering, &text)
                    .await
            }
            OutboundKind::Error(_)
            | OutboundKind::Notice(_)
            | OutboundKind::Question { .. }
            | OutboundKind::Post(_)
            | OutboundKind::Status(_)
            | OutboundKind::Tool(_)
            | OutboundKind::Done(_) => Ok(()),
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
    /// if there is one, the others sent after it.
    async fn deliver_reply(
        &self,
        out: &mut ChatOut,
        chat: &ChatId,
        place: S::Place,
        answering: Option<&MessageId>,
        text: &str,
    ) -> Result<(), CoreError> {
        let holds = &self.holds;
        let (limit, measure) = self.surface.limit();
        let mut parts = split(text, limit, measure);
        if parts.is_empty() {
            parts.push("…".into());
        }
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
                .and_then(|draft| draft.finish(out.started.elapsed()).0.map(str::to_owned));
            match (index, draft_message) {
                (0, Some(message)) => {
                    // Edits stay an interval apart, the last one too.
                    if let Some(draft) = &out.draft {
                        let (_, wait) = draft.finish(out.started.elapsed());
                        tokio::time::sleep(wait).await;
                    }
                    let edit = Said {
                        as_reply: false,
                        ..said
                    };
                    match holds
                        .call(chat, self.surface.edit(&place, &message, edit))
                        .await
                    {
                        Ok(()) => {}
                        // The draft is gone (deleted by someone): the part goes out anew.
                        Err(CoreError::Channel { message: why, .. }) => {
                            tracing::info!(%why, "the draft could not be edited; the reply is sent anew");
                            holds.call(chat, self.surface.send(&place, said)).await?;
                        }
                        Err(err) => return Err(err),
                    }
                }
                _ => {
                    holds.call(chat, self.surface.send(&place, said)).await?;
                }
            }
            out.delivered_parts = index + 1;
        }
        Ok(())
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

fn notice<'a>(text: &'a str, answering: Option<&'a MessageId>, as_reply: bool) -> Said<'a> {
    Said {
        text,
        form: Form::Notice,
        answering,
        as_reply,
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use switchboard_core::TurnEnd;

    use super::*;

    /// What the recording surface saw: (call, message id, text, as_reply).
    type Call = (&'static str, String, String, bool);

    /// A 429 with Telegram's and Discord's stated wait.
    const RETRY_AFTER: Duration = Duration::from_secs(3);

    #[derive(Default)]
    struct Recorder {
        calls: Mutex<Vec<Call>>,
        /// Sends that fail with a rate limit, by the number of the send (0-based).
        failing_send: Mutex<Option<usize>>,
        sends: Mutex<usize>,
        /// Edits fail as if the message were gone.
        edits_fail: bool,
        /// Edits answered 429 (with [`RETRY_AFTER`]), by the number of the edit (0-based).
        limited_edit: Mutex<Option<usize>>,
        edits: Mutex<usize>,
        /// When each call was made, by chat place: (call, when).
        times: Mutex<Vec<(&'static str, Instant)>>,
    }

    impl Recorder {
        fn time(&self, call: &'static str) {
            self.times
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push((call, Instant::now()));
        }
    }

    #[async_trait]
    impl Surface for Recorder {
        type Place = ();

        fn place(&self, _chat: &ChatId) -> Result<(), CoreError> {
            Ok(())
        }

        fn limit(&self) -> (usize, Measure) {
            (64, Measure::Chars)
        }

        fn typing_every(&self) -> Duration {
            Duration::from_secs(5)
        }

        async fn send(&self, (): &(), said: Said<'_>) -> Result<String, CoreError> {
            self.time("send");
            let number = {
                let mut sends = self.sends.lock().unwrap_or_else(|e| e.into_inner());
                *sends += 1;
                *sends - 1
            };
            if *self.failing_send.lock().unwrap_or_else(|e| e.into_inner()) == Some(number) {
                return Err(CoreError::RateLimited { retry_after: None });
            }
            let id = format!("m{number}");
            self.calls.lock().unwrap_or_else(|e| e.into_inner()).push((
                "send",
                id.clone(),
                said.text.into(),
                said.as_reply,
            ));
            Ok(id)
        }

        async fn edit(&self, (): &(), message: &str, said: Said<'_>) -> Result<(), CoreError> {
            self.time("edit");
            let number = {
                let mut edits = self.edits.lock().unwrap_or_else(|e| e.into_inner());
                *edits += 1;
                *edits - 1
            };
            if *self.limited_edit.lock().unwrap_or_else(|e| e.into_inner()) == Some(number) {
                return Err(CoreError::RateLimited {
                    retry_after: Some(RETRY_AFTER),
                });
            }
            if self.edits_fail {
                return Err(CoreError::Channel {
                    channel: "test".into(),
                    message: "Unknown Message".into(),
                });
            }
            self.calls.lock().unwrap_or_else(|e| e.into_inner()).push((
                "edit",
                message.into(),
                said.text.into(),
                said.as_reply,
            ));
            Ok(())
        }

        async fn typing(&self, (): &()) -> Result<(), CoreError> {
            self.time("typing");
            Ok(())
        }
    }

    fn out(kind: OutboundKind) -> OutboundMessage {
        out_to("c", kind)
    }

    fn out_to(chat: &str, kind: OutboundKind) -> OutboundMessage {
        OutboundMessage {
            channel: "test".into(),
            chat_id: chat.into(),
            reply_to: Some(MessageId::from("u1")),
            kind,
        }
    }

    fn times(replies: &Replies<Recorder>) -> Vec<(&'static str, Instant)> {
        replies
            .surface()
            .times
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    #[tokio::test(start_paused = true)]
    async fn a_reply_that_ends_before_the_interval_is_closed_at_once() {
        let replies = Replies::new(Arc::new(Recorder::default()), true, Duration::from_secs(1));
        let started = Instant::now();
        replies.send(out(OutboundKind::TurnStarted)).await.ok();
        replies
            .send(out(OutboundKind::Delta("Hello".into())))
            .await
            .ok();
        tokio::time::sleep(Duration::from_millis(50)).await;
        replies
            .send(out(OutboundKind::Message("Hello there".into())))
            .await
            .ok();
        let calls = calls(&replies);
        assert_eq!(calls[1], ("edit", "m0".into(), "Hello there".into(), false));
        assert_eq!(
            started.elapsed(),
            Duration::from_millis(50),
            "no wait for the edit interval after the first send"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_rate_limited_draft_holds_every_call_to_its_chat_and_no_other() {
        let recorder = Recorder::default();
        *recorder
            .limited_edit
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = Some(0);
        let replies = Arc::new(Replies::new(
            Arc::new(recorder),
            true,
            Duration::from_millis(100),
        ));
        replies.send(out(OutboundKind::TurnStarted)).await.ok();
        replies
            .send(out(OutboundKind::Delta("Hello".into())))
            .await
            .ok();
        tokio::time::sleep(Duration::from_millis(150)).await;
        // This edit is answered 429: the chat is held for three seconds.
        let limited = Instant::now();
        replies
            .send(out(OutboundKind::Delta(" there".into())))
            .await
            .ok();
        tokio::time::sleep(Duration::from_millis(150)).await;
        replies
            .send(out(OutboundKind::Delta(", skipped".into())))
            .await
            .ok();
        // Another chat goes on meanwhile.
        replies
            .send(out_to("other", OutboundKind::Post("elsewhere".into())))
            .await
            .ok();
        let elsewhere = Instant::now();
        replies
            .send(out(OutboundKind::Message("Hello there, done".into())))
            .await
            .ok();
        let times = times(&replies);
        let after: Vec<&str> = times
            .iter()
            .filter(|(call, at)| *at > limited && *at < limited + RETRY_AFTER && *call != "send")
            .map(|(call, _)| *call)
            .collect();
        assert!(after.is_empty(), "nothing went to the held chat: {after:?}");
        assert!(elsewhere < limited + Duration::from_millis(500));
        let last = times.last().expect("the final edit");
        assert_eq!(last.0, "edit");
        assert!(
            last.1 >= limited + RETRY_AFTER,
            "the final reply waited out retry_after"
        );
        let calls = calls(&replies);
        assert_eq!(
            calls.iter().filter(|c| c.2 == "Hello there, done").count(),
            1,
            "the reply went out once"
        );
    }

    fn words(text: &str) -> Vec<&str> {
        text.split_whitespace().collect()
    }

    fn calls(replies: &Replies<Recorder>) -> Vec<Call> {
        replies
            .surface()
            .calls
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    #[tokio::test(start_paused = true)]
    async fn a_streamed_reply_ends_in_the_draft_and_the_rest_follows() {
        let replies = Replies::new(Arc::new(Recorder::default()), true, Duration::from_secs(1));
        replies.send(out(OutboundKind::TurnStarted)).await.ok();
        replies
            .send(out(OutboundKind::Delta("Hello".into())))
            .await
            .ok();
        replies
            .send(out(OutboundKind::Delta(" there".into())))
            .await
            .ok();
        let reply = "Hello there, this is longer than sixty-four characters, the shortest limit split keeps";
        replies
            .send(out(OutboundKind::Message(reply.into())))
            .await
            .ok();
        replies
            .send(out(OutboundKind::Done(TurnEnd::Answered)))
            .await
            .ok();
        let calls = calls(&replies);
        assert_eq!(calls[0], ("send", "m0".into(), "Hello".into(), true));
        // The final reply's first part went into the draft, the others after it.
        let edits: Vec<_> = calls.iter().filter(|c| c.0 == "edit").collect();
        assert_eq!(edits.last().map(|c| c.1.as_str()), Some("m0"));
        let final_parts: Vec<String> = std::iter::once(edits.last().map(|c| c.2.clone()))
            .flatten()
            .chain(
                calls
                    .iter()
                    .skip(1)
                    .filter(|c| c.0 == "send")
                    .map(|c| c.2.clone()),
            )
            .collect();
        assert_eq!(words(&final_parts.join(" ")), words(reply));
        assert!(
            calls.iter().skip(1).all(|c| !c.3),
            "only the first message is a reply"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_reply_that_failed_part_way_resumes_without_repeating() {
        let recorder = Recorder::default();
        *recorder
            .failing_send
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = Some(1);
        let replies = Replies::new(Arc::new(recorder), false, Duration::from_secs(1));
        let reply = "one two three four five six seven eight nine ten eleven twelve ".repeat(4);
        let message = out(OutboundKind::Message(reply.clone()));
        replies.send(out(OutboundKind::TurnStarted)).await.ok();
        let first = replies.send(message.clone()).await;
        assert!(
            matches!(first, Err(CoreError::RateLimited { .. })),
            "{first:?} {:?}",
            calls(&replies)
        );
        replies.send(message).await.ok();
        let texts: Vec<String> = calls(&replies).into_iter().map(|c| c.2).collect();
        assert!(texts.len() >= 3, "{texts:?}");
        assert_eq!(
            words(&texts.join(" ")),
            words(&reply),
            "each part once, in order"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_post_leaves_the_running_draft_alone() {
        let replies = Replies::new(Arc::new(Recorder::default()), true, Duration::from_secs(1));
        replies.send(out(OutboundKind::TurnStarted)).await.ok();
        replies
            .send(out(OutboundKind::Delta("draft".into())))
            .await
            .ok();
        replies
            .send(out(OutboundKind::Post("a reminder".into())))
            .await
            .ok();
        replies
            .send(out(OutboundKind::Message("the answer".into())))
            .await
            .ok();
        let calls = calls(&replies);
        assert_eq!(calls[1], ("send", "m1".into(), "a reminder".into(), false));
        assert_eq!(calls[2], ("edit", "m0".into(), "the answer".into(), false));
    }

    #[tokio::test(start_paused = true)]
    async fn a_reply_whose_draft_is_gone_is_sent_anew() {
        let recorder = Recorder {
            edits_fail: true,
            ..Recorder::default()
        };
        let replies = Replies::new(Arc::new(recorder), true, Duration::from_secs(1));
        replies.send(out(OutboundKind::TurnStarted)).await.ok();
        replies
            .send(out(OutboundKind::Delta("draft".into())))
            .await
            .ok();
        let sent = replies
            .send(out(OutboundKind::Message("the answer".into())))
            .await;
        assert!(sent.is_ok(), "{sent:?}");
        let calls = calls(&replies);
        assert_eq!(
            calls.last(),
            Some(&("send", "m1".into(), "the answer".into(), true))
        );
    }
}
