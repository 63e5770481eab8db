//! Building the daemon from a config, and stopping it (how it runs as a service, on signals,
//! is `service.rs`'s).
//!
//! [`start`] builds it in phases, each a function — the place (alone or a cluster's member,
//! its bus and stores), the core (agents, scheduler, spending), what watches it, the
//! channels, the dispatcher, the MCP servers, the control panel, the scheduler, the listener
//! — and returns a [`Running`] daemon; [`Running::shutdown`] stops it in order: intake
//! first, then running turns (after a grace period), then outbound delivery, then every
//! socket (each sends what is queued for it and a close frame, and is waited for), then the
//! listener.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use anyhow::Context;
use serde_json::json;
use switchboard_adapter::{ChannelParts, Pairing};
use switchboard_agent::scheduler::{Scheduler, SystemClock};
use switchboard_agent::{Agents, Dispatcher};
use switchboard_core::{Bus, Channel, ChannelRetry, LaneOptions, RetryingChannel, Shutdown};
use switchboard_llm::Observer;
use switchboard_sessions::StoreHealth;
use switchboard_tools::ToolRegistry;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::agents::{AgentParts, ToolParts};
use crate::config::Config;
use crate::health::Health;
use crate::llm_health::LlmHealth;
use crate::metrics;
use crate::platforms::{self, Platforms};
use crate::server::{self, Server};

/// After the grace period and cancellation, how long cancelled turns get to save.
const CANCEL_DEADLINE: Duration = Duration::from_secs(5);

/// A daemon that is serving.
pub struct Running {
    addr: SocketAddr,
    shutdown: Shutdown,
    grace: Duration,
    health: Health,
    /// The bus; its outbound lanes are closed once the turns are done.
    hub: Arc<dyn Bus>,
    /// Channel supervisors.
    channels: TaskTracker,
    /// Cancelled once the outbound lanes are empty, so channel tasks end.
    channels_stop: CancellationToken,
    /// Stopped last.
    server: Server,
    /// The agents (a reload replaces their model chains and tools).
    agents: Agents,
    /// Telegram and Discord (a reload restarts one whose settings changed).
    platforms: Platforms,
    /// What building the tools again needs.
    tool_parts: ToolParts,
    /// The text of the config in use.
    config_text: String,
    /// Told every model attempt's outcome (a reload builds the chain again with it).
    llm_health: Arc<LlmHealth>,
    /// The MCP servers (a reload changes them).
    #[cfg(feature = "mcp")]
    mcp: crate::mcp_servers::Mcp,
    /// What the models cost and the caps (a reload changes them).
    spending: Arc<switchboard_agent::usage::Spending>,
    /// Reloads the control panel asks for (taken by `switchboard run`'s loop).
    reloads: Option<mpsc::Receiver<crate::admin::ReloadRequest>>,
    /// The config text the control panel shows, kept equal to `config_text` (no panel: none).
    shown_config: Option<Arc<Mutex<String>>>,
}

