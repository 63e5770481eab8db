//! The gateway connection: HELLO, IDENTIFY (or RESUME), heartbeats with zombie detection,
//! and the dispatches the channel uses, handed on **in the order Discord sent them**.
//!
//! Why not serenity's `Client`: its shard runner starts a task per event, so two messages
//! sent quickly in one chat can reach the hub swapped (`tests/serenity.rs` shows it on
//! serenity's path); its WebSocket reads frames of any size; and its connection type is
//! private to the crate, so an ordered loop cannot be built on its `Shard`. This loop is the
//! protocol's small core (documented at <https://discord.com/developers/docs/events/gateway>):
//! [`Gateway::connect`] admits a connection (Discord's refusals and IDENTIFY budget), opens
//! the socket, does the handshake and reads the session.
//!
//! A session that drops (network, zombie, op 7) is resumed where it left off — Discord
//! replays what was missed — so no message is lost while the daemon runs. Its resume state
//! is also kept in the state store (at READY, then at each heartbeat with the sequence of
//! the heartbeat before), so a daemon killed and started again — or, on a cluster, the
//! gateway that takes the connection over — resumes it too, and what was said meanwhile
//! comes. A normal close (the daemon stopping) ends the session and forgets it. A close that
//! means the config is wrong (token, intents) ends with an error naming the fix.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use futures::{SinkExt, StreamExt};
use serde::Deserialize;
use serde_json::{Value, json};
use switchboard_core::{CoreError, StateStore, error_chain};
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::protocol::{CloseFrame, WebSocketConfig};
use tokio_tungstenite::tungstenite::{self, Message as Frame};
use tokio_util::sync::CancellationToken;

use crate::identify::{IDENTIFY_WINDOW, identify_wait};
use crate::kept::{KeptSession, Resume};
use crate::model::Message;
use crate::rest::{CHANNEL_NAME, Rest, channel_error};

/// The largest gateway message read (READY of a bot in many servers is the largest).
const MAX_FRAME_BYTES: usize = 8 * 1024 * 1024;
/// How long the gateway has to say HELLO, and to answer IDENTIFY or RESUME.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(20);
/// After Discord refused the config (token, intents), the next attempt waits this long
/// since the refusal: Discord resets a token that identifies more than 1,000 times a day.
const AFTER_REFUSAL: Duration = Duration::from_secs(300);
/// The query every gateway URL gets.
const QUERY: &str = "v=10&encoding=json";

/// What the channel is handed, in order.
#[derive(Debug)]
pub(crate) enum Event {
    /// A new session: who the bot is.
    Ready {
        /// The bot's user id.
        user: u64,
        /// The application's id (slash commands are registered under it).
        application: u64,
    },
    /// Someone wrote (or the bot did; intake decides).
    Message(Box<Message>),
    /// A slash command (or another interaction), as Discord sent it.
    Interaction(Value),
}

/// How one connection ended.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Ended {
    /// The stop token was cancelled, or no one takes events any more.
    Stopped,
    /// The connection dropped; connect again (resuming if the session allows).
    Reconnect,
}

/// The gateway's opcodes the channel uses
/// (<https://discord.com/developers/docs/topics/opcodes-and-status-codes#gateway-gateway-opcodes>).
mod op {
    /// An event was dispatched (receive).
    pub const DISPATCH: u8 = 0;
    /// A heartbeat (send; Discord may ask for one at once).
    pub const HEARTBEAT: u8 = 1;
    /// Start a new session (send).
    pub const IDENTIFY: u8 = 2;
    /// Resume a session (send).
    pub const RESUME: u8 = 6;
    /// Reconnect and resume (receive).
    pub const RECONNECT: u8 = 7;
    /// The session is invalid; `d` says whether it may be resumed (receive).
    pub const INVALID_SESSION: u8 = 9;
    /// The first message: the heartbeat interval (receive).
    pub const HELLO: u8 = 10;
    /// A heartbeat was received (receive).
    pub const HEARTBEAT_ACK: u8 = 11;
}

/// A gateway frame.
#[derive(Deserialize)]
struct Envelope {
    op: u8,
    #[serde(default)]
    d: Value,
    s: Option<u64>,
    t: Option<String>,
}

