//! The channels the config enables, built from their sections (each adapter's
//! `ChannelSection`, registered once in `config.rs`), run under the supervisor each with its
//! own stop tokens, so a reload can restart one with new settings (a token, an allow list)
//! while the others go on.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use switchboard_adapter::{BuildError, BuiltChannel, ChannelParts, ChannelSection};
use switchboard_core::{Bus, ChannelContext};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::config::Config;
use crate::health::Health;
use crate::supervisor;

/// How long a stopped channel may take to end before its successor starts anyway.
const STOP_TIMEOUT: Duration = Duration::from_secs(40);

/// What running the channels needs besides what builds them.
#[derive(Clone)]
pub struct Parts {
    /// What every channel is built with.
    pub channel: ChannelParts,
    pub health: Health,
    /// The daemon's intake token and the channels' stop token: each channel gets children.
    pub intake: CancellationToken,
    pub stop: CancellationToken,
    pub tracker: TaskTracker,
}

/// A running channel.
struct Running {
    ctx: ChannelContext,
    task: JoinHandle<()>,
    /// Whether it mounted routes at start (a reload cannot rebuild it).
    routes: bool,
}

/// The running channels, by name.
pub struct Platforms {
    parts: Parts,
    running: BTreeMap<&'static str, Running>,
}

/// A channel built from a config, not yet running.
pub struct Built {
    pub name: &'static str,
    built: BuiltChannel,
    /// Whether it has routes (still known once they were taken out to be mounted).
    routes: bool,
}

impl Built {
    /// Its routes on the HTTP listener, to be mounted (once, at start).
    pub fn take_router(&mut self) -> Option<axum::Router> {
        self.built.router.take()
    }

    /// Whether it has routes: a reload cannot mount them, so it cannot start it.
    pub fn has_routes(&self) -> bool {
        self.routes
    }

    /// The channel.
    pub fn channel(&self) -> &Arc<dyn switchboard_core::Channel> {
        &self.built.channel
    }
}

impl Platforms {
    pub fn new(parts: Parts) -> Self {
        Self {
            parts,
            running: BTreeMap::new(),
        }
    }

    /// The hub the channels publish on.
    pub fn hub(&self) -> &Arc<dyn Bus> {
        &self.parts.channel.hub
    }

    /// Builds `name`'s channel from its `section` of `config`; `None` when it is not
    /// enabled.
    pub fn build(
        &self,
        config: &Config,
        name: &'static str,
        section: &dyn ChannelSection,
    ) -> anyhow::Result<Option<Built>> {
        if !section.enabled() {
            return Ok(None);
        }
        let built = section
            .build(&self.parts.channel)
            .map_err(|err| match err {
                BuildError::Config(problem) => config
                    .source
                    .problem(&format!("channels.{name}"), problem)
                    .into(),
                BuildError::Start(err) => anyhow::Error::new(err),
            })?;
        let routes = built.router.is_some();
        Ok(Some(Built {
            name,
            built,
            routes,
        }))
    }

    /// Whether `name` runs with routes mounted at start (a reload cannot rebuild it).
    pub fn has_routes(&self, name: &str) -> bool {
        self.running.get(name).is_some_and(|running| running.routes)
    }

    /// Registers a built channel's delivery lanes and gauges and runs it under the
    /// supervisor. Its routes, if any, are the caller's to mount (taken out before).
    pub fn start(&mut self, built: Built) {
        let parts = &self.parts;
        let Built {
            name,
            built,
            routes,
        } = built;
        for (gauge, read) in built.gauges {
            parts.health.gauge(gauge, read);
        }
        crate::app::register(self.hub(), &parts.health, built.channel.clone());
        let ctx = ChannelContext {
            hub: self.hub().clone(),
            intake: parts.intake.child_token(),
            shutdown: parts.stop.child_token(),
        };
        let task = supervisor::spawn_channel(
            built.channel,
            ctx.clone(),
            parts.health.clone(),
            &parts.tracker,
        );
        self.running.insert(name, Running { ctx, task, routes });
    }

    /// Stops `name`'s channel and waits (a while) for it to end.
    pub async fn stop(&mut self, name: &str) {
        let Some(running) = self.running.remove(name) else {
            return;
        };
        running.ctx.intake.cancel();
        running.ctx.shutdown.cancel();
        if tokio::time::timeout(STOP_TIMEOUT, running.task)
            .await
            .is_err()
        {
            tracing::warn!(
                channel = name,
                "the channel did not stop in time; its successor starts anyway"
            );
        }
    }
}