/// Starts the daemon. `tools` are the tools offered to the model. The phases, in order:
/// where it runs (the place: alone, or a member of a cluster, and its stores), the agents,
/// what watches them, the channels, the agents' dispatcher, the MCP servers, the control
/// panel, the scheduler, and last the listener — so nothing is served before everything
/// behind it exists.
pub async fn start(config: Config, tools: ToolRegistry) -> anyhow::Result<Running> {
    let shutdown = Shutdown::new();
    let place = crate::cluster::Place::join(&config, shutdown.intake()).await?;
    let core = build_core(&config, &place, &shutdown, tools)?;
    let health = Health::new();
    watch_core(&health, &core);
    let mut router = health.router();
    // Installed before anything records (the route is added once the channels are known).
    let recorder = config.http.metrics.then(metrics::recorder).flatten();
    let (platforms, channels) =
        start_channels(&config, &place, &core, &health, &shutdown, &mut router)?;
    if let Some(handle) = recorder {
        router = router.merge(metrics::router(
            handle,
            health.clone(),
            metrics::Series {
                spending: Some(core.spending.clone()),
                ..metrics_series(&config, &core.agents, &core.hub)
            },
            config.metrics_access()?,
            config.http.allowed_hosts.clone(),
        ));
    }
    if place.runs_agents() {
        place.start_worker();
        start_dispatcher(&core, &health, &shutdown);
    }
    // MCP servers start in the background: a slow or broken one delays nothing; its tools
    // come when it is up. They stop with the channels.
    #[cfg(feature = "mcp")]
    let mcp = start_mcp(&config, &core, &health, &channels.stop).await?;
    let panel = control_panel(&config, &core, &health, &channels.pairing, &mut router)?;
    // Scheduled work stops with intake: a run it did not hand over stays due (or pending),
    // for the next start.
    if let Some(scheduler) = core.scheduler.clone() {
        crate::scheduler_config::sync_declared(scheduler.jobs(), &config).await;
        let intake = shutdown.intake().clone();
        shutdown
            .tracker()
            .spawn(async move { scheduler.run(intake).await });
    }
    let server = listen(&config, router, &health).await?;
    health.set_ready();

    Ok(Running {
        addr: server.addr(),
        shutdown,
        grace: Config::duration(&config.daemon.shutdown_grace_secs),
        health,
        hub: core.hub,
        channels: channels.tracker,
        channels_stop: channels.stop,
        server,
        agents: core.agents,
        platforms,
        tool_parts: core.tool_parts,
        config_text: config.source.text.clone(),
        llm_health: core.llm_health,
        #[cfg(feature = "mcp")]
        mcp,
        spending: core.spending,
        reloads: panel.reloads,
        shown_config: panel.shown_config,
    })
}

/// What answers messages: the bus, the models' health, the scheduler, the spending and the
/// agents with their tools.
struct Core {
    hub: Arc<dyn Bus>,
    llm_health: Arc<LlmHealth>,
    scheduler: Option<Scheduler>,
    spending: Arc<switchboard_agent::usage::Spending>,
    agents: Agents,
    tool_parts: ToolParts,
}

/// Builds the agents on the place's bus and stores, with the scheduler and the spending
/// they share (the scheduler only where agents run).
fn build_core(
    config: &Config,
    place: &crate::cluster::Place,
    shutdown: &Shutdown,
    tools: ToolRegistry,
) -> anyhow::Result<Core> {
    let hub: Arc<dyn Bus> = place.bus().clone();
    let llm_health = Arc::new(LlmHealth::default());
    llm_health.start_with(config);
    let observer: Arc<dyn Observer> = llm_health.clone();
    let scheduler = (config.scheduler.enabled && place.runs_agents()).then(|| {
        Scheduler::new(
            place.stores().jobs(),
            hub.clone(),
            Arc::new(SystemClock),
            config.scheduler.settings(),
        )
    });
    let spending = crate::usage_config::spending(config, place.stores().usage());
    if let Some(scheduler) = &scheduler {
        scheduler.keep_to(spending.clone());
    }
    let parts = AgentParts {
        place: Some(place),
        extra_tools: tools,
        hub: Some(&hub),
        observer: Some(&observer),
        scheduler: scheduler.clone(),
        spending: Some(spending.clone()),
        // Sub-agents only where an agent may start them.
        spawner: config
            .agent_specs()
            .iter()
            .any(|spec| spec.section.spawn.enabled)
            .then(|| switchboard_agent::spawn::Spawner::new(hub.clone(), shutdown.turns().clone())),
    };
    let (agents, tool_parts) = crate::agents::build_agents(config, parts)?;
    Ok(Core {
        hub,
        llm_health,
        scheduler,
        spending,
        agents,
        tool_parts,
    })
}

