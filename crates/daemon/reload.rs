//! Reloading the config on SIGHUP (`systemctl reload`): the file is read and checked again;
//! a config with an error is refused — the error logged with file, line and key — and the
//! running one kept. What can change live does: the model chain (`[llm]`) and the tools
//! (`[tools]`, but `restrict_to_workspace`) are swapped for the turns that start next, and a
//! platform channel whose section changed (a token, an allow list, a policy) is restarted
//! with its new settings — the others go on; the jobs `[[scheduler.jobs]]` and
//! `[heartbeat]` declare are added, changed and removed in the job store; MCP servers are
//! started, stopped or restarted as `[mcp]` now says. Every other key that changed is named in a log
//! line saying it takes effect after a restart. Everything new is built before anything is
//! applied (`Plan::prepare`, then `Plan::apply`), so a reload is applied whole or not at all.

use std::collections::BTreeMap;
use std::path::Path;

use crate::config::Config;
use crate::health::Health;
use crate::llm_config;
use crate::platforms::Platforms;

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

/// What of the running daemon a reload may change.
pub(crate) struct Live<'a> {
    /// The agents: their model chains and (shared) tools.
    pub agents: &'a switchboard_agent::Agents,
    /// The channels.
    pub platforms: &'a mut Platforms,
    /// What building the tools again needs.
    pub tool_parts: &'a crate::agents::ToolParts,
    /// Where a channel that is gone is taken off.
    pub health: &'a Health,
    /// Told every model attempt's outcome.
    pub llm_health: &'a std::sync::Arc<crate::llm_health::LlmHealth>,
    /// The MCP servers.
    #[cfg(feature = "mcp")]
    pub mcp: &'a mut crate::mcp_servers::Mcp,
    /// What the models cost and the caps.
    pub spending: &'a switchboard_agent::usage::Spending,
}

/// Reads `path` again and applies what can change live (see the module doc); `running` is
/// the text of the config in use, replaced by the new one when it is applied.
pub(crate) async fn reload(path: &Path, running: &mut String, live: Live<'_>) -> Reloaded {
    let refuse = |err: String| {
        tracing::error!(error = %err, "config reload refused; the running config is kept");
        Reloaded::Refused(err)
    };
    let config = match Config::load(path) {
        Ok(config) => config,
        Err(err) => return refuse(err.to_string()),
    };
    let changed = changed_keys(running, &config.source.text);
    let plan = match Plan::prepare(&config, changed, &live) {
        Ok(plan) => plan,
        Err(err) => return refuse(err),
    };
    let need_restart = match plan.apply(&config, live).await {
        Ok(need_restart) => need_restart,
        Err(err) => return refuse(err),
    };
    if !need_restart.is_empty() {
        tracing::warn!(keys = ?need_restart,
            "these changed keys take effect only after a restart (systemctl restart switchboard)");
    }
    *running = config.source.text.clone();
    Reloaded::Applied { need_restart }
}

/// Whether `key` is `prefix` or under it.
fn under(key: &str, prefix: &str) -> bool {
    key == prefix || key.starts_with(&format!("{prefix}."))
}

/// Whether a changed key of an agent's model is live (`agent.model`, `agents.NAME.model`); the
/// rest of what describes agents needs a restart.
fn model_live(key: &str) -> bool {
    key == "agent.model"
        || (key.starts_with("agents.") && key.ends_with(".model") && key.matches('.').count() == 2)
}

/// Whether a changed key of the caps is live (the zone that begins a day needs a restart).
fn spending_live(key: &str) -> bool {
    under(key, "limits.daily_usd") || under(key, "limits.daily_usd_per_chat")
}

/// Whether a changed key of `[tools]` is live (not what the workspace itself enforces).
fn tools_live(key: &str) -> bool {
    under(key, "tools") && key != "tools.restrict_to_workspace"
}

/// Everything a reload changes, built before anything is applied.
struct Plan<'c> {
    changed: Vec<String>,
    /// The models, built again.
    catalog: llm_config::Catalog,
    /// Channels whose section changed: their prefix, and what they are built into now
    /// (`None`: disabled).
    restart: Vec<(&'c str, String, Option<crate::platforms::Built>)>,
    /// The tools, built again when `[tools]` changed.
    tools: Option<switchboard_tools::ToolRegistry>,
    /// Whether the jobs the config declares are synced (the scheduler runs here).
    jobs: bool,
}

impl<'c> Plan<'c> {
    /// Builds what `changed` needs of `config`; why not, when something cannot be.
    fn prepare(config: &'c Config, changed: Vec<String>, live: &Live<'_>) -> Result<Self, String> {
        let observer: std::sync::Arc<dyn switchboard_llm::Observer> = live.llm_health.clone();
        let catalog = llm_config::Catalog::build(config, Some(&observer))
            .map_err(|err| format!("{err:#}"))?;
        // A channel with routes (a webhook, the web page) has them mounted at start: a change
        // to it needs a restart.
        let mut restart = Vec::new();
        for (name, section) in config.channels.all() {
            let prefix = format!("channels.{name}");
            if !changed.iter().any(|key| under(key, &prefix)) || live.platforms.has_routes(name) {
                continue;
            }
            match live.platforms.build(config, name, section) {
                Ok(Some(built)) if built.has_routes() => continue,
                Ok(built) => restart.push((name, prefix, built)),
                Err(err) => return Err(format!("{err:#}")),
            }
        }
        let tools = if changed.iter().any(|key| tools_live(key)) {
            Some(
                crate::agents::build_tools(config, live.tool_parts)
                    .map_err(|err| format!("{err:#}"))?,
            )
        } else {
            None
        };
        Ok(Self {
            changed,
            catalog,
            restart,
            tools,
            jobs: live.tool_parts.scheduler().is_some(),
        })
    }

