//! switchboard-tools: what the agent can do besides talking.
//!
//! A [`Tool`] has a name, a description and a JSON-schema for its arguments, says whether
//! it is *exclusive* (it mutates shared state, so it runs alone), may have its own timeout
//! and ask for approval, and is called with a [`ToolContext`] carrying the [`Workspace`]
//! and a cancellation token. A [`ToolRegistry`] holds a set of tools and produces the
//! definitions sent to the model; [`ToolSources`] holds the agent's registries by source
//! (the built-in tools, an embedder's, later each MCP server's), replaceable one by one while
//! turns run, each turn keeping the snapshot it started with; [`builtin::registry`] builds
//! the built-in ones from `[tools]`.
//!
//! # Layout
//! - `tool`: the [`Tool`] trait, [`ToolContext`], [`ToolOutput`] and [`ToolDefinition`].
//! - `registry`: [`ToolRegistry`].
//! - `outbox`: [`Outbox`], where the agent's own texts and files go, and their receipts.
//! - `sources`: [`ToolSources`] and [`ToolCollision`].
//! - `filter`: [`ToolFilter`], the tools an agent offers, and [`matches_name`] (`github__*`).
//! - `workspace`: [`Workspace`], the only way a tool reaches a file: lexical checks, then
//!   `openat2(RESOLVE_BENEATH)` from the workspace's descriptor.
//! - `builtin`: the built-in tools, one file each.
//! - `sandbox`: what `exec` runs in (Landlock, a PID namespace or subreaper, an
//!   unprivileged user when the daemon is root, the lifeline).
//! - `netguard`: which addresses `web_fetch` may reach, and DNS.
//! - `skills`: the skills of the workspace (`skills/<name>/SKILL.md`).
//! - `cap`: cutting results to size, keeping a command's head and tail.
//! - `config`: `[tools]`.
//! - `error`: [`ToolError`].

pub mod builtin;
mod cap;
pub mod config;
mod error;
mod filter;
pub mod netguard;
mod outbox;
mod registry;
pub mod sandbox;
pub mod skills;
mod sources;
mod tool;
mod workspace;

pub use cap::{HeadTail, cap_result};
pub use config::ToolsSection;
pub use error::ToolError;
pub use filter::{ToolFilter, matches_name};
pub use outbox::{Outbox, Outgoing, SendTo, SentBy};
pub use registry::ToolRegistry;
pub use sources::{ToolCollision, ToolSources};
pub use tool::{
    AskUser, SubAgents, Tool, ToolContext, ToolDefinition, ToolOutput, TurnChat, TurnSlot, User,
};
pub use workspace::{DirEntry, EntryKind, ResolvedPath, Workspace};