/// `/healthz`'s checks of the core: the models (not a readiness matter: a daemon whose model
/// fails still takes, and answers, messages) and every agent's session store.
fn watch_core(health: &Health, core: &Core) {
    let models = core.llm_health.clone();
    health.check_health_only("llm", Box::new(move || models.check()));
    let stores = core.agents.clone();
    health.check(
        "store",
        Box::new(move || {
            let degraded: Vec<_> = stores
                .iter()
                .filter_map(|agent| match agent.store().health() {
                    StoreHealth::Ok => None,
                    StoreHealth::Degraded {
                        error,
                        failed_writes,
                    } => Some((agent.name().clone(), error, failed_writes)),
                })
                .collect();
            match degraded.as_slice() {
                [] => Ok(()),
                // One agent (the usual case): as it always was.
                [(name, error, failed_writes)] if stores.len() == 1 || name.is_default() => {
                    Err(json!({"error": error, "failed_writes": failed_writes}))
                }
                all => Err(json!({
                    "error": all.iter().map(|(name, error, _)| format!("agent {name}: {error}"))
                        .collect::<Vec<_>>().join("; "),
                    "failed_writes": all.iter().map(|(_, _, failed)| failed).sum::<u64>(),
                })),
            }
        }),
    );
}

/// The channels' supervision: who tracks their tasks, what stops them, and the pairing they
/// (and the panel) share.
struct ChannelsRunning {
    tracker: TaskTracker,
    stop: CancellationToken,
    pairing: Arc<Pairing>,
}

/// Builds and starts every channel the config enables where this process runs channels,
/// merging the routes they serve into `router`.
fn start_channels(
    config: &Config,
    place: &crate::cluster::Place,
    core: &Core,
    health: &Health,
    shutdown: &Shutdown,
    router: &mut axum::Router,
) -> anyhow::Result<(Platforms, ChannelsRunning)> {
    let tracker = TaskTracker::new();
    let stop = CancellationToken::new();
    let pairing = Arc::new(Pairing::new(place.stores().state().clone()));
    let mut platforms = Platforms::new(platforms::Parts {
        channel: ChannelParts {
            hub: core.hub.clone(),
            pairing: pairing.clone(),
            state: place.stores().state().clone(),
            state_dir: config.path(&config.agent.state_dir),
            workspace: config.path(&config.agent.workspace),
            http: config.http_facts(),
            handed_over: place.is_cluster(),
            transcripts: Some(Arc::new(crate::history::SessionHistory(
                core.agents.clone(),
            ))),
        },
        health: health.clone(),
        intake: shutdown.intake().clone(),
        stop: stop.clone(),
        tracker: tracker.clone(),
    });
    let here = if place.runs_channels() {
        config.channels.all()
    } else {
        Vec::new()
    };
    for (name, section) in here {
        if let Some(mut built) = platforms.build(config, name, section)? {
            if let Some(routes) = built.take_router() {
                *router = std::mem::take(router).merge(routes);
            }
            platforms.start(built);
        }
    }
    Ok((
        platforms,
        ChannelsRunning {
            tracker,
            stop,
            pairing,
        },
    ))
}

/// Starts the dispatcher that hands messages to the agents' workers.
fn start_dispatcher(core: &Core, health: &Health, shutdown: &Shutdown) {
    let dispatcher = Arc::new(Dispatcher::new(
        core.agents.clone(),
        core.hub.clone(),
        shutdown.clone(),
    ));
    let sessions = dispatcher.clone();
    health.gauge(
        "active_sessions",
        Box::new(move || sessions.active_sessions()),
    );
    shutdown.tracker().spawn(async move {
        if let Err(err) = dispatcher.run().await {
            tracing::error!(error = %err, "dispatcher stopped");
        }
    });
}

