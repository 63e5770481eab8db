//! Reloading the config on SIGHUP (`systemctl reload`): the file is read and checked again;
//! a config with an error is refused — the error logged with file, line and key — and the
//! running one kept. What can change live does: the model chain (`[llm]`) and the tools
//! (`[tools]`, but `restrict_to_workspace`) are swapped for the turns that start next, and a
//! platform channel whose section changed (a token, an allow list, a policy) is restarted
//! with its new settings — the others go on; the jobs `[[scheduler.jobs]]` and
//! `[heartbeat]` declare are added, changed and removed in the job store; MCP servers are
//! started, stopped or restarted as `[mcp]` now says. Every other key that changed is named in a log
//! line saying it takes effect after a restart. Everything new is built before anything is
//! applied, so a reload is applied whole or not at all.

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
    let Live {
        agents,
        platforms,
        tool_parts,
        health,
        llm_health,
        #[cfg(feature = "mcp")]
        mcp,
        spending,
    } = live;
    let refuse = |err: String| {
        tracing::error!(error = %err, "config reload refused; the running config is kept");
        Reloaded::Refused(err)
    };
    let config = match Config::load(path) {
        Ok(config) => config,
        Err(err) => return refuse(err.to_string()),
    };
    let observer: std::sync::Arc<dyn switchboard_llm::Observer> = llm_health.clone();
    let catalog = match llm_config::Catalog::build(&config, Some(&observer)) {
        Ok(catalog) => catalog,
        Err(err) => return refuse(format!("{err:#}")),
    };
    let changed = changed_keys(running, &config.source.text);
    let under = |key: &str, prefix: &str| key == prefix || key.starts_with(&format!("{prefix}."));
    // A channel with routes (a webhook, the web page) has them mounted at start: a change to
    // it needs a restart.
    let mut restart = Vec::new();
    for (name, section) in config.channels.all() {
        let prefix = format!("channels.{name}");
        if !changed.iter().any(|key| under(key, &prefix)) || platforms.has_routes(name) {
            continue;
        }
        match platforms.build(&config, name, section) {
            Ok(Some(built)) if built.has_routes() => continue,
            Ok(built) => restart.push((name, prefix, built)),
            Err(err) => return refuse(format!("{err:#}")),
        }
    }

    // The tools, unless the change is to what the workspace itself enforces.
    let tools_live = |key: &str| under(key, "tools") && key != "tools.restrict_to_workspace";
    let tools = if changed.iter().any(|key| tools_live(key)) {
        match crate::agents::build_tools(&config, tool_parts) {
            Ok(tools) => Some(tools),
            Err(err) => return refuse(format!("{err:#}")),
        }
    } else {
        None
    };

    // The config's jobs: synced with the job store (when the scheduler runs).
    let jobs_live = |key: &str| {
        (under(key, "scheduler.jobs") || under(key, "heartbeat"))
            && tool_parts.scheduler().is_some()
    };

    // Everything new is built: apply it — the tools first, the one step that can still be
    // refused (a new tool with the name of another source's), before anything changed.
    // An agent's model is live; the rest of what describes agents needs a restart.
    let model_live = |key: &str| {
        key == "agent.model"
            || (key.starts_with("agents.")
                && key.ends_with(".model")
                && key.matches('.').count() == 2)
    };
    // The caps and prices are live; the zone that begins a day needs a restart.
    let spending_live =
        |key: &str| under(key, "limits.daily_usd") || under(key, "limits.daily_usd_per_chat");
    let live = |key: &String| {
        under(key, "llm")
            || model_live(key)
            || spending_live(key)
            || tools_live(key)
            || jobs_live(key)
            || (cfg!(feature = "mcp") && under(key, "mcp"))
            || restart.iter().any(|(_, prefix, _)| under(key, prefix))
    };
    let sources = agents.default_agent().tool_sources();
    if let Some(tools) = tools
        && let Err(collision) = sources.set(crate::agents::BUILTIN_SOURCE, tools)
    {
        return refuse(collision.to_string());
    }
    let need_restart: Vec<String> = changed.iter().filter(|k| !live(k)).cloned().collect();
    if changed
        .iter()
        .any(|key| under(key, "llm") || model_live(key))
    {
        let models: std::collections::BTreeMap<String, Option<&str>> = config
            .agent_specs()
            .iter()
            .map(|spec| {
                let model = spec.section.model.as_ref().map(|m| m.get_ref().as_str());
                (spec.name.to_string(), model)
            })
            .collect();
        for agent in agents.iter() {
            // An agent the new config no longer has keeps running as it was until a restart.
            if let Some(model) = models.get(agent.name().as_str()) {
                agent.set_models(catalog.models_for(*model));
            }
        }
        // What was known of the old models (a refused key, say) no longer holds.
        llm_health.start_with(&config);
    }
    if changed
        .iter()
        .any(|key| under(key, "llm.prices") || spending_live(key))
    {
        spending.reconfigure(config.prices(), config.limits());
    }
    if let Some(scheduler) = tool_parts.scheduler()
        && changed.iter().any(|key| jobs_live(key))
    {
        crate::scheduler_config::sync_declared(scheduler.jobs(), &config).await;
    }
    // MCP servers: the added started, the removed stopped, the changed restarted; the others
    // and running turns (which keep the tools they started with) are not touched.
    #[cfg(feature = "mcp")]
    if changed.iter().any(|key| under(key, "mcp")) {
        match mcp.apply(&config).await {
            Ok(touched) => tracing::info!(servers = ?touched, "MCP servers changed"),
            Err(err) => tracing::error!(error = %err, "the MCP servers could not be changed"),
        }
    }
    for (name, _, built) in restart {
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
    tracing::info!(changed = ?changed, provider = %config.llm.provider.get_ref(),
        model = %config.llm.model, "config reloaded");
    if !need_restart.is_empty() {
        tracing::warn!(keys = ?need_restart,
            "these changed keys take effect only after a restart (systemctl restart switchboard)");
    }
    *running = config.source.text.clone();
    Reloaded::Applied { need_restart }
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
