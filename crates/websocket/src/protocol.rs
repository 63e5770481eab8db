//! The JSON frames of the WebSocket protocol (documented in `docs/protocol.md`).

use serde::{Deserialize, Serialize};
use switchboard_core::{OutboundFile, OutboundKind, OutboundMessage};

/// The longest `chat_id` accepted, in bytes.
pub const MAX_CHAT_ID_BYTES: usize = 128;

/// What a client sends.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum ClientFrame {
    /// A message for the agent in chat `chat_id`; this socket then receives the chat's frames.
    Message {
        /// The chat (session `websocket_<chat_id>`).
        chat_id: String,
        /// The text.
        content: String,
        /// The client's id for the message (optional): a message whose id its chat already
        /// handled is not answered again, so a client may resend after a lost connection.
        #[serde(default)]
        id: Option<String>,
        /// Files uploaded first (`POST /upload`), sent with the message.
        #[serde(default)]
        attachments: Vec<AttachmentRef>,
    },
    /// Receive a chat's frames without sending to it (e.g. a second tab), or again after a
    /// reconnect.
    Subscribe {
        /// The chat.
        chat_id: String,
        /// The `seq` of the last frame of the chat this client has: of the frames kept while
        /// no socket was on the chat, only later ones are sent (none twice after moving to
        /// another server of a cluster). Without it, all that were kept.
        #[serde(default)]
        after: Option<u64>,
    },
    /// Stop receiving a chat's frames.
    Unsubscribe {
        /// The chat.
        chat_id: String,
    },
    /// Asks for a `pong` (an application-level keepalive for clients without ping frames).
    Ping,
    /// Asks for the chat's conversation so far (a page shown again after a reload or a
    /// reconnect): answered with one `history` frame.
    History {
        /// The chat.
        chat_id: String,
    },
    /// Asks for the list of conversations (answered with `conversations`, and sent again to
    /// every socket that asked whenever it changes).
    Conversations,
    /// Searches what was said in every conversation (answered with `search`, or an `error`
    /// saying why not: `[memory]` off, a query the index cannot read).
    Search {
        /// Words (all must match), `"a phrase"`, `OR`, `NOT`, `prefix*`.
        query: String,
    },
    /// Adds a conversation to the list, or renames it (with `title`), and marks it as the
    /// most recent.
    Conversation {
        /// The chat.
        chat_id: String,
        /// Its title (kept as it is when left out).
        #[serde(default)]
        title: Option<String>,
    },
    /// Removes a conversation from the list and starts its session anew (`/new`).
    DeleteConversation {
        /// The chat.
        chat_id: String,
    },
}

/// The most attachments one message may carry.
pub const MAX_ATTACHMENTS: usize = 8;
/// The longest conversation title, in bytes.
pub const MAX_TITLE_BYTES: usize = 200;

/// A file a client uploaded, as its message names it: `file` is what `POST /upload`
/// answered.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct AttachmentRef {
    /// The saved file's name under `media/websocket/` (from the upload's answer).
    pub file: String,
    /// The name the person gave it (shown; the saved name is used if left out).
    #[serde(default)]
    pub name: Option<String>,
    /// Whether it is a voice note the page recorded (an answer to it may be spoken back).
    #[serde(default)]
    pub voice: bool,
    /// A recording's length in milliseconds, as the page measured it.
    #[serde(default)]
    pub duration_ms: Option<u64>,
}

