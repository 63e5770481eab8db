//! What answers messages: the agents on the place's bus and stores, with the models, tools,
//! scheduler and spending they share ([`Core`], built by [`build_core`]) — and the three
//! components a reload changes of them: their model chains ([`Models`]: `[llm]` and each
//! agent's `model`), their tools ([`Tools`]: `[tools]` but `restrict_to_workspace`) and the
//! caps ([`Caps`]: `[limits]`' amounts and `[llm.prices]`).

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::json;
use switchboard_adapter::Pairing;
use switchboard_agent::Agents;
use switchboard_core::{Bus, Shutdown};
use switchboard_llm::Observer;
use switchboard_scheduler::{Scheduler, SystemClock};
use switchboard_sessions::StoreHealth;
use switchboard_tools::ToolRegistry;
use switchboard_usage::{Limits, Spending, UsageStore};

use crate::agents::{AgentParts, BUILTIN_SOURCE, ToolParts};
use crate::catalog::Catalog;
use crate::cluster::Place;
use crate::component::{Assembly, Change, Component, Core, change, under};
use crate::config::Config;
use crate::health::Health;
use crate::model_health::ModelHealth;

/// Builds the agents on the place's bus and stores, with the scheduler and the spending
/// they share (the scheduler only where agents run).
pub(crate) fn build_core(
    config: &Config,
    place: &Place,
    shutdown: &Shutdown,
    tools: ToolRegistry,
) -> anyhow::Result<Core> {
    let hub: Arc<dyn Bus> = place.bus().clone();
    let llm_health = Arc::new(ModelHealth::default());
    llm_health.start_with(config);
    let observer: Arc<dyn Observer> = llm_health.clone();
    let audio_health = Arc::new(ModelHealth::default());
    audio_health.start_with_audio(config);
    let audio_observer: Arc<dyn switchboard_audio::Observer> = audio_health.clone();
    let scheduler = (config.scheduler.enabled && place.runs_agents()).then(|| {
        Scheduler::new(
            place.stores().jobs(),
            hub.clone(),
            Arc::new(SystemClock),
            config.scheduler.settings(),
        )
    });
    let spending = spending(config, place.stores().usage());
    if let Some(scheduler) = &scheduler {
        scheduler.keep_to(spending.clone());
    }
    let parts = AgentParts {
        place: Some(place),
        extra_tools: tools,
        hub: Some(&hub),
        observer: Some(&observer),
        audio_observer: Some(&audio_observer),
        scheduler: scheduler.clone(),
        spending: Some(spending.clone()),
        // Sub-agents only where an agent may start them.
        spawner: config
            .agent_specs()
            .iter()
            .any(|spec| spec.section.spawn.enabled)
            .then(|| switchboard_spawn::Spawner::new(hub.clone(), shutdown.turns().clone())),
    };
    let (agents, tool_parts) = crate::agents::build_agents(config, parts)?;
    Ok(Core {
        hub,
        llm_health,
        audio_health,
        scheduler,
        spending,
        agents,
        tool_parts,
        pairing: Arc::new(Pairing::new(place.stores().state().clone())),
    })
}

/// The daemon's spending, recorded in `state_dir/usage/`; with caps but no price for a
/// model, says that model's calls count nothing toward them.
fn spending(config: &Config, store: Arc<dyn UsageStore>) -> Arc<Spending> {
    let prices = config.prices();
    let limits = config.limits();
    if limits != Limits::default() {
        let unpriced: Vec<String> = config
            .model_names()
            .into_iter()
            .filter(|model| !prices.has(model))
            .collect();
        if !unpriced.is_empty() {
            tracing::warn!(models = ?unpriced,
                "[limits] caps what the models cost, but these have no price in [llm.prices]: \
                 their calls count $0 toward the caps");
        }
    }
    Arc::new(Spending::new(
        store,
        prices,
        limits,
        config.limits_zone(),
        Arc::new(SystemClock),
    ))
}

