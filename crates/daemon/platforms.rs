//! The channels the config enables, built from their sections (each adapter's
//! `ChannelSection`, registered once in `config.rs`), run under the supervisor each with its
//! own stop tokens, so a reload can restart one with new settings (a token, an allow list)
//! while the others go on. The channels are one component: a reload rebuilds the channels
//! whose section changed (with the builders that started them) and restarts them.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use switchboard_adapter::{BuildError, BuiltChannel, ChannelParts, ChannelSection};
use switchboard_core::{Bus, Channel, ChannelContext, ChannelRetry, LaneOptions, RetryingChannel};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::component::{Assembly, Change, Component, change, under};
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

/// The running channels, by name (a handle: clones share them).
#[derive(Clone)]
pub struct Platforms {
    parts: Parts,
    running: Arc<Mutex<BTreeMap<&'static str, Running>>>,
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
            running: Arc::default(),
        }
    }

    fn running(&self) -> std::sync::MutexGuard<'_, BTreeMap<&'static str, Running>> {
        self.running.lock().unwrap_or_else(PoisonError::into_inner)
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
        self.running()
            .get(name)
            .is_some_and(|running| running.routes)
    }

    /// Registers a built channel's delivery lanes and gauges and runs it under the
    /// supervisor. Its routes, if any, are the caller's to mount (taken out before).
    pub fn start(&self, built: Built) {
        let parts = &self.parts;
        let Built {
            name,
            built,
            routes,
        } = built;
        for (gauge, read) in built.gauges {
            parts.health.gauge(gauge, read);
        }
        register(self.hub(), &parts.health, built.channel.clone());
        let ctx = ChannelContext {
            hub: self.hub().clone(),
            intake: parts.intake.child_token(),
            shutdown: parts.stop.child_token(),
            trouble: Default::default(),
        };
        let task = supervisor::spawn_channel(
            built.channel,
            ctx.clone(),
            parts.health.clone(),
            &parts.tracker,
        );
        self.running().insert(name, Running { ctx, task, routes });
    }

    /// Stops `name`'s channel and waits (a while) for it to end.
    pub async fn stop(&self, name: &str) {
        let Some(running) = self.running().remove(name) else {
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

/// The channels as a component: built where this process runs channels (each its routes
/// mounted), and restarted by a reload that changed their section.
impl Component for Platforms {
    async fn build(daemon: &mut Assembly<'_>) -> anyhow::Result<Option<Self>> {
        let config = daemon.config;
        let platforms = Platforms::new(Parts {
            channel: ChannelParts {
                hub: daemon.core.hub.clone(),
                pairing: daemon.core.pairing.clone(),
                state: daemon.place.stores().state().clone(),
                media: daemon.place.stores().media().clone(),
                state_dir: config.path(&config.agent.state_dir),
                workspace: config.path(&config.agent.workspace),
                http: config.http_facts(),
                handed_over: daemon.place.is_cluster(),
                transcripts: Some(Arc::new(crate::history::SessionHistory(
                    daemon.core.agents.clone(),
                ))),
            },
            health: daemon.health.clone(),
            intake: daemon.shutdown.intake().clone(),
            stop: daemon.channels_stop.clone(),
            tracker: daemon.channel_tasks.clone(),
        });
        if daemon.place.runs_channels() {
            for (name, section) in config.channels.all() {
                if let Some(mut built) = platforms.build(config, name, section)? {
                    if let Some(routes) = built.take_router() {
                        daemon.serve(routes);
                    }
                    platforms.start(built);
                }
            }
        }
        Ok(Some(platforms))
    }

    /// Rebuilds each channel whose section changed; one with routes (a webhook, the web
    /// page) has them mounted at start, so a change to it needs a restart.
    fn prepare(&self, config: &Arc<Config>, changed: &[String]) -> Result<Option<Change>, String> {
        let mut restart = Vec::new();
        for (name, section) in config.channels.all() {
            let prefix = format!("channels.{name}");
            if !changed.iter().any(|key| under(key, &prefix)) || self.has_routes(name) {
                continue;
            }
            match self.build(config, name, section) {
                Ok(Some(built)) if built.has_routes() => continue,
                Ok(built) => restart.push((name, prefix, built)),
                Err(err) => return Err(format!("{err:#}")),
            }
        }
        let prefixes: Vec<String> = restart
            .iter()
            .map(|(_, prefix, _)| prefix.clone())
            .collect();
        let platforms = self.clone();
        Ok(change(
            changed,
            |key| prefixes.iter().any(|prefix| under(key, prefix)),
            async move {
                for (name, _, built) in restart {
                    platforms.restart(name, built).await;
                }
                Ok(())
            },
        ))
    }
}

impl Platforms {
    /// Stops the channel `name` and starts what it is built into now (`None`: disabled, and
    /// its health entry goes).
    async fn restart(&self, name: &str, built: Option<Built>) {
        self.stop(name).await;
        match built {
            Some(built) => {
                tracing::info!(
                    channel = name,
                    "restarting the channel with its new settings"
                );
                self.start(built);
            }
            None => {
                tracing::info!(channel = name, "the channel is disabled now; stopped");
                self.parts.health.remove(name);
            }
        }
    }
}

/// Routes a channel's outbound messages through per-chat lanes, its sends retried when the
/// platform rate limits or is briefly unavailable; `/healthz` counts what is given up on.
fn register(hub: &Arc<dyn Bus>, health: &Health, channel: Arc<dyn Channel>) {
    let name = channel.name();
    let retrying = RetryingChannel::new(channel, ChannelRetry::default());
    let lanes = hub.register_channel(Arc::new(retrying), LaneOptions::default());
    health.gauge(
        format!("{name}_undeliverable"),
        Box::new(move || usize::try_from(lanes.undeliverable()).unwrap_or(usize::MAX)),
    );
}
