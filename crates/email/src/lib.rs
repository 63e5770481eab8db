//! switchboard-email: mail as a channel — a mailbox read over IMAP, waiting with IDLE, and
//! answered over SMTP; each thread (by `References` / `In-Reply-To`) is a chat.
//!
//! Only the addresses (and `@domain`s) of `allow_from` are answered: a sender's address can
//! be forged, so strangers get no pairing code by mail. A mail is taken into the channel's
//! inbox (fsynced) before the UID it was read at is kept (`email/uid` in the state store),
//! and the mailbox is read again after that UID on every (re)connection: nothing is lost
//! across a kill -9 or a dropped connection, and a mail read twice (or delivered twice,
//! which the inbox and the session's journal know by its Message-ID) is answered once.
//! Replies stay in their thread (`Re:`, `In-Reply-To`, `References`) and quote the mail
//! they answer; HTML-only mails are read as text; attachments are saved in the workspace,
//! and the agent's files go out as attachments. Answers are not streamed (a sent mail
//! cannot be changed), and mail has no "typing…". The agent gets the `email` tool to work in
//! the mailbox: search, read, and send to the people and domains of `allow_from`.
//!
//! # Layout
//! - `config`: [`EmailSection`] (`[channels.email]`) and [`EmailSettings`].
//! - `convert`: a mail in switchboard's terms, and a reply's quote (pure).
//! - `threads`: each chat's thread, kept for replies.
//! - `imap`: the mailbox (connect, search, fetch, flags, IDLE).
//! - `surface`: mail out over SMTP, replies (the channel's `Surface`), attachments read back.
//! - `tool`: [`EmailTool`], the agent's `email` tool (search, read, send).
//! - `channel`: [`EmailChannel`], the intake.

mod channel;
mod config;
mod convert;
mod imap;
mod surface;
mod threads;
mod tool;

pub use channel::{EmailChannel, UID_KEY};
pub use config::{EmailSection, EmailSettings};
pub use convert::{thread_chat, without_quoted_tail};
pub use surface::{CHANNEL_NAME, MESSAGE_LIMIT};
pub use tool::{EmailTool, MAX_LISTED, MAX_READ_CHARS};
