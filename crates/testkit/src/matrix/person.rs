//! [`Person`]: someone on the homeserver, with a Matrix client of their own (matrix-sdk,
//! as Element X is built on it): registered, logged in, syncing, reading every message of
//! their rooms decrypted as their client shows it, and writing as their client does —
//! encrypted in encrypted rooms.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use matrix_sdk::config::SyncSettings;
use matrix_sdk::media::{MediaFormat, MediaRequestParameters};
use matrix_sdk::ruma::events::room::MediaSource;
use matrix_sdk::ruma::events::room::message::OriginalSyncRoomMessageEvent;
use matrix_sdk::ruma::serde::Raw;
use matrix_sdk::ruma::{OwnedRoomId, RoomId, UserId};
use matrix_sdk::{Client, Room, RoomMemberships};
use serde_json::Value;
use tokio::sync::Notify;
use tokio::time::Instant;

use super::Synapse;

/// A message someone wrote in one of the person's rooms, as their client read it.
#[derive(Clone, Debug)]
pub struct Seen {
    pub room: String,
    pub event: String,
    pub sender: String,
    /// Its content, decrypted.
    pub content: Value,
    /// When the person's client had it.
    pub at: Instant,
}

impl Seen {
    /// The message it edits, when it is an edit.
    pub fn edits(&self) -> Option<&str> {
        (self.content["m.relates_to"]["rel_type"] == "m.replace")
            .then(|| self.content["m.relates_to"]["event_id"].as_str())
            .flatten()
    }

    /// The message it replies to.
    pub fn reply_to(&self) -> Option<&str> {
        self.content["m.relates_to"]["m.in_reply_to"]["event_id"].as_str()
    }

    /// The thread it is in.
    pub fn thread(&self) -> Option<&str> {
        (self.content["m.relates_to"]["rel_type"] == "m.thread")
            .then(|| self.content["m.relates_to"]["event_id"].as_str())
            .flatten()
    }
}

/// A person with their client; it stops syncing when dropped.
pub struct Person {
    pub client: Client,
    pub id: String,
    seen: Arc<Mutex<Vec<Seen>>>,
    changed: Arc<Notify>,
    syncing: tokio::task::JoinHandle<()>,
}

impl Person {
    /// Registers `@name:localhost` on `synapse`, logs in and starts syncing; `changed` is
    /// notified at every message their client reads.
    ///
    /// # Panics
    /// When the homeserver refuses.
    pub async fn join(synapse: &Synapse, name: &str, changed: Arc<Notify>) -> Self {
        let password = format!("{name}-password");
        let id = synapse.register(name, &password).await;
        // A phone's client tries a request again when the connection fails (the homeserver
        // restarting, a pooled connection it closed), as Element's sending queue does.
        let client = Client::builder()
            .homeserver_url(synapse.url())
            .request_config(matrix_sdk::config::RequestConfig::new().retry_limit(6))
            .build()
            .await
            .expect("a client");
        client
            .matrix_auth()
            .login_username(&id, &password)
            .initial_device_display_name(&format!("{name}'s phone"))
            .send()
            .await
            .expect("logging in");
        let seen = Arc::new(Mutex::new(Vec::new()));
        let noted = seen.clone();
        let notify = changed.clone();
        client.add_event_handler(
            move |event: Raw<OriginalSyncRoomMessageEvent>, room: Room| {
                let noted = noted.clone();
                let notify = notify.clone();
                async move {
                    let Ok(value) = event.deserialize_as::<Value>() else {
                        return;
                    };
                    noted.lock().expect("seen").push(Seen {
                        room: room.room_id().to_string(),
                        event: value["event_id"].as_str().unwrap_or_default().to_owned(),
                        sender: value["sender"].as_str().unwrap_or_default().to_owned(),
                        content: value["content"].clone(),
                        at: Instant::now(),
                    });
                    notify.notify_waiters();
                }
            },
        );
        client
            .sync_once(SyncSettings::default())
            .await
            .expect("a first sync");
        let syncing = tokio::spawn({
            let client = client.clone();
            async move {
                loop {
                    let settings = SyncSettings::default().timeout(Duration::from_secs(5));
                    if client.sync(settings).await.is_err() {
                        tokio::time::sleep(Duration::from_millis(200)).await;
                    }
                }
            }
        });
        Self {
            client,
            id,
            seen,
            changed,
            syncing,
        }
    }

    /// Makes an encrypted direct chat with `bot`, inviting it; returns the room.
    ///
    /// # Panics
    /// When the homeserver refuses.
    pub async fn direct_chat(&self, bot: &str) -> OwnedRoomId {
        let bot = UserId::parse(bot).expect("a user id");
        let room = self.client.create_dm(&bot).await.expect("a direct chat");
        room.room_id().to_owned()
    }

    /// Makes a room named `name` and invites `people`; encrypted when `encrypted`.
    ///
    /// # Panics
    /// When the homeserver refuses.
    pub async fn room(&self, name: &str, people: &[&str], encrypted: bool) -> OwnedRoomId {
        use matrix_sdk::ruma::api::client::room::create_room::v3::Request;
        let mut request = Request::new();
        request.name = Some(name.to_owned());
        request.invite = people
            .iter()
            .map(|person| UserId::parse(*person).expect("a user id"))
            .collect();
        if encrypted {
            let encryption: Raw<_> = Raw::new(&serde_json::json!({
                "type": "m.room.encryption", "state_key": "",
                "content": {"algorithm": "m.megolm.v1.aes-sha2"}
            }))
            .expect("json")
            .cast_unchecked();
            request.initial_state = vec![encryption];
        }
        let room = self.client.create_room(request).await.expect("a room");
        room.room_id().to_owned()
    }

