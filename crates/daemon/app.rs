//! Building the daemon from a config, and stopping it (how it runs as a service, on signals,
//! is `service.rs`'s).
//!
//! [`start`] builds it in phases, each a function: the place (alone or a cluster's member,
//! its bus and stores), the core (the agents and what they share), the components — each
//! built from its section, one line each in [`build_components`], the channels last — the
//! dispatcher where agents run, and the listener. It returns a [`Running`] daemon, which a
//! reload changes through the same components; [`Running::shutdown`] stops it in order:
//! intake first, then running turns (after a grace period), then outbound delivery, then
//! every socket (each sends what is queued for it and a close frame, and is waited for),
//! then the listener.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use switchboard_agent::Dispatcher;
use switchboard_core::{Bus, Shutdown};
use switchboard_tools::ToolRegistry;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::admin::Panel;
use crate::component::Core;
use crate::component::{Assembly, Components, ReloadRequest};
use crate::config::Config;
use crate::config_values::duration;
use crate::engine::{Caps, Models, Tools, build_core, watch_core};
use crate::health::Health;
use crate::metrics::Metrics;
use crate::platforms::Platforms;
use crate::scheduling::Scheduling;
use crate::server::{self, Server};

// A component left out of the build is registered as its `NotBuilt` stand-in.
#[cfg(not(feature = "mcp"))]
use crate::component::NotBuilt as Mcp;
#[cfg(feature = "mcp")]
use crate::mcp_servers::Mcp;

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
    /// What a reload changes.
    components: Components,
    /// The text of the config in use.
    config_text: String,
    /// Reloads asked for over HTTP (taken by `switchboard run`'s loop).
    reloads: Option<mpsc::Receiver<ReloadRequest>>,
}

/// Starts the daemon. `tools` are the tools offered to the model beside the config's. The
/// phases, in order: where it runs (the place: alone, or a member of a cluster, and its
/// stores), the core (the agents), the components and the channels, the dispatcher, and last
/// the listener — so nothing is served before everything behind it exists.
pub async fn start(config: Config, tools: ToolRegistry) -> anyhow::Result<Running> {
    let shutdown = Shutdown::new();
    let place = crate::cluster::Place::join(&config, shutdown.intake()).await?;
    let core = build_core(&config, &place, &shutdown, tools)?;
    let health = Health::new();
    watch_core(&health, &core);
    if place.runs_agents() {
        // Waiting for messages from the start: nothing comes before the components run.
        start_dispatcher(&core, &health, &shutdown);
    }
    let (channels, channels_stop) = (TaskTracker::new(), CancellationToken::new());
    let mut daemon = Assembly {
        config: &config,
        place: &place,
        core: &core,
        health: &health,
        shutdown: &shutdown,
        channels_stop: &channels_stop,
        channel_tasks: &channels,
        router: health.router(),
        reloads: None,
    };
    let components = build_components(&mut daemon).await?;
    let Assembly {
        router, reloads, ..
    } = daemon;
    // A worker takes its partitions once the channels of a process that runs both exist; a
    // gateway keeps itself listed among the members.
    place.start_worker();
    // A worker serves no channel: its start line names none.
    let served = if place.runs_channels() {
        config.channels.enabled()
    } else {
        Vec::new()
    };
    let bind = if place.runs_channels() {
        (config.http.bind.get_ref().0, "http.bind")
    } else {
        (config.worker_bind(), "cluster.worker_bind")
    };
    let server = listen(&config, bind, router, &health, &served).await?;
    health.set_ready();

    Ok(Running {
        addr: server.addr(),
        shutdown,
        grace: duration(&config.daemon.shutdown_grace_secs),
        health,
        hub: core.hub,
        channels,
        channels_stop,
        server,
        components,
        config_text: config.source.text,
        reloads,
    })
}

/// Every component, one line each, in the order they are built and a reload applies them.
async fn build_components(daemon: &mut Assembly<'_>) -> anyhow::Result<Components> {
    let mut components = Components::default();
    // First: the one part of a reload that may still be refused once everything is built.
    components.add::<Tools>(daemon).await?;
    components.add::<Models>(daemon).await?;
    components.add::<Caps>(daemon).await?;
    // Before the channels: its recorder counts from their first message.
    components.add::<Metrics>(daemon).await?;
    // In the background: a slow or broken server delays nothing.
    components.add::<Mcp>(daemon).await?;
    components.add::<Panel>(daemon).await?;
    components.add::<Platforms>(daemon).await?;
    // Last: its start reads the job store (temporaries freed before the daemon idles, not
    // left as holes below what lasts), and it only queues runs — the dispatcher that takes
    // them starts after it.
    components.add::<Scheduling>(daemon).await?;
    Ok(components)
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

/// Binds the listener within the limits of `[http]` (fitted to the descriptors there are)
/// and serves `router`.
async fn listen(
    config: &Config,
    (bind, key): (SocketAddr, &str),
    router: axum::Router,
    health: &Health,
    channels: &[&str],
) -> anyhow::Result<Server> {
    let mut limits = server::Limits {
        header_timeout: duration(&config.http.header_timeout_secs),
        max_connections: *config.http.max_connections.get_ref(),
        max_pending: *config.http.max_pending_connections.get_ref(),
        max_pending_per_client: *config.http.max_pending_per_client.get_ref(),
        reserved: config.http.reserved_connections,
    };
    let (descriptors, reserve) = server::fit_to_descriptors(&mut limits);
    let server = Server::bind(bind, router, limits)
        .await
        .with_context(|| format!("cannot listen on {bind} ({key})"))?;
    let addr = server.addr();
    health.gauge("http_connections", Box::new(server.open_connections()));
    health.gauge(
        "http_refused_connections",
        Box::new(server.refused_connections()),
    );
    // Where a person opens the page (the listener on every address: this host's loopback).
    let url = match addr.ip() {
        ip if ip.is_unspecified() && ip.is_ipv4() => format!("http://127.0.0.1:{}/", addr.port()),
        ip if ip.is_unspecified() => format!("http://[::1]:{}/", addr.port()),
        _ => format!("http://{addr}/"),
    };
    tracing::info!(%addr, %url, model = %config.llm.model, base_url = %config.llm.base_url(), provider = %config.llm.provider.get_ref(),
        fallbacks = config.llm.fallbacks.len(),
        ?channels,
        max_connections = limits.max_connections,
        descriptors, descriptor_reserve = reserve, "switchboard is serving");
    Ok(server)
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
        crate::reload::reload(path, &mut self.config_text, &self.components).await
    }

    /// The reloads the control panel asks for, to be served by whoever owns this daemon's
    /// loop (once: later calls get `None`).
    pub fn reload_requests(&mut self) -> Option<mpsc::Receiver<ReloadRequest>> {
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