/// The gateway client. Its resume state outlives a connection (and a restart of the
/// channel by its supervisor).
pub(crate) struct Gateway {
    rest: Rest,
    token: String,
    intents: u64,
    resume: Mutex<Option<Resume>>,
    /// The resume state kept for whoever connects next.
    kept: KeptSession,
    /// When Discord last refused the config, and why.
    refused: Mutex<Option<(Instant, String)>>,
    /// When the last IDENTIFYs were sent (at most [`IDENTIFY_WINDOW`] of them kept).
    identified: Mutex<VecDeque<Instant>>,
}

impl Gateway {
    /// The bot's user name, as Discord knows it by the token (`GET /users/@me`).
    pub(crate) async fn whoami(&self) -> Result<String, CoreError> {
        let me = self
            .rest
            .call(reqwest::Method::GET, "users/@me", None)
            .await?;
        Ok(me["username"].as_str().unwrap_or("(unnamed)").to_owned())
    }

    pub(crate) fn new(rest: Rest, token: String, intents: u64, kept: Arc<dyn StateStore>) -> Self {
        Self {
            rest,
            token,
            intents,
            resume: Mutex::new(None),
            kept: KeptSession::new(kept),
            refused: Mutex::new(None),
            identified: Mutex::new(VecDeque::new()),
        }
    }

    fn resume(&self) -> std::sync::MutexGuard<'_, Option<Resume>> {
        self.resume.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Keeps the session, resumable from `seq`, for whoever connects next.
    async fn keep(&self, seq: u64) {
        let resume = self.resume().clone();
        if let Some(resume) = resume {
            self.kept.keep(resume, seq).await;
        }
    }

    /// One connection, until it ends; events go to `events` in order; `live` is called
    /// once the session is ready or resumed. A failure to connect is an `Err`.
    pub(crate) async fn connect(
        &self,
        events: &mpsc::Sender<Event>,
        stop: &CancellationToken,
        live: impl Fn(),
    ) -> Result<Ended, CoreError> {
        if self.resume().is_none()
            && let Some(kept) = self.kept.take().await
        {
            tracing::info!("Discord: resuming the session kept by the last connection");
            *self.resume() = Some(kept);
        }
        let resume = self.resume().clone();
        if let Some(ended) = self.admit(resume.is_none(), stop).await? {
            return Ok(ended);
        }
        let mut socket = tokio::select! {
            () = stop.cancelled() => return Ok(Ended::Stopped),
            socket = self.open(resume.as_ref()) => socket?,
        };
        let interval = self.handshake(&mut socket, resume.as_ref()).await?;
        self.read(&mut socket, interval, events, stop, &live).await
    }

    /// Whether a connection may be tried now: not while Discord's refusal of the config is
    /// recent (an `Err` saying why), and a new session only within Discord's budget of
    /// IDENTIFYs (waiting if need be; `Some` if stopped meanwhile).
    async fn admit(
        &self,
        identify: bool,
        stop: &CancellationToken,
    ) -> Result<Option<Ended>, CoreError> {
        let refused = self
            .refused
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        if let Some((at, why)) = refused {
            let left = (at + AFTER_REFUSAL).saturating_duration_since(Instant::now());
            if !left.is_zero() {
                // Not asked again yet: the channel stays failed, saying why.
                return Err(channel_error(format!(
                    "{why} (asking again in {} s)",
                    left.as_secs()
                )));
            }
        }
        if !identify {
            return Ok(None);
        }
        let wait = identify_wait(
            &self
                .identified
                .lock()
                .unwrap_or_else(PoisonError::into_inner),
            Instant::now(),
        );
        if !wait.is_zero() {
            tracing::warn!(
                wait_s = wait.as_secs(),
                "Discord: many new sessions lately; waiting before the next (Discord resets tokens that identify too often)"
            );
            tokio::select! {
                () = stop.cancelled() => return Ok(Some(Ended::Stopped)),
                () = tokio::time::sleep(wait) => {}
            }
        }
        Ok(None)
    }

