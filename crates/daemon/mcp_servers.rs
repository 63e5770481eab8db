//! The daemon's MCP servers (with the `mcp` feature): made when a config first names one,
//! changed by a reload, shown in `/healthz`.

use std::sync::Arc;

use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::config::Config;
use crate::health::Health;

/// The MCP servers of the daemon, made when a config first names one (a daemon without
/// them has nothing of MCP), and what they need.
pub(crate) struct Mcp {
    pub(crate) servers: Option<switchboard_mcp::Servers>,
    pub(crate) tools: Arc<switchboard_tools::ToolSources>,
    pub(crate) health: Health,
    pub(crate) stop: CancellationToken,
}

impl Mcp {
    /// Runs the servers `config` names (starting, stopping and restarting what changed);
    /// returns the names of those started or stopped.
    pub(crate) async fn apply(
        &mut self,
        config: &Config,
    ) -> Result<Vec<String>, crate::config::ConfigError> {
        let specs = config.mcp_servers()?;
        if specs.is_empty() && self.servers.is_none() {
            return Ok(Vec::new());
        }
        let servers = self.servers.get_or_insert_with(|| {
            let servers = switchboard_mcp::Servers::new(self.tools.clone(), self.stop.clone());
            watch_mcp(&self.health, servers.clone());
            servers
        });
        Ok(servers.apply(specs).await)
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
