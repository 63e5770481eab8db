//! [`Prices`]: what a model's tokens cost, from `[llm.prices."MODEL"]`.

use std::collections::BTreeMap;

use switchboard_core::Usage;

/// One model's prices, in US dollars per million tokens.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Price {
    /// Input (prompt) tokens not read from the provider's cache.
    pub input_per_mtok: f64,
    /// Output (completion) tokens.
    pub output_per_mtok: f64,
    /// Input tokens read from the provider's cache; the input price when `None`.
    pub cached_input_per_mtok: Option<f64>,
}

impl Price {
    /// What `usage` costs, in dollars.
    pub fn cost(&self, usage: &Usage) -> f64 {
        let cached = usage.cached_input_tokens.min(usage.input_tokens);
        let fresh = usage.input_tokens - cached;
        let cached_price = self.cached_input_per_mtok.unwrap_or(self.input_per_mtok);
        (fresh as f64 * self.input_per_mtok
            + cached as f64 * cached_price
            + usage.output_tokens as f64 * self.output_per_mtok)
            / 1_000_000.0
    }
}

/// The price table, by model name as the config names the model.
#[derive(Clone, Debug, Default)]
pub struct Prices(BTreeMap<String, Price>);

impl Prices {
    /// The table.
    pub fn new(prices: impl IntoIterator<Item = (String, Price)>) -> Self {
        Self(prices.into_iter().collect())
    }

    /// What `usage` of `model` costs; `None` when the table has no price for it.
    pub fn cost(&self, model: &str, usage: &Usage) -> Option<f64> {
        self.0.get(model).map(|price| price.cost(usage))
    }

    /// Whether the table prices `model`.
    pub fn has(&self, model: &str) -> bool {
        self.0.contains_key(model)
    }

    /// Whether the table is empty.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cached_input_is_priced_apart_and_defaults_to_the_input_price() {
        let price = Price {
            input_per_mtok: 2.0,
            output_per_mtok: 8.0,
            cached_input_per_mtok: Some(0.5),
        };
        let usage = Usage {
            input_tokens: 1_000_000,
            output_tokens: 500_000,
            cached_input_tokens: 400_000,
            reasoning_tokens: 0,
        };
        // 600k fresh × $2 + 400k cached × $0.5 + 500k out × $8.
        assert!((price.cost(&usage) - (1.2 + 0.2 + 4.0)).abs() < 1e-9);
        let no_cache_price = Price {
            cached_input_per_mtok: None,
            ..price
        };
        assert!((no_cache_price.cost(&usage) - (2.0 + 4.0)).abs() < 1e-9);
        let prices = Prices::new([("m".to_owned(), price)]);
        assert!(prices.cost("other", &usage).is_none());
        assert!(prices.has("m"));
    }
}