/// `/healthz`'s checks of the core: the models (not a readiness matter: a daemon whose model
/// fails still takes, and answers, messages) and every agent's session store.
pub(crate) fn watch_core(health: &Health, core: &Core) {
    let models = core.llm_health.clone();
    health.check_health_only("llm", Box::new(move || models.check()));
    // The audio servers, only when the config uses them (nothing is watched otherwise).
    if core.agents.default_agent().voice().is_on() {
        let audio = core.audio_health.clone();
        health.check_health_only("audio", Box::new(move || audio.check()));
    }
    // The memory index, only when `[memory]` is on: degraded (not unready) when an agent's
    // index cannot be brought up to date — searches still answer from what it holds.
    if let Some(memory) = core.tool_parts.memory.clone() {
        let standing = memory.clone();
        health.detail("memory", Box::new(move || json!(standing.standing())));
        health.check_health_only(
            "memory",
            Box::new(move || {
                let failed: Vec<String> = memory
                    .standing()
                    .into_iter()
                    .filter_map(|(agent, standing)| {
                        let error = standing.error?;
                        Some(format!("agent {agent}: {error}"))
                    })
                    .collect();
                if failed.is_empty() {
                    Ok(())
                } else {
                    Err(json!({"error": failed.join("; ")}))
                }
            }),
        );
    }
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

/// The tools the config describes, built again when `[tools]` changed. Applied first of
/// everything: a new tool with the name of another source's refuses the whole reload.
pub(crate) struct Tools {
    agents: Agents,
    parts: ToolParts,
}

/// Whether a changed key of `[tools]` is live (not what the workspace itself enforces).
fn tools_live(key: &str) -> bool {
    under(key, "tools") && key != "tools.restrict_to_workspace"
}

impl Component for Tools {
    async fn build(daemon: &mut Assembly<'_>) -> anyhow::Result<Option<Self>> {
        Ok(Some(Self {
            agents: daemon.core.agents.clone(),
            parts: daemon.core.tool_parts.clone(),
        }))
    }

    fn prepare(&self, config: &Arc<Config>, changed: &[String]) -> Result<Option<Change>, String> {
        if !changed.iter().any(|key| tools_live(key)) {
            return Ok(None);
        }
        let tools =
            crate::agents::build_tools(config, &self.parts).map_err(|err| format!("{err:#}"))?;
        let sources = self.agents.default_agent().tool_sources().clone();
        Ok(change(changed, tools_live, async move {
            sources
                .set(BUILTIN_SOURCE, tools)
                .map_err(|collision| collision.to_string())
        }))
    }
}

/// The agents' model chains, built again on every reload (a config whose models cannot be
/// built is refused) and swapped when `[llm]` or an agent's model changed.
pub(crate) struct Models {
    agents: Agents,
    health: Arc<ModelHealth>,
}

/// Whether a changed key is one of the models': `[llm]`, `agent.model`, `agents.NAME.model`
/// (the rest of what describes agents needs a restart).
fn models_live(key: &str) -> bool {
    under(key, "llm")
        || key == "agent.model"
        || (key.starts_with("agents.") && key.ends_with(".model") && key.matches('.').count() == 2)
}

impl Component for Models {
    async fn build(daemon: &mut Assembly<'_>) -> anyhow::Result<Option<Self>> {
        Ok(Some(Self {
            agents: daemon.core.agents.clone(),
            health: daemon.core.llm_health.clone(),
        }))
    }

    fn prepare(&self, config: &Arc<Config>, changed: &[String]) -> Result<Option<Change>, String> {
        let observer: Arc<dyn Observer> = self.health.clone();
        let catalog = Catalog::build(config, Some(&observer)).map_err(|err| format!("{err:#}"))?;
        let (agents, health, config) = (self.agents.clone(), self.health.clone(), config.clone());
        Ok(change(changed, models_live, async move {
            swap_models(&config, &catalog, &agents);
            // What was known of the old models (a refused key, say) no longer holds.
            health.start_with(&config);
            Ok(())
        }))
    }
}

/// Gives every agent the new config still has its model chain from `catalog`; an agent the
/// new config no longer has keeps running as it was until a restart.
fn swap_models(config: &Config, catalog: &Catalog, agents: &Agents) {
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

/// What the models cost and the daily caps (the zone that begins a day needs a restart).
pub(crate) struct Caps(Arc<Spending>);

fn caps_live(key: &str) -> bool {
    under(key, "llm.prices")
        || under(key, "limits.daily_usd")
        || under(key, "limits.daily_usd_per_chat")
}

impl Component for Caps {
    async fn build(daemon: &mut Assembly<'_>) -> anyhow::Result<Option<Self>> {
        Ok(Some(Self(daemon.core.spending.clone())))
    }

    fn prepare(&self, config: &Arc<Config>, changed: &[String]) -> Result<Option<Change>, String> {
        let (spending, prices, limits) = (self.0.clone(), config.prices(), config.limits());
        Ok(change(changed, caps_live, async move {
            spending.reconfigure(prices, limits);
            Ok(())
        }))
    }
}

/// The caps and prices as the config reads them.
#[cfg(test)]
mod tests {
    use crate::config::parse_minimal_for_test as parse;

    #[test]
    fn a_price_for_a_model_the_config_does_not_name_is_refused_at_its_line() {
        let err = parse(
            "[llm]\nmodel = \"gpt-4o\"\nmodels = [\"o3\"]\n\n[llm.prices.\"gpt-4.1\"]\n\
             input_per_mtok = 2.0\noutput_per_mtok = 8.0\n",
        )
        .expect_err("unknown model");
        assert_eq!(err.key, "llm.prices.gpt-4.1");
        assert_eq!(err.line, Some(7), "{err}");
        assert!(err.message.contains("the models are gpt-4o, o3"), "{err}");
        let fine = parse(
            "[llm]\nmodel = \"gpt-4o\"\n[llm.prices.\"gpt-4o\"]\ninput_per_mtok = 2.5\n\
             output_per_mtok = 10\ncached_input_per_mtok = 1.25\n[limits]\ndaily_usd = 5\n\
             daily_usd_per_chat = 1.5\ntimezone = \"Europe/Berlin\"\n",
        )
        .expect("parses");
        assert_eq!(fine.limits().daily_usd_per_chat, Some(1.5));
        assert!(fine.prices().has("gpt-4o"));
    }

    #[test]
    fn a_negative_price_or_cap_and_an_unknown_zone_are_refused() {
        let err = parse("[limits]\ndaily_usd = -1\n").expect_err("negative");
        assert_eq!((err.key.as_str(), err.line), ("limits.daily_usd", Some(4)));
        let err = parse("[limits]\ntimezone = \"Mars/Olympus\"\n").expect_err("zone");
        assert_eq!(err.key, "limits.timezone");
        let err = parse(
            "[llm]\nmodel = \"m\"\n[llm.prices.m]\ninput_per_mtok = 1\noutput_per_mtok = \"x\"\n",
        )
        .expect_err("type");
        assert_eq!(err.key, "llm.prices.m.output_per_mtok");
    }
}
