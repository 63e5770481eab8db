//! `[transcription]` and `[speech]`: which servers turn voice notes into text and answers into
//! voice, their caps, and what each is built into ([`Transcription`], [`Speech`]). Both are
//! off unless `enabled = true`: then nothing of them is built, and no voice note costs a call.

use std::sync::Arc;
use std::time::Duration;

use serde::Deserialize;
use switchboard_core::{ConfigProblem, expand_env, positive_seconds};
use switchboard_llm::{ApiKey, RetryPolicy};
use toml::Spanned;

use crate::client::{Chain, MAX_SPEECH_BYTES, Observer, Server, ServerConfig};
use crate::error::AudioError;

/// One more server to try when the one before fails (`fallbacks = [{ … }]`).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AudioFallback {
    /// Its API root.
    pub base_url: Spanned<String>,
    /// Its key, usually `${SOME_ENV_VAR}`; absent for local servers.
    pub api_key: Option<Spanned<String>>,
    /// Its model.
    pub model: String,
}

/// `[transcription]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TranscriptionSection {
    /// Transcribe voice notes and audio files before the turn.
    pub enabled: bool,
    /// The API root of an OpenAI-compatible server.
    pub base_url: Spanned<String>,
    /// The key, usually `${OPENAI_API_KEY}`; absent for local servers.
    pub api_key: Option<Spanned<String>>,
    /// The model.
    pub model: String,
    /// The language spoken (ISO-639-1, e.g. `en`); the server guesses when absent.
    pub language: Option<Spanned<String>>,
    /// Show the person what was heard, quoted under their voice note.
    pub echo: bool,
    /// The largest file sent to be transcribed.
    pub max_bytes: Spanned<u64>,
    /// The longest recording sent to be transcribed.
    pub max_duration_secs: Spanned<f64>,
    /// How long one transcription may take.
    pub timeout_secs: Spanned<f64>,
    /// Retries of timeouts, refused connections, 429 and 5xx, per server.
    pub max_retries: u32,
    /// Servers tried in order when the one before fails.
    pub fallbacks: Vec<AudioFallback>,
}

impl Default for TranscriptionSection {
    fn default() -> Self {
        Self {
            enabled: false,
            base_url: Spanned::new(0..0, "https://api.openai.com/v1".into()),
            api_key: None,
            model: "whisper-1".into(),
            language: None,
            echo: true,
            max_bytes: Spanned::new(0..0, 25 * 1000 * 1000),
            max_duration_secs: Spanned::new(0..0, 600.0),
            timeout_secs: Spanned::new(0..0, 120.0),
            max_retries: 2,
            fallbacks: Vec::new(),
        }
    }
}

/// When an answer also goes back as a voice message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SpeakWhen {
    /// Never.
    Never,
    /// When the message it answers was a voice note.
    WhenSpokenTo,
    /// Every answer of a turn.
    Always,
}

/// `[speech]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SpeechSection {
    /// Speak answers (see `reply`).
    pub enabled: bool,
    /// The API root of an OpenAI-compatible server.
    pub base_url: Spanned<String>,
    /// The key.
    pub api_key: Option<Spanned<String>>,
    /// The model.
    pub model: String,
    /// The voice.
    pub voice: String,
    /// The audio the server makes: `opus` (OGG/Opus, what Telegram plays as a voice
    /// message), `mp3`, `aac`, `flac` or `wav`.
    pub format: Spanned<String>,
    /// When an answer is spoken: `never`, `when_spoken_to` or `always`.
    pub reply: SpeakWhen,
    /// The longest answer spoken, in characters (a longer one goes as text only, with a
    /// line saying so).
    pub max_chars: Spanned<usize>,
    /// How long making one spoken answer may take.
    pub timeout_secs: Spanned<f64>,
    /// Retries of timeouts, refused connections, 429 and 5xx, per server.
    pub max_retries: u32,
    /// Servers tried in order when the one before fails.
    pub fallbacks: Vec<AudioFallback>,
}

