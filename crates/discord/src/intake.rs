//! From the gateway's events to the hub, one at a time in the order Discord sent them: is a
//! message for the agent ([`incoming`]), then the shared intake ([`Admission`]) takes it
//! into the channel's inbox (on disk until its fate is known: Discord does not deliver a
//! message again, so one the daemon was killed before handling is taken up from there at
//! the next start), asks the [`Gate`] whether its author may talk (a pairing code in a DM
//! for anyone else, silence in servers), fetches its files ([`Files`]) and publishes it.
//! Slash commands are answered at once (Discord wants an answer within three seconds) and
//! go on as the same command typed.

use std::sync::Arc;

use async_trait::async_trait;
use futures::TryStreamExt;
use serde_json::{Value, json};
use switchboard_adapter::{
    Arrival, Chunks, Fetch, FileRef, Gate, Incoming, Intake as Admission, Sender, Verdict, media,
};
use switchboard_core::{Bus, COMMANDS, CommandSpec, InboundMessage};

use crate::convert::{Scope, incoming};
use crate::gateway::{Event, snowflake};
use crate::rest::{Authors, CHANNEL_NAME, Rest};

/// The most characters of what a slash command takes (a model's name, a job's action).
const MAX_OPTION_CHARS: usize = 100;

/// Hosts attachments are fetched from (besides the API's own, for tests and proxies).
const ATTACHMENT_HOSTS: [&str; 2] = ["cdn.discordapp.com", "media.discordapp.net"];

/// What taking an event needs.
pub(crate) struct Intake {
    /// Messages: the inbox, the gate, their files, the hub.
    pub(crate) admission: Admission,
    /// Slash commands.
    pub(crate) commands: Arc<Commands>,
    pub(crate) scope: Scope,
    pub(crate) slash_commands: bool,
}

/// Attachments, fetched only from Discord's CDN (or the configured API host).
pub(crate) struct Files {
    pub(crate) rest: Rest,
    /// The author of each message let in: a reply to it mentions them.
    pub(crate) authors: Arc<Authors>,
}

/// Answering slash commands: who may, the REST call, the hub.
pub(crate) struct Commands {
    pub(crate) rest: Rest,
    pub(crate) hub: Arc<dyn Bus>,
    pub(crate) gate: Arc<Gate>,
}

impl Intake {
    /// Takes one event. A message with files to fetch is admitted beside other chats'
    /// messages (in order within its own chat), so a slow download holds up only its chat.
    pub(crate) async fn take(&mut self, event: Event) {
        match event {
            Event::Ready { user, application } => {
                self.scope.me = user;
                if self.slash_commands {
                    // In the background: messages are not held up by it.
                    tokio::spawn(register(self.commands.rest.clone(), application));
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
                Incoming::Message(arrival) => self.admission.take(*arrival).await,
            },
            Event::Interaction(interaction) => {
                // Its answer is a REST call: not in the way of other events.
                let commands = self.commands.clone();
                tokio::spawn(async move { commands.interaction(interaction).await });
            }
        }
    }
}

#[async_trait]
impl Fetch for Files {
    async fn fetch(&self, file: &FileRef) -> Result<Chunks, String> {
        let url = media::file_url(
            &file.url,
            &ATTACHMENT_HOSTS,
            self.rest.host(),
            "Discord's CDN",
        )?;
        let response = self.rest.download(url).await?;
        Ok(Box::pin(
            response.bytes_stream().map_err(|err| err.to_string()),
        ))
    }

    fn admitted(&self, arrival: &Arrival) {
        if let Ok(sender) = arrival.sender.parse() {
            self.authors.note(arrival.message.clone(), sender);
        }
    }
}

impl Commands {
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
