//! switchboard-spawn: sub-agents. A turn hands a task to a child — a turn of the same agent in a session of its
//! own — with the `spawn` tool, and goes on or waits for the answer.
//!
//! A child is a message of the internal channel `spawn`: chat `<parent session>~<n>`, so its
//! session is `spawn_<parent session>~<n>`, with its own history, the same journal,
//! ordering, turn slots and cost records as any chat, its origin [`Origin::Delegated`] (the
//! model is told it is a sub-agent), the tools `[agent.spawn]` leaves it (by default the
//! parent's but `spawn`, `message` and `cron`) and its own time and token budget. Nobody reads
//! the `spawn` channel ([`Channel::has_person`] is false), so a child cannot ask anything.
//!
//! - `wait = true`: the parent's tool call returns the child's answer; the parent's turn lets
//!   go of its slot while it waits, so the child can run even at `max_concurrent_turns = 1`.
//! - `wait = false` (the default): the call returns at once; when the session's running
//!   children are all done, their answers enter the parent session together, as one message
//!   of origin [`Origin::SubAgents`], and the parent answers the person with them — once.
//!
//! `/stop` in the parent chat stops its turn and every child it started (the message of each
//! carries a cancellation token of the parent's family; see `worker.rs`), and their answers
//! are dropped. A child that fails is a result that says so, never a crash of the parent.
//! What runs is listed by `/status`. A child running when the daemon stops is not taken up
//! again (its message has no platform id to journal), and its parent is not told.
//!
//! [`Origin::Delegated`]: switchboard_core::Origin::Delegated
//! [`Origin::SubAgents`]: switchboard_core::Origin::SubAgents
//! [`Channel::has_person`]: switchboard_core::Channel::has_person
//!
//! # Layout
//! - `config`: [`SpawnConfig`], an agent's `[agent.spawn]`.
//! - `spawner`: [`Spawner`], the families of running children and the `spawn` channel.
//! - `tree`: [`Trees`](tree::Trees), each chat's sub-agents at every depth, counted against
//!   its limits.
//! - `handle`: a turn's [`SubAgents`](switchboard_tools::SubAgents), what the tool calls.
//! - `tool`: [`SpawnTool`].

mod config;
mod handle;
mod spawner;
mod tool;
mod tree;

pub use config::SpawnConfig;
pub use handle::TurnChildren;
pub use spawner::{CHANNEL, Spawner};
pub use tool::SpawnTool;
pub use tree::TreeLimits;
