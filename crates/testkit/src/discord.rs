//! [`FakeDiscord`]: Discord's REST API and gateway for tests, speaking the real wire format
//! over real sockets.
//!
//! `GET /api/v10/gateway` names the fake's gateway, a WebSocket that says HELLO, takes
//! IDENTIFY (refusing a wrong token with close 4004) or RESUME (replaying the dispatches
//! the session missed, then RESUMED), answers heartbeats, and sends READY and the
//! MESSAGE_CREATE / INTERACTION_CREATE dispatches tests make. REST takes what the adapter
//! sends — messages (refused with Discord's 400 over 2000 characters), edits, typing,
//! slash commands, interaction answers — and a channel can be told to answer 429 with a
//! `retry_after`. Everything is recorded, with whom each message would have pinged under
//! its `allowed_mentions`.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use axum::Router;
use axum::routing::{get, patch, post, put};
use serde_json::{Value, json};
use tokio::sync::{Notify, mpsc};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

mod gateway;
mod mentions;
mod rest;

pub use mentions::pings;

/// The token tests configure.
pub const TEST_TOKEN: &str = "MTAwMDAwMDAwMDAwMDAwMDAw.fake.discord-test-token";
/// The bot's user id (and its application's).
pub const BOT_ID: u64 = 900_000_000_000_000_001;
/// The session id the fake hands out.
const SESSION: &str = "fake-session-1";

/// Something the bot sent: a new message, or an edit of one.
#[derive(Clone, Debug)]
pub struct Sent {
    /// The channel.
    pub channel: u64,
    /// The message's id (the edited one's, for an edit).
    pub message_id: u64,
    /// Its content.
    pub content: String,
    /// The message it replies to (`message_reference`).
    pub reply_to: Option<u64>,
    /// Whether this is an edit.
    pub edit: bool,
    /// Who it would ping: `everyone`, `role:<id>`, `user:<id>`.
    pub pinged: Vec<String>,
    /// When it arrived.
    pub at: Instant,
}

/// What goes to the connected gateway socket.
enum Push {
    Frame(Value),
    Close(u16),
}

#[derive(Default)]
struct Inner {
    /// The connected gateway socket, if one is.
    socket: Option<mpsc::UnboundedSender<Push>>,
    seq: u64,
    /// Every dispatch of the session, for RESUME.
    dispatched: Vec<Value>,
    identifies: u32,
    refused_identifies: u32,
    resumes: u32,
    heartbeats: u32,
    /// Close codes the bot sent.
    closes: Vec<u16>,
    heartbeat_ms: u64,
    next_id: u64,
    /// Authors of the people's messages, by id (for a reply's ping).
    authors: HashMap<u64, u64>,
    /// Each message people wrote, by id, to dispatch again.
    messages: HashMap<u64, Value>,
    sent: Vec<Sent>,
    texts: HashMap<(u64, u64), String>,
    typing: Vec<u64>,
    /// Channels answering 429: (retry_after seconds, answers left).
    limited: HashMap<u64, (f64, u32)>,
    limited_at: Vec<(u64, Instant)>,
    /// Channels whose next write gets a global 429 (`retry_after` seconds).
    global_limited: HashMap<u64, f64>,
    /// When a global 429 was answered.
    global_at: Vec<Instant>,
    /// The messages bucket, when set: (limit, window); and each channel's use of it:
    /// (remaining, reset at).
    bucket: Option<(u32, Duration)>,
    buckets: HashMap<u64, (u32, Instant)>,
    /// Writes answered 429 for being over the bucket the headers had stated.
    over_bucket: Vec<(u64, Instant)>,
    /// Refused sends (400), by channel.
    refused: Vec<(u64, String)>,
    commands: Vec<Value>,
    /// Interaction answers: (interaction id, body).
    callbacks: Vec<(String, Value)>,
    files: HashMap<String, Vec<u8>>,
    /// How long a file download takes before its bytes come.
    file_delay: Duration,
    /// When each file download was answered.
    files_served: Vec<Instant>,
    /// Files the bot attached to its messages, in order.
    uploads: Vec<crate::multipart::Uploaded>,
    /// Uploads in flight held for a kill.
    holding: crate::multipart::Holding,
}

