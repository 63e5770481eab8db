//! Building the daemon from a config and running it until it is told to stop.
//!
//! [`start`] wires store → LLM → agent → hub → channels → dispatcher → HTTP and returns a
//! [`Running`] daemon; [`Running::shutdown`] stops it in order: intake first, then running
//! turns (after a grace period), then outbound delivery, then sockets and the listener.

use std::net::SocketAddr;
use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use axum::serve::ListenerExt;
use switchboard_agent::{Agent, AgentConfig, DEFAULT_SYSTEM_PROMPT, Dispatcher};
use switchboard_core::{Channel, ChannelContext, ChatHub, Shutdown};
use switchboard_llm::{ApiKey, LlmProvider, OpenAiConfig, OpenAiProvider, RetryPolicy};
use switchboard_sessions::JsonlStore;
use switchboard_tools::ToolRegistry;
use switchboard_websocket::{WebSocketChannel, WsAuth, WsConfig};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::config::{AuthMode, Config, expand_env};
use crate::health::Health;
use crate::{cli, notify, supervisor};

/// Outbound messages queued per channel before the agent waits for the adapter.
const OUTBOUND_QUEUE: usize = 1024;
/// After the grace period and cancellation, how long cancelled turns get to save.
const CANCEL_DEADLINE: Duration = Duration::from_secs(5);

/// A daemon that is serving.
pub struct Running {
    addr: SocketAddr,
    shutdown: Shutdown,
    grace: Duration,
    health: Health,
    websocket: Option<WebSocketChannel>,
    /// Channel supervisors and delivery loops.
    channels: TaskTracker,
    /// Cancelled once the turns are done, so delivery loops flush and end.
    delivery_stop: CancellationToken,
    /// Cancelled last, to stop the HTTP listener.
    http_stop: CancellationToken,
    http: JoinHandle<std::io::Result<()>>,
}

/// Builds the agent's parts from the config: the store, the LLM and the agent itself.
pub fn build_agent(config: &Config, tools: ToolRegistry) -> anyhow::Result<Arc<Agent>> {
    let state_dir = config.path(&config.agent.state_dir);
    let workspace = config.path(&config.agent.workspace);
    create_dir(&state_dir, "agent.state_dir")?;
    create_dir(&workspace, "agent.workspace")?;
    let store = JsonlStore::open(&state_dir)
        .with_context(|| format!("cannot open the session store in {}", state_dir.display()))?;
    let llm = build_llm(config)?;
    let section = &config.agent;
    let agent_config = AgentConfig {
        workspace,
        max_iterations: *section.max_iterations.get_ref(),
        history_limit: *section.history_limit.get_ref(),
        max_concurrent_turns: *section.max_concurrent_turns.get_ref(),
        tool_timeout: Config::duration(&section.tool_timeout_secs),
        context_file_max_bytes: section.context_file_max_bytes,
        idle_timeout: Config::duration(&section.idle_timeout_secs),
        stream: section.stream,
        system_prompt: section
            .system_prompt
            .clone()
            .unwrap_or_else(|| DEFAULT_SYSTEM_PROMPT.to_owned()),
        ..AgentConfig::default()
    };
    Ok(Arc::new(Agent::new(
        llm,
        tools,
        Arc::new(store),
        agent_config,
    )))
}

fn build_llm(config: &Config) -> anyhow::Result<Arc<dyn LlmProvider>> {
    let llm = &config.llm;
    let api_key = match &llm.api_key {
        None => ApiKey::None,
        Some(raw) => match expand_env(raw.get_ref()) {
            Ok(key) => ApiKey::Key(key),
            Err(variable) => {
                tracing::warn!(%variable, "llm.api_key refers to an unset environment variable; \
                    every message will get an error until it is set");
                ApiKey::Missing { variable }
            }
        },
    };
    let provider = OpenAiProvider::new(OpenAiConfig {
        base_url: llm.base_url.get_ref().clone(),
        api_key,
        model: llm.model.clone(),
        temperature: llm.temperature,
        max_tokens: llm.max_tokens,
        first_byte_timeout: Config::duration(&llm.timeout_secs),
        request_timeout: Config::duration(&llm.request_timeout_secs),
        retry: RetryPolicy {
            max_retries: llm.max_retries,
            ..RetryPolicy::default()
        },
    })?;
    Ok(Arc::new(provider))
}

fn create_dir(path: &Path, key: &str) -> anyhow::Result<()> {
    let mut builder = std::fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::DirBuilderExt;
        builder.mode(0o700);
    }
    builder
        .create(path)
        .with_context(|| format!("cannot create {} ({key})", path.display()))
}

