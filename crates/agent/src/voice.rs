//! [`Voice`]: the audio parts an agent's turns use — the transcription of what people say
//! (`[transcription]`, heard before the turn: `hearing`), the speech of its answers
//! (`[speech]`, spoken after: `speaking`), and where a spoken answer waits for its channel.
//! Shared by a daemon's agents; off (all `None`) unless the config enables them.

use std::sync::Arc;

use switchboard_audio::{Speech, Transcription};
use switchboard_core::MediaStore;

/// The audio parts of an agent.
#[derive(Clone, Default)]
pub struct Voice {
    /// Turns voice notes into text before the turn; `None`: they reach the model as files.
    pub transcription: Option<Arc<Transcription>>,
    /// Turns answers into voice messages; `None`: answers are text only.
    pub speech: Option<Arc<Speech>>,
    /// Where a spoken answer's audio waits for its channel (needed by `speech`).
    pub media: Option<Arc<dyn MediaStore>>,
}

impl Voice {
    /// Whether either part is on.
    pub fn is_on(&self) -> bool {
        self.transcription.is_some() || self.speech.is_some()
    }
}

impl std::fmt::Debug for Voice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Voice")
            .field("transcription", &self.transcription.is_some())
            .field("speech", &self.speech.is_some())
            .finish()
    }
}
