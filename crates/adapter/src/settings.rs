//! Checks every adapter's config section makes of its values, each a [`ConfigProblem`]
//! pointing at the value in the file: a required secret (`${ENV}` expanded), an http(s)
//! URL, a number of seconds within bounds.

use std::time::Duration;

use switchboard_core::{ConfigProblem, expand_env};
use toml::Spanned;
use url::Url;

/// A required secret, with `${ENV}` references expanded; `example` shows how to write it.
pub fn secret(
    value: Option<&Spanned<String>>,
    key: &str,
    example: &str,
) -> Result<String, ConfigProblem> {
    let Some(value) = value else {
        return Err(ConfigProblem::new(
            None,
            key,
            format!("is required when the channel is enabled, e.g. {key} = \"{example}\""),
        ));
    };
    expand_env(value.get_ref())
        .map_err(|unresolved| ConfigProblem::new(Some(value.span()), key, unresolved.to_string()))
}

/// An `http://` or `https://` URL with a host.
pub fn http_url(value: &Spanned<String>, key: &str) -> Result<Url, ConfigProblem> {
    Url::parse(value.get_ref())
        .ok()
        .filter(|url| matches!(url.scheme(), "http" | "https") && url.host().is_some())
        .ok_or_else(|| {
            ConfigProblem::new(
                Some(value.span()),
                key,
                format!("`{}` is not an http:// or https:// URL", value.get_ref()),
            )
        })
}

/// A number of seconds from `min` to a day.
pub fn seconds(value: &Spanned<f64>, key: &str, min: f64) -> Result<Duration, ConfigProblem> {
    let secs = *value.get_ref();
    if secs.is_finite() && secs >= min && secs <= 86_400.0 {
        Ok(Duration::from_secs_f64(secs))
    } else {
        Err(ConfigProblem::new(
            Some(value.span()),
            key,
            format!("must be from {min} to 86400 seconds, got {secs}"),
        ))
    }
}
