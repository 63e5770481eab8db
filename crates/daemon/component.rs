//! Components: the parts of the daemon built from config sections, the way a channel is
//! built from its `ChannelSection`, and reloaded through the same interface.
//!
//! A component is
//! - **checked** with its section when the config is parsed (the section's own `validate`,
//!   its errors located at file, line and key by the config);
//! - **built** by [`Component::build`] from the config and the daemon assembled so far
//!   ([`Assembly`]) into running parts: its tasks (on the daemon's trackers), its HTTP routes
//!   (merged into the listener's router), its `/healthz` checks and gauges. It returns `None`
//!   when the config does not enable it, and then nothing of it exists — no task, no
//!   allocation at idle;
//! - **reloaded** by [`Component::prepare`]: what a changed config needs of it is built
//!   first — and may be refused — and applied only once every component prepared its part
//!   ([`Change::apply`]), so a reload is applied whole or not at all. A changed key that no
//!   component applies live is named as needing a restart;
//! - **left out** by a cargo feature: [`NotBuilt`] stands in for it in the one
//!   registration line (`components!` in `app.rs`), and its section refuses a config that
//!   uses it, saying which feature builds it in.
//!
//! Adding one: its section (a type that deserializes and validates itself, in the crate of
//! its code) goes in `Config`; its `impl Component` (usually next to what it runs) builds it
//! from that section and says which keys it applies live; one line in `components!` runs it.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use switchboard_adapter::Pairing;
use switchboard_agent::Agents;
use switchboard_core::{Bus, Shutdown};
use switchboard_scheduler::Scheduler;
use switchboard_usage::Spending;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::agents::ToolParts;
use crate::cluster::Place;
use crate::config::Config;
use crate::health::Health;
use crate::model_health::ModelHealth;

/// What a reload did.
#[derive(Debug, PartialEq, Eq)]
pub enum Reloaded {
    /// The new config is in use; these changed keys need a restart to take effect.
    Applied {
        /// Dotted keys.
        need_restart: Vec<String>,
    },
    /// The new config was refused (the error); the running one stays.
    Refused(String),
}

/// A reload asked for over HTTP (the control panel's); the answer is what it did.
pub type ReloadRequest = tokio::sync::oneshot::Sender<Reloaded>;

/// What applies a component's part of a reload: a future that does nothing until awaited.
/// It may still refuse (the reload is then refused and what was applied before it stays).
pub(crate) type Apply = Pin<Box<dyn Future<Output = Result<(), String>> + Send>>;

/// A component's part of a reload, prepared before anything is applied.
pub(crate) struct Change {
    /// The changed keys it applies live (the others need a restart, unless another
    /// component applies them).
    pub live: Vec<String>,
    /// Applies them.
    pub apply: Apply,
}

/// What answers messages: the bus, the models' health, the scheduler, the spending, the
/// agents with their tools, and who may talk besides the allow lists.
pub(crate) struct Core {
    pub hub: Arc<dyn Bus>,
    pub llm_health: Arc<ModelHealth>,
    /// The audio servers' health (`[transcription]`, `[speech]`).
    pub audio_health: Arc<ModelHealth>,
    pub scheduler: Option<Scheduler>,
    pub spending: Arc<Spending>,
    pub agents: Agents,
    pub tool_parts: ToolParts,
    pub pairing: Arc<Pairing>,
}

/// The daemon as assembled when the components are built: what they are built on, and where
/// they put their routes.
pub(crate) struct Assembly<'a> {
    pub config: &'a Config,
    /// What this process is (alone, a gateway, a worker) and its stores.
    pub place: &'a Place,
    /// The agents and what they share.
    pub core: &'a Core,
    pub health: &'a Health,
    /// Turns and intake (tasks that stop with intake go on its tracker).
    pub shutdown: &'a Shutdown,
    /// Cancelled with the channels, once outbound delivery is done.
    pub channels_stop: &'a CancellationToken,
    /// What tracks the channels' tasks (waited for after `channels_stop`).
    pub channel_tasks: &'a TaskTracker,
    /// The listener's routes so far; a component merges its own.
    pub router: axum::Router,
    /// Reloads asked for over HTTP (the control panel's), for whoever runs the daemon's
    /// loop to serve.
    pub reloads: Option<mpsc::Receiver<ReloadRequest>>,
}

impl Assembly<'_> {
    /// Mounts `routes` on the listener.
    pub(crate) fn serve(&mut self, routes: axum::Router) {
        self.router = std::mem::take(&mut self.router).merge(routes);
    }
}

/// A part of the daemon built from its config section (see the module doc).
pub(crate) trait Component: Send + Sync {
    /// Builds it into running parts; `None` when `daemon.config` does not enable it.
    fn build(daemon: &mut Assembly<'_>) -> impl Future<Output = anyhow::Result<Option<Self>>>
    where
        Self: Sized;

    /// What `config` changes of it, given the dotted keys that `changed`; `None` when none of
    /// them is its to apply live. Builds everything before returning: applying only swaps.
    fn prepare(&self, config: &Arc<Config>, changed: &[String]) -> Result<Option<Change>, String>;
}

/// The running components, in the order they were built.
#[derive(Default)]
pub(crate) struct Components(Vec<Box<dyn Component>>);

impl Components {
    /// Builds `C` and keeps it when the config enables it.
    pub(crate) async fn add<C: Component + 'static>(
        &mut self,
        daemon: &mut Assembly<'_>,
    ) -> anyhow::Result<()> {
        if let Some(component) = C::build(daemon).await? {
            self.0.push(Box::new(component));
        }
        Ok(())
    }

    /// Every component's part of a reload to `config`, in order, and the changed keys none
    /// of them applies live (they need a restart); refused when one of them cannot be built.
    pub(crate) fn prepare(
        &self,
        config: &Arc<Config>,
        changed: &[String],
    ) -> Result<(Vec<Apply>, Vec<String>), String> {
        let mut applies = Vec::new();
        let mut live = Vec::new();
        for component in &self.0 {
            if let Some(change) = component.prepare(config, changed)? {
                live.extend(change.live);
                applies.push(change.apply);
            }
        }
        let need_restart = changed
            .iter()
            .filter(|key| !live.contains(key))
            .cloned()
            .collect();
        Ok((applies, need_restart))
    }
}

/// Whether dotted `key` is `prefix` or under it.
pub(crate) fn under(key: &str, prefix: &str) -> bool {
    key == prefix || key.starts_with(&format!("{prefix}."))
}

/// The keys of `changed` for which `live` holds, as a [`Change`] applied by `apply` — or
/// `None` when there are none.
pub(crate) fn change<F>(changed: &[String], live: impl Fn(&str) -> bool, apply: F) -> Option<Change>
where
    F: Future<Output = Result<(), String>> + Send + 'static,
{
    let live: Vec<String> = changed.iter().filter(|key| live(key)).cloned().collect();
    (!live.is_empty()).then(|| Change {
        live,
        apply: Box::pin(apply),
    })
}

/// The stand-in for a component left out of the build by its cargo feature: never built
/// (its section, refused when used, says which feature builds it in).
#[allow(
    dead_code,
    reason = "registered only in a build that leaves a component out"
)]
pub(crate) struct NotBuilt;

impl Component for NotBuilt {
    async fn build(_daemon: &mut Assembly<'_>) -> anyhow::Result<Option<Self>> {
        Ok(None)
    }

    fn prepare(
        &self,
        _config: &Arc<Config>,
        _changed: &[String],
    ) -> Result<Option<Change>, String> {
        Ok(None)
    }
}
