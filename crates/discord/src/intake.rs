//! From the gateway's events to the hub, one at a time in the order Discord sent them: is a
//! message for the agent ([`incoming`]), then it is taken into the channel's [`Inbox`] (on
//! disk until its fate is known: Discord does not deliver a message again, so one the daemon
//! was killed before handling is taken up from there at the next start), may its author talk
//! (the shared [`Gate`]: a pairing code in a DM for anyone else, silence in servers), then
//! its files are saved and it is published. Slash commands are answered at once (Discord
//! wants an answer within three seconds) and go on as the same command typed.

use std::path::PathBuf;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use switchboard_adapter::media::{self, Incoming as IncomingFile};
use switchboard_adapter::{Gate, Inbox, InboxEntry, PerChat, Remembered, Sender, Verdict, say};
use switchboard_core::{Bus, COMMANDS, ChatId, CommandSpec, CoreError, InboundMessage, MessageId};

use crate::convert::{FileRef, Incoming, Received, Scope, incoming};
use crate::gateway::{Event, snowflake};
use crate::rest::{Authors, CHANNEL_NAME, Rest};

/// The most characters of what a slash command takes (a model's name, a job's action).
const MAX_OPTION_CHARS: usize = 100;

/// Hosts attachments are fetched from (besides the API's own, for tests and proxies).
const ATTACHMENT_HOSTS: [&str; 2] = ["cdn.discordapp.com", "media.discordapp.net"];

/// Chats seen since the start, with the person of each direct message (`None` for a
/// server channel): who the agent may write to unasked.
pub(crate) type Chats = Remembered<String, Option<String>>;

/// Chats remembered at most; beyond, the table starts over.
pub(crate) const MAX_KNOWN_CHATS: usize = 10_000;

/// What taking an event needs.
pub(crate) struct Intake {
    pub(crate) admit: Arc<Admit>,
    pub(crate) scope: Scope,
    pub(crate) slash_commands: bool,
    /// Messages with files are admitted beside other chats', in order within their own.
    pub(crate) per_chat: PerChat,
    /// Messages taken in and not yet handled; opened by the channel's first run.
    pub(crate) inbox: Option<Inbox>,
    pub(crate) inbox_path: PathBuf,
}

/// A message as the inbox keeps it.
#[derive(Serialize, Deserialize)]
struct Kept {
    received: Received,
    username: String,
}

/// Admitting a message: who may talk, its files, the hub.
pub(crate) struct Admit {
    pub(crate) rest: Rest,
    pub(crate) hub: Arc<dyn Bus>,
    pub(crate) gate: Arc<Gate>,
    pub(crate) chats: Arc<Chats>,
    pub(crate) authors: Arc<Authors>,
    pub(crate) workspace: PathBuf,
    pub(crate) max_attachment_bytes: u64,
}

impl Intake {
    /// Opens the inbox (once: a restarted run keeps it) and admits again what it holds from
    /// an earlier daemon, in order.
    pub(crate) async fn open_inbox(&mut self) -> Result<(), CoreError> {
        if self.inbox.is_some() {
            return Ok(());
        }
        let (inbox, taken) = Inbox::opened(&self.inbox_path)
            .await
            .map_err(|err| crate::rest::channel_error(err.to_string()))?;
        if !taken.is_empty() {
            tracing::info!(
                messages = taken.len(),
                "Discord: taking up messages a previous run did not handle"
            );
        }
        for waiting in taken {
            match serde_json::from_value::<Kept>(waiting.body) {
                Ok(kept) => self.admit_kept(kept, Some(waiting.entry)).await,
                Err(err) => {
                    tracing::warn!(error = %err, "Discord: an inbox message that cannot be read was skipped");
                    waiting.entry.settle();
                }
            }
        }
        self.inbox = Some(inbox);
        Ok(())
    }

    /// Admits a message, in order within its chat (beside other chats' when it has files).
    async fn admit_kept(&mut self, kept: Kept, place: Option<InboxEntry>) {
        let chat = kept.received.chat.clone();
        let quick = kept.received.files.is_empty();
        let admit = self.admit.clone();
        let work = async move { admit.admit(kept.received, &kept.username, place).await };
        self.per_chat.run(&chat, quick, work).await;
    }

    /// Takes a message into the inbox (off the runtime's threads: it is fsynced). A message
    /// the inbox refuses (full, too large, a disk error) is still admitted, without it.
    async fn keep(&self, kept: &Kept) -> Option<InboxEntry> {
        let inbox = self.inbox.as_ref()?;
        let body = serde_json::to_value(kept).ok()?;
        match inbox.keep(body).await {
            Ok(entry) => Some(entry),
            Err(err) => {
                tracing::warn!(error = %err, "Discord: a message not kept in the inbox (it is handled, but not taken up again after a crash)");
                None
            }
        }
    }