    fn joined_room(&self, room: &RoomId) -> Room {
        self.client
            .get_room(room)
            .expect("the person is in the room")
    }

    /// Waits until `who` has joined `room`, as the person's client sees it.
    ///
    /// # Panics
    /// After `patience`.
    pub async fn wait_joined(&self, room: &RoomId, who: &str, patience: Duration) {
        let who = UserId::parse(who).expect("a user id");
        let deadline = Instant::now() + patience;
        loop {
            if let Some(room) = self.client.get_room(room)
                && let Ok(members) = room.members_no_sync(RoomMemberships::JOIN).await
                && members.iter().any(|member| member.user_id() == who)
            {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "{who} did not join {room} within {patience:?}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Joins `room` once the invite to it reached the person's client.
    ///
    /// # Panics
    /// When no invite came within 30 s, or the homeserver refuses.
    pub async fn accept_invite(&self, room: &RoomId) {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(invited) = self.client.get_room(room) {
                if invited.state() == matrix_sdk::RoomState::Joined {
                    return;
                }
                if invited.state() == matrix_sdk::RoomState::Invited {
                    invited.join().await.expect("joining");
                    return;
                }
            }
            assert!(Instant::now() < deadline, "no invite to {room} came");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Whether `who` left `room` (or declined its invite), as the person's client sees it.
    pub async fn left(&self, room: &RoomId, who: &str) -> bool {
        let who = UserId::parse(who).expect("a user id");
        let Some(room) = self.client.get_room(room) else {
            return false;
        };
        match room.get_member_no_sync(&who).await {
            Ok(Some(member)) => matches!(
                member.membership(),
                matrix_sdk::ruma::events::room::member::MembershipState::Leave
            ),
            _ => false,
        }
    }

    /// Sends a message with `content` (`{"msgtype": "m.text", "body": …}`) to `room`,
    /// encrypted where the room is; returns its event id.
    ///
    /// # Panics
    /// When it cannot be sent.
    pub async fn send(&self, room: &RoomId, content: Value) -> String {
        let sent = self
            .joined_room(room)
            .send_raw("m.room.message", content)
            .await
            .expect("sending");
        sent.event_id.to_string()
    }

    /// Sends `bytes` as a file (`m.file`, or by its type) with `caption`, encrypted where the
    /// room is; returns its event id.
    ///
    /// # Panics
    /// When it cannot be sent.
    pub async fn send_file(
        &self,
        room: &RoomId,
        name: &str,
        mime: &str,
        bytes: Vec<u8>,
        caption: Option<&str>,
    ) -> String {
        let mime: mime::Mime = mime.parse().expect("a MIME type");
        let mut config = matrix_sdk::attachment::AttachmentConfig::new();
        config.caption = caption.map(str::to_owned);
        let sent = self
            .joined_room(room)
            .send_attachment(name, &mime, bytes, config)
            .await
            .expect("sending a file");
        sent.event_id.to_string()
    }

    /// Sends a voice message (`bytes`, OGG/Opus, `seconds` long) as their app records one;
    /// returns its event id.
    ///
    /// # Panics
    /// When it cannot be sent.
    pub async fn send_voice(&self, room: &RoomId, bytes: Vec<u8>, seconds: u32) -> String {
        use matrix_sdk::attachment::{AttachmentConfig, AttachmentInfo, BaseAudioInfo};
        let audio = BaseAudioInfo {
            duration: Some(Duration::from_secs(u64::from(seconds))),
            size: matrix_sdk::ruma::UInt::new(bytes.len() as u64),
        };
        let mut config = AttachmentConfig::new();
        // The SDK marks it a voice message when it has a waveform, as apps record one.
        config.info = Some(AttachmentInfo::Voice {
            audio_info: audio,
            waveform: Some(vec![0; 30]),
        });
        let mime: mime::Mime = "audio/ogg".parse().expect("a MIME type");
        let sent = self
            .joined_room(room)
            .send_attachment("Voice message.ogg", &mime, bytes, config)
            .await
            .expect("sending a voice message");
        sent.event_id.to_string()
    }

    /// The bytes of a file message's `content`, downloaded (and decrypted) by the person's
    /// client.
    ///
    /// # Panics
    /// When it cannot be fetched.
    pub async fn download(&self, content: &Value) -> Vec<u8> {
        let source: MediaSource = if content["file"].is_object() {
            serde_json::from_value(serde_json::json!({"file": content["file"]}))
        } else {
            serde_json::from_value(serde_json::json!({"url": content["url"]}))
        }
        .expect("a file's source");
        self.client
            .media()
            .get_media_content(
                &MediaRequestParameters {
                    source,
                    format: MediaFormat::File,
                },
                false,
            )
            .await
            .expect("the file")
    }

    /// Every message of the person's rooms their client read, oldest first.
    pub fn seen(&self) -> Vec<Seen> {
        self.seen.lock().expect("seen").clone()
    }

    /// What `sender` wrote in `room`.
    pub fn seen_from(&self, room: &str, sender: &str) -> Vec<Seen> {
        self.seen()
            .into_iter()
            .filter(|seen| seen.room == room && seen.sender == sender)
            .collect()
    }

    /// Notified at every message read.
    pub fn changed(&self) -> &Arc<Notify> {
        &self.changed
    }
}

impl Drop for Person {
    fn drop(&mut self) {
        self.syncing.abort();
    }
}
