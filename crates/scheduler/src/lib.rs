//! switchboard-scheduler: scheduled work — jobs that hand the agent a message on a
//! schedule, in a chat, as work whose [`Origin`](switchboard_core::Origin) says where it
//! comes from. It knows the bus and the tools, not the agent: the agent's hook tells it how
//! a run's turn ended ([`Outcomes`]), and a [`Budget`] (the agent's spending) whether a
//! chat may spend.
//!
//! # Layout
//! - `job`: [`Job`], [`Run`] and [`Outcome`]: the records the store keeps.
//! - `runs`: a job's runs as every store keeps them: a due time claimed once, a run settled
//!   once.
//! - `due`: [`Schedule`] and the next due time, across time zones and daylight saving.
//! - `store`: [`JobStore`], what the scheduler needs of where jobs and runs are kept.
//! - `state_store`: [`StateJobStore`], jobs as documents of the daemon's state store (files
//!   in one process, the bucket on a cluster).
//! - `migrate`: [`migrate_file`], the jobs file of earlier versions moved into it.
//! - `jobs`: [`Jobs`], what chats and the operator may do with jobs (add, list, pause...);
//!   `describe`: how a job reads in a list.
//! - `isolated`: the `cron` channel that posts the answers of runs in sessions of their
//!   own to their jobs' chats.
//! - `clock`: [`Clock`], what "now" is (the system's, or tokio's paused one in tests).
//! - `message`: what a run tells the agent (a task's message, the heartbeat's instructions).
//! - `runner`: [`Scheduler`], the loop that leads the firing duty and hands due runs to the
//!   agent.
//! - `firing`: what happens at a due time — its verdict, its claim, the due times it folds,
//!   a retry — and the claims a lost scheduler left, taken over.
//! - `outcome`: what becomes of a run handed over: recorded, tried again, told
//!   ([`Outcomes`]: where its turn ended).
//! - `tool`: [`CronTool`], the agent's `cron` tool.
//! - `section`: `[scheduler]` ([`SchedulerSection`], the jobs it declares) and `[heartbeat]`.

mod clock;
mod describe;
mod due;
mod firing;
mod isolated;
mod job;
mod jobs;
mod message;
mod migrate;
#[cfg(test)]
mod once_tests;
mod outcome;
mod runner;
mod runs;
mod section;
mod state_store;
mod store;
#[cfg(test)]
mod test_setup;
mod tool;

pub use clock::{Clock, SystemClock, TokioClock};
pub use describe::{Reading, describe, reading};
pub use due::{Schedule, When, default_zone, duration, local, zone};
pub use isolated::CHANNEL as ISOLATED_CHANNEL;
pub use job::{ActiveHours, Job, JobKind, Outcome, Run, SessionMode};
pub use jobs::SchedulerConfig;
pub use jobs::{Asker, Declared, JobAction, Jobs, NewJob, Synced};
pub use migrate::migrate_file;
pub use outcome::Outcomes;
pub use runner::{Budget, Scheduler};
pub use runs::RUNS_KEPT;
pub use section::{HeartbeatSection, JobEntry, SchedulerSection, chat_target, declared_jobs};
pub use state_store::StateJobStore;
pub use store::{JobChange, JobStore, JobStoreError};
pub use tool::CronTool;