    /// Takes one event. A message with files to fetch is admitted beside other chats'
    /// messages (in order within its own chat), so a slow download holds up only its chat.
    pub(crate) async fn take(&mut self, event: Event) {
        match event {
            Event::Ready { user, application } => {
                self.scope.me = user;
                if self.slash_commands {
                    // In the background: messages are not held up by it.
                    tokio::spawn(register(self.admit.rest.clone(), application));
                }
            }
            Event::Message(message) => match incoming(&message, &self.scope) {
                Incoming::Ignore(why) => {
                    tracing::debug!(
                        message = message.id,
                        why,
                        "Discord message not for the agent"
                    );
                }
                Incoming::Message(received) => {
                    let kept = Kept {
                        received: *received,
                        username: message.author.username.clone(),
                    };
                    let place = self.keep(&kept).await;
                    self.admit_kept(kept, place).await;
                }
            },
            Event::Interaction(interaction) => {
                // Its answer is a REST call: not in the way of other events.
                let admit = self.admit.clone();
                tokio::spawn(async move { admit.interaction(interaction).await });
            }
        }
    }
}

impl Admit {
    async fn admit(&self, received: Received, username: &str, place: Option<InboxEntry>) {
        let sender = received.sender.to_string();
        let verdict = self
            .gate
            .verdict(Sender {
                id: &sender,
                username: Some(username),
                name: &received.name,
                private: received.private,
            })
            .await;
        let chat = ChatId::from(received.chat.as_str());
        let reply_to = Some(MessageId::from(received.message.as_str()));
        match verdict {
            Verdict::Allowed => return self.publish(received, place).await,
            Verdict::Pair(text) => {
                tracing::info!(%sender, "Discord: an unknown sender got a pairing code");
                say(&self.hub, CHANNEL_NAME, &chat, reply_to, text).await;
            }
            Verdict::Ignore => {
                tracing::debug!(%sender, %chat, "Discord: a message from a sender who may not talk");
            }
        }
        // Not for the agent: nothing to take up again.
        if let Some(place) = place {
            place.settle();
        }
    }

    async fn publish(&self, received: Received, place: Option<InboxEntry>) {
        let mut content = received.text.clone();
        let mut attachments = Vec::new();
        for file in &received.files {
            match self.save(&received, file).await {
                Ok(attachment) => attachments.push(switchboard_core::Attachment {
                    duration_ms: file.duration_ms,
                    voice: file.voice,
                    ..attachment
                }),
                Err(why) => media::not_saved(&mut content, CHANNEL_NAME, &file.name, &why),
            }
        }
        self.authors.note(received.message.clone(), received.sender);
        let person = received.private.then(|| received.sender.to_string());
        self.chats.note(received.chat.clone(), person);
        let mut message = InboundMessage::text(
            CHANNEL_NAME.into(),
            received.chat.as_str().into(),
            received.sender.to_string().into(),
            content,
        );
        message.id = Some(MessageId::from(received.message.as_str()));
        message.reply_to = received.reply_to.map(MessageId::from);
        message.attachments = attachments;
        // Settled once its fate is known; one left unprocessed (the daemon stopped first)
        // stays for the next start.
        message.ack = place.map(InboxEntry::ack);
        if let Err(err) = self.hub.publish_inbound(message).await {
            tracing::info!(error = %err, "a Discord message was not taken");
        }
    }

    /// Saves one attachment, fetched only from Discord's CDN (or the configured API host).
    async fn save(
        &self,
        received: &Received,
        file: &FileRef,
    ) -> Result<switchboard_core::Attachment, String> {
        let incoming = IncomingFile {
            channel: CHANNEL_NAME,
            chat: &received.chat,
            message: &received.message,
            name: &file.name,
            mime: file.mime.as_deref(),
            max_bytes: self.max_attachment_bytes,
            cap_key: "channels.discord.max_attachment_bytes",
        };
        if file.size > self.max_attachment_bytes {
            return Err(incoming.too_large());
        }
        let url = media::file_url(
            &file.url,
            &ATTACHMENT_HOSTS,
            self.rest.host(),
            "Discord's CDN",
        )?;
        let response = self.rest.download(url).await?;
        media::save(&self.workspace, incoming, response.bytes_stream()).await
    }

