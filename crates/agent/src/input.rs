//! [`TurnInput`]: what a turn answers — the whole inbound message as the turn needs it —
//! and reading the images it shows the model.

use std::io::Read;
use std::sync::Arc;

use base64::Engine;
use switchboard_core::{
    Attachment, ImagePart, InboundMessage, MessageId, Origin, ScheduledRun, SenderId, SessionKey,
};
use switchboard_llm::ImageData;
use switchboard_tools::{TurnChat, TurnSlot, User, Workspace};

/// The largest image sent to a model, in bytes.
const MAX_IMAGE_BYTES: u64 = ImagePart::MAX_BYTES;
/// The most images of one message (a person's, a tool result) sent to a model.
pub(crate) const MAX_IMAGES: usize = 8;

/// What a turn answers: the whole inbound message as the turn needs it.
#[derive(Clone, Debug, Default)]
pub struct TurnInput {
    /// The person's text (with a line for each attachment, naming where it was saved).
    pub text: String,
    /// What the person wrote, without the attachments' lines.
    pub content: String,
    /// What came with it (files, voice notes).
    pub attachments: Vec<Attachment>,
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
    /// The turn's slot among the turns that may run at once, for tools that wait on other
    /// turns (they let go of it meanwhile); `None`: the turn took none (the terminal).
    pub slot: Option<Arc<dyn TurnSlot>>,
    /// Where the message comes from (a person, a schedule, the heartbeat): kept with it in
    /// history and shown to the model.
    pub origin: Origin,
    /// The chat its spending and sub-agents count against, when not the turn's own session
    /// (a sub-agent's task, an isolated scheduled run).
    pub on_behalf_of: Option<SessionKey>,
    /// The scheduled run it is, when it is one (its end is settled by it).
    pub run: Option<ScheduledRun>,
    /// The chat it was written in, for tools that send to it (`None`: none, the terminal).
    pub chat: Option<TurnChat>,
}

impl TurnInput {
    /// A new message's text, without a platform id.
    pub fn text(text: impl Into<String>) -> Self {
        let text = text.into();
        Self {
            content: text.clone(),
            text,
            ..Self::default()
        }
    }

