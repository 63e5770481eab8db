//! What adapter config sections share: a [`ConfigProblem`] located by its span in the
//! config file (the daemon turns it into `file:line:col: key: problem`), and expansion of
//! secrets: `${ENV}` from the environment, `${credential:NAME}` from systemd's credentials.

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

/// A `${…}` reference that could not be resolved. Its text names the reference and why,
/// never a secret.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Unresolved {
    /// `${NAME}`: the environment variable is unset or empty.
    Env(String),
    /// `${credential:NAME}`: the credential could not be read.
    Credential {
        /// The credential's name.
        name: String,
        /// Why.
        why: String,
    },
}

impl std::fmt::Display for Unresolved {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Env(name) => write!(f, "the environment variable {name} is not set"),
            Self::Credential { name, why } => write!(f, "the credential {name} {why}"),
        }
    }
}

/// The longest credential read, in bytes.
const MAX_CREDENTIAL_BYTES: u64 = 64 * 1024;

/// Replaces every `${NAME}` with the environment variable's value (a secret withdrawn from
/// the environment at start included: [`crate::environment`]) and every
/// `${credential:NAME}` with the contents of `$CREDENTIALS_DIRECTORY/NAME` (systemd's
/// `LoadCredential=`; one trailing newline dropped). An unset or empty one is an error
/// naming it.
pub fn expand_env(raw: &str) -> Result<String, Unresolved> {
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
        match name.strip_prefix("credential:") {
            Some(credential) => out.push_str(&read_credential(credential)?),
            None => match crate::environment::var(name) {
                Some(value) if !value.is_empty() => out.push_str(&value),
                _ => return Err(Unresolved::Env(name.to_owned())),
            },
        }
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

fn read_credential(name: &str) -> Result<String, Unresolved> {
    let fail = |why: String| Unresolved::Credential {
        name: name.to_owned(),
        why,
    };
    if name.is_empty() || name.contains('/') || name == "." || name == ".." {
        return Err(fail(
            "is not a credential name (a file name, no `/`)".into(),
        ));
    }
    let Some(dir) = std::env::var_os("CREDENTIALS_DIRECTORY") else {
        return Err(fail(format!(
            "cannot be read: $CREDENTIALS_DIRECTORY is not set (under systemd, add \
             LoadCredential={name}:/path/to/file to the unit)"
        )));
    };
    let path = std::path::Path::new(&dir).join(name);
    let mut text = String::new();
    std::io::Read::read_to_string(
        &mut std::io::Read::take(
            std::fs::File::open(&path).map_err(|err| fail(format!("cannot be read: {err}")))?,
            MAX_CREDENTIAL_BYTES + 1,
        ),
        &mut text,
    )
    .map_err(|err| fail(format!("cannot be read: {err}")))?;
    if text.len() as u64 > MAX_CREDENTIAL_BYTES {
        return Err(fail(format!("is larger than {MAX_CREDENTIAL_BYTES} bytes")));
    }
    let value = text
        .strip_suffix('\n')
        .map(|v| v.strip_suffix('\r').unwrap_or(v))
        .unwrap_or(&text);
    if value.is_empty() {
        return Err(fail("is empty".into()));
    }
    Ok(value.to_owned())
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
            Err(Unresolved::Env("SURELY_UNSET_VAR_123".into()))
        );
        // Without systemd's credentials directory (tests never set it in-process).
        if std::env::var_os("CREDENTIALS_DIRECTORY").is_none() {
            let err = expand_env("${credential:ws-token}").expect_err("no directory");
            assert!(
                err.to_string().contains("LoadCredential=ws-token:"),
                "{err}"
            );
        }
        let err = expand_env("${credential:../etc/passwd}").expect_err("a path");
        assert!(err.to_string().contains("not a credential name"), "{err}");
    }
}
