//! `[limits]`, with `[llm.prices."MODEL"]`: the daily caps on what the models cost, and
//! the prices they are counted at.

use serde::Deserialize;
use switchboard_core::{ConfigError, ConfigSource as Source};
use switchboard_llm::section::PriceTable;
use toml::Spanned;

use crate::{Limits, Price, Prices};

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

impl LimitsSection {
    /// Checks the price table (`prices`: for models the config names, `models`; sane
    /// prices) and the caps; errors name `llm.prices.<model>` or `limits.<key>`.
    pub fn validate(
        &self,
        prices: &PriceTable,
        models: &[String],
        source: &Source,
    ) -> Result<(), ConfigError> {
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
        for (model, price) in prices {
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
        let limits = self;
        for (value, key) in [
            (&limits.daily_usd, "limits.daily_usd"),
            (&limits.daily_usd_per_chat, "limits.daily_usd_per_chat"),
        ] {
            if let Some(value) = value {
                amount(value, key.into())?;
            }
        }
        if let Some(zone) = &limits.timezone {
            switchboard_scheduler::zone(zone.get_ref())
                .map_err(|why| source.error_at(Some(zone.span()), "limits.timezone".into(), why))?;
        }
        Ok(())
    }

    /// The caps, as the agent reads them.
    pub fn limits(&self) -> Limits {
        Limits {
            daily_usd: self.daily_usd.as_ref().map(|v| *v.get_ref()),
            daily_usd_per_chat: self.daily_usd_per_chat.as_ref().map(|v| *v.get_ref()),
        }
    }

    /// The zone whose midnight begins a day for the caps: its own, else `scheduler`'s.
    pub fn zone(&self, scheduler: Option<&Spanned<String>>) -> Option<String> {
        self.timezone
            .as_ref()
            .or(scheduler)
            .map(|zone| zone.get_ref().clone())
    }
}

/// The price table, as the agent reads it.
pub fn prices(table: &PriceTable) -> Prices {
    Prices::new(table.iter().map(|(model, price)| {
        let price = price.get_ref();
        (
            model.clone(),
            Price {
                input_per_mtok: *price.input_per_mtok.get_ref(),
                output_per_mtok: *price.output_per_mtok.get_ref(),
                cached_input_per_mtok: price.cached_input_per_mtok.as_ref().map(|p| *p.get_ref()),
            },
        )
    }))
}
