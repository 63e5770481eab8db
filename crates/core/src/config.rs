//! What adapter config sections share: a [`ConfigProblem`] located by its span in the
//! config file (the daemon turns it into `file:line:col: key: problem`), and `${ENV}`
//! expansion of secrets.

use std::ops::Range;

/// A problem with one key of a config section.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigProblem {
    /// Where the value is in the file (`toml::Spanned::span`), when it was written there.
    pub span: Option<Range<usize>>,
    /// The key, relative to the section (e.g. `token`); the daemon prefixes the section.
    pub key: String,
    /// What is wrong and, where possible, what to write instead.
    pub message: String,
}

impl ConfigProblem {
    /// A problem with `key`, at `span`.
    pub fn new(span: Option<Range<usize>>, key: &str, message: impl Into<String>) -> Self {
        Self {
            // A default value has the empty span 0..0: it was not written anywhere.
            span: span.filter(|span| span.end > 0 || span.start > 0),
            key: key.to_owned(),
            message: message.into(),
        }
    }
}

/// Replaces every `${NAME}` with the environment variable's value. An unset or empty
/// variable is an error carrying its name.
pub fn expand_env(raw: &str) -> Result<String, String> {
    let mut out = String::with_capacity(raw.len());
    let mut rest = raw;
    while let Some(start) = rest.find("${") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let Some(end) = after.find('}') else {
            out.push_str(&rest[start..]);
            return Ok(out);
        };
        let name = &after[..end];
        match std::env::var(name) {
            Ok(value) if !value.is_empty() => out.push_str(&value),
            _ => return Err(name.to_owned()),
        }
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn env_references_expand_and_missing_ones_are_named() {
        assert_eq!(expand_env("plain"), Ok("plain".into()));
        let home = std::env::var("HOME").expect("HOME is set in tests");
        assert_eq!(expand_env("a${HOME}b"), Ok(format!("a{home}b")));
        assert_eq!(
            expand_env("${SURELY_UNSET_VAR_123}"),
            Err("SURELY_UNSET_VAR_123".into())
        );
    }
}
