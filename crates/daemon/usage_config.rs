//! `[llm.prices."MODEL"]` and `[limits]`: what the models cost and the daily caps on it, and
//! the daemon's [`Spending`] built from them.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::Deserialize;
use switchboard_agent::scheduler::SystemClock;
use switchboard_agent::usage::{Limits, Price, Prices, Spending, UsageStore};
use toml::Spanned;

use crate::config::{Config, ConfigError};

/// One model's `[llm.prices."MODEL"]`, in US dollars per million tokens.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PriceSection {
    /// Input (prompt) tokens.
    pub input_per_mtok: Spanned<f64>,
    /// Output (completion) tokens.
    pub output_per_mtok: Spanned<f64>,
    /// Input tokens read from the provider's prompt cache (the input price when absent).
    pub cached_input_per_mtok: Option<Spanned<f64>>,
}

/// `[limits]`: daily caps on what the models cost.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LimitsSection {
    /// US dollars a day, all chats of all agents together.
    pub daily_usd: Option<Spanned<f64>>,
    /// US dollars a day, each chat.
    pub daily_usd_per_chat: Option<Spanned<f64>>,
    /// The zone whose midnight begins a day (IANA name); `scheduler.timezone`, else the
    /// system's.
    pub timezone: Option<Spanned<String>>,
}

impl Config {
    /// Checks the price table (models the config names, sane prices) and the caps.
    pub(crate) fn validate_usage(&self) -> Result<(), ConfigError> {
        let source = &self.source;
        let amount = |value: &Spanned<f64>, key: String| {
            let amount = *value.get_ref();
            if (0.0..1e9).contains(&amount) {
                Ok(())
            } else {
                Err(source.error_at(
                    Some(value.span()),
                    key,
                    format!("must be an amount of US dollars (0 or more), got {amount}"),
                ))
            }
        };
        let models = self.model_names();
        for (model, price) in &self.llm.prices {
            let key = format!("llm.prices.{model}");
            if !models.iter().any(|known| known == model) {
                return Err(source.error_at(
                    Some(price.span()),
                    key,
                    format!(
                        "no model `{model}` is configured: the models are {} (a price is for \
                         llm.model, llm.models, a fallback's, an agent's or a judge's model)",
                        models.join(", ")
                    ),
                ));
            }
            let price = price.get_ref();
            amount(&price.input_per_mtok, format!("{key}.input_per_mtok"))?;
            amount(&price.output_per_mtok, format!("{key}.output_per_mtok"))?;
            if let Some(cached) = &price.cached_input_per_mtok {
                amount(cached, format!("{key}.cached_input_per_mtok"))?;
            }
        }
        let limits = &self.limits;
        for (value, key) in [
            (&limits.daily_usd, "limits.daily_usd"),
            (&limits.daily_usd_per_chat, "limits.daily_usd_per_chat"),
        ] {
            if let Some(value) = value {
                amount(value, key.into())?;
            }
        }
        if let Some(zone) = &limits.timezone {
            switchboard_agent::scheduler::zone(zone.get_ref())
                .map_err(|why| source.error_at(Some(zone.span()), "limits.timezone".into(), why))?;
        }
        Ok(())
    }

    /// Every model the config names, `[llm]`'s first.
    pub(crate) fn model_names(&self) -> Vec<String> {
        let llm = &self.llm;
        let mut names = vec![llm.model.clone()];
        let fallbacks = llm.fallbacks.iter().map(|fallback| &fallback.model);
        let specs = self.agent_specs();
        let agents = specs
            .iter()
            .filter_map(|spec| spec.section.model.as_ref().map(|m| m.get_ref().clone()));
        // A judge's calls are priced (and counted against the chat) like the agent's own.
        let judges = specs
            .iter()
            .filter_map(|spec| spec.section.verify.judge.as_ref().map(|j| j.model.clone()));
        for name in fallbacks
            .chain(&llm.models)
            .cloned()
            .chain(agents)
            .chain(judges)
        {
            if !names.contains(&name) {
                names.push(name);
            }
        }
        names
    }

    /// The caps, as the agent reads them.
    pub(crate) fn limits(&self) -> Limits {
        Limits {
            daily_usd: self.limits.daily_usd.as_ref().map(|v| *v.get_ref()),
            daily_usd_per_chat: self
                .limits
                .daily_usd_per_chat
                .as_ref()
                .map(|v| *v.get_ref()),
        }
    }

    /// The price table, as the agent reads it.
    pub(crate) fn prices(&self) -> Prices {
        Prices::new(self.llm.prices.iter().map(|(model, price)| {
            let price = price.get_ref();
            (
                model.clone(),
                Price {
                    input_per_mtok: *price.input_per_mtok.get_ref(),
                    output_per_mtok: *price.output_per_mtok.get_ref(),
                    cached_input_per_mtok: price
                        .cached_input_per_mtok
                        .as_ref()
                        .map(|p| *p.get_ref()),
                },
            )
        }))
    }

    /// The zone whose midnight begins a day for the caps.
    pub(crate) fn limits_zone(&self) -> Option<String> {
        self.limits
            .timezone
            .as_ref()
            .or(self.scheduler.timezone.as_ref())
            .map(|zone| zone.get_ref().clone())
    }
}

/// The daemon's spending, recorded in `state_dir/usage/`; with caps but no price for a
/// model, says that model's calls count nothing toward them.
pub(crate) fn spending(config: &Config, store: Arc<dyn UsageStore>) -> Arc<Spending> {
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

/// The price table of `[llm]`.
pub type PriceTable = BTreeMap<String, Spanned<PriceSection>>;

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