    /// A slash command: answered at once, then taken as the command typed in its channel.
    async fn interaction(&self, interaction: Value) {
        // Type 2 is an application command.
        if interaction["type"].as_u64() != Some(2) {
            return;
        }
        let name = interaction["data"]["name"].as_str().unwrap_or_default();
        let Some(spec) = COMMANDS.iter().find(|spec| spec.name == name) else {
            return;
        };
        // Both go into a URL path: an id is digits, a token URL-safe characters.
        let id = interaction["id"]
            .as_str()
            .filter(|id| !id.is_empty() && id.bytes().all(|b| b.is_ascii_digit()));
        let token = interaction["token"].as_str().filter(|token| {
            (1..=1024).contains(&token.len())
                && token
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
        });
        let (Some(id), Some(token), Some(channel)) =
            (id, token, snowflake(&interaction["channel_id"]))
        else {
            tracing::warn!("Discord: an interaction without a usable id, token or channel");
            return;
        };
        let user = if interaction["member"]["user"].is_object() {
            &interaction["member"]["user"]
        } else {
            &interaction["user"]
        };
        let Some(sender) = snowflake(&user["id"]) else {
            return;
        };
        let username = user["username"].as_str().unwrap_or_default();
        let private = interaction["guild_id"].is_null();
        let sender_id = sender.to_string();
        let allowed = self
            .gate
            .verdict(Sender {
                id: &sender_id,
                username: Some(username),
                name: user["global_name"].as_str().unwrap_or(username),
                private,
            })
            .await;
        let command = typed(spec, &interaction["data"]["options"]);
        let answer = match &allowed {
            Verdict::Allowed => command.clone(),
            Verdict::Pair(text) => text.clone(),
            Verdict::Ignore => "You may not talk to this agent.".to_owned(),
        };
        // 4: a message in answer; flag 64 makes it visible to the sender only.
        let flags = if matches!(allowed, Verdict::Allowed) {
            0
        } else {
            64
        };
        let body = json!({"type": 4, "data": {
            "content": answer, "flags": flags, "allowed_mentions": {"parse": []},
        }});
        let path = format!("interactions/{id}/{token}/callback");
        if let Err(err) = self
            .rest
            .call(reqwest::Method::POST, &path, Some(&body))
            .await
        {
            tracing::warn!(error = %err, "Discord: a slash command could not be answered");
        }
        if matches!(allowed, Verdict::Allowed) {
            let message = InboundMessage::text(
                CHANNEL_NAME.into(),
                channel.to_string().into(),
                sender_id.into(),
                command,
            );
            if let Err(err) = self.hub.publish_inbound(message).await {
                tracing::info!(error = %err, "a Discord command was not taken");
            }
        }
    }
}

/// A slash command of `spec` with `options` as the person would have typed it: `/name`, and
/// what it takes (`/model NAME`, `/jobs rm ID`) when its option holds a fitting value.
fn typed(spec: &CommandSpec, options: &Value) -> String {
    let taken = spec.takes.and_then(|takes| {
        options
            .as_array()
            .into_iter()
            .flatten()
            .find(|option| option["name"] == takes.name)
            .and_then(|option| option["value"].as_str())
            .map(str::trim)
            .filter(|words| {
                !words.is_empty()
                    && words.chars().count() <= MAX_OPTION_CHARS
                    && !words.contains(char::is_control)
                    && words.split_whitespace().count() <= takes.words
            })
    });
    match taken {
        Some(words) => format!("/{} {words}", spec.name),
        None => format!("/{}", spec.name),
    }
}

/// The slash commands, as registered: every chat command ([`COMMANDS`]), with an optional
/// text option for what it takes.
pub(crate) fn slash_commands() -> Vec<Value> {
    COMMANDS
        .iter()
        .map(|spec| {
            let mut command = json!({"name": spec.name, "description": spec.summary,
                "type": 1, "contexts": [0, 1, 2]});
            if let Some(takes) = spec.takes {
                command["options"] = json!([{"type": 3, "name": takes.name,
                    "description": takes.about, "required": false}]);
            }
            command
        })
        .collect()
}

/// Registers the slash commands (replacing the application's global ones).
async fn register(rest: Rest, application: u64) {
    let commands = slash_commands();
    let path = format!("applications/{application}/commands");
    match rest
        .call(reqwest::Method::PUT, &path, Some(&Value::Array(commands)))
        .await
    {
        Ok(_) => tracing::debug!("Discord: slash commands registered"),
        Err(err) => {
            tracing::warn!(error = %err, "Discord: slash commands not registered (typed commands still work)");
        }
    }
}
