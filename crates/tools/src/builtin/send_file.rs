//! `send_file`: the agent sends a file of its workspace — a chart it drew, a report, a CSV —
//! to the chat it answers in, or to another chat under the `message` tool's rules. Pictures
//! go out as pictures where the platform shows them, everything else as documents.
//!
//! Nothing is said to be sent that was not: the file is checked against what the platform
//! takes before anything is uploaded (too large: the platform's limit is the error), copied
//! into the daemon's media store (so what is uploaded is what was checked, even if the
//! workspace file changes meanwhile), and the tool returns once the platform accepted the
//! upload — with its message id — or with the platform's error. A turn taken up again after a
//! crash that sends the same file to the same chat finds the receipt of the first upload and
//! does not upload it again.

use std::io::{Read, Seek, SeekFrom};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use serde::Deserialize;
use serde_json::json;
use switchboard_core::{ChannelName, ChatId, ImagePart, MediaKind, OutboundFile, media::size};

use super::args;
use super::message::receipt;
use crate::outbox::{Outbox, Outgoing, SendTo, SentBy};
use crate::{Tool, ToolContext, ToolError, ToolOutput};

/// The longest caption taken (a platform shows less with a file; the rest follows as text).
const MAX_CAPTION_BYTES: usize = 4 * 1024;

/// How long a call may take: an upload of tens of megabytes, and the platform's waits.
const TIMEOUT: Duration = Duration::from_secs(300);

/// Sends a file to a chat.
#[derive(Debug)]
pub struct SendFile {
    outbox: Arc<dyn Outbox>,
}

