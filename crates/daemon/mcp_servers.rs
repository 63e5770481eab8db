//! The daemon's MCP servers (with the `mcp` feature), a component: started in the background
//! at start (a slow or broken one delays nothing; its tools come when it is up), made when a
//! config first names one, changed by a reload, shown in `/healthz`, stopped with the
//! channels.

use std::sync::{Arc, OnceLock};

use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::component::{Assembly, Change, Component, change, under};
use crate::config::Config;
use crate::health::Health;

/// The MCP servers of the daemon, made when a config first names one (a daemon without
/// them has nothing of MCP), and what they need (a handle: clones share them).
#[derive(Clone)]
pub(crate) struct Mcp {
    servers: Arc<OnceLock<switchboard_mcp::Servers>>,
    tools: Arc<switchboard_tools::ToolSources>,
    health: Health,
    stop: CancellationToken,
}

impl Mcp {
    /// Runs the servers `config` names (starting, stopping and restarting what changed);
    /// returns the names of those started or stopped.
    async fn apply(&self, config: &Config) -> Result<Vec<String>, crate::config::ConfigError> {
        let specs = config.mcp_servers()?;
        if specs.is_empty() && self.servers.get().is_none() {
            return Ok(Vec::new());
        }
        let servers = self.servers.get_or_init(|| {
            let servers = switchboard_mcp::Servers::new(self.tools.clone(), self.stop.clone());
            watch_mcp(&self.health, servers.clone());
            servers
        });
        Ok(servers.apply(specs).await)
    }
}

impl Component for Mcp {
    async fn build(daemon: &mut Assembly<'_>) -> anyhow::Result<Option<Self>> {
        let mcp = Self {
            servers: Arc::default(),
            tools: daemon.core.agents.default_agent().tool_sources().clone(),
            health: daemon.health.clone(),
            stop: daemon.channels_stop.clone(),
        };
        mcp.apply(daemon.config).await?;
        Ok(Some(mcp))
    }

    /// The added servers started, the removed stopped, the changed restarted; the others and
    /// running turns (which keep the tools they started with) are not touched.
    fn prepare(&self, config: &Arc<Config>, changed: &[String]) -> Result<Option<Change>, String> {
        let (mcp, config) = (self.clone(), config.clone());
        Ok(change(changed, |key| under(key, "mcp"), async move {
            match mcp.apply(&config).await {
                Ok(touched) => tracing::info!(servers = ?touched, "MCP servers changed"),
                Err(err) => {
                    tracing::error!(error = %err, "the MCP servers could not be changed");
                }
            }
            Ok(())
        }))
    }
}

/// Shows the MCP servers in `/healthz`: degraded while one is down (each named, with why),
/// and a gauge of the tools they offer.
fn watch_mcp(health: &Health, servers: switchboard_mcp::Servers) {
    use switchboard_mcp::ServerState;
    let down = servers.clone();
    health.check_health_only(
        "mcp",
        Box::new(move || {
            let problems: serde_json::Map<String, serde_json::Value> = down
                .states()
                .into_iter()
                .filter_map(|(name, state)| match state {
                    ServerState::Down { why } => Some((name, json!(why))),
                    _ => None,
                })
                .collect();
            if problems.is_empty() {
                return Ok(());
            }
            let error = problems
                .iter()
                .map(|(name, why)| format!("{name}: {}", why.as_str().unwrap_or_default()))
                .collect::<Vec<_>>()
                .join("; ");
            Err(json!({"error": error, "servers_down": problems}))
        }),
    );
    health.gauge(
        "mcp_tools",
        Box::new(move || {
            servers
                .states()
                .into_iter()
                .map(|(_, state)| match state {
                    ServerState::Up { tools } => tools.len(),
                    _ => 0,
                })
                .sum()
        }),
    );
}