impl ClientFrame {
    /// Parses a text frame; the error names what is wrong with it.
    pub fn parse(text: &str, max_bytes: usize) -> Result<Self, String> {
        if text.len() > max_bytes {
            return Err(format!(
                "frame too large: {} bytes, the limit is {max_bytes}",
                text.len()
            ));
        }
        let frame: Self =
            serde_json::from_str(text).map_err(|err| format!("invalid frame: {err}"))?;
        match &frame {
            Self::Message {
                chat_id,
                content,
                id,
                attachments,
            } => {
                check_chat_id(chat_id)?;
                if content.trim().is_empty() && attachments.is_empty() {
                    return Err("invalid frame: `content` is empty".into());
                }
                if attachments.len() > MAX_ATTACHMENTS {
                    return Err(format!(
                        "invalid frame: at most {MAX_ATTACHMENTS} attachments per message"
                    ));
                }
                if let Some(id) = id
                    && (id.is_empty()
                        || id.len() > MAX_CHAT_ID_BYTES
                        || id.chars().any(char::is_control))
                {
                    return Err(format!(
                        "invalid frame: `id` must be 1 to {MAX_CHAT_ID_BYTES} bytes without control characters"
                    ));
                }
            }
            Self::Subscribe { chat_id, .. }
            | Self::Unsubscribe { chat_id }
            | Self::History { chat_id }
            | Self::DeleteConversation { chat_id } => check_chat_id(chat_id)?,
            Self::Conversation { chat_id, title } => {
                check_chat_id(chat_id)?;
                if let Some(title) = title
                    && (title.len() > MAX_TITLE_BYTES || title.chars().any(char::is_control))
                {
                    return Err(format!(
                        "invalid frame: `title` must be at most {MAX_TITLE_BYTES} bytes without control characters"
                    ));
                }
            }
            Self::Search { query } => {
                if query.trim().is_empty() || query.len() > MAX_QUERY_BYTES {
                    return Err(format!(
                        "invalid frame: `query` must be 1 to {MAX_QUERY_BYTES} bytes"
                    ));
                }
            }
            Self::Ping | Self::Conversations => {}
        }
        Ok(frame)
    }
}

pub(crate) fn check_chat_id(chat_id: &str) -> Result<(), String> {
    if chat_id.is_empty() || chat_id.len() > MAX_CHAT_ID_BYTES {
        return Err(format!(
            "invalid frame: `chat_id` must be 1 to {MAX_CHAT_ID_BYTES} bytes"
        ));
    }
    if chat_id.chars().any(char::is_control) {
        return Err("invalid frame: `chat_id` contains control characters".into());
    }
    Ok(())
}

/// What the server sends.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ServerFrame {
    /// The connection is authenticated and ready.
    Ready {
        /// The server's version.
        version: &'static str,
        /// The largest frame the server reads (a longer message is refused, and closes the
        /// socket).
        max_frame_bytes: usize,
        /// The largest file `POST /upload` takes (0: uploads are off).
        max_attachment_bytes: u64,
    },
    /// A turn began (show "typing…" until its `done`).
    Started {
        /// The chat.
        chat_id: String,
    },
    /// A piece of a reply as it streams in.
    Delta {
        /// The chat.
        chat_id: String,
        /// The text piece.
        text: String,
    },
    /// A whole reply.
    Message {
        /// The chat.
        chat_id: String,
        /// The text.
        content: String,
    },
    /// The text streamed so far is void; the reply streams anew.
    Reset {
        /// The chat.
        chat_id: String,
    },
    /// What the turn waits on (a slow model, a retry, a check of the answer); replaced by
    /// the next frame. With `waiting_for`, the turn waits on the person: the text is a
    /// question (`answer`) or a request to run a tool (`approval`, answered by `/approve`
    /// or `/deny`), and the chat's next message is the answer.
    Status {
        /// The chat.
        chat_id: String,
        /// The status line.
        text: String,
        /// `approval` or `answer` when the turn waits on the person.
        #[serde(skip_serializing_if = "Option::is_none")]
        waiting_for: Option<&'static str>,
    },
    /// A message the agent sent unasked, outside any turn (no `done` follows).
    Post {
        /// The chat.
        chat_id: String,
        /// The text.
        content: String,
    },
    /// A file for the chat: a picture (shown), a voice message (played), a document
    /// (offered to download), each at `url` — a link that works without the token and
    /// expires (a day).
    File {
        /// The chat.
        chat_id: String,
        /// Its name.
        name: String,
        /// Its MIME type.
        mime: String,
        /// Its size in bytes.
        bytes: u64,
        /// `image`, `voice` or `document`.
        kind: &'static str,
        /// Where to fetch it (a path on this server).
        url: String,
        /// Words shown with it (Markdown), if any.
        #[serde(skip_serializing_if = "Option::is_none")]
        caption: Option<String>,
    },
    /// What the person's voice note said, as it was transcribed (with `reply_to`: the
    /// message it was in).
    Transcript {
        /// The chat.
        chat_id: String,
        /// The text heard.
        text: String,
    },
    /// Something to know that is not the reply (e.g. the chat could not be saved).
    Notice {
        /// The chat.
        chat_id: String,
        /// The notice.
        text: String,
    },
    /// A tool started or ended.
    Tool {
        /// The chat.
        chat_id: String,
        /// The call's id (the same in its start and end frames).
        id: String,
        /// The tool.
        name: String,
        /// `started`, `finished` or `failed`.
        status: &'static str,
        /// At `started`, the arguments; at the end, the start of the result or error (at
        /// most 512 bytes, `…` marking a cut).
        detail: String,
        /// At the end, how long the call ran.
        #[serde(skip_serializing_if = "Option::is_none")]
        elapsed_ms: Option<u64>,
    },
    /// The turn (or the answer to a command) is over.
    Done {
        /// The chat.
        chat_id: String,
        /// How it ended: `answered`, `iteration_limit`, `cancelled`, `failed`, `not_a_turn`.
        end: &'static str,
    },
    /// Something went wrong; without `chat_id` it is about the frame the client sent.
    Error {
        /// The chat, when the error is about one.
        #[serde(skip_serializing_if = "Option::is_none")]
        chat_id: Option<String>,
        /// What went wrong.
        message: String,
    },
    /// The answer to `ping`.
    Pong,
    /// The answer to `history`: the chat's messages as its people saw them (what they
    /// wrote and the agent's replies, oldest first; tool calls and results left out).
    History {
        /// The chat.
        chat_id: String,
        /// The messages.
        messages: Vec<Said>,
        /// Whether a turn runs in the chat now (its frames follow).
        running: bool,
        /// The question the running turn waits on, if it does (as its `status` frame said).
        #[serde(skip_serializing_if = "Option::is_none")]
        waiting: Option<Waiting>,
        /// The running turn's answer so far (what its `delta` frames said).
        #[serde(skip_serializing_if = "Option::is_none")]
        text: Option<String>,
        /// The `seq` of the last frame `text` and `waiting` cover: a later frame with a
        /// `seq` up to it is already in them.
        #[serde(skip_serializing_if = "Option::is_none")]
        seq: Option<u64>,
    },
    /// What became of a message the client gave an `id`: `handled` (answered, or a repeat of
    /// one that was), `dropped` (refused or dropped by `/stop`: sending it again will not
    /// help) or `unprocessed` (the daemon stopped first: send it again, with the same id,
    /// after reconnecting).
    Handled {
        /// The chat.
        chat_id: String,
        /// The message's id.
        id: String,
        /// `handled`, `dropped` or `unprocessed`.
        fate: &'static str,
    },
    /// The list of conversations, most recent first.
    Conversations {
        /// The conversations.
        conversations: Vec<Conversation>,
    },
    /// What a `search` found, best first.
    Search {
        /// The query, as it was asked.
        query: String,
        /// The hits.
        hits: Vec<SearchHit>,
    },
}

