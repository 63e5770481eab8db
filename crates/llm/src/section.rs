//! `[llm]`: which models answer — the provider, its server and key, fallbacks, the models a
//! chat may switch to, timeouts, limits, retries and prices — and each model built from it.
//!
//! The primary provider and each of `fallbacks` is a plain client (OpenAI-compatible,
//! Anthropic or Gemini, chosen by `provider`) inside its own [`Retrying`]; the daemon chains them with
//! a [`Failover`](crate::Failover). Timeouts, limits, retries, temperature and `max_tokens`
//! are the section's, shared by every entry.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use serde::Deserialize;
use switchboard_core::{ConfigError, ConfigSource, expand_env, positive_seconds};
use toml::Spanned;

use crate::{
    AnthropicProvider, ApiKey, GeminiProvider, LlmError, LlmProvider, Observed, Observer,
    OpenAiProvider, ProviderConfig, ResponseLimits, RetryPolicy, Retrying,
};

/// Which API the LLM speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ProviderKind {
    /// OpenAI chat completions (OpenAI, OpenRouter, vLLM, Ollama, llama.cpp …).
    Openai,
    /// Anthropic's Messages API.
    Anthropic,
    /// Google's Gemini API (`generateContent`).
    Gemini,
}

impl ProviderKind {
    /// Its name in the config and in metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Openai => "openai",
            Self::Anthropic => "anthropic",
            Self::Gemini => "gemini",
        }
    }

    /// The API root used when the config gives none.
    pub fn default_base_url(self) -> &'static str {
        match self {
            Self::Openai => "https://api.openai.com/v1",
            Self::Anthropic => "https://api.anthropic.com/v1",
            Self::Gemini => "https://generativelanguage.googleapis.com/v1beta",
        }
    }
}

impl fmt::Display for ProviderKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// `[llm]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LlmSection {
    /// The API the server speaks.
    pub provider: Spanned<ProviderKind>,
    /// The API root; the provider's own when absent.
    pub base_url: Option<Spanned<String>>,
    /// The key, usually `${SOME_ENV_VAR}`; absent for local servers.
    pub api_key: Option<Spanned<String>>,
    /// The model.
    pub model: String,
    /// Sampling temperature.
    pub temperature: Option<f32>,
    /// Upper bound on tokens per response.
    pub max_tokens: Option<u32>,
    /// Seconds to wait for the first byte of a response.
    pub timeout_secs: Spanned<f64>,
    /// Seconds to wait between two chunks of a response.
    pub idle_timeout_secs: Spanned<f64>,
    /// Seconds a whole call to one provider may take, retries and their waits included.
    pub request_timeout_secs: Spanned<f64>,
    /// Seconds of silence after which the chat is told the model is slow.
    pub slow_notice_secs: Spanned<f64>,
    /// Retries of timeouts, connection errors, 429 and 5xx, per provider.
    pub max_retries: u32,
    /// Bytes read from the server for one response.
    pub max_response_bytes: Spanned<usize>,
    /// Bytes of a reply's text.
    pub max_reply_bytes: Spanned<usize>,
    /// Bytes of one response's tool calls.
    pub max_tool_arguments_bytes: Spanned<usize>,
    /// Providers tried in order when the one before fails after its retries.
    pub fallbacks: Vec<Fallback>,
    /// Seconds a provider that failed twice in a row is skipped.
    pub fallback_cooldown_secs: Spanned<f64>,
    /// Connections open at once to each provider's server; calls beyond wait for one.
    pub max_connections: Spanned<usize>,
    /// Whether the model takes images (a person's photos, images tools return).
    pub images: bool,
    /// More models of this provider a chat may switch to with `/model`.
    pub models: Vec<String>,
    /// `[llm.prices."MODEL"]`: what each model's tokens cost.
    pub prices: PriceTable,
}

impl Default for LlmSection {
    fn default() -> Self {
        Self {
            provider: Spanned::new(0..0, ProviderKind::Openai),
            base_url: None,
            api_key: None,
            model: "gpt-4o-mini".into(),
            temperature: None,
            max_tokens: None,
            timeout_secs: Spanned::new(0..0, 30.0),
            idle_timeout_secs: Spanned::new(0..0, 60.0),
            request_timeout_secs: Spanned::new(0..0, 300.0),
            slow_notice_secs: Spanned::new(0..0, 15.0),
            max_retries: 3,
            max_response_bytes: Spanned::new(0..0, 32 * 1024 * 1024),
            max_reply_bytes: Spanned::new(0..0, 1024 * 1024),
            max_tool_arguments_bytes: Spanned::new(0..0, 1024 * 1024),
            fallbacks: Vec::new(),
            fallback_cooldown_secs: Spanned::new(0..0, 60.0),
            max_connections: Spanned::new(0..0, 64),
            images: true,
            models: Vec::new(),
            prices: Default::default(),
        }
    }
}

