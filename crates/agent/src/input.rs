//! [`TurnInput`]: what a turn answers — the whole inbound message as the turn needs it —
//! and reading the images it shows the model.

use std::io::Read;

use base64::Engine;
use switchboard_core::{Attachment, ImagePart, InboundMessage, MessageId, Origin, SenderId};
use switchboard_llm::ImageData;
use switchboard_tools::{User, Workspace};

/// The largest image sent to a model, in bytes (Anthropic's limit is 5 MB).
const MAX_IMAGE_BYTES: u64 = 5 * 1024 * 1024;
/// The most images of one message sent to a model.
const MAX_IMAGES: usize = 8;

/// What a turn answers: the whole inbound message as the turn needs it.
#[derive(Clone, Debug, Default)]
pub struct TurnInput {
    /// The person's text (with a line for each attachment, naming where it was saved).
    pub text: String,
    /// The images among the attachments: shown to the model with the message.
    pub images: Vec<ImagePart>,
    /// Who wrote it.
    pub sender: Option<SenderId>,
    /// The platform id of the message it replies to, if any.
    pub reply_to: Option<MessageId>,
    /// The inbound message's platform id: the turn's progress is journaled under it, so a
    /// message delivered again after a crash is taken up, not answered twice.
    pub inbound: Option<MessageId>,
    /// The user message is in history already (a turn a crash interrupted, taken up again):
    /// answer it without saving it again.
    pub resume: bool,
    /// The person, for tools and hooks that ask them something mid-turn.
    pub user: Option<User>,
    /// Where the message comes from (a person, a schedule, the heartbeat): kept with it in
    /// history and shown to the model.
    pub origin: Origin,
}

impl TurnInput {
    /// A new message's text, without a platform id.
    pub fn text(text: impl Into<String>) -> Self {
        Self {
            text: text.into(),
            ..Self::default()
        }
    }

    /// The turn answering `message`.
    pub fn from_message(message: &InboundMessage) -> Self {
        Self {
            text: message_text(message),
            images: message.attachments.iter().filter_map(image_part).collect(),
            sender: Some(message.sender.clone()),
            reply_to: message.reply_to.clone(),
            inbound: message.id.clone(),
            resume: false,
            user: None,
            origin: message.origin.clone(),
        }
    }
}

/// What the model reads of a message: its text, and a line for each attachment naming
/// where it was saved.
pub(crate) fn message_text(message: &InboundMessage) -> String {
    let mut text = message.content.clone();
    for attachment in &message.attachments {
        if !text.is_empty() {
            text.push('\n');
        }
        text.push_str(&format!(
            "[attachment: {} ({}, {} bytes), saved in the workspace at {}]",
            attachment.name,
            attachment.mime.as_deref().unwrap_or("unknown type"),
            attachment.bytes,
            attachment.path
        ));
    }
    text
}

/// An attachment a model can look at: PNG, JPEG, GIF or WebP within the size limit.
fn image_part(attachment: &Attachment) -> Option<ImagePart> {
    let mime = attachment.mime.as_deref()?;
    let known = matches!(
        mime,
        "image/png" | "image/jpeg" | "image/gif" | "image/webp"
    );
    (known && attachment.bytes <= MAX_IMAGE_BYTES).then(|| ImagePart {
        path: attachment.path.clone(),
        mime: mime.to_owned(),
    })
}

/// Reads the images of the new message for the request (through the workspace, so a path
/// cannot leave it). One that cannot be read is left out, and logged: the text still names
/// where it was saved.
pub(crate) fn load_images(workspace: &Workspace, parts: &[ImagePart]) -> Vec<ImageData> {
    let mut loaded = Vec::new();
    for part in parts.iter().take(MAX_IMAGES) {
        let read = workspace
            .resolve(&part.path)
            .and_then(|path| workspace.open_read(&path))
            .map_err(|err| err.to_string())
            .and_then(|file| {
                let mut bytes = Vec::new();
                file.take(MAX_IMAGE_BYTES + 1)
                    .read_to_end(&mut bytes)
                    .map_err(|err| err.to_string())?;
                if bytes.len() as u64 > MAX_IMAGE_BYTES {
                    return Err(format!("larger than {MAX_IMAGE_BYTES} bytes"));
                }
                Ok(bytes)
            });
        match read {
            Ok(bytes) => loaded.push(ImageData {
                path: part.path.clone(),
                mime: part.mime.clone(),
                base64: base64::engine::general_purpose::STANDARD
                    .encode(bytes)
                    .into(),
            }),
            Err(err) => tracing::warn!(path = %part.path, error = %err,
                "an image could not be read; the model gets only its path"),
        }
    }
    loaded
}
