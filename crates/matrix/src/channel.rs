//! [`MatrixChannel`]: the `Channel` impl — the bot's client syncing with its homeserver
//! (one long poll at a time, decrypting as it goes), invites answered, each room message
//! taken in order, and replies through the shared [`Replies`] over the rooms.
//!
//! Nothing received is lost: each sync's messages are taken into the channel's inbox
//! (fsynced) before its `next_batch` token is kept (in the state store, `matrix.since`); a
//! start, or a sync after any break, begins from the kept token, so the homeserver sends
//! again whatever came after it. A message sent again is one the inbox or the session's
//! journal already has: answered once. The SDK's own store keeps its token too, but the
//! channel never syncs from it: only from what its inbox holds.
//!
//! A message whose key has not come yet (people's clients send keys beside the message, and
//! a slow one after it) waits: it is tried again at each sync for [`KEY_WAIT`], the kept
//! token held before it so a restart meets it again; a key that never comes is told to its
//! author, never dropped silently.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use matrix_sdk::config::SyncSettings;
use matrix_sdk::deserialized_responses::{TimelineEvent, TimelineEventKind};
use matrix_sdk::ruma::api::client::filter::{FilterDefinition, RoomEventFilter, RoomFilter};
use matrix_sdk::ruma::api::client::sync::sync_events::v3::Filter;
use matrix_sdk::ruma::events::room::encrypted::OriginalSyncRoomEncryptedEvent;
use matrix_sdk::ruma::serde::Raw;
use matrix_sdk::ruma::{OwnedRoomId, UInt};
use matrix_sdk::{Client, Room, RoomState};
use serde_json::Value;
use switchboard_adapter::{
    Admit, AllowList, BuildError, BuiltChannel, ChannelParts, ChannelSection, Gate, HttpFacts,
    Inbox, Incoming, Intake, IntakeParts, Replies, keep,
};
use switchboard_core::{
    Channel, ChannelContext, ChannelName, ChatId, ConfigProblem, CoreError, OutboundMessage, Sent,
    StateStore,
};
use tokio::sync::OnceCell;
use tokio::time::Instant;

use crate::config::{MatrixSection, MatrixSettings};
use crate::convert::{RoomFacts, read};
use crate::session::{self, Paths};
use crate::surface::{CHANNEL_NAME, Files, MEDIA, Rooms, channel_error, mapped, unavailable};

/// The key the token of the last sync taken in is kept under.
pub const TOKEN_KEY: &str = "matrix.since";
/// How long a sync waits on the homeserver for something new.
const LONG_POLL: Duration = Duration::from_secs(30);
/// The pause before syncing again after a sync failed.
const RETRY_AFTER: Duration = Duration::from_secs(2);
/// How long a message whose key has not come is tried again.
pub const KEY_WAIT: Duration = Duration::from_secs(120);
/// Events of a room one sync brings at most (more than this while the bot was away: the
/// older ones are fetched by no one, and a warning says so).
const TIMELINE_LIMIT: u32 = 100;

impl ChannelSection for MatrixSection {
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
        let channel = MatrixChannel::new(self.settings()?, parts);
        Ok(BuiltChannel::new(Arc::new(channel)))
    }
}

/// The Matrix channel. Cloning shares it.
#[derive(Clone)]
pub struct MatrixChannel {
    inner: Arc<Inner>,
}

struct Inner {
    settings: MatrixSettings,
    paths: Paths,
    /// The bot's client, once logged in (at the first run); the rooms and files use it.
    client: Arc<OnceCell<Client>>,
    replies: Replies<Rooms>,
    admit: Arc<Admit>,
    state: Arc<dyn StateStore>,
    /// Taken by `run` (one at a time, under the supervisor).
    intake: tokio::sync::Mutex<Intake>,
}

/// A message that came encrypted with a key not (yet) had.
struct Locked {
    room: OwnedRoomId,
    event: Raw<OriginalSyncRoomEncryptedEvent>,
    sender: String,
    /// The token the sync that brought it began from: kept until it is read or given up.
    since: Option<String>,
    until: Instant,
}