    /// The WebSocket to the gateway: the session's resume address, or the one `GET /gateway`
    /// names for a new session.
    async fn open(&self, resume: Option<&Resume>) -> Result<Socket, CoreError> {
        let url = match resume {
            Some(resume) => resume.url.clone(),
            None => {
                let answer = self
                    .rest
                    .call(reqwest::Method::GET, "gateway", None)
                    .await?;
                answer["url"]
                    .as_str()
                    .map(str::to_owned)
                    .ok_or_else(|| unavailable("GET /gateway answered no url".into()))?
            }
        };
        let url = format!("{}/?{QUERY}", url.trim_end_matches('/'));
        // Frames are small but for READY; the read buffer grows when one needs it (the
        // default starts at 128 KiB).
        let config = WebSocketConfig::default()
            .read_buffer_size(8 * 1024)
            .max_message_size(Some(MAX_FRAME_BYTES))
            .max_frame_size(Some(MAX_FRAME_BYTES));
        let connecting = tokio_tungstenite::connect_async_with_config(&url, Some(config), true);
        let connected = tokio::time::timeout(HANDSHAKE_TIMEOUT, connecting)
            .await
            .map_err(|_| unavailable(format!("the gateway {url} did not answer in time")))
            .and_then(|c| {
                c.map_err(|err| {
                    unavailable(format!(
                        "cannot reach the gateway {url}: {}",
                        error_chain(&err)
                    ))
                })
            });
        match connected {
            Ok((socket, _)) => Ok(socket),
            Err(err) => {
                // The resume address may be gone: the next attempt starts a new session.
                *self.resume() = None;
                Err(err)
            }
        }
    }

