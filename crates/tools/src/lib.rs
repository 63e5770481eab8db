//! switchboard-tools: what the agent can do besides talking.
//!
//! A [`Tool`] has a name, a description and a JSON-schema for its arguments, says whether
//! it is *exclusive* (it mutates shared state, so it runs alone), and is called with a
//! [`ToolContext`] carrying the workspace and a cancellation token. The [`ToolRegistry`]
//! holds the tools of a daemon and produces the definitions sent to the model.
//!
//! # Layout
//! - `tool`: the [`Tool`] trait, [`ToolContext`] and [`ToolDefinition`].
//! - `registry`: [`ToolRegistry`].
//! - `error`: [`ToolError`].

mod error;
mod registry;
mod tool;

pub use error::ToolError;
pub use registry::ToolRegistry;
pub use tool::{Tool, ToolContext, ToolDefinition};