impl SendFile {
    /// A `send_file` tool sending through `outbox`.
    pub fn new(outbox: Arc<dyn Outbox>) -> Self {
        Self { outbox }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Args {
    path: String,
    #[serde(default)]
    caption: Option<String>,
    #[serde(default)]
    channel: Option<String>,
    #[serde(default)]
    chat_id: Option<String>,
    #[serde(default, rename = "as")]
    kind: Option<MediaKind>,
}

#[async_trait]
impl Tool for SendFile {
    fn name(&self) -> &str {
        "send_file"
    }

    fn description(&self) -> &str {
        "Send a file from the workspace (a chart, a report, a CSV, an image) to the person: \
         by default into this chat; with channel and chat_id to another chat that has \
         talked to you. Pictures are shown as pictures, other files as documents. Returns \
         once the platform accepted it (its message id), or why it could not be sent."
    }

    fn parameters(&self) -> serde_json::Value {
        json!({
            "type": "object",
            "properties": {
                "path": {"type": "string", "description": "the file, relative to the workspace"},
                "caption": {"type": "string", "description": "a few words shown with it (Markdown)"},
                "channel": {"type": "string", "description": "another chat's channel (with chat_id); leave out for this chat"},
                "chat_id": {"type": "string", "description": "another chat's id on that channel"},
                "as": {"type": "string", "enum": ["image", "document", "voice"],
                    "description": "how to send it; leave out to send pictures as images and everything else as documents"}
            },
            "required": ["path"]
        })
    }

    fn timeout(&self) -> Option<Duration> {
        Some(TIMEOUT)
    }

    async fn call(
        &self,
        value: serde_json::Value,
        ctx: &ToolContext,
    ) -> Result<ToolOutput, ToolError> {
        let args: Args = args(value)?;
        if args
            .caption
            .as_ref()
            .is_some_and(|caption| caption.len() > MAX_CAPTION_BYTES)
        {
            return Err(ToolError::InvalidArguments(format!(
                "the caption is longer than {MAX_CAPTION_BYTES} bytes; send the text with its own message"
            )));
        }
        let target = target(&args, ctx)?;
        let opened = open(ctx, &args.path).await?;
        let kind = args.kind.unwrap_or_else(|| MediaKind::of(&opened.mime));
        if kind == MediaKind::Image && !ImagePart::shown_type(&opened.mime) {
            return Err(ToolError::InvalidArguments(format!(
                "{} is not a picture the platforms show (PNG, JPEG, GIF or WebP): send it as a document",
                args.path
            )));
        }
        let limits = self.outbox.limits(&target.channel)?;
        if let Some(why) = limits.refusal(&target.channel.to_string(), kind, opened.bytes) {
            return Err(ToolError::Failed(format!(
                "{} was not sent: {why}",
                args.path
            )));
        }
        let kept = self
            .outbox
            .media()
            .keep(opened.file, &opened.name)
            .await
            .map_err(|err| ToolError::Failed(format!("{} was not sent: {err}", args.path)))?;
        let file = OutboundFile {
            key: kept.key,
            name: opened.name.clone(),
            mime: opened.mime,
            bytes: kept.bytes,
            kind,
            caption: args.caption.filter(|caption| !caption.trim().is_empty()),
        };
        let by = SentBy {
            agent: &ctx.agent,
            session: &ctx.session,
            turn: ctx.chat.as_ref().and_then(|turn| turn.turn.as_ref()),
        };
        let to = SendTo {
            channel: &target.channel,
            chat: &target.chat,
            own: target.own,
            answering: target.answering.as_ref(),
        };
        let sent = tokio::select! {
            sent = self.outbox.send(by, to, Outgoing::File(file, kept.sha256)) => sent,
            () = ctx.cancel.cancelled() => return Err(ToolError::Cancelled),
        };
        let sent = sent.map_err(|err| match err {
            ToolError::Failed(why) => {
                ToolError::Failed(format!("{} was not sent: {why}", opened.name))
            }
            other => other,
        })?;
        let place = if target.own {
            "this chat".to_owned()
        } else {
            format!("{} chat {}", target.channel, target.chat)
        };
        let what = format!("{} ({}, {})", opened.name, kind.as_str(), size(kept.bytes));
        Ok(format!("{what}: {}", receipt(&sent, &place)).into())
    }
}

/// Where a file goes.
struct Target {
    channel: ChannelName,
    chat: ChatId,
    own: bool,
    answering: Option<switchboard_core::MessageId>,
}

fn target(args: &Args, ctx: &ToolContext) -> Result<Target, ToolError> {
    let named = match (&args.channel, &args.chat_id) {
        (Some(channel), Some(chat)) => {
            Some((ChannelName::from(channel.trim()), ChatId::from(chat.trim())))
        }
        (None, None) => None,
        _ => {
            return Err(ToolError::InvalidArguments(
                "give channel and chat_id together (or neither, for this chat)".into(),
            ));
        }
    };
    let own = ctx.chat.as_ref();
    match (named, own) {
        (Some((channel, chat)), own) => {
            let is_own = own.is_some_and(|own| own.channel == channel && own.chat == chat);
            Ok(Target {
                answering: own.filter(|_| is_own).and_then(|own| own.answering.clone()),
                channel,
                chat,
                own: is_own,
            })
        }
        (None, Some(own)) => Ok(Target {
            channel: own.channel.clone(),
            chat: own.chat.clone(),
            own: true,
            answering: own.answering.clone(),
        }),
        (None, None) => Err(ToolError::InvalidArguments(
            "this turn answers no chat: name the channel and chat_id to send to".into(),
        )),
    }
}

/// A file of the workspace, opened through it.
struct Opened {
    file: std::fs::File,
    name: String,
    mime: String,
    bytes: u64,
}

/// Opens `raw` through the workspace (a path outside it is refused) and reads its type: a
/// picture by its first bytes, anything else by its name.
async fn open(ctx: &ToolContext, raw: &str) -> Result<Opened, ToolError> {
    let workspace = ctx.workspace.clone();
    let raw = raw.to_owned();
    tokio::task::spawn_blocking(move || {
        let resolved = workspace.resolve(&raw)?;
        let mut file = workspace.open_read(&resolved)?;
        let meta = file
            .metadata()
            .map_err(|err| ToolError::Failed(format!("cannot read {raw}: {err}")))?;
        if !meta.is_file() {
            return Err(ToolError::InvalidArguments(format!("{raw} is not a file")));
        }
        let mut head = [0u8; 12];
        let read = file.read(&mut head).unwrap_or(0);
        file.seek(SeekFrom::Start(0))
            .map_err(|err| ToolError::Failed(format!("cannot read {raw}: {err}")))?;
        let name = resolved
            .as_path()
            .file_name()
            .map(|name| name.to_string_lossy().into_owned())
            .unwrap_or_else(|| "file".to_owned());
        let mime = ImagePart::sniff(&head[..read])
            .map(str::to_owned)
            .unwrap_or_else(|| mime_of(&name).to_owned());
        Ok(Opened {
            file,
            name,
            mime,
            bytes: meta.len(),
        })
    })
    .await
    .unwrap_or_else(|err| Err(ToolError::Failed(format!("the tool stopped: {err}"))))
}

/// The MIME type of a file by its name's extension: the kinds of files an agent makes
/// (documents, data, audio); anything else is `application/octet-stream`.
pub(crate) fn mime_of(name: &str) -> &'static str {
    let extension = name
        .rsplit_once('.')
        .map(|(_, ext)| ext.to_ascii_lowercase())
        .unwrap_or_default();
    match extension.as_str() {
        "pdf" => "application/pdf",
        "csv" => "text/csv",
        "txt" | "log" => "text/plain",
        "md" => "text/markdown",
        "json" => "application/json",
        "html" | "htm" => "text/html",
        "xml" => "application/xml",
        "svg" => "image/svg+xml",
        "zip" => "application/zip",
        "gz" => "application/gzip",
        "tar" => "application/x-tar",
        "xlsx" => "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet",
        "docx" => "application/vnd.openxmlformats-officedocument.wordprocessingml.document",
        "pptx" => "application/vnd.openxmlformats-officedocument.presentationml.presentation",
        "ods" => "application/vnd.oasis.opendocument.spreadsheet",
        "odt" => "application/vnd.oasis.opendocument.text",
        "ogg" | "oga" | "opus" => "audio/ogg",
        "mp3" => "audio/mpeg",
        "m4a" => "audio/mp4",
        "wav" => "audio/wav",
        "webm" => "audio/webm",
        "flac" => "audio/flac",
        "mp4" => "video/mp4",
        "png" => "image/png",
        "jpg" | "jpeg" => "image/jpeg",
        "gif" => "image/gif",
        "webp" => "image/webp",
        _ => "application/octet-stream",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_files_type_is_read_from_its_name_when_its_bytes_say_nothing() {
        assert_eq!(mime_of("report.PDF"), "application/pdf");
        assert_eq!(mime_of("data.csv"), "text/csv");
        assert_eq!(mime_of("voice.ogg"), "audio/ogg");
        assert_eq!(mime_of("Makefile"), "application/octet-stream");
    }
}