/// One entry of `llm.fallbacks`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Fallback {
    /// The API the server speaks.
    pub provider: Spanned<ProviderKind>,
    /// The API root; the provider's own when absent.
    pub base_url: Option<Spanned<String>>,
    /// The key, usually `${SOME_ENV_VAR}`.
    pub api_key: Option<Spanned<String>>,
    /// The model.
    pub model: String,
    /// Whether the model takes images.
    #[serde(default = "yes")]
    pub images: bool,
}

fn yes() -> bool {
    true
}

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

/// `[llm.prices]`: each model's price, by model name.
pub type PriceTable = BTreeMap<String, Spanned<PriceSection>>;

/// A model with the config key that describes it (`llm`, `llm.fallbacks[0]`, …).
pub type Keyed = (String, Arc<dyn LlmProvider>);

/// One model of a chain as the config names it: `[llm]`'s own, a fallback's, the judge's.
#[derive(Clone, Copy, Debug)]
pub struct ModelEntry<'a> {
    /// The API its server speaks.
    pub kind: ProviderKind,
    /// Its API root, if the config gives one.
    pub base_url: Option<&'a Spanned<String>>,
    /// Its key, if the config gives one.
    pub api_key: Option<&'a Spanned<String>>,
    /// The model.
    pub model: &'a str,
    /// Whether it takes images.
    pub images: bool,
    /// The config key of its API key, for the warning when it is unset.
    pub key_name: &'a str,
}

impl LlmSection {
    /// `model` reached on this section's server (provider, URL, key): how a model that is
    /// not in the chain (`models`, an agent's) is called.
    pub fn server_of<'a>(&'a self, model: &'a str) -> ModelEntry<'a> {
        ModelEntry {
            kind: *self.provider.get_ref(),
            base_url: self.base_url.as_ref(),
            api_key: self.api_key.as_ref(),
            model,
            images: self.images,
            key_name: "llm.api_key",
        }
    }

    /// The primary's API root.
    pub fn base_url(&self) -> String {
        base_url(*self.provider.get_ref(), self.base_url.as_ref())
    }

    /// Checks what serde cannot: sizes, durations, URLs; errors name `llm.<key>` at its line.
    pub fn validate(&self, source: &ConfigSource) -> Result<(), ConfigError> {
        for (value, key) in [
            (&self.max_response_bytes, "llm.max_response_bytes"),
            (&self.max_reply_bytes, "llm.max_reply_bytes"),
            (
                &self.max_tool_arguments_bytes,
                "llm.max_tool_arguments_bytes",
            ),
        ] {
            if *value.get_ref() < 1024 {
                return Err(source.error_at(
                    Some(value.span()),
                    key.into(),
                    format!("must be at least 1024, got {}", value.get_ref()),
                ));
            }
        }
        for (value, key) in [
            (&self.timeout_secs, "llm.timeout_secs"),
            (&self.idle_timeout_secs, "llm.idle_timeout_secs"),
            (&self.request_timeout_secs, "llm.request_timeout_secs"),
            (&self.slow_notice_secs, "llm.slow_notice_secs"),
            (&self.fallback_cooldown_secs, "llm.fallback_cooldown_secs"),
        ] {
            positive_seconds(*value.get_ref())
                .map_err(|message| source.error_at(Some(value.span()), key.into(), message))?;
        }
        check_url(source, self.base_url.as_ref(), "llm.base_url")?;
        if !(1..=1024).contains(self.max_connections.get_ref()) {
            return Err(source.error_at(
                Some(self.max_connections.span()),
                "llm.max_connections".into(),
                format!(
                    "must be from 1 to 1024, got {}",
                    self.max_connections.get_ref()
                ),
            ));
        }
        for (index, fallback) in self.fallbacks.iter().enumerate() {
            let key = format!("llm.fallbacks[{index}].base_url");
            check_url(source, fallback.base_url.as_ref(), &key)?;
        }
        Ok(())
    }

    /// The models of the chain whose API key cannot be resolved (every call to them fails with
    /// `MissingApiKey`): provider, model, and why — so that health can say so from the start.
    pub fn missing_keys(&self) -> Vec<(&'static str, String, LlmError)> {
        let llm = self;
        let primary = (llm.provider.get_ref(), &llm.model, llm.api_key.as_ref());
        let fallbacks = llm
            .fallbacks
            .iter()
            .map(|f| (f.provider.get_ref(), &f.model, f.api_key.as_ref()));
        std::iter::once(primary)
            .chain(fallbacks)
            .filter_map(|(kind, model, raw)| {
                let unresolved = expand_env(raw?.get_ref()).err()?;
                Some((
                    kind.as_str(),
                    model.clone(),
                    LlmError::MissingApiKey {
                        reason: unresolved.to_string(),
                    },
                ))
            })
            .collect()
    }