struct Shared {
    inner: Mutex<Inner>,
    changed: Notify,
    addr: Mutex<Option<SocketAddr>>,
    stop: CancellationToken,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// A running fake Discord; it stops when dropped.
pub struct FakeDiscord {
    addr: SocketAddr,
    shared: Arc<Shared>,
}

impl FakeDiscord {
    /// Starts on 127.0.0.1 with an ephemeral port.
    pub async fn start() -> std::io::Result<Self> {
        let shared = Arc::new(Shared {
            inner: Mutex::new(Inner {
                heartbeat_ms: 41_250,
                next_id: 1_000,
                ..Inner::default()
            }),
            changed: Notify::new(),
            addr: Mutex::new(None),
            stop: CancellationToken::new(),
        });
        let app = Router::new()
            .route("/api/v10/gateway", get(gateway::gateway_url))
            .route("/gateway", get(gateway::gateway))
            .route("/gateway/", get(gateway::gateway))
            .route("/api/v10/channels/{channel}/messages", post(rest::create))
            .route(
                "/api/v10/channels/{channel}/messages/{message}",
                patch(rest::edit),
            )
            .route("/api/v10/channels/{channel}/typing", post(rest::typing))
            .route("/api/v10/users/@me", get(rest::whoami))
            .route("/api/v10/applications/{app}/commands", put(rest::commands))
            .route(
                "/api/v10/interactions/{id}/{token}/callback",
                post(rest::callback),
            )
            .route("/attachments/{name}", get(rest::file))
            .with_state(shared.clone());
        let (addr, stop) =
            crate::serve(app, std::net::SocketAddr::from(([127, 0, 0, 1], 0))).await?;
        *shared.addr.lock().unwrap_or_else(PoisonError::into_inner) = Some(addr);
        // The server's own stop ends the gateway sockets, too.
        let sockets = shared.stop.clone();
        tokio::spawn(async move {
            sockets.cancelled().await;
            stop.cancel();
        });
        Ok(Self { addr, shared })
    }

    /// The URL to configure as `channels.discord.api_url`.
    pub fn api_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Heartbeats asked of the next connection, every `interval`.
    pub fn set_heartbeat(&self, interval: Duration) {
        self.shared.lock().heartbeat_ms = u64::try_from(interval.as_millis()).unwrap_or(41_250);
    }

    /// The DM channel of `user` with the bot.
    pub fn dm_channel(user: u64) -> u64 {
        user + 5_000_000
    }

    /// `user` writes `text` to the bot in a DM. Returns the message's id.
    pub fn dm(&self, user: u64, text: &str) -> u64 {
        self.message(Self::dm_channel(user), None, user, false, text, json!({}))
    }

    /// `user` writes `text` in a server's channel, mentioning the bot if `mention`.
    pub fn guild_message(
        &self,
        guild: u64,
        channel: u64,
        user: u64,
        mention: bool,
        text: &str,
    ) -> u64 {
        let (text, extra) = if mention {
            let bot = json!({"id": BOT_ID.to_string(), "username": "switchboard", "discriminator": "0", "avatar": null, "bot": true});
            (format!("<@{BOT_ID}> {text}"), json!({"mentions": [bot]}))
        } else {
            (text.to_owned(), json!({}))
        };
        self.message(channel, Some(guild), user, false, &text, extra)
    }

    /// Another bot (`user`) writes `text` in a DM channel.
    pub fn bot_message(&self, channel: u64, user: u64, text: &str) -> u64 {
        self.message(channel, None, user, true, text, json!({}))
    }

    /// `user` sends a file in a DM.
    pub fn dm_file(&self, user: u64, text: &str, name: &str, bytes: Vec<u8>) -> u64 {
        let url = format!("http://{}/attachments/{name}", self.addr);
        let size = bytes.len();
        self.shared.lock().files.insert(name.to_owned(), bytes);
        let attachment = json!({"id": "1", "filename": name, "size": size, "url": url,
            "proxy_url": url, "content_type": "text/plain"});
        let extra = json!({"attachments": [attachment]});
        self.message(Self::dm_channel(user), None, user, false, text, extra)
    }

    /// `user` records a voice message (`bytes`, OGG/Opus, `seconds` long) in a DM, as
    /// Discord's apps send it: an attachment with its length and waveform, the message
    /// flagged a voice message.
    pub fn dm_voice(&self, user: u64, bytes: Vec<u8>, seconds: f64) -> u64 {
        let name = format!("voice-message-{}.ogg", self.next_id());
        let url = format!("http://{}/attachments/{name}", self.addr);
        let size = bytes.len();
        self.shared.lock().files.insert(name.clone(), bytes);
        let attachment = json!({"id": "1", "filename": name, "size": size, "url": url,
            "proxy_url": url, "content_type": "audio/ogg", "duration_secs": seconds,
            "waveform": "AAAAAAAAAA=="});
        let extra = json!({"attachments": [attachment], "flags": 1 << 13});
        self.message(Self::dm_channel(user), None, user, false, "", extra)
    }

    /// File downloads wait `delay` before their bytes come (a slow CDN).
    pub fn set_file_delay(&self, delay: Duration) {
        self.shared.lock().file_delay = delay;
    }