/// Something a `search` found.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct SearchHit {
    /// The chat it was said in.
    pub chat_id: String,
    /// When (milliseconds since the Unix epoch), if known.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub at_ms: Option<i64>,
    /// `user`, `assistant`, `job NAME`, …
    pub who: String,
    /// The text around the match, the matching words marked `**so**`.
    pub snippet: String,
    /// Whether its conversation was closed (deleted from the list, or `/new`).
    pub archived: bool,
}

/// The longest query a `search` frame may carry.
pub const MAX_QUERY_BYTES: usize = 500;

/// Hits a `search` frame is answered with at most.
pub const MAX_SEARCH_HITS: usize = 30;

/// What a paused turn asked the person.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Waiting {
    /// The question.
    pub text: String,
    /// `approval` or `answer`.
    pub waiting_for: &'static str,
}

/// One message of a chat's history as the client shows it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Said {
    /// `user`, `assistant` or `tool` (a tool call and its result).
    pub role: &'static str,
    /// The text (empty for a tool call).
    pub content: String,
    /// The call, for `tool`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool: Option<SaidTool>,
}

/// A tool call in a chat's history: what the model asked and the start of what it got.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct SaidTool {
    /// The call's id.
    pub id: String,
    /// The tool.
    pub name: String,
    /// Its arguments (the start, as in `tool` frames).
    pub arguments: String,
    /// The start of its result; `None` when none was saved.
    pub result: Option<String>,
    /// Whether it returned a result rather than an error.
    pub ok: bool,
}

impl Said {
    /// A message a person or the agent wrote.
    pub fn text(role: &'static str, content: String) -> Self {
        Self {
            role,
            content,
            tool: None,
        }
    }
}