impl Default for SpeechSection {
    fn default() -> Self {
        Self {
            enabled: false,
            base_url: Spanned::new(0..0, "https://api.openai.com/v1".into()),
            api_key: None,
            model: "gpt-4o-mini-tts".into(),
            voice: "alloy".into(),
            format: Spanned::new(0..0, "opus".into()),
            reply: SpeakWhen::WhenSpokenTo,
            max_chars: Spanned::new(0..0, 1500),
            timeout_secs: Spanned::new(0..0, 60.0),
            max_retries: 2,
            fallbacks: Vec::new(),
        }
    }
}

/// The formats a spoken answer may have: the server's name, its type, its file extension.
const FORMATS: [(&str, &str, &str); 5] = [
    ("opus", "audio/ogg", "ogg"),
    ("mp3", "audio/mpeg", "mp3"),
    ("aac", "audio/aac", "aac"),
    ("flac", "audio/flac", "flac"),
    ("wav", "audio/wav", "wav"),
];

/// Checks a URL: http or https with a host.
fn check_url(url: &Spanned<String>, key: &str) -> Result<(), ConfigProblem> {
    let text = url.get_ref();
    let host = text
        .strip_prefix("http://")
        .or_else(|| text.strip_prefix("https://"));
    if host.is_none_or(|rest| rest.is_empty() || rest.starts_with('/')) {
        return Err(ConfigProblem::new(
            Some(url.span()),
            key,
            format!(
                "`{text}` is not an http:// or https:// URL with a host, e.g. \
                 \"http://127.0.0.1:8080/v1\""
            ),
        ));
    }
    Ok(())
}

fn check_seconds(value: &Spanned<f64>, key: &str) -> Result<(), ConfigProblem> {
    positive_seconds(*value.get_ref())
        .map_err(|message| ConfigProblem::new(Some(value.span()), key, message))
}

fn check_servers(
    base_url: &Spanned<String>,
    fallbacks: &[AudioFallback],
) -> Result<(), ConfigProblem> {
    check_url(base_url, "base_url")?;
    for (index, fallback) in fallbacks.iter().enumerate() {
        check_url(&fallback.base_url, &format!("fallbacks[{index}].base_url"))?;
    }
    Ok(())
}

/// The key of a server, resolved (or why it cannot be: every call then fails saying so).
fn api_key(raw: Option<&Spanned<String>>) -> ApiKey {
    match raw.map(|raw| expand_env(raw.get_ref())) {
        None => ApiKey::None,
        Some(Ok(key)) => ApiKey::Key(key),
        Some(Err(unresolved)) => ApiKey::Missing {
            reason: unresolved.to_string(),
        },
    }
}

/// The servers of a section: its own, then its fallbacks.
fn chain(
    what: &'static str,
    primary: (&Spanned<String>, Option<&Spanned<String>>, &str),
    fallbacks: &[AudioFallback],
    timeout: Duration,
    max_retries: u32,
    observer: Option<Arc<dyn Observer>>,
) -> Result<Chain, AudioError> {
    let (base_url, key, model) = primary;
    let mut servers = vec![Server::new(
        ServerConfig {
            base_url: base_url.get_ref().clone(),
            api_key: api_key(key),
            model: model.to_owned(),
            key: what.to_owned(),
        },
        timeout,
    )?];
    for (index, fallback) in fallbacks.iter().enumerate() {
        servers.push(Server::new(
            ServerConfig {
                base_url: fallback.base_url.get_ref().clone(),
                api_key: api_key(fallback.api_key.as_ref()),
                model: fallback.model.clone(),
                key: format!("{what}.fallbacks[{index}]"),
            },
            timeout,
        )?);
    }
    let policy = RetryPolicy {
        max_retries,
        ..RetryPolicy::default()
    };
    Ok(Chain::new(what, servers, policy).observed(observer))
}

