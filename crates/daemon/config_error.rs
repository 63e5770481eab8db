//! Where a config problem is: [`ConfigError`] (file, line, column, dotted key, message) and
//! [`Source`], the file's path and text kept so that a problem found after parsing — by a
//! section's own checks, an adapter's, the agents' — is located the same way as serde's.

use std::path::PathBuf;

use switchboard_core::ConfigProblem;

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

/// Where a config came from, kept to locate errors found after parsing.
#[derive(Debug, Default, Clone)]
pub struct Source {
    /// The file's path.
    pub path: PathBuf,
    /// Its text.
    pub text: String,
}

/// The dotted key of a serde path, without the internal segments of `Spanned`.
pub(crate) fn key_of(path: &serde_path_to_error::Path) -> String {
    path.to_string()
        .split('.')
        .filter(|segment| !segment.is_empty() && !segment.starts_with("$__"))
        .collect::<Vec<_>>()
        .join(".")
}

impl Source {
    /// The error for a problem an adapter found in its section `section`.
    pub fn problem(&self, section: &str, problem: ConfigProblem) -> ConfigError {
        self.error_at(
            problem.span,
            format!("{section}.{}", problem.key),
            problem.message,
        )
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
    fn long_numbers_are_shortened_and_others_kept() {
        assert_eq!(short_numbers("got 12.5 and 8080"), "got 12.5 and 8080");
        let long = format!("got {}", "1".repeat(30));
        assert_eq!(short_numbers(&long), "got 1.111111111111111e29");
    }

    #[test]
    fn a_span_is_told_as_line_and_column_and_no_span_as_the_file() {
        let source = Source {
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
