//! switchboard-adapter: what every platform adapter shares, so Telegram and Discord (and
//! whatever comes next) do not each write their own.
//!
//! Delivery itself — one lane per chat, retries of rate limits — is in core, under the
//! hub. This crate has the pieces an adapter uses to shape what it sends and to decide who
//! may talk: all of them pure or file-backed, unit-tested without a network.
//!
//! # Layout
//! - `split`: [`split`] a reply at a platform's limit, code fences kept valid.
//! - `markdown`: [`telegram_html`], Markdown in Telegram's HTML subset ([`slack_mrkdwn`] and
//!   [`whatsapp_text`] beside it).
//! - `draft`: [`Draft`], the throttled draft streamer (one message edited in place).
//! - `pairing`: [`AllowList`] and [`Pairing`]: who may talk, codes for everyone else.
//! - `gate`: [`Gate`], who may talk: the allow list, then pairing.
//! - `intake`: [`Intake`] and [`Admit`], a push platform's message from its [`Arrival`] to
//!   the hub (the inbox, the gate, its files, in order per chat), and [`say`], answering
//!   outside a turn.
//! - `remembered`: [`Remembered`], a bounded table of what was seen of people and chats.
//! - `per_chat`: [`PerChat`], intake work in order per chat, side by side across chats.
//! - `media`: [`save`](media::save) attachments under the workspace's `media/<channel>/`.
//! - `outgoing`: [`FileMedia`], files waiting for their channel in the state directory.
//! - `settings`: checks of config values (secrets, URLs, seconds) with their spans.
//! - `holds`: a chat held for a platform's `retry_after`, every call to it waiting.
//! - `outbound`: [`Replies`], a turn's typing, draft and final reply over any [`Surface`].
//! - `kept`: [`KeptChats`], each chat's draft and delivery kept for a standby gateway.
//! - `factory`: [`ChannelSection`], a channel built from its config section.
//! - `inbox`: [`Inbox`], what a push platform delivered, on disk until its fate is known.

mod draft;
mod factory;
mod gate;
mod holds;
mod inbox;
mod intake;
mod kept;
mod markdown;
pub mod media;
mod outbound;
mod outgoing;
mod pairing;
mod per_chat;
mod remembered;
pub mod settings;
mod split;

pub use draft::{Draft, Step};
pub use factory::{
    BuildError, BuiltChannel, ChannelParts, ChannelSection, Gauge, HttpFacts, NotBuilt,
};
pub use gate::{Gate, Sender};
pub use inbox::{Inbox, InboxEntry, InboxError, Taken};
pub use intake::{
    Admit, Arrival, Chunks, Fetch, FileRef, Incoming, Intake, IntakeParts, MAX_KNOWN_CHATS, keep,
    say,
};
pub use kept::{Kept, KeptChats};
pub use markdown::{plain_text, slack_mrkdwn, telegram_html, visible_text, whatsapp_text};
pub use outbound::{Form, Replies, Said, Surface, Upload};
pub use outgoing::{FileMedia, KEEP_DAYS};
pub use pairing::{
    AllowList, Approved, CODE_TTL, MAX_PENDING, PAIRING_KEY, Pairing, PairingError, PairingFile,
    PendingCode, RESEND_AFTER, Verdict,
};
pub use per_chat::{MAX_IN_FLIGHT, PerChat};
pub use remembered::Remembered;
pub use split::{Measure, split};
