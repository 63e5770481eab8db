//! What adapter config sections share: a [`ConfigProblem`] located by its span in the
//! config file (the daemon turns it into `file:line:col: key: problem`), and expansion of
//! secrets: `${ENV}` from the environment, `${credential:NAME}` from systemd's credentials.

use std::ops::Range;
use std::path::PathBuf;

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

/// Checks a number of seconds from a config: positive, finite, at most a year.
pub fn positive_seconds(secs: f64) -> Result<(), String> {
    if secs.is_finite() && secs > 0.0 && secs <= 86_400.0 * 365.0 {
        Ok(())
    } else {
        Err(format!("must be a positive number of seconds, got {secs}"))
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

/// The id under which the unit loads its credentials directory: a file `NAME` there is the
/// credential `switchboard_NAME`, which `${credential:NAME}` finds too.
pub const LOADED_DIRECTORY: &str = "switchboard";

/// Where credentials are read from when `$CREDENTIALS_DIRECTORY` is not set: the files
/// themselves, for root's `doctor` beside a service's config ([`read_credentials_from`]).
static CREDENTIALS_AT: std::sync::OnceLock<std::path::PathBuf> = std::sync::OnceLock::new();

/// Reads `${credential:NAME}` from `dir` (`NAME`, or `switchboard_NAME`) when systemd gave
/// no `$CREDENTIALS_DIRECTORY`: an operator's command run as root checks the service's
/// secrets from the files the unit loads. Set once, before any is read.
pub fn read_credentials_from(dir: std::path::PathBuf) {
    let _ = CREDENTIALS_AT.set(dir);
}

/// The longest credential read, in bytes.
const MAX_CREDENTIAL_BYTES: u64 = 64 * 1024;

/// Replaces every `${NAME}` with the environment variable's value (a secret withdrawn from
/// the environment at start included: [`crate::environment`]) and every
/// `${credential:NAME}` with the contents of `$CREDENTIALS_DIRECTORY/NAME`, else of
/// `…/switchboard_NAME` (systemd's `LoadCredential=`, of a file or of the unit's credentials
/// directory; one trailing newline dropped). An unset or empty one is an error
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
    let Some(dir) = std::env::var_os("CREDENTIALS_DIRECTORY")
        .or_else(|| CREDENTIALS_AT.get().map(|dir| dir.clone().into_os_string()))
    else {
        return Err(fail(format!(
            "cannot be read: $CREDENTIALS_DIRECTORY is not set (under systemd, add \
             LoadCredential={name}:/path/to/file to the unit, or put the file in the \
             directory it loads, /etc/switchboard/credentials)"
        )));
    };
    // The unit loads a whole directory (`LoadCredential=switchboard:/etc/switchboard/
    // credentials`), whose files systemd names `switchboard_FILE`.
    let dir = std::path::Path::new(&dir);
    let path = [
        dir.join(name),
        dir.join(format!("{LOADED_DIRECTORY}_{name}")),
    ]
    .into_iter()
    .find(|path| path.exists())
    .unwrap_or_else(|| dir.join(name));
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

/// A config problem, located.
#[derive(Debug, thiserror::Error)]
#[error("{file}{}: {key}{}{message}", location(*.line, *.column), if .key.is_empty() { "" } else { ": " })]
pub struct ConfigError {
    /// The config file.
    pub file: String,
    /// 1-based line, when known.
    pub line: Option<usize>,
    /// 1-based column, when known.
    pub column: Option<usize>,
    /// The dotted key, e.g. `agent.history_limit`; empty when the whole file is at fault.
    pub key: String,
    /// What is wrong and, where possible, what to write instead.
    pub message: String,
}

fn location(line: Option<usize>, column: Option<usize>) -> String {
    match (line, column) {
        (Some(line), Some(column)) => format!(":{line}:{column}"),
        (Some(line), None) => format!(":{line}"),
        _ => String::new(),
    }
}

/// Where a config came from, kept to locate errors found after parsing (a section's own
/// checks, an adapter's).
#[derive(Debug, Default, Clone)]
pub struct ConfigSource {
    /// The file's path.
    pub path: PathBuf,
    /// Its text.
    pub text: String,
}

impl ConfigSource {
    /// The error for a problem an adapter found in its section `section`.
    pub fn problem(&self, section: &str, problem: ConfigProblem) -> ConfigError {
        let key = if problem.key.is_empty() {
            section.to_owned()
        } else {
            format!("{section}.{}", problem.key)
        };
        self.error_at(problem.span, key, problem.message)
    }

    /// An error at a byte span of the text.
    pub fn error_at(
        &self,
        span: Option<std::ops::Range<usize>>,
        key: String,
        message: String,
    ) -> ConfigError {
        let (line, column) = match span {
            Some(span) if span.end > 0 || span.start > 0 => {
                let before = &self.text[..span.start.min(self.text.len())];
                let line = before.matches('\n').count() + 1;
                let column = before.len() - before.rfind('\n').map_or(0, |i| i + 1) + 1;
                (Some(line), Some(column))
            }
            _ => (None, None),
        };
        ConfigError {
            file: self.path.display().to_string(),
            line,
            column,
            key,
            message: short_numbers(message.trim()),
        }
    }
}

/// `message` with every number longer than 20 characters written in scientific notation:
/// `1e300` in a config comes back from serde (and from `{}` of an `f64`) as 301 digits.
fn short_numbers(message: &str) -> String {
    let mut out = String::with_capacity(message.len());
    let mut rest = message;
    while let Some(start) = rest.find(|c: char| c.is_ascii_digit()) {
        out.push_str(&rest[..start]);
        let run = &rest[start..];
        let end = run
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(run.len());
        let number = &run[..end];
        match number.parse::<f64>() {
            Ok(value) if number.len() > 20 => out.push_str(&format!("{value:e}")),
            _ => out.push_str(number),
        }
        rest = &run[end..];
    }
    out.push_str(rest);
    out
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

    #[test]
    fn long_numbers_are_shortened_and_others_kept() {
        assert_eq!(short_numbers("got 12.5 and 8080"), "got 12.5 and 8080");
        let long = format!("got {}", "1".repeat(30));
        assert_eq!(short_numbers(&long), "got 1.111111111111111e29");
    }

    #[test]
    fn a_span_is_told_as_line_and_column_and_no_span_as_the_file() {
        let source = ConfigSource {
            path: PathBuf::from("/etc/switchboard/config.toml"),
            text: "[agent]\nhistory_limit = 1\n".into(),
        };
        let at = source.error_at(
            Some(24..25),
            "agent.history_limit".into(),
            "too small".into(),
        );
        assert_eq!(
            at.to_string(),
            "/etc/switchboard/config.toml:2:17: agent.history_limit: too small"
        );
        let whole = source.error_at(None, String::new(), "unreadable".into());
        assert_eq!(
            whole.to_string(),
            "/etc/switchboard/config.toml: unreadable"
        );
    }
}