/// The servers of a section whose key cannot be resolved: their model, and the error every
/// call to them ends with.
fn missing_keys(
    what: &str,
    enabled: bool,
    primary: (Option<&Spanned<String>>, &str),
    fallbacks: &[AudioFallback],
) -> Vec<(String, AudioError)> {
    if !enabled {
        return Vec::new();
    }
    std::iter::once((what.to_owned(), primary.0, primary.1))
        .chain(fallbacks.iter().enumerate().map(|(index, fallback)| {
            (
                format!("{what}.fallbacks[{index}]"),
                fallback.api_key.as_ref(),
                fallback.model.as_str(),
            )
        }))
        .filter_map(|(key, raw, model)| {
            let unresolved = expand_env(raw?.get_ref()).err()?;
            Some((
                model.to_owned(),
                AudioError::MissingApiKey {
                    reason: unresolved.to_string(),
                    key: format!("{key}.api_key"),
                },
            ))
        })
        .collect()
}

impl TranscriptionSection {
    /// Its servers whose key cannot be resolved (model, error), when it is on.
    pub fn missing_keys(&self) -> Vec<(String, AudioError)> {
        missing_keys(
            "transcription",
            self.enabled,
            (self.api_key.as_ref(), &self.model),
            &self.fallbacks,
        )
    }

    /// Checks what serde cannot (only when enabled): URLs, caps, seconds, the language.
    pub fn validate(&self) -> Result<(), ConfigProblem> {
        if !self.enabled {
            return Ok(());
        }
        check_servers(&self.base_url, &self.fallbacks)?;
        check_seconds(&self.max_duration_secs, "max_duration_secs")?;
        check_seconds(&self.timeout_secs, "timeout_secs")?;
        let max = &self.max_bytes;
        if !(1..=switchboard_core::MAX_MEDIA_BYTES).contains(max.get_ref()) {
            return Err(ConfigProblem::new(
                Some(max.span()),
                "max_bytes",
                format!(
                    "must be from 1 to {} (100 MB), got {}",
                    switchboard_core::MAX_MEDIA_BYTES,
                    max.get_ref()
                ),
            ));
        }
        if let Some(language) = &self.language {
            let code = language.get_ref();
            let fine =
                (2..=3).contains(&code.len()) && code.bytes().all(|b| b.is_ascii_lowercase());
            if !fine {
                return Err(ConfigProblem::new(
                    Some(language.span()),
                    "language",
                    format!("`{code}` is not a language code such as \"en\" or \"de\""),
                ));
            }
        }
        Ok(())
    }

    /// What it builds; `None` when it is off.
    pub fn build(
        &self,
        observer: Option<Arc<dyn Observer>>,
    ) -> Result<Option<Transcription>, AudioError> {
        if !self.enabled {
            return Ok(None);
        }
        let timeout = Duration::from_secs_f64(*self.timeout_secs.get_ref());
        let chain = chain(
            "transcription",
            (&self.base_url, self.api_key.as_ref(), &self.model),
            &self.fallbacks,
            timeout,
            self.max_retries,
            observer,
        )?;
        Ok(Some(Transcription {
            chain,
            language: self.language.as_ref().map(|l| l.get_ref().clone()),
            echo: self.echo,
            max_bytes: *self.max_bytes.get_ref(),
            max_duration: Duration::from_secs_f64(*self.max_duration_secs.get_ref()),
        }))
    }
}

impl SpeechSection {
    /// Its servers whose key cannot be resolved (model, error), when it is on.
    pub fn missing_keys(&self) -> Vec<(String, AudioError)> {
        missing_keys(
            "speech",
            self.enabled && self.reply != SpeakWhen::Never,
            (self.api_key.as_ref(), &self.model),
            &self.fallbacks,
        )
    }

    /// Checks what serde cannot (only when enabled): URLs, the format, the caps.
    pub fn validate(&self) -> Result<(), ConfigProblem> {
        if !self.enabled {
            return Ok(());
        }
        check_servers(&self.base_url, &self.fallbacks)?;
        check_seconds(&self.timeout_secs, "timeout_secs")?;
        let format = &self.format;
        if !FORMATS.iter().any(|(name, _, _)| name == format.get_ref()) {
            let names: Vec<&str> = FORMATS.iter().map(|(name, _, _)| *name).collect();
            return Err(ConfigProblem::new(
                Some(format.span()),
                "format",
                format!(
                    "`{}` is not one of {} (opus is what Telegram plays as a voice message)",
                    format.get_ref(),
                    names.join(", ")
                ),
            ));
        }
        if !(1..=100_000).contains(self.max_chars.get_ref()) {
            return Err(ConfigProblem::new(
                Some(self.max_chars.span()),
                "max_chars",
                format!("must be from 1 to 100000, got {}", self.max_chars.get_ref()),
            ));
        }
        Ok(())
    }