    /// When each file download was answered.
    pub fn files_served(&self) -> Vec<Instant> {
        self.shared.lock().files_served.clone()
    }

    /// `user` runs the slash command `/name` in `channel` (a server's when `guild`).
    pub fn slash_command(&self, channel: u64, guild: Option<u64>, user: u64, name: &str) -> String {
        self.slash_command_with(channel, guild, user, name, Vec::new())
    }

    /// A slash command with options (`(name, value)` pairs, as Discord sends a string
    /// option's).
    pub fn slash_command_with(
        &self,
        channel: u64,
        guild: Option<u64>,
        user: u64,
        name: &str,
        options: Vec<(&str, &str)>,
    ) -> String {
        let id = self.next_id().to_string();
        let person = person(user, false);
        let mut d = json!({"id": id, "application_id": BOT_ID.to_string(), "type": 2,
            "token": format!("token-{id}"), "version": 1, "channel_id": channel.to_string(),
            "data": {"id": "1", "name": name, "type": 1}});
        if !options.is_empty() {
            let options: Vec<Value> = options
                .into_iter()
                .map(|(name, value)| json!({"name": name, "type": 3, "value": value}))
                .collect();
            d["data"]["options"] = Value::Array(options);
        }
        match guild {
            Some(guild) => {
                d["guild_id"] = json!(guild.to_string());
                d["member"] = json!({"user": person});
            }
            None => d["user"] = person,
        }
        self.dispatch("INTERACTION_CREATE", d);
        id
    }

    fn next_id(&self) -> u64 {
        let mut inner = self.shared.lock();
        inner.next_id += 1;
        inner.next_id
    }

    fn message(
        &self,
        channel: u64,
        guild: Option<u64>,
        user: u64,
        bot: bool,
        text: &str,
        extra: Value,
    ) -> u64 {
        let id = self.next_id();
        let mut d = json!({
            "id": id.to_string(), "channel_id": channel.to_string(), "content": text,
            "author": person(user, bot),
            "timestamp": "2026-11-24T10:00:00.000000+00:00", "edited_timestamp": null,
            "tts": false, "mention_everyone": false, "mentions": [], "mention_roles": [],
            "attachments": [], "embeds": [], "pinned": false, "type": 0,
        });
        if let Some(guild) = guild {
            d["guild_id"] = json!(guild.to_string());
        }
        if let (Some(d), Some(extra)) = (d.as_object_mut(), extra.as_object()) {
            for (key, value) in extra {
                d.insert(key.clone(), value.clone());
            }
        }
        let mut inner = self.shared.lock();
        inner.authors.insert(id, user);
        inner.messages.insert(id, d.clone());
        drop(inner);
        self.dispatch("MESSAGE_CREATE", d);
        id
    }

    /// Dispatches the message `id` again, as a gateway does that replays a session's
    /// events (a `MESSAGE_CREATE` with the same message, under a new sequence number).
    pub fn deliver_again(&self, id: u64) {
        let message = self.shared.lock().messages.get(&id).cloned();
        if let Some(d) = message {
            self.dispatch("MESSAGE_CREATE", d);
        }
    }

    /// Sends a dispatch on the session (kept for a RESUME if no socket takes it).
    fn dispatch(&self, kind: &str, d: Value) {
        let mut inner = self.shared.lock();
        inner.seq += 1;
        let frame = json!({"op": 0, "s": inner.seq, "t": kind, "d": d});
        inner.dispatched.push(frame.clone());
        if let Some(socket) = &inner.socket {
            let _ = socket.send(Push::Frame(frame));
        }
    }

    /// Closes the gateway connection with `code` (4000: "unknown error", resumable).
    pub fn close_gateway(&self, code: u16) {
        let mut inner = self.shared.lock();
        if let Some(socket) = inner.socket.take() {
            let _ = socket.send(Push::Close(code));
        }
        drop(inner);
        self.shared.changed.notify_waiters();
    }

    /// Whether a gateway socket is connected and identified (or resumed).
    pub fn connected(&self) -> bool {
        self.shared.lock().socket.is_some()
    }

    /// IDENTIFYs received.
    pub fn identifies(&self) -> u32 {
        self.shared.lock().identifies
    }

    /// IDENTIFYs refused for a wrong token (close 4004).
    pub fn refused_identifies(&self) -> u32 {
        self.shared.lock().refused_identifies
    }

    /// RESUMEs accepted.
    pub fn resumes(&self) -> u32 {
        self.shared.lock().resumes
    }

    /// Close codes the bot sent (1000: it logged off).
    pub fn closes(&self) -> Vec<u16> {
        self.shared.lock().closes.clone()
    }

    /// Heartbeats received.
    pub fn heartbeats(&self) -> u32 {
        self.shared.lock().heartbeats
    }

