//! The models the config names — `[llm]`'s chain and the models beyond it (`[llm] models`,
//! each agent's, each judge's) — each built once from `[llm]` (`switchboard_llm::section`),
//! and the agents' chains made of them.

use std::sync::Arc;
use std::time::Duration;

use switchboard_llm::{Failover, LlmProvider, Observer};

use crate::config::Config;
use crate::config_values::duration;

/// The provider chain the config describes (see the module doc); every attempt of each of
/// its models is told to `observer` (the daemon's health and metrics).
pub fn build(
    config: &Config,
    observer: Option<&Arc<dyn Observer>>,
) -> anyhow::Result<Arc<dyn LlmProvider>> {
    Ok(Catalog::build(config, observer)?.chain(None))
}

/// Every model the config names — `[llm]`'s, each fallback's, `[llm] models`, each agent's
/// `model` — each built once behind its retry layer, so the chains made of them share their
/// connections.
pub struct Catalog {
    /// By model name: `[llm]`'s first, then the fallbacks in order, then the others.
    models: Vec<(String, Arc<dyn LlmProvider>)>,
    /// How many of `models`, from the first, are the configured chain (`[llm]` + fallbacks).
    chain: usize,
    /// `llm.fallback_cooldown_secs`.
    cooldown: Duration,
}

impl Catalog {
    /// The models of `config`; every attempt of each is told to `observer`.
    pub fn build(config: &Config, observer: Option<&Arc<dyn Observer>>) -> anyhow::Result<Self> {
        let mut models: Vec<(String, Arc<dyn LlmProvider>)> = config
            .llm
            .chain_models(observer)?
            .into_iter()
            .map(|(_, model)| (model.model().to_owned(), model))
            .collect();
        let chain = models.len();
        let llm = &config.llm;
        for name in config.model_names() {
            if !models.iter().any(|(have, _)| *have == name) {
                let extra = llm.model(llm.server_of(&name), observer)?;
                models.push((name, extra));
            }
        }
        Ok(Self {
            models,
            chain,
            cooldown: duration(&llm.fallback_cooldown_secs),
        })
    }

    /// The models' names, `[llm]`'s first.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.models.iter().map(|(name, _)| name.as_str())
    }

    /// An agent's chains: its own (starting with `model`, `None`: `[llm]`'s), and one for
    /// each model a chat may choose — when there is more than one.
    pub fn models_for(&self, model: Option<&str>) -> switchboard_agent::Models {
        let choices = (self.models.len() > 1).then(|| {
            self.names()
                .map(|name| (name.to_owned(), self.chain(Some(name))))
                .collect::<Vec<_>>()
        });
        switchboard_agent::Models::new(self.chain(model), choices.into_iter().flatten())
    }

    /// The chain that starts with the model `first` (`None`: `[llm]`'s) and goes on with
    /// the configured chain's others, in order.
    pub fn chain(&self, first: Option<&str>) -> Arc<dyn LlmProvider> {
        let at = first
            .and_then(|first| self.models.iter().position(|(name, _)| name == first))
            .unwrap_or(0);
        let primary = self.models[at].1.clone();
        let fallbacks: Vec<_> = self.models[..self.chain]
            .iter()
            .enumerate()
            .filter(|(index, _)| *index != at)
            .map(|(_, (_, model))| model.clone())
            .collect();
        if fallbacks.is_empty() {
            return primary;
        }
        Arc::new(Failover::new(primary, fallbacks, self.cooldown))
    }
}