    /// HELLO, then IDENTIFY (or RESUME where the last session left off): the heartbeat
    /// interval.
    async fn handshake(
        &self,
        socket: &mut Socket,
        resume: Option<&Resume>,
    ) -> Result<Duration, CoreError> {
        let hello = tokio::time::timeout(HANDSHAKE_TIMEOUT, next_envelope(socket))
            .await
            .map_err(|_| unavailable("the gateway sent no HELLO".into()))?
            .map_err(|closed| match closed {
                Closed::Code(code) => {
                    unavailable(format!("the gateway closed before HELLO ({code})"))
                }
                Closed::Error(err) => unavailable(format!("the gateway connection failed: {err}")),
            })?;
        let interval = match hello {
            Some(Envelope {
                op: op::HELLO, d, ..
            }) => d["heartbeat_interval"]
                .as_u64()
                .map(|ms| Duration::from_millis(ms.clamp(50, 600_000)))
                .ok_or_else(|| unavailable("HELLO without a heartbeat_interval".into()))?,
            _ => return Err(unavailable("the gateway did not start with HELLO".into())),
        };
        let hello_back = match resume {
            Some(resume) => json!({"op": op::RESUME, "d": {
                "token": self.token, "session_id": resume.session, "seq": resume.seq,
            }}),
            None => {
                let mut identified = self
                    .identified
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner);
                if identified.len() >= IDENTIFY_WINDOW {
                    identified.pop_front();
                }
                identified.push_back(Instant::now());
                json!({"op": op::IDENTIFY, "d": {
                    "token": self.token,
                    "intents": self.intents,
                    "properties": {"os": std::env::consts::OS, "browser": "switchboard", "device": "switchboard"},
                }})
            }
        };
        send(socket, &hello_back).await?;
        Ok(interval)
    }

    /// Reads the session until it ends, heartbeating every `interval`; READY (or RESUMED)
    /// must come within the handshake's time.
    async fn read(
        &self,
        socket: &mut Socket,
        interval: Duration,
        events: &mpsc::Sender<Event>,
        stop: &CancellationToken,
        live: &impl Fn(),
    ) -> Result<Ended, CoreError> {
        let first = interval.mul_f64(fastrand::f64());
        let mut beat = tokio::time::interval_at(Instant::now() + first, interval);
        let mut acked = true;
        let handshake = tokio::time::sleep(HANDSHAKE_TIMEOUT);
        tokio::pin!(handshake);
        let mut live_yet = false;
        // The sequence seen at the last heartbeat: what is kept at the next one. An event
        // is in the inbox (or on the cluster's bus) long before a heartbeat interval has
        // passed, so whoever resumes from there misses none (and the journal answers the
        // ones it is sent again once).
        let mut settled_seq = None;
        loop {
            let envelope = tokio::select! {
                () = stop.cancelled() => return Ok(self.close(socket).await),
                () = &mut handshake, if !live_yet => {
                    return Err(unavailable("the gateway did not answer IDENTIFY or RESUME in time".into()));
                }
                _ = beat.tick() => {
                    if !acked {
                        tracing::info!("Discord: no heartbeat ACK; reconnecting");
                        return Ok(Ended::Reconnect);
                    }
                    acked = false;
                    if self.heartbeat(socket).await.is_err() {
                        return Ok(Ended::Reconnect);
                    }
                    if let Some(seq) = settled_seq {
                        self.keep(seq).await;
                    }
                    settled_seq = self.resume().as_ref().map(|resume| resume.seq);
                    continue;
                }
                envelope = next_envelope(socket) => envelope,
            };
            let envelope = match envelope {
                Ok(Some(envelope)) => envelope,
                Ok(None) => return Ok(Ended::Reconnect),
                Err(Closed::Code(code)) => return self.closed(code),
                Err(Closed::Error(err)) => {
                    tracing::info!(error = %err, "Discord: the gateway connection failed; reconnecting");
                    return Ok(Ended::Reconnect);
                }
            };
            match envelope.op {
                op::DISPATCH => {
                    live_yet |= matches!(envelope.t.as_deref(), Some("READY" | "RESUMED"));
                    if let Some(ended) = self
                        .dispatched(envelope, live, events, &mut settled_seq)
                        .await
                    {
                        return Ok(ended);
                    }
                }
                // Discord asks for a heartbeat now.
                op::HEARTBEAT if self.heartbeat(socket).await.is_err() => {
                    return Ok(Ended::Reconnect);
                }
                op::RECONNECT => {
                    tracing::info!("Discord asked to reconnect");
                    return Ok(Ended::Reconnect);
                }
                op::INVALID_SESSION => {
                    return Ok(self.invalid_session(envelope.d.as_bool(), stop).await);
                }
                op::HEARTBEAT_ACK => acked = true,
                _ => {}
            }
        }
    }

    /// A normal close, which ends the session: the next start identifies anew.
    async fn close(&self, socket: &mut Socket) -> Ended {
        *self.resume() = None;
        self.kept.forget().await;
        let frame = CloseFrame {
            code: CloseCode::Normal,
            reason: "".into(),
        };
        let _ = tokio::time::timeout(Duration::from_secs(2), socket.close(Some(frame))).await;
        Ended::Stopped
    }

    /// An event: its sequence noted (kept at once from READY's: nothing came before it),
    /// and what it says handed on; `Some` when the reading ends.
    async fn dispatched(
        &self,
        envelope: Envelope,
        live: &impl Fn(),
        events: &mpsc::Sender<Event>,
        settled_seq: &mut Option<u64>,
    ) -> Option<Ended> {
        if let Some(seq) = envelope.s
            && let Some(resume) = self.resume().as_mut()
        {
            resume.seq = resume.seq.max(seq);
        }
        let ready =
            (envelope.t.as_deref() == Some("READY")).then(|| envelope.s.unwrap_or_default());
        let event = self.dispatch(envelope, live);
        if let Some(seq) = ready {
            *settled_seq = Some(seq);
            self.keep(seq).await;
        }
        let event = event?;
        if events.send(event).await.is_err() {
            return Some(Ended::Stopped);
        }
        None
    }

    /// Sends a heartbeat with the last sequence number seen.
    async fn heartbeat(&self, socket: &mut Socket) -> Result<(), CoreError> {
        let seq = self.resume().as_ref().map(|r| r.seq);
        send(socket, &json!({"op": op::HEARTBEAT, "d": seq})).await
    }

    /// Discord said the session is invalid (op 9; `resumable` is its `d`): forget it unless
    /// it may be resumed, and wait the 1–5 s Discord asks for before the next attempt.
    async fn invalid_session(&self, resumable: Option<bool>, stop: &CancellationToken) -> Ended {
        if resumable != Some(true) {
            *self.resume() = None;
        }
        let wait = Duration::from_millis(1000 + fastrand::u64(0..4000));
        tracing::info!(
            wait_ms = wait.as_millis() as u64,
            "Discord: the session is invalid; starting another"
        );
        tokio::select! {
            () = stop.cancelled() => Ended::Stopped,
            () = tokio::time::sleep(wait) => Ended::Reconnect,
        }
    }

    /// A dispatch as the channel's event (if it uses it), keeping READY's resume state.
    fn dispatch(&self, envelope: Envelope, live: &impl Fn()) -> Option<Event> {
        let kind = envelope.t.as_deref().unwrap_or_default();
        match kind {
            "READY" => {
                let d = &envelope.d;
                let (Some(session), Some(url)) =
                    (d["session_id"].as_str(), d["resume_gateway_url"].as_str())
                else {
                    tracing::warn!("Discord: READY without a session; it cannot be resumed");
                    return None;
                };
                *self.resume() = Some(Resume {
                    session: session.to_owned(),
                    url: url.to_owned(),
                    seq: envelope.s.unwrap_or_default(),
                });
                let user = snowflake(&d["user"]["id"]).unwrap_or_default();
                let application = snowflake(&d["application"]["id"]).unwrap_or(user);
                live();
                Some(Event::Ready { user, application })
            }
            "RESUMED" => {
                tracing::info!("Discord: session resumed");
                live();
                None
            }
            "MESSAGE_CREATE" => match serde_json::from_value::<Message>(envelope.d) {
                Ok(message) => Some(Event::Message(Box::new(message))),
                Err(err) => {
                    tracing::warn!(error = %err, "Discord: a message that cannot be read was skipped");
                    None
                }
            },
            "INTERACTION_CREATE" => Some(Event::Interaction(envelope.d)),
            _ => None,
        }
    }

    /// The gateway closed with `code`: reconnect, start a new session, or give up with what
    /// to fix.
    fn closed(&self, code: u16) -> Result<Ended, CoreError> {
        let fatal = match code {
            4004 => {
                Some("Discord refused the bot token (close 4004); check channels.discord.token")
            }
            4010 | 4011 => Some(
                "Discord wants this bot sharded; switchboard runs one shard (bots in fewer than 2,500 servers)",
            ),
            4012 => Some("Discord no longer speaks gateway v10 (close 4012); update switchboard"),
            4013 => Some("Discord refused the gateway intents (close 4013)"),
            4014 => Some(
                "Discord refused the Message Content intent (close 4014): enable it on the developer portal's Bot page",
            ),
            _ => None,
        };
        if let Some(message) = fatal {
            *self.resume() = None;
            *self.refused.lock().unwrap_or_else(PoisonError::into_inner) =
                Some((Instant::now(), message.to_owned()));
            return Err(channel_error(message.into()));
        }
        if matches!(code, 4007 | 4009) {
            *self.resume() = None;
        }
        tracing::info!(code, "Discord closed the gateway connection; reconnecting");
        Ok(Ended::Reconnect)
    }
}