    /// What it builds; `None` when it is off.
    pub fn build(&self, observer: Option<Arc<dyn Observer>>) -> Result<Option<Speech>, AudioError> {
        if !self.enabled || self.reply == SpeakWhen::Never {
            return Ok(None);
        }
        let timeout = Duration::from_secs_f64(*self.timeout_secs.get_ref());
        let chain = chain(
            "speech",
            (&self.base_url, self.api_key.as_ref(), &self.model),
            &self.fallbacks,
            timeout,
            self.max_retries,
            observer,
        )?;
        let (format, mime, extension) = FORMATS
            .iter()
            .find(|(name, _, _)| name == self.format.get_ref())
            .copied()
            .unwrap_or(FORMATS[0]);
        Ok(Some(Speech {
            chain,
            voice: self.voice.clone(),
            format,
            mime,
            extension,
            reply: self.reply,
            max_chars: *self.max_chars.get_ref(),
        }))
    }
}

/// `[transcription]` built: the servers, and what a recording may be to be sent.
#[derive(Debug)]
pub struct Transcription {
    chain: Chain,
    /// The language spoken, when the config says.
    pub language: Option<String>,
    /// Whether the person is shown what was heard.
    pub echo: bool,
    /// The largest file sent.
    pub max_bytes: u64,
    /// The longest recording sent.
    pub max_duration: Duration,
}

impl Transcription {
    /// Why a recording of `bytes` lasting `length` (when known) is not sent, if it is not:
    /// a sentence naming the cap and its key.
    pub fn refusal(&self, bytes: u64, length: Option<Duration>) -> Option<String> {
        if bytes > self.max_bytes {
            return Some(format!(
                "it is {}, and recordings of at most {} are transcribed \
                 (transcription.max_bytes)",
                switchboard_core::media::size(bytes),
                switchboard_core::media::size(self.max_bytes)
            ));
        }
        let length = length?;
        (length > self.max_duration).then(|| {
            format!(
                "it is {} long, and recordings of at most {} are transcribed \
                 (transcription.max_duration_secs)",
                clock(length),
                clock(self.max_duration)
            )
        })
    }

    /// The text said in the recording `bytes` (a file named `name` of type `mime`).
    pub async fn transcribe(
        &self,
        bytes: Vec<u8>,
        name: &str,
        mime: &str,
    ) -> Result<String, AudioError> {
        let language = self.language.as_deref();
        self.chain
            .run(|server| {
                let bytes = bytes.clone();
                async move { server.transcribe(bytes, name, mime, language).await }
            })
            .await
    }

    /// The models, in order.
    pub fn models(&self) -> Vec<&str> {
        self.chain.models()
    }

    /// The servers, in order.
    pub fn servers(&self) -> &[Server] {
        self.chain.servers()
    }
}

/// A spoken answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Spoken {
    /// The audio.
    pub bytes: Vec<u8>,
    /// Its type.
    pub mime: &'static str,
    /// A file name for it (`answer.ogg`).
    pub name: String,
}

/// `[speech]` built: the servers, the voice, when to speak.
#[derive(Debug)]
pub struct Speech {
    chain: Chain,
    voice: String,
    /// The format asked of the server.
    format: &'static str,
    mime: &'static str,
    extension: &'static str,
    /// When an answer is spoken.
    pub reply: SpeakWhen,
    /// The longest answer spoken, in characters.
    pub max_chars: usize,
}

impl Speech {
    /// Whether an answer to a message that was (`spoken_to`) or was not a voice note is spoken.
    pub fn speaks(&self, spoken_to: bool) -> bool {
        match self.reply {
            SpeakWhen::Never => false,
            SpeakWhen::WhenSpokenTo => spoken_to,
            SpeakWhen::Always => true,
        }
    }