    /// Whether a changed key is applied here, not after a restart.
    fn is_live(&self, key: &str) -> bool {
        let jobs = self.jobs && (under(key, "scheduler.jobs") || under(key, "heartbeat"));
        under(key, "llm")
            || model_live(key)
            || spending_live(key)
            || tools_live(key)
            || jobs
            || (cfg!(feature = "mcp") && under(key, "mcp"))
            || self.restart.iter().any(|(_, prefix, _)| under(key, prefix))
    }

    /// Applies it — the tools first, the one step that can still be refused (a new tool with
    /// the name of another source's), before anything changed; returns the changed keys that
    /// need a restart.
    async fn apply(self, config: &Config, live: Live<'_>) -> Result<Vec<String>, String> {
        let Live {
            agents,
            platforms,
            health,
            llm_health,
            #[cfg(feature = "mcp")]
            mcp,
            spending,
            tool_parts,
        } = live;
        let changed = &self.changed;
        if let Some(tools) = self.tools.clone()
            && let Err(collision) = agents
                .default_agent()
                .tool_sources()
                .set(crate::agents::BUILTIN_SOURCE, tools)
        {
            return Err(collision.to_string());
        }
        let need_restart: Vec<String> = changed
            .iter()
            .filter(|key| !self.is_live(key))
            .cloned()
            .collect();
        if changed
            .iter()
            .any(|key| under(key, "llm") || model_live(key))
        {
            swap_models(config, &self.catalog, agents);
            // What was known of the old models (a refused key, say) no longer holds.
            llm_health.start_with(config);
        }
        if changed
            .iter()
            .any(|key| under(key, "llm.prices") || spending_live(key))
        {
            spending.reconfigure(config.prices(), config.limits());
        }
        if let Some(scheduler) = tool_parts.scheduler()
            && changed
                .iter()
                .any(|key| under(key, "scheduler.jobs") || under(key, "heartbeat"))
        {
            crate::scheduler_config::sync_declared(scheduler.jobs(), config).await;
        }
        // MCP servers: the added started, the removed stopped, the changed restarted; the
        // others and running turns (which keep the tools they started with) are not touched.
        #[cfg(feature = "mcp")]
        if changed.iter().any(|key| under(key, "mcp")) {
            match mcp.apply(config).await {
                Ok(touched) => tracing::info!(servers = ?touched, "MCP servers changed"),
                Err(err) => tracing::error!(error = %err, "the MCP servers could not be changed"),
            }
        }
        for (name, _, built) in self.restart {
            restart_channel(platforms, health, name, built).await;
        }
        tracing::info!(changed = ?changed, provider = %config.llm.provider.get_ref(),
            model = %config.llm.model, "config reloaded");
        Ok(need_restart)
    }
}

/// Gives every agent the new config still has its model chain from `catalog`; an agent the
/// new config no longer has keeps running as it was until a restart.
fn swap_models(config: &Config, catalog: &llm_config::Catalog, agents: &switchboard_agent::Agents) {
    let models: BTreeMap<String, Option<&str>> = config
        .agent_specs()
        .iter()
        .map(|spec| {
            let model = spec.section.model.as_ref().map(|m| m.get_ref().as_str());
            (spec.name.to_string(), model)
        })
        .collect();
    for agent in agents.iter() {
        if let Some(model) = models.get(agent.name().as_str()) {
            agent.set_models(catalog.models_for(*model));
        }
    }
}

/// Stops the channel `name` and starts what it is built into now (`None`: disabled, and its
/// health entry goes).
async fn restart_channel(
    platforms: &mut Platforms,
    health: &Health,
    name: &str,
    built: Option<crate::platforms::Built>,
) {
    platforms.stop(name).await;
    match built {
        Some(built) => {
            tracing::info!(
                channel = name,
                "restarting the channel with its new settings"
            );
            platforms.start(built);
        }
        None => {
            tracing::info!(channel = name, "the channel is disabled now; stopped");
            health.remove(name);
        }
    }
}

/// The dotted keys whose values differ between two config texts (added and removed ones
/// included).
fn changed_keys(old: &str, new: &str) -> Vec<String> {
    let flatten = |text: &str| {
        let mut keys = BTreeMap::new();
        if let Ok(table) = text.parse::<toml::Table>() {
            flatten_into(&mut keys, String::new(), &toml::Value::Table(table));
        }
        keys
    };
    let (old, new) = (flatten(old), flatten(new));
    let mut changed: Vec<String> = old
        .keys()
        .chain(new.keys())
        .filter(|key| old.get(*key) != new.get(*key))
        .cloned()
        .collect();
    changed.sort();
    changed.dedup();
    changed
}

fn flatten_into(keys: &mut BTreeMap<String, toml::Value>, prefix: String, value: &toml::Value) {
    match value {
        toml::Value::Table(table) => {
            for (key, value) in table {
                let key = if prefix.is_empty() {
                    key.clone()
                } else {
                    format!("{prefix}.{key}")
                };
                flatten_into(keys, key, value);
            }
        }
        other => {
            keys.insert(prefix, other.clone());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn changed_keys_are_named_by_their_dotted_path() {
        let old = "[llm]\nmodel = \"a\"\n[agent]\nmax_iterations = 40\n";
        let new = "[llm]\nmodel = \"b\"\n[agent]\nmax_iterations = 40\nstream = false\n";
        assert_eq!(changed_keys(old, new), ["agent.stream", "llm.model"]);
        assert!(changed_keys(old, old).is_empty());
    }
}
