//! switchboard-audio: the audio providers beside the language models — speech to text for
//! the voice notes people send, text to speech for the answers spoken back.
//!
//! Both speak the OpenAI-compatible audio API (`/audio/transcriptions`, `/audio/speech`),
//! which OpenAI, Groq, whisper.cpp's server, faster-whisper-server and Kokoro-FastAPI answer:
//! a server is chosen by its `base_url`. Like the language models, each call is retried on
//! what may heal and handed to the next configured server on what does not, and every
//! attempt is told to an [`Observer`] (the daemon's health and metrics).
//!
//! # Layout
//! - `section`: `[transcription]` and `[speech]`, and what they build: [`Transcription`]
//!   (the caps a recording is held to) and [`Speech`] (when an answer is spoken).
//! - `client`: [`Server`], one server's two calls, and [`Chain`], the servers in order.
//! - `duration`: how long a recording lasts, read from an OGG or WAV file's bytes.
//! - `error`: [`AudioError`].

mod client;
pub mod duration;
mod error;
mod section;

pub use client::{Chain, MAX_SPEECH_BYTES, Observer, Server, ServerConfig};
pub use error::AudioError;
pub use section::{
    AudioFallback, SpeakError, SpeakWhen, Speech, SpeechSection, Spoken, Transcription,
    TranscriptionSection, clock,
};