impl ServerFrame {
    /// An error about the frame the client sent.
    pub fn frame_error(message: impl Into<String>) -> Self {
        Self::Error {
            chat_id: None,
            message: message.into(),
        }
    }

    /// The frame an outbound message becomes; `link` names where a file is fetched (none:
    /// files are not offered here).
    pub fn from_outbound(
        message: OutboundMessage,
        link: impl FnOnce(&OutboundFile) -> Option<String>,
    ) -> Self {
        let chat_id = message.chat_id.to_string();
        match message.kind {
            OutboundKind::TurnStarted => Self::Started { chat_id },
            OutboundKind::Delta(text) => Self::Delta { chat_id, text },
            OutboundKind::Message(content) => Self::Message { chat_id, content },
            OutboundKind::Tool(tool) => Self::Tool {
                chat_id,
                id: tool.id,
                name: tool.name,
                status: tool.status.as_str(),
                detail: tool.detail,
                elapsed_ms: tool
                    .elapsed
                    .map(|elapsed| u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX)),
            },
            OutboundKind::DraftReset => Self::Reset { chat_id },
            OutboundKind::Status(text) => Self::Status {
                chat_id,
                text,
                waiting_for: None,
            },
            OutboundKind::Question { text, awaiting } => Self::Status {
                chat_id,
                text,
                waiting_for: Some(awaiting.as_str()),
            },
            OutboundKind::Notice(text) => Self::Notice { chat_id, text },
            OutboundKind::Transcript(text) => Self::Transcript { chat_id, text },
            OutboundKind::Post(content) => Self::Post { chat_id, content },
            OutboundKind::File(file) => match link(&file) {
                Some(url) => Self::File {
                    chat_id,
                    kind: file.kind.as_str(),
                    url,
                    name: file.name,
                    mime: file.mime,
                    bytes: file.bytes,
                    caption: file.caption,
                },
                None => Self::Error {
                    chat_id: Some(chat_id),
                    message: format!("a file ({}) cannot be shown on this page", file.name),
                },
            },
            OutboundKind::Done(end) => Self::Done {
                chat_id,
                end: end.as_str(),
            },
            OutboundKind::Error(message) => Self::Error {
                chat_id: Some(chat_id),
                message,
            },
        }
    }

    /// The frame an outbound message becomes, as JSON text, numbered `seq` (its place among
    /// the chat's frames, which a client names to resubscribe): with `reply_to`, the id of
    /// the client message it answers, when it answers one that had an id (so a client with
    /// several messages in flight in a chat knows which turn a frame belongs to).
    pub fn outbound_json(
        message: OutboundMessage,
        seq: u64,
        link: impl FnOnce(&OutboundFile) -> Option<String>,
    ) -> String {
        let reply_to = message.reply_to.clone();
        // A scheduled run's turn starts marked, so the page says it was not the person's.
        let scheduled = matches!(message.kind, OutboundKind::TurnStarted)
            && message.turn.as_ref().is_some_and(|turn| {
                turn.as_str()
                    .starts_with(switchboard_core::SCHEDULED_RUN_PREFIX)
            });
        let mut json = Self::from_outbound(message, link).to_json();
        // The frame is a JSON object: the fields go in before its closing brace (cheaper
        // than serde's flattening, on every frame of every turn).
        if !json.ends_with('}') {
            return json;
        }
        json.pop();
        if let Some(id) = reply_to
            && let Ok(id) = serde_json::to_string(id.as_str())
        {
            json.push_str(",\"reply_to\":");
            json.push_str(&id);
        }
        if scheduled {
            json.push_str(",\"scheduled\":true");
        }
        json.push_str(",\"seq\":");
        json.push_str(&seq.to_string());
        json.push('}');
        json
    }

    /// The frame as JSON text.
    pub fn to_json(&self) -> String {
        // Serializing these plain structs cannot fail.
        serde_json::to_string(self).unwrap_or_else(|_| r#"{"type":"error"}"#.to_owned())
    }
}

/// One conversation of the list.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Conversation {
    /// Its chat (session `websocket_<chat_id>`).
    pub chat_id: String,
    /// Its title.
    pub title: String,
    /// When it was last written in or renamed (milliseconds since the Unix epoch).
    pub updated_ms: u64,
}

#[cfg(test)]
#[path = "protocol_tests.rs"]
mod tests;
