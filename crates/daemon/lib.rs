//! switchboard, the daemon: wiring, config, CLI and operations.
//!
//! The binary (`main.rs`) is a thin shell over this library so the end-to-end tests can
//! start the whole daemon in-process on `127.0.0.1:0` with [`app::start`].
//!
//! # Layout
//! Building and running the daemon:
//! - `app`: [`app::start`] in phases (place, core, channels, dispatcher, MCP, panel,
//!   scheduler, listener), [`app::Running`], graceful shutdown.
//! - `cluster`: `[cluster]`: what this process is (alone, a gateway, a worker), its bus and
//!   stores.
//! - `agents`: building the daemon's agents; `history`: a chat's conversation read for the
//!   channels that show it; `outbox`: where the `message` tool sends, and to whom it may.
//! - `platforms`: the channels the config enables, built from their sections;
//!   `supervisor`: channel tasks restarted with backoff, outbound delivery loops.
//! - `mcp_servers`: the MCP servers (feature `mcp`).
//! - `service`: `switchboard run` — started, reloaded, stopped on signals, told to systemd.
//! - `reload`: SIGHUP and the panel's reload — what changes live, what needs a restart.
//! - `health`: `/healthz` and the states behind it; `llm_health`: whether the models answer.
//!
//! Its config (the file, `${ENV}`, credentials, and the sections that are the daemon's):
//! - `config`: [`config::Config`], composing every section; `config_error`: where a problem
//!   is (`ConfigError`, `Source`); `config_values`: `${…}` references, bind names, masking
//!   secrets for display; `config_properties` (tests): no file panics the parser.
//! - `agents_config`: `[agent]`, `[agents.NAME]`, `[[bindings]]`; `turn_config`:
//!   `[agent.verify]`, `[agent.approvals]`, `[agent.spawn]`; `llm_config`: `[llm]` and the
//!   provider chain; `scheduler_config`: `[scheduler]`, `[heartbeat]`; `usage_config`:
//!   `[llm.prices]`, `[limits]`; `http_config`: `[http]`.
//!
//! HTTP:
//! - `server`: the listener (header timeout, connection limits, descriptor reserve);
//!   `admission`: who gets a pre-auth slot (per client, shared out when scarce).
//! - `metrics`: `/metrics`; `admin`: the control panel (`/admin`); `telemetry`: spans over
//!   OTLP (feature `otlp`).
//!
//! The command line:
//! - `cli`: the commands (clap); `terminal` and `prompt`: `switchboard agent`; `cron`,
//!   `pairing`, `onboard`, `status`, `doctor`, `usage_cli`, `mcp_cli`: the other commands.
//!
//! The process:
//! - `harden`: before anything runs, secrets out of the environment, not dumpable;
//!   `early_stop`: a SIGTERM while starting stops it cleanly; `logging`: tracing (text or
//!   JSON); `notify`: systemd's notify socket (READY, STOPPING, watchdog).

mod admin;
mod admission;
pub mod agents;
mod agents_config;
pub mod app;
pub mod catalog;
pub mod cli;
mod cluster;
mod cluster_report;
mod component;
pub mod config;
mod config_error;
mod config_values;
pub mod cron;
pub mod doctor;
pub mod early_stop;
mod engine;
pub mod harden;
pub mod health;
mod history;
mod http_config;
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
mod scheduling;
pub mod server;
pub mod service;
pub mod status;
pub mod supervisor;
pub mod telemetry;
pub mod terminal;
pub mod turn_config;
pub mod usage_cli;
mod usage_config;

#[cfg(test)]
mod config_properties;