impl MatrixChannel {
    /// A channel with `settings`, publishing on the parts' hub; its session and store go
    /// under the state directory, files under the workspace, pairing is its pairing.
    pub fn new(settings: MatrixSettings, parts: &ChannelParts) -> Self {
        let client = Arc::new(OnceCell::new());
        let rooms = Arc::new(Rooms {
            client: client.clone(),
        });
        let gate = Gate::new(
            CHANNEL_NAME,
            AllowList::new(&settings.allow_from),
            parts.pairing.clone(),
        );
        let admit = Arc::new(Admit::new(
            IntakeParts {
                channel: CHANNEL_NAME,
                platform: "Matrix",
                hub: parts.hub.clone(),
                gate: Arc::new(gate),
                workspace: parts.workspace.clone(),
                max_attachment_bytes: settings.max_attachment_bytes,
                cap_key: "channels.matrix.max_attachment_bytes",
            },
            Arc::new(Files {
                client: client.clone(),
            }),
        ));
        let inbox_path = parts.state_dir.join(CHANNEL_NAME).join("inbox.jsonl");
        let replies = Replies::new(rooms, settings.stream, settings.edit_interval)
            .keeping(parts.kept(CHANNEL_NAME))
            .with_media(parts.media.clone());
        Self {
            inner: Arc::new(Inner {
                paths: Paths::under(&parts.state_dir),
                settings,
                client,
                replies,
                admit: admit.clone(),
                state: parts.state.clone(),
                intake: tokio::sync::Mutex::new(Intake::new(admit, inbox_path)),
            }),
        }
    }
}

impl Inner {
    /// The bot's client, logged in (once; later runs reuse it).
    async fn client(&self) -> Result<&Client, CoreError> {
        self.client
            .get_or_try_init(|| session::open(&self.settings, &self.paths))
            .await
    }

    /// The token of the last sync taken in, kept by an earlier run.
    async fn kept_token(&self) -> Option<String> {
        match self.state.get(TOKEN_KEY).await {
            Ok(Some(stored)) => String::from_utf8(stored.bytes)
                .ok()
                .filter(|token| !token.is_empty()),
            Ok(None) => None,
            Err(err) => {
                tracing::warn!(error = %err, "Matrix: the kept sync token could not be read; starting from now");
                None
            }
        }
    }

    async fn keep_token(&self, token: &str) {
        if let Err(err) = self.state.put(TOKEN_KEY, token.as_bytes().to_vec()).await {
            tracing::warn!(error = %err, "Matrix: the sync token could not be kept (a restart gets its messages again; the journal answers them once)");
        }
    }

    /// What a sync asks for: the rooms' recent events, members loaded lazily.
    fn sync_settings(since: Option<&str>) -> SyncSettings {
        let mut timeline = RoomEventFilter::default();
        timeline.limit = Some(UInt::from(TIMELINE_LIMIT));
        let mut state = RoomEventFilter::default();
        state.lazy_load_options = matrix_sdk::ruma::api::client::filter::LazyLoadOptions::Enabled {
            include_redundant_members: false,
        };
        let mut room = RoomFilter::default();
        room.timeline = timeline;
        room.state = state;
        let mut filter = FilterDefinition::default();
        filter.room = room;
        let settings = SyncSettings::default()
            .timeout(LONG_POLL)
            .filter(Filter::FilterDefinition(filter));
        match since {
            Some(since) => settings.token(since),
            None => settings,
        }
    }

    /// Answers the invites waiting: joins rooms people who may talk invited it to, and
    /// direct chats (where a stranger gets a pairing code); declines the rest.
    async fn answer_invites(&self, client: &Client) {
        for room in client.invited_rooms() {
            let inviter = match room.invite_details().await {
                Ok(invite) => invite.inviter.map(|member| member.user_id().to_string()),
                Err(err) => {
                    tracing::warn!(room = %room.room_id(), error = %err, "Matrix: an invite cannot be read");
                    continue;
                }
            };
            let direct = room.is_direct().await.unwrap_or(false);
            let allowed = match &inviter {
                Some(inviter) => self.admit.gate().allows(inviter, Some(inviter)).await,
                None => false,
            };
            let inviter = inviter.as_deref().unwrap_or("someone unknown");
            if allowed || direct {
                match room.join().await {
                    Ok(()) => {
                        tracing::info!(room = %room.room_id(), inviter, direct, "Matrix: joined a room on invite")
                    }
                    Err(err) => {
                        tracing::warn!(room = %room.room_id(), inviter, error = %err, "Matrix: an invite could not be taken (tried again at the next sync)")
                    }
                }
            } else {
                tracing::info!(room = %room.room_id(), inviter, "Matrix: declined an invite to a room from someone not in channels.matrix.allow_from");
                if let Err(err) = room.leave().await {
                    tracing::warn!(room = %room.room_id(), error = %err, "Matrix: an invite could not be declined");
                }
            }
        }
    }