    /// Each model of the chain on its own, with the config key that describes it (`llm`,
    /// `llm.fallbacks[0]`, …), primary first.
    pub fn chain_models(
        &self,
        observer: Option<&Arc<dyn Observer>>,
    ) -> Result<Vec<Keyed>, LlmError> {
        let llm = self;
        let mut models = vec![(
            "llm".to_owned(),
            llm.model(
                ModelEntry {
                    kind: *llm.provider.get_ref(),
                    base_url: llm.base_url.as_ref(),
                    api_key: llm.api_key.as_ref(),
                    model: &llm.model,
                    images: llm.images,
                    key_name: "llm.api_key",
                },
                observer,
            )?,
        )];
        for (index, fallback) in llm.fallbacks.iter().enumerate() {
            let key = format!("llm.fallbacks[{index}]");
            let entry = llm.model(
                ModelEntry {
                    kind: *fallback.provider.get_ref(),
                    base_url: fallback.base_url.as_ref(),
                    api_key: fallback.api_key.as_ref(),
                    model: &fallback.model,
                    images: fallback.images,
                    key_name: &format!("{key}.api_key"),
                },
                observer,
            )?;
            models.push((key, entry));
        }
        Ok(models)
    }

    /// One model behind its retry layer, with `[llm]`'s timeouts, limits and retries.
    pub fn model(
        &self,
        entry: ModelEntry<'_>,
        observer: Option<&Arc<dyn Observer>>,
    ) -> Result<Arc<dyn LlmProvider>, LlmError> {
        let llm = self;
        let kind = entry.kind;
        let settings = ProviderConfig {
            base_url: base_url(kind, entry.base_url),
            api_key: api_key(entry.api_key, entry.key_name),
            model: entry.model.to_owned(),
            images: entry.images,
            temperature: llm.temperature,
            max_tokens: llm.max_tokens,
            first_byte_timeout: duration(&llm.timeout_secs),
            idle_timeout: duration(&llm.idle_timeout_secs),
            limits: ResponseLimits {
                max_response_bytes: *llm.max_response_bytes.get_ref(),
                max_reply_bytes: *llm.max_reply_bytes.get_ref(),
                max_tool_arguments_bytes: *llm.max_tool_arguments_bytes.get_ref(),
            },
            max_connections: *llm.max_connections.get_ref(),
            ..ProviderConfig::default()
        };
        let mut client: Arc<dyn LlmProvider> = match kind {
            ProviderKind::Openai => Arc::new(OpenAiProvider::new(settings)?),
            ProviderKind::Anthropic => Arc::new(AnthropicProvider::new(settings)?),
            ProviderKind::Gemini => Arc::new(GeminiProvider::new(settings)?),
        };
        if let Some(observer) = observer {
            client = Arc::new(Observed::new(client, observer.clone()));
        }
        let policy = RetryPolicy {
            max_retries: llm.max_retries,
            ..RetryPolicy::default()
        };
        let deadline: Duration = duration(&llm.request_timeout_secs);
        let retrying = Retrying::new(client, policy, deadline)
            .with_slow_notice(duration(&llm.slow_notice_secs));
        Ok(Arc::new(retrying))
    }
}

fn base_url(kind: ProviderKind, configured: Option<&Spanned<String>>) -> String {
    configured.map_or_else(
        || kind.default_base_url().to_owned(),
        |url| url.get_ref().clone(),
    )
}

/// Checks that `url`, when given, is an http:// or https:// URL with a host; the error names
/// `key` at its line.
pub fn check_url(
    source: &ConfigSource,
    url: Option<&Spanned<String>>,
    key: &str,
) -> Result<(), ConfigError> {
    let Some(url) = url else { return Ok(()) };
    let text = url.get_ref();
    let host = text
        .strip_prefix("http://")
        .or_else(|| text.strip_prefix("https://"));
    if host.is_none_or(|rest| rest.is_empty() || rest.starts_with('/')) {
        return Err(source.error_at(
            Some(url.span()),
            key.into(),
            format!(
                "`{text}` is not an http:// or https:// URL with a host, e.g. \
                 \"http://127.0.0.1:11434/v1\""
            ),
        ));
    }
    Ok(())
}

fn api_key(raw: Option<&Spanned<String>>, key: &str) -> ApiKey {
    match raw {
        None => ApiKey::None,
        Some(raw) => match expand_env(raw.get_ref()) {
            Ok(value) => ApiKey::Key(value),
            Err(unresolved) => {
                tracing::warn!(reason = %unresolved, key, "an API key cannot be resolved; \
                    calls to that model fail until it is");
                ApiKey::Missing {
                    reason: unresolved.to_string(),
                }
            }
        },
    }
}

/// A duration from a validated seconds field.
fn duration(value: &Spanned<f64>) -> Duration {
    Duration::from_secs_f64(*value.get_ref())
}
