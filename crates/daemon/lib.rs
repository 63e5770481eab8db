//! switchboard, the daemon: wiring, config, CLI and operations.
//!
//! The binary (`main.rs`) is a thin shell over this library so the end-to-end tests can
//! start the whole daemon in-process on `127.0.0.1:0` with [`app::start`].
//!
//! # Layout
//! - `app`: builds everything from a [`config::Config`] and runs it; graceful shutdown.
//! - `config`: the TOML config, `${ENV}` secrets.
//! - `config_error`: where a config problem is (`ConfigError`, `Source`).
//! - `agents_config`: `[agents.NAME]` (taking `[agent]`'s keys) and `[[bindings]]`.
//! - `agents`: building the daemon's agents from them.
//! - `cli`: the command line (clap).
//! - `cluster`: `[cluster]`: what this process is (alone, a gateway, a worker) and its bus.
//! - `server`: the HTTP listener (header timeout, connection limits, descriptor reserve).
//! - `admission`: who gets a pre-auth connection slot (per client, shared out when scarce).
//! - `supervisor`: channel tasks restarted with backoff; outbound delivery loops.
//! - `health`: `/healthz` and the channel states behind it.
//! - `llm_health`: whether the models answer (for `/healthz` and `/metrics`).
//! - `terminal`: `switchboard agent`, turns in the terminal.
//! - `prompt`: its prompt (rustyline in a terminal: editing, history, paste; lines from a pipe).
//! - `cron`: `switchboard cron`, the operator's view of scheduled jobs.
//! - `pairing`: `switchboard pairing`, who may talk.
//! - `onboard`: `switchboard onboard`, a workspace's starter files.
//! - `outbox`: where the `message` tool sends, and to whom it may.
//! - `logging`: tracing setup (text or JSON).
//! - `scheduler_config`: `[scheduler]`.
//! - `usage_config`: `[llm.prices]` and `[limits]`, the daemon's spending.
//! - `usage_cli`: `switchboard usage`, a table per day, agent and chat.
//! - `harden`: before anything runs: secrets out of the environment, not dumpable.
//! - `early_stop`: a SIGTERM while starting stops the daemon cleanly.
//! - `notify`: systemd's notify socket (READY, STOPPING, watchdog).

mod admin;
mod admission;
pub mod agents;
mod agents_config;
pub mod app;
pub mod cli;
mod cluster;
pub mod config;
mod config_error;
mod config_values;
pub mod cron;
pub mod doctor;
pub mod early_stop;
pub mod harden;
pub mod health;
mod history;
mod http_config;
pub mod llm_config;
pub mod llm_health;
pub mod logging;
#[cfg(feature = "mcp")]
pub mod mcp_cli;
#[cfg(feature = "mcp")]
mod mcp_servers;
pub mod metrics;
pub mod notify;
pub mod onboard;
pub mod outbox;
pub mod pairing;
pub mod platforms;
pub mod prompt;
pub mod reload;
pub mod scheduler_config;
pub mod server;
pub mod status;
pub mod supervisor;
pub mod telemetry;
pub mod terminal;
pub mod turn_config;
pub mod usage_cli;
mod usage_config;

#[cfg(test)]
mod config_properties;