/// The MCP servers the config names, started in the background (a daemon without them has
/// nothing of MCP).
#[cfg(feature = "mcp")]
async fn start_mcp(
    config: &Config,
    core: &Core,
    health: &Health,
    stop: &CancellationToken,
) -> anyhow::Result<crate::mcp_servers::Mcp> {
    let mut mcp = crate::mcp_servers::Mcp {
        servers: None,
        tools: core.agents.default_agent().tool_sources().clone(),
        health: health.clone(),
        stop: stop.clone(),
    };
    mcp.apply(config).await?;
    Ok(mcp)
}

/// What the control panel leaves the running daemon: the reloads it asks for and the config
/// text it shows (none without a panel).
#[derive(Default)]
struct Panel {
    reloads: Option<mpsc::Receiver<crate::admin::ReloadRequest>>,
    shown_config: Option<Arc<Mutex<String>>>,
}

/// The control panel's routes, when it has a token (else nothing of it is made).
fn control_panel(
    config: &Config,
    core: &Core,
    health: &Health,
    pairing: &Arc<Pairing>,
    router: &mut axum::Router,
) -> anyhow::Result<Panel> {
    let Some(token) = config.admin_access()? else {
        return Ok(Panel::default());
    };
    let (reload_requests, requests) = mpsc::channel(4);
    let text = Arc::new(Mutex::new(config.source.text.clone()));
    let admin = crate::admin::Admin {
        auth: switchboard_http::Auth::Token(token),
        health: health.clone(),
        agents: core.agents.clone(),
        hub: core.hub.clone(),
        pairing: pairing.clone(),
        usage: core.spending.store().clone(),
        jobs: core
            .scheduler
            .as_ref()
            .map(|scheduler| scheduler.jobs().clone()),
        path: config.source.path.clone(),
        config_text: text.clone(),
        reloads: reload_requests,
    };
    *router = std::mem::take(router).merge(admin.router());
    Ok(Panel {
        reloads: Some(requests),
        shown_config: Some(text),
    })
}

/// Binds the listener within the limits of `[http]` (fitted to the descriptors there are)
/// and serves `router`.
async fn listen(config: &Config, router: axum::Router, health: &Health) -> anyhow::Result<Server> {
    let bind = config.http.bind.get_ref().0;
    let mut limits = server::Limits {
        header_timeout: Config::duration(&config.http.header_timeout_secs),
        max_connections: *config.http.max_connections.get_ref(),
        max_pending: *config.http.max_pending_connections.get_ref(),
        max_pending_per_client: *config.http.max_pending_per_client.get_ref(),
        reserved: config.http.reserved_connections,
    };
    let (descriptors, reserve) = server::fit_to_descriptors(&mut limits);
    let server = Server::bind(bind, router, limits)
        .await
        .with_context(|| format!("cannot listen on {bind} (http.bind)"))?;
    let addr = server.addr();
    health.gauge("http_connections", Box::new(server.open_connections()));
    health.gauge(
        "http_refused_connections",
        Box::new(server.refused_connections()),
    );
    tracing::info!(%addr, model = %config.llm.model, base_url = %config.llm.base_url(), provider = %config.llm.provider.get_ref(),
        fallbacks = config.llm.fallbacks.len(),
        channels = ?config.channels.enabled(),
        max_connections = limits.max_connections,
        descriptors, descriptor_reserve = reserve, "switchboard is serving");
    Ok(server)
}