    /// One sync from `since`: its invites answered, its messages taken in, the ones still
    /// locked added to `locked`. Returns the next token.
    async fn sync(
        &self,
        client: &Client,
        intake: &mut Intake,
        inbox: &Inbox,
        since: Option<&str>,
        locked: &mut Vec<Locked>,
    ) -> Result<String, CoreError> {
        let known: Vec<OwnedRoomId> = client
            .joined_rooms()
            .iter()
            .map(|room| room.room_id().to_owned())
            .collect();
        let response = client
            .sync_once(Self::sync_settings(since))
            .await
            .map_err(|err| mapped(&err, "syncing"))?;
        self.answer_invites(client).await;
        let me = client
            .user_id()
            .map(|me| me.to_string())
            .unwrap_or_default();
        for (room_id, update) in response.rooms.joined {
            let Some(room) = client.get_room(&room_id) else {
                continue;
            };
            // A room just joined brings its recent past, not all of it: nothing is missed.
            if update.timeline.limited
                && since.is_some()
                && known.contains(&room_id)
                && !joined_within(&update.timeline.events, &me)
            {
                tracing::warn!(room = %room_id, "Matrix: more came in a room than one sync brings; the oldest of it is not read");
            }
            for event in update.timeline.events {
                self.take(intake, inbox, &room, &me, event, since, locked)
                    .await?;
            }
        }
        self.unlock(client, intake, inbox, &me, locked).await?;
        Ok(response.next_batch)
    }

    /// Takes in one event of `room`: into the inbox, then admitted in order; an event whose
    /// key has not come waits in `locked`.
    #[allow(clippy::too_many_arguments)]
    async fn take(
        &self,
        intake: &mut Intake,
        inbox: &Inbox,
        room: &Room,
        me: &str,
        event: TimelineEvent,
        since: Option<&str>,
        locked: &mut Vec<Locked>,
    ) -> Result<(), CoreError> {
        if let TimelineEventKind::UnableToDecrypt { event, .. } = &event.kind {
            let sender = event
                .get_field::<String>("sender")
                .ok()
                .flatten()
                .unwrap_or_default();
            if sender != me {
                tracing::info!(room = %room.room_id(), sender, "Matrix: a message came before its key; it waits for it");
                locked.push(Locked {
                    room: room.room_id().to_owned(),
                    event: event.clone().cast_unchecked(),
                    sender,
                    since: since.map(str::to_owned),
                    until: Instant::now() + KEY_WAIT,
                });
            }
            return Ok(());
        }
        let value: Value = match event.raw().deserialize_as() {
            Ok(value) => value,
            Err(err) => {
                tracing::warn!(error = %err, "Matrix: an event that cannot be read was skipped");
                return Ok(());
            }
        };
        let facts = RoomFacts {
            room: room.room_id().as_str(),
            private: room.joined_members_count() <= 2,
            threads: self.settings.threads,
        };
        let arrival = match read(&value, me, facts) {
            Incoming::Message(arrival) => *arrival,
            Incoming::Ignore(why) => {
                tracing::debug!(why, "Matrix event not for the agent");
                return Ok(());
            }
        };
        // A full inbox: not taken now; the sync is made again from before it.
        let entry = keep(inbox, &arrival, "Matrix")
            .await
            .map_err(|err| unavailable(format!("a message could not be taken in yet: {err}")))?;
        intake.admit(arrival, entry).await;
        Ok(())
    }

    /// Tries the locked messages again: the ones now readable are taken in; the ones whose
    /// wait is over are given up, their authors told.
    async fn unlock(
        &self,
        client: &Client,
        intake: &mut Intake,
        inbox: &Inbox,
        me: &str,
        locked: &mut Vec<Locked>,
    ) -> Result<(), CoreError> {
        let mut still = Vec::new();
        for waiting in std::mem::take(locked) {
            let Some(room) = client.get_room(&waiting.room) else {
                continue;
            };
            let opened = room.decrypt_event(&waiting.event, None).await;
            match opened {
                Ok(event) if !matches!(event.kind, TimelineEventKind::UnableToDecrypt { .. }) => {
                    self.take(intake, inbox, &room, me, event, None, &mut still)
                        .await?;
                }
                _ if Instant::now() >= waiting.until => self.give_up(&room, &waiting).await,
                _ => still.push(waiting),
            }
        }
        *locked = still;
        Ok(())
    }