    /// How many uploads arrived so far (held and refused ones too).
    pub fn uploads_started(&self) -> u64 {
        self.shared.lock().holding.started
    }

    /// Holds every upload that arrives until [`FakeDiscord::release_uploads`] (an upload in
    /// flight, for a kill in the middle of it).
    pub fn hold_uploads(&self) {
        self.shared.lock().holding.hold();
    }

    /// Lets held uploads go: kept as sent (`keep`), or dropped as if the connection broke
    /// before the platform had the whole file. Later uploads are not held.
    pub fn release_uploads(&self, keep: bool) {
        self.shared.lock().holding.release(keep);
        self.shared.changed.notify_waiters();
    }

    /// The files the bot attached to its messages in `channel`, in order.
    pub fn uploads_to(&self, channel: u64) -> Vec<crate::multipart::Uploaded> {
        let channel = channel.to_string();
        self.shared
            .lock()
            .uploads
            .iter()
            .filter(|upload| upload.chat == channel)
            .cloned()
            .collect()
    }

    /// Everything the bot sent, in order.
    pub fn sent(&self) -> Vec<Sent> {
        self.shared.lock().sent.clone()
    }

    /// New messages (not edits) in `channel`.
    pub fn messages_to(&self, channel: u64) -> Vec<Sent> {
        self.sent()
            .into_iter()
            .filter(|s| s.channel == channel && !s.edit)
            .collect()
    }

    /// What message `id` in `channel` shows now.
    pub fn current_text(&self, channel: u64, id: u64) -> Option<String> {
        self.shared.lock().texts.get(&(channel, id)).cloned()
    }

    /// Channels "typing…" was shown in, once per call.
    pub fn typing_in(&self, channel: u64) -> usize {
        self.shared
            .lock()
            .typing
            .iter()
            .filter(|c| **c == channel)
            .count()
    }

    /// Sends refused with a 400: (channel, Discord's message).
    pub fn refused(&self) -> Vec<(u64, String)> {
        self.shared.lock().refused.clone()
    }

    /// `channel` answers its next `times` sends and edits with a 429 asking to wait
    /// `retry_after`.
    pub fn rate_limit(&self, channel: u64, retry_after: Duration, times: u32) {
        self.shared
            .lock()
            .limited
            .insert(channel, (retry_after.as_secs_f64(), times));
    }

    /// Message writes (sends and edits) share one bucket per channel of `limit` calls every
    /// `window`, stated in every answer's `X-RateLimit-*` headers, as Discord does; a write
    /// over it is answered 429 (and recorded: [`FakeDiscord::over_bucket`]).
    pub fn set_bucket(&self, limit: u32, window: Duration) {
        self.shared.lock().bucket = Some((limit, window));
    }

    /// Writes answered 429 because they came when the headers had said nothing was left.
    pub fn over_bucket(&self) -> Vec<(u64, Instant)> {
        self.shared.lock().over_bucket.clone()
    }

    /// The next write to `channel` is answered with a global 429 (`X-RateLimit-Global`).
    pub fn global_limit(&self, channel: u64, retry_after: Duration) {
        self.shared
            .lock()
            .global_limited
            .insert(channel, retry_after.as_secs_f64());
    }

    /// When global 429s were answered.
    pub fn global_at(&self) -> Vec<Instant> {
        self.shared.lock().global_at.clone()
    }

    /// When `channel` answered 429.
    pub fn limited_at(&self, channel: u64) -> Vec<Instant> {
        self.shared
            .lock()
            .limited_at
            .iter()
            .filter(|(c, _)| *c == channel)
            .map(|(_, at)| *at)
            .collect()
    }

    /// The slash commands registered last.
    pub fn commands(&self) -> Vec<Value> {
        self.shared.lock().commands.clone()
    }

    /// Interaction answers: (interaction id, body).
    pub fn callbacks(&self) -> Vec<(String, Value)> {
        self.shared.lock().callbacks.clone()
    }

    /// Waits until `check` holds of what was recorded, or panics after `timeout`.
    pub async fn wait_until(
        &self,
        timeout: Duration,
        what: &str,
        check: impl Fn(&FakeDiscord) -> bool,
    ) {
        let what = format!("the fake Discord seeing {what}");
        let context = || format!("sent: {:#?}", self.sent());
        crate::wait_on(
            &self.shared.changed,
            timeout,
            &what,
            || check(self),
            context,
        )
        .await;
    }
}

impl Drop for FakeDiscord {
    fn drop(&mut self) {
        self.shared.stop.cancel();
    }
}

fn person(user: u64, bot: bool) -> Value {
    json!({"id": user.to_string(), "username": format!("user{user}"),
        "global_name": format!("User {user}"), "discriminator": "0", "avatar": null, "bot": bot})
}
