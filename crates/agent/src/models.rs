//! [`Models`]: the model chains an agent's turns may use — its own, and one for each model
//! a chat may choose with `/model` (the chosen model first, the agent's others after it).

use std::collections::BTreeMap;
use std::sync::Arc;

use switchboard_llm::LlmProvider;

/// An agent's model chains.
#[derive(Clone)]
pub struct Models {
    /// The agent's own chain.
    default: Arc<dyn LlmProvider>,
    /// The chain of each model a chat may choose, by the model's name.
    choices: BTreeMap<String, Arc<dyn LlmProvider>>,
}

impl Models {
    /// One chain and no choice.
    pub fn single(llm: Arc<dyn LlmProvider>) -> Self {
        Self {
            default: llm,
            choices: BTreeMap::new(),
        }
    }

    /// The agent's chain, and the chains chats may choose by model name.
    pub fn new(
        default: Arc<dyn LlmProvider>,
        choices: impl IntoIterator<Item = (String, Arc<dyn LlmProvider>)>,
    ) -> Self {
        Self {
            default,
            choices: choices.into_iter().collect(),
        }
    }

    /// The agent's own chain.
    pub fn default_chain(&self) -> &Arc<dyn LlmProvider> {
        &self.default
    }

    /// The chain for a chat that chose `model`; the agent's own for no choice, or for a
    /// model that is no longer offered (the config changed).
    pub fn chain(&self, model: Option<&str>) -> &Arc<dyn LlmProvider> {
        model
            .and_then(|model| self.choices.get(model))
            .unwrap_or(&self.default)
    }

    /// Whether a chat may choose `model`.
    pub fn offers(&self, model: &str) -> bool {
        self.choices.contains_key(model)
    }

    /// The models a chat may choose, by name, sorted.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.choices.keys().map(String::as_str)
    }
}
