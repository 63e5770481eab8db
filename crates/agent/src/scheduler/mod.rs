//! Scheduled work: jobs that hand the agent a message on a schedule, in a chat, as work
//! whose [`Origin`](switchboard_core::Origin) says where it comes from.
//!
//! # Layout
//! - `job`: [`Job`], [`Run`] and [`Outcome`]: the records the store keeps.
//! - `due`: [`Schedule`] and the next due time, across time zones and daylight saving.
//! - `store`: [`JobStore`], where jobs and runs are kept, and [`FileJobStore`].

mod due;
mod job;
mod store;

pub use due::{Schedule, default_zone, duration, zone};
pub use job::{Job, Outcome, Run, SessionMode};
pub use store::{FileJobStore, JobStore, JobStoreError, RUNS_KEPT};