/// Starts the daemon. `tools` are the tools offered to the model.
pub async fn start(config: Config, tools: ToolRegistry) -> anyhow::Result<Running> {
    let shutdown = Shutdown::new();
    let agent = build_agent(&config, tools)?;
    let hub = ChatHub::new(config.daemon.inbound_queue, shutdown.intake().clone());
    let health = Health::new();
    let channels = TaskTracker::new();
    let delivery_stop = CancellationToken::new();
    let ctx = ChannelContext {
        hub: hub.clone(),
        shutdown: shutdown.intake().clone(),
    };

    let mut router = health.router();
    let mut websocket = None;
    let ws_section = &config.channels.websocket;
    if ws_section.enabled {
        let auth = match ws_section.auth.get_ref() {
            AuthMode::None => WsAuth::None,
            AuthMode::Token => WsAuth::Token(config.websocket_token()?),
        };
        let channel = WebSocketChannel::new(
            WsConfig {
                auth,
                max_frame_bytes: ws_section.max_frame_bytes,
                ..WsConfig::default()
            },
            hub.clone(),
        );
        router = router.merge(channel.router());
        let sockets = channel.clone();
        health.gauge(
            "websocket_connections",
            Box::new(move || sockets.connections()),
        );
        let outbound = hub.register_channel(channel.name(), OUTBOUND_QUEUE);
        supervisor::spawn_channel(
            Arc::new(channel.clone()),
            outbound,
            ctx.clone(),
            health.clone(),
            delivery_stop.clone(),
            &channels,
        );
        websocket = Some(channel);
    }

    let dispatcher = Arc::new(Dispatcher::new(agent, hub.clone(), shutdown.clone()));
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

    let bind = *config.http.bind.get_ref();
    let listener = tokio::net::TcpListener::bind(bind)
        .await
        .with_context(|| format!("cannot listen on {bind} (http.bind)"))?;
    let addr = listener.local_addr()?;
    // Small frames must not wait for the client's delayed ACK.
    let listener = listener.tap_io(|tcp| {
        let _ = tcp.set_nodelay(true);
    });
    let http_stop = CancellationToken::new();
    let http = tokio::spawn(
        axum::serve(listener, router)
            .with_graceful_shutdown(http_stop.clone().cancelled_owned())
            .into_future(),
    );
    tracing::info!(%addr, model = %config.llm.model, base_url = %config.llm.base_url.get_ref(),
        websocket = ws_section.enabled, "switchboard is serving");

    Ok(Running {
        addr,
        shutdown,
        grace: Config::duration(&config.daemon.shutdown_grace_secs),
        health,
        websocket,
        channels,
        delivery_stop,
        http_stop,
        http,
    })
}

impl Running {
    /// The address the HTTP listener is bound to.
    pub fn addr(&self) -> SocketAddr {
        self.addr
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
        // Turns are over: deliver what they queued, then close sockets and the listener.
        self.delivery_stop.cancel();
        self.channels.close();
        if tokio::time::timeout(CANCEL_DEADLINE, self.channels.wait())
            .await
            .is_err()
        {
            tracing::warn!("channels did not stop in time");
        }
        if let Some(websocket) = &self.websocket {
            websocket.close_all();
        }
        self.http_stop.cancel();
        match tokio::time::timeout(CANCEL_DEADLINE, self.http).await {
            Ok(Ok(Ok(()))) => {}
            Ok(Ok(Err(err))) => tracing::warn!(error = %err, "HTTP server ended with an error"),
            Ok(Err(err)) => tracing::warn!(error = %err, "HTTP server task failed"),
            Err(_) => tracing::warn!("HTTP connections did not close in time"),
        }
        tracing::info!(clean, "stopped");
        clean
    }
}

/// `switchboard run`: starts the daemon and stops it on SIGTERM or ctrl-c. A second
/// signal cancels running turns at once.
pub async fn run_until_signal(config: Option<&Path>) -> anyhow::Result<ExitCode> {
    let path = cli::resolve_config(config)?;
    let config = Config::load(&path)?;
    let running = start(config, ToolRegistry::new()).await?;
    notify::ready();
    let watchdog = CancellationToken::new();
    notify::spawn_watchdog(watchdog.clone());

    wait_for_signal().await?;
    notify::stopping();
    let turns = running.shutdown.clone();
    let hurry = tokio::spawn(async move {
        if wait_for_signal().await.is_ok() {
            tracing::warn!("second signal: cancelling running turns now");
            turns.cancel_turns();
        }
    });
    running.shutdown().await;
    hurry.abort();
    watchdog.cancel();
    Ok(ExitCode::SUCCESS)
}

async fn wait_for_signal() -> anyhow::Result<()> {
    #[cfg(unix)]
    {
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
            .context("cannot listen for SIGTERM")?;
        tokio::select! {
            _ = term.recv() => tracing::info!("SIGTERM received"),
            result = tokio::signal::ctrl_c() => {
                result.context("cannot listen for ctrl-c")?;
                tracing::info!("interrupt received");
            }
        }
    }
    #[cfg(not(unix))]
    tokio::signal::ctrl_c()
        .await
        .context("cannot listen for ctrl-c")?;
    Ok(())
}