    /// Tells the author of a message that stayed locked that it was not read.
    async fn give_up(&self, room: &Room, waiting: &Locked) {
        tracing::warn!(room = %waiting.room, sender = waiting.sender, "Matrix: a message's key never came; its author is told");
        if room.state() != RoomState::Joined
            || !self
                .admit
                .gate()
                .allows(&waiting.sender, Some(&waiting.sender))
                .await
        {
            return;
        }
        let notice = serde_json::json!({
            "msgtype": "m.notice",
            "body": "I could not read a message of yours: it was encrypted, and its key never reached me. Please send it again (if it keeps happening, verify this session from your client).",
        });
        if let Err(err) = room.send_raw("m.room.message", notice).await {
            tracing::warn!(error = %err, "Matrix: the notice of an unread message was not sent");
        }
    }

    /// The token to keep: the oldest one a locked message needs, else the latest.
    fn safe_token<'a>(latest: &'a str, locked: &'a [Locked]) -> Option<&'a str> {
        match locked.iter().map(|waiting| waiting.since.as_deref()).next() {
            Some(held) => held,
            None => Some(latest),
        }
    }
}

/// Whether `events` hold the bot's own join: the room was joined since the last sync, and
/// what came before it is history, not something missed.
fn joined_within(events: &[TimelineEvent], me: &str) -> bool {
    events.iter().any(|event| {
        let raw = event.raw();
        let field = |name: &str| raw.get_field::<String>(name).ok().flatten();
        field("type").as_deref() == Some("m.room.member")
            && field("state_key").as_deref() == Some(me)
            && raw
                .get_field::<Value>("content")
                .ok()
                .flatten()
                .is_some_and(|content| content["membership"] == "join")
    })
}

#[async_trait]
impl Channel for MatrixChannel {
    fn name(&self) -> ChannelName {
        ChannelName::from(CHANNEL_NAME)
    }

    async fn check(&self) -> Result<Option<String>, CoreError> {
        let device = session::check(&self.inner.settings, &self.inner.paths).await?;
        Ok(Some(format!("{} ({device})", self.inner.settings.user)))
    }

    async fn run(&self, ctx: ChannelContext) -> Result<(), CoreError> {
        let inner = &self.inner;
        let client = inner.client().await?;
        let mut intake = inner.intake.lock().await;
        let inbox = intake
            .open_inbox()
            .await
            .map_err(|err| channel_error(err.to_string()))?;
        let mut since = inner.kept_token().await;
        if since.is_none() {
            // The first start: what came before it is history, not questions.
            let first = tokio::select! {
                () = ctx.intake.cancelled() => None,
                first = client.sync_once(Inner::sync_settings(None).timeout(Duration::ZERO)) => Some(first),
            };
            if let Some(first) = first {
                let first = first.map_err(|err| mapped(&err, "syncing for the first time"))?;
                inner.answer_invites(client).await;
                inner.keep_token(&first.next_batch).await;
                since = Some(first.next_batch);
            }
        }
        tracing::info!(user = %inner.settings.user, "Matrix: syncing");
        let mut locked = Vec::new();
        loop {
            tokio::select! {
                () = ctx.intake.cancelled() => break,
                synced = inner.sync(client, &mut intake, &inbox, since.as_deref(), &mut locked) => {
                    match synced {
                        Ok(next) => {
                            if let Some(keep) = Inner::safe_token(&next, &locked) {
                                inner.keep_token(keep).await;
                            }
                            since = Some(next);
                        }
                        Err(err) if err.is_transient() => {
                            tracing::info!(error = %err, "Matrix: syncing again");
                            tokio::select! {
                                () = ctx.intake.cancelled() => break,
                                () = tokio::time::sleep(RETRY_AFTER) => {}
                            }
                        }
                        Err(err) => return Err(err),
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

#[cfg(test)]
mod tests {
    use super::*;

    fn event(json: Value) -> TimelineEvent {
        TimelineEvent::from_plaintext(Raw::from_json(
            serde_json::value::to_raw_value(&json).expect("JSON"),
        ))
    }

    fn member(who: &str, membership: &str) -> TimelineEvent {
        event(serde_json::json!({
            "type": "m.room.member", "state_key": who, "sender": who,
            "event_id": "$m", "origin_server_ts": 1, "content": {"membership": membership},
        }))
    }

    #[test]
    fn only_the_bots_own_join_makes_a_short_timeline_history() {
        let me = "@bot:localhost";
        let text = event(serde_json::json!({
            "type": "m.room.message", "sender": "@ada:localhost", "event_id": "$t",
            "origin_server_ts": 1, "content": {"msgtype": "m.text", "body": "hi"},
        }));
        assert!(joined_within(&[text.clone(), member(me, "join")], me));
        assert!(!joined_within(std::slice::from_ref(&text), me));
        assert!(!joined_within(
            &[member("@ada:localhost", "join"), text],
            me
        ));
        assert!(!joined_within(&[member(me, "leave")], me));
    }
}