/// The series `/metrics` publishes at zero from the start: this config's models, tools
/// and channels.
fn metrics_series(config: &Config, agents: &Agents, hub: &Arc<dyn Bus>) -> metrics::Series {
    let llm = &config.llm;
    let mut models = vec![(llm.provider.get_ref().as_str(), llm.model.clone())];
    for fallback in &llm.fallbacks {
        models.push((fallback.provider.get_ref().as_str(), fallback.model.clone()));
    }
    // The models beyond the chain (`[llm] models`, the agents'), on `[llm]`'s server.
    for name in config.model_names() {
        if !models.iter().any(|(_, have)| *have == name) {
            models.push((llm.provider.get_ref().as_str(), name));
        }
    }
    let all = agents.default_agent().tool_sources().snapshot();
    metrics::Series {
        agents: agents
            .iter()
            .map(|agent| agent.name().to_string())
            .collect(),
        spending: None,
        models,
        tools: all.names().map(str::to_owned).collect(),
        channels: hub.channels().iter().map(ToString::to_string).collect(),
        scheduler: config.scheduler.enabled,
        #[cfg(feature = "mcp")]
        mcp_servers: config
            .mcp
            .servers
            .iter()
            .filter(|(_, entry)| entry.enabled)
            .map(|(name, _)| name.clone())
            .collect(),
        #[cfg(not(feature = "mcp"))]
        mcp_servers: Vec::new(),
    }
}

/// Routes a channel's outbound messages through per-chat lanes, its sends retried when the
/// platform rate limits or is briefly unavailable; `/healthz` counts what is given up on.
pub(crate) fn register(hub: &Arc<dyn Bus>, health: &Health, channel: Arc<dyn Channel>) {
    let name = channel.name();
    let retrying = RetryingChannel::new(channel, ChannelRetry::default());
    let lanes = hub.register_channel(Arc::new(retrying), LaneOptions::default());
    health.gauge(
        format!("{name}_undeliverable"),
        Box::new(move || usize::try_from(lanes.undeliverable()).unwrap_or(usize::MAX)),
    );
}

impl Running {
    /// What stops it: cancelling its running turns at once is what a second stop signal
    /// does while it stops.
    pub fn stopping(&self) -> Shutdown {
        self.shutdown.clone()
    }

    /// The address the HTTP listener is bound to.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Reads the config at `path` again and applies what can change live (see `reload.rs`).
    pub async fn reload(&mut self, path: &Path) -> crate::reload::Reloaded {
        let live = crate::reload::Live {
            agents: &self.agents,
            platforms: &mut self.platforms,
            tool_parts: &self.tool_parts,
            health: &self.health,
            llm_health: &self.llm_health,
            #[cfg(feature = "mcp")]
            mcp: &mut self.mcp,
            spending: &self.spending,
        };
        let reloaded = crate::reload::reload(path, &mut self.config_text, live).await;
        if let Some(shown) = &self.shown_config {
            self.config_text
                .clone_into(&mut shown.lock().unwrap_or_else(PoisonError::into_inner));
        }
        reloaded
    }

    /// The reloads the control panel asks for, to be served by whoever owns this daemon's
    /// loop (once: later calls get `None`).
    pub fn reload_requests(&mut self) -> Option<mpsc::Receiver<crate::admin::ReloadRequest>> {
        self.reloads.take()
    }

    /// The `/healthz` state (tests look at it without HTTP).
    pub fn health(&self) -> &Health {
        &self.health
    }

    /// Stops the daemon in order and waits for it. Returns whether every turn ended within
    /// the grace period or its cancellation deadline.
    pub async fn shutdown(self) -> bool {
        self.health.set_stopping();
        tracing::info!(grace_ms = self.grace.as_millis() as u64, "shutting down");
        let clean = self.shutdown.drain(self.grace, CANCEL_DEADLINE).await;
        if !clean {
            tracing::warn!("some turns did not end in time");
        }
        // Turns are over: deliver what they queued, stop the channels, then close sockets
        // and the listener.
        if !self.hub.close_outbound(CANCEL_DEADLINE).await {
            tracing::warn!("some outbound messages were not delivered in time");
        }
        self.channels_stop.cancel();
        self.channels.close();
        if tokio::time::timeout(CANCEL_DEADLINE, self.channels.wait())
            .await
            .is_err()
        {
            tracing::warn!("channels did not stop in time");
        }
        if !self.server.shutdown(CANCEL_DEADLINE).await {
            tracing::warn!("HTTP connections did not close in time");
        }
        tracing::info!(clean, "stopped");
        clean
    }
}