type Socket =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

/// Why a connection ended.
enum Closed {
    /// With a close code.
    Code(u16),
    /// Broken.
    Error(String),
}

/// The next frame that is an envelope; `None` when the stream ended.
async fn next_envelope(socket: &mut Socket) -> Result<Option<Envelope>, Closed> {
    loop {
        let frame = match socket.next().await {
            None => return Ok(None),
            Some(Err(err)) => return Err(Closed::Error(err.to_string())),
            Some(Ok(frame)) => frame,
        };
        let text = match frame {
            Frame::Text(text) => text,
            Frame::Close(frame) => {
                return Err(Closed::Code(
                    frame.map(|f| u16::from(f.code)).unwrap_or(1005),
                ));
            }
            Frame::Binary(_) => {
                return Err(Closed::Error(
                    "a binary frame (compression was not asked for)".into(),
                ));
            }
            _ => continue,
        };
        match serde_json::from_str::<Envelope>(text.as_str()) {
            Ok(envelope) => return Ok(Some(envelope)),
            Err(err) => {
                tracing::warn!(error = %err, "Discord: a gateway frame that cannot be read")
            }
        }
    }
}

async fn send(socket: &mut Socket, value: &Value) -> Result<(), CoreError> {
    socket
        .send(Frame::text(value.to_string()))
        .await
        .map_err(|err: tungstenite::Error| {
            unavailable(format!("the gateway connection failed: {err}"))
        })
}

fn unavailable(message: String) -> CoreError {
    CoreError::Unavailable {
        channel: CHANNEL_NAME.into(),
        message,
    }
}

/// A Discord id, sent as a string.
pub(crate) fn snowflake(value: &Value) -> Option<u64> {
    match value {
        Value::String(text) => text.parse().ok(),
        Value::Number(number) => number.as_u64(),
        _ => None,
    }
}