    /// `text` (plain, as it is read) spoken. A text over [`Speech::max_chars`] is refused
    /// with the sentence to tell the person.
    pub async fn speak(&self, text: &str) -> Result<Spoken, SpeakError> {
        let chars = text.chars().count();
        if chars > self.max_chars {
            return Err(SpeakError::TooLong(format!(
                "The answer is {chars} characters, longer than the {} read aloud \
                 (speech.max_chars): it is sent as text only.",
                self.max_chars
            )));
        }
        let bytes = self
            .chain
            .run(|server| async move { server.speak(text, &self.voice, self.format).await })
            .await
            .map_err(SpeakError::Failed)?;
        if bytes.is_empty() {
            return Err(SpeakError::Failed(AudioError::Decode(
                "the server answered no audio".into(),
            )));
        }
        debug_assert!(bytes.len() <= MAX_SPEECH_BYTES);
        Ok(Spoken {
            bytes,
            mime: self.mime,
            name: format!("answer.{}", self.extension),
        })
    }

    /// The models, in order.
    pub fn models(&self) -> Vec<&str> {
        self.chain.models()
    }

    /// The servers, in order.
    pub fn servers(&self) -> &[Server] {
        self.chain.servers()
    }
}

/// Why an answer was not spoken.
#[derive(Debug, thiserror::Error)]
pub enum SpeakError {
    /// It is longer than `max_chars`; the sentence says so.
    #[error("{0}")]
    TooLong(String),
    /// The servers failed.
    #[error("{0}")]
    Failed(AudioError),
}

/// A length as a clock reads it: `0:07`, `12:30`, `1:02:03`.
pub fn clock(length: Duration) -> String {
    let total = length.as_secs_f64().round() as u64;
    let (hours, minutes, seconds) = (total / 3600, total / 60 % 60, total % 60);
    if hours > 0 {
        format!("{hours}:{minutes:02}:{seconds:02}")
    } else {
        format!("{minutes}:{seconds:02}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn section<T: serde::de::DeserializeOwned>(text: &str) -> T {
        toml::from_str(text).expect("parses")
    }

    #[test]
    fn a_section_is_off_unless_enabled_and_checked_only_then() {
        let off: TranscriptionSection = section("base_url = \"nonsense\"");
        assert!(off.validate().is_ok());
        assert!(off.build(None).expect("builds").is_none());
        let on: TranscriptionSection = section("enabled = true\nbase_url = \"nonsense\"");
        let problem = on.validate().expect_err("refused");
        assert_eq!(problem.key, "base_url");
        let on: SpeechSection = section("enabled = true\nformat = \"pcm\"");
        let problem = on.validate().expect_err("refused");
        assert_eq!(problem.key, "format");
        assert!(problem.message.contains("opus"), "{}", problem.message);
    }

    #[test]
    fn a_recording_over_a_cap_is_refused_naming_the_cap() {
        let on: TranscriptionSection =
            section("enabled = true\nmax_bytes = 1000000\nmax_duration_secs = 60");
        let hearing = on.build(None).expect("builds").expect("on");
        assert_eq!(hearing.refusal(999, Some(Duration::from_secs(59))), None);
        assert_eq!(hearing.refusal(999, None), None, "a length not known");
        let long = hearing
            .refusal(999, Some(Duration::from_secs(750)))
            .expect("too long");
        assert_eq!(
            long,
            "it is 12:30 long, and recordings of at most 1:00 are transcribed \
             (transcription.max_duration_secs)"
        );
        let big = hearing.refusal(2_000_000, None).expect("too big");
        assert!(
            big.contains("2 MB") && big.contains("transcription.max_bytes"),
            "{big}"
        );
    }

    #[test]
    fn speaking_follows_the_reply_setting() {
        let when: SpeechSection = section("enabled = true");
        let speech = when.build(None).expect("builds").expect("on");
        assert!(speech.speaks(true) && !speech.speaks(false));
        let never: SpeechSection = section("enabled = true\nreply = \"never\"");
        assert!(
            never.build(None).expect("builds").is_none(),
            "nothing to build"
        );
        assert_eq!(clock(Duration::from_secs(3723)), "1:02:03");
    }
}
