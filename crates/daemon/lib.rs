//! switchboard, the daemon: wiring, config, CLI and operations.
//!
//! The binary (`main.rs`) is a thin shell over this library so the end-to-end tests can
//! start the whole daemon in-process on `127.0.0.1:0` with [`app::start`].
//!
//! # Layout
//! Building and running the daemon:
//! - `app`: [`app::start`] in phases (place, core, components and channels, dispatcher,
//!   listener), [`app::Running`], graceful shutdown.
//! - `component`: the seam every part but the core is built and reloaded through
//!   (`Component`, `Assembly`, `NotBuilt`), and the core they are built on.
//! - `cluster`: what this process is (alone, a gateway, a worker), its bus and stores;
//!   `cluster_report`: what `doctor` and `status` say of the cluster; `migrate`: the files
//!   of earlier versions moved into the state store at the first start.
//! - `engine`: the core (agents, models' health, scheduler, spending, pairing) and the
//!   components a reload changes of it (their models, tools and caps); `agents`: building the
//!   agents; `catalog`: the models the config names; `history`: a chat's conversation for
//!   the channels that show it; `outbox`: where the `message` tool sends, and to whom.
//! - `platforms`: the channels, built from their sections, as one component;
//!   `supervisor`: channel tasks restarted with backoff.
//! - `scheduling`: the scheduler as a component; `mcp_servers`: the MCP servers (feature
//!   `mcp`); `metrics`: `/metrics`; `admin`: the control panel (`/admin`).
//! - `service`: `switchboard run` — started, reloaded, stopped on signals, told to systemd.
//! - `reload`: SIGHUP and the panel's reload, through the components.
//! - `health`: `/healthz` and the states behind it; `model_health`: whether the models (and
//!   the audio servers) answer.
//!
//! Its config (the file, `${ENV}`, credentials, and the sections that are the daemon's):
//! - `config`: [`config::Config`], composing every section, and what reads across them;
//!   `config_error`: reading serde's path into a key (the located error is the core's);
//!   `config_values`: `${…}` references, bind names, seconds, masking secrets for display;
//!   `config_properties` (tests): no file panics the parser; `left_out`: the section of a
//!   part a cargo feature leaves out (`[mcp]`, `[cluster]`), refused.
//! - `http_config`: `[http]`;
//!   `telemetry`: `[telemetry]`, spans over OTLP (feature `otlp`). The other sections are
//!   their crates': `[agent]`, `[agents.NAME]` and `[[bindings]]` the agent's, `[llm]` the
//!   llm's, `[scheduler]` and `[heartbeat]` the scheduler's, `[limits]` usage's, `[tools]`
//!   the tools', each channel's its own.
//!
//! HTTP: `server`: the listener (header timeout, connection limits, descriptor reserve);
//! `admission`: who gets a pre-auth slot (per client, shared out when scarce).
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
mod left_out;
pub mod logging;
#[cfg(feature = "mcp")]
pub mod mcp_cli;
#[cfg(feature = "mcp")]
mod mcp_servers;
pub mod memory_cli;
#[cfg(feature = "cluster")]
mod memory_feed;
pub mod metrics;
mod migrate;
pub mod model_health;
pub mod notify;
pub mod onboard;
pub mod outbox;
pub mod pairing;
pub mod platforms;
pub mod prompt;
pub mod reload;
mod scheduling;
pub mod server;
pub mod service;
pub mod status;
pub mod supervisor;
pub mod telemetry;
pub mod terminal;
pub mod usage_cli;

#[cfg(test)]
mod config_properties;
