//! switchboard-whatsapp: the WhatsApp channel, on the official Cloud API — not the
//! unofficial WhatsApp Web protocol, which drops messages and gets numbers banned.
//!
//! Messages come to a webhook on the daemon's HTTP listener (`/whatsapp/webhook`): Meta's
//! verify handshake is answered with the configured token, and every notification must be
//! signed with the app's secret (`X-Hub-Signature-256`) or it is refused. A message is taken
//! into the channel's inbox (fsynced) before the webhook answers 200, so Meta — which sends
//! a notification again until it gets one — never has a message the daemon lost. Replies go
//! out through the Graph API: text in WhatsApp's formatting, split at 4,096 characters, as a
//! reply to the person's message; files uploaded and sent as pictures, voice or documents;
//! the person's message marked read with "typing…" shown while the answer is made (WhatsApp
//! has no edits, so answers are not streamed). WhatsApp lets a business write freely only
//! within 24 hours of the person's last message: outside that window a send is refused with
//! the reason named (and logged for the operator), never dropped silently.
//!
//! # Layout
//! - `config`: [`WhatsAppSection`] (`[channels.whatsapp]`) and [`WhatsAppSettings`].
//! - `convert`: the webhook's signature and notifications in switchboard's terms (pure).
//! - `graph`: the Graph API calls, as the channel's `Surface`, and its files.
//! - `channel`: [`WhatsAppChannel`], the webhook route and intake.

mod channel;
mod config;
mod convert;
mod graph;

pub use channel::{WEBHOOK_PATH, WhatsAppChannel};
pub use config::{WhatsAppSection, WhatsAppSettings};
pub use convert::SIGNATURE_HEADER;
pub use graph::{CHANNEL_NAME, MESSAGE_LIMIT, WINDOW_CLOSED};