    /// The turn answering `message`.
    pub fn from_message(message: &InboundMessage) -> Self {
        Self {
            text: message_text(message),
            content: message.content.clone(),
            attachments: message.attachments.clone(),
            images: message.attachments.iter().filter_map(image_part).collect(),
            sender: Some(message.sender.clone()),
            reply_to: message.reply_to.clone(),
            inbound: message.id.clone(),
            resume: false,
            user: None,
            slot: None,
            origin: message.origin.clone(),
            on_behalf_of: message.on_behalf_of.clone(),
            run: message.run.clone(),
            chat: Some(TurnChat {
                channel: message.channel.clone(),
                chat: message.chat_id.clone(),
                answering: message
                    .origin
                    .is_person()
                    .then(|| message.id.clone())
                    .flatten(),
                turn: message.id.clone(),
            }),
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
        text.push_str(&attachment_line(attachment));
    }
    text
}

/// The line naming an attachment in the model's text (a recording's is replaced by what
/// was heard in it, see `hearing`).
pub(crate) fn attachment_line(attachment: &Attachment) -> String {
    format!(
        "[attachment: {} ({}, {} bytes), saved in the workspace at {}]",
        attachment.name,
        attachment.mime.as_deref().unwrap_or("unknown type"),
        attachment.bytes,
        attachment.path
    )
}

/// An attachment a model can look at: PNG, JPEG, GIF or WebP within the size limit.
fn image_part(attachment: &Attachment) -> Option<ImagePart> {
    let mime = attachment.mime.as_deref()?;
    (ImagePart::shown_type(mime) && attachment.bytes <= MAX_IMAGE_BYTES).then(|| ImagePart {
        path: attachment.path.clone(),
        mime: mime.to_owned(),
    })
}

/// What a turn may still show of images, so a tool that returns a screenshot every round
/// cannot grow a request past what providers take (Anthropic's is 32 MB).
#[derive(Clone, Copy, Debug)]
pub(crate) struct ImageBudget {
    /// Images.
    images: usize,
    /// Their bytes.
    bytes: u64,
}

/// The most images one turn shows.
const MAX_TURN_IMAGES: usize = 16;
/// The most image bytes one turn shows.
const MAX_TURN_IMAGE_BYTES: u64 = 20 * 1024 * 1024;

impl Default for ImageBudget {
    fn default() -> Self {
        Self {
            images: MAX_TURN_IMAGES,
            bytes: MAX_TURN_IMAGE_BYTES,
        }
    }
}

/// Reads the images of a new message (the person's, a tool result's) for the request,
/// within the turn's `budget`, on a blocking thread. One that cannot be read or is past the
/// budget is left out, and logged: the text still names where it was saved.
pub(crate) async fn show_images(
    workspace: &Arc<Workspace>,
    parts: &[ImagePart],
    budget: &mut ImageBudget,
) -> Vec<ImageData> {
    if parts.is_empty() {
        return Vec::new();
    }
    let workspace = workspace.clone();
    let parts = parts.to_vec();
    let mut left = *budget;
    let loaded = tokio::task::spawn_blocking(move || {
        let loaded = load_images(&workspace, &parts, &mut left);
        (loaded, left)
    })
    .await;
    match loaded {
        Ok((loaded, left)) => {
            *budget = left;
            loaded
        }
        Err(err) => {
            tracing::warn!(error = %err, "reading images stopped; the model gets only their paths");
            Vec::new()
        }
    }
}

/// Reads images through the workspace, so a path cannot leave it.
fn load_images(
    workspace: &Workspace,
    parts: &[ImagePart],
    budget: &mut ImageBudget,
) -> Vec<ImageData> {
    let mut loaded = Vec::new();
    for part in parts.iter().take(MAX_IMAGES) {
        if budget.images == 0 {
            tracing::warn!(path = %part.path, "a turn shows at most {MAX_TURN_IMAGES} images; \
                the model gets only its path");
            continue;
        }
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
                if bytes.len() as u64 > budget.bytes {
                    return Err(format!(
                        "past the {MAX_TURN_IMAGE_BYTES} bytes of images a turn shows"
                    ));
                }
                Ok(bytes)
            });
        match read {
            Ok(bytes) => {
                budget.images -= 1;
                budget.bytes -= bytes.len() as u64;
                loaded.push(ImageData {
                    path: part.path.clone(),
                    mime: part.mime.clone(),
                    base64: base64::engine::general_purpose::STANDARD
                        .encode(bytes)
                        .into(),
                });
            }
            Err(err) => tracing::warn!(path = %part.path, error = %err,
                "an image is not shown; the model gets only its path"),
        }
    }
    loaded
}

#[cfg(test)]
mod tests {
    use super::*;

    fn images(dir: &std::path::Path, count: usize, bytes: usize) -> Vec<ImagePart> {
        (0..count)
            .map(|n| {
                let path = format!("img-{bytes}-{n}.png");
                std::fs::write(dir.join(&path), vec![7u8; bytes]).expect("write");
                ImagePart {
                    path,
                    mime: "image/png".into(),
                }
            })
            .collect()
    }

    /// A turn shows at most 16 images and 20 MiB of them, however many messages bring
    /// them; each message at most 8.
    #[tokio::test]
    async fn a_turn_shows_images_within_its_budget() {
        let dir = tempfile::tempdir().expect("tempdir");
        let workspace = Arc::new(Workspace::new(dir.path(), &[], true).expect("workspace"));
        let mut budget = ImageBudget::default();
        let small = images(dir.path(), 10, 10);
        assert_eq!(show_images(&workspace, &small, &mut budget).await.len(), 8);
        assert_eq!(show_images(&workspace, &small, &mut budget).await.len(), 8);
        assert_eq!(show_images(&workspace, &small, &mut budget).await.len(), 0);

        let mut budget = ImageBudget::default();
        let big = images(dir.path(), 5, MAX_IMAGE_BYTES as usize);
        assert_eq!(show_images(&workspace, &big, &mut budget).await.len(), 4);
        assert_eq!(
            show_images(&workspace, &small[..1], &mut budget)
                .await
                .len(),
            0
        );
        let missing = [ImagePart {
            path: "gone.png".into(),
            mime: "image/png".into(),
        }];
        assert!(
            show_images(&workspace, &missing, &mut budget)
                .await
                .is_empty()
        );
    }
}
