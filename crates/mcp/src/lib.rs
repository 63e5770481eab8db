//! switchboard-mcp: the agent as a client of Model Context Protocol servers, on the official
//! Rust SDK (`rmcp`). Each `[mcp.servers.NAME]` is started and supervised on its own; while it
//! is up its tools are the tool source `mcp:NAME` of the agent, offered to the model as
//! `NAME__tool` — ordinary tools to the rest of the agent.
//!
//! # Layout
//! - `config`: [`McpSection`] (`[mcp]`) and the resolved [`ServerSpec`].
//! - `server`: [`Servers`], the daemon's servers as the config says (and a reload changes
//!   them); [`Server`], one server's supervisor (start, list, watch, restart).
//! - `tool`: [`McpTool`], one tool of a server.

mod config;
mod server;
mod tool;

pub use config::{McpSection, ServerEntry, ServerSpec};
pub use server::{
    CONNECT_TIMEOUT, MAX_DEFINITIONS, MAX_TOOLS, Server, ServerState, Servers, probe,
};
pub use tool::{Checked, McpTool};
