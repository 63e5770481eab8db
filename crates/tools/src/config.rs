//! `[tools]`: which built-in tools run and how, with one default for each key.

use std::time::Duration;

use serde::Deserialize;
use switchboard_core::ConfigProblem;
use toml::Spanned;

use crate::builtin::{DEFAULT_DENY, ExecOptions, SandboxHelper};

/// `[tools]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ToolsSection {
    /// File tools reach only the workspace (and `exec` writes only there, where Landlock
    /// is available).
    pub restrict_to_workspace: bool,
    /// A tool's result longer than this is cut, with a note saying so.
    pub max_result_bytes: Spanned<usize>,
    /// `[tools.exec]`.
    pub exec: ExecSection,
}

impl Default for ToolsSection {
    fn default() -> Self {
        Self {
            restrict_to_workspace: true,
            max_result_bytes: Spanned::new(0..0, 16 * 1024),
            exec: ExecSection::default(),
        }
    }
}

/// `[tools.exec]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ExecSection {
    /// Whether the model may run shell commands.
    pub enabled: bool,
    /// Seconds a command may run when the model asks for no other timeout.
    pub timeout_secs: Spanned<f64>,
    /// The longest timeout the model may ask for.
    pub max_timeout_secs: Spanned<f64>,
    /// Regular expressions of command lines refused; replaces the built-in list.
    pub deny: Spanned<Vec<String>>,
    /// The program that runs a command confined; default: the daemon's own binary
    /// (`switchboard sandbox-exec`). Tests that run the daemon in-process set it.
    pub sandbox_helper: Option<String>,
}

impl Default for ExecSection {
    fn default() -> Self {
        Self {
            enabled: true,
            timeout_secs: Spanned::new(0..0, 60.0),
            max_timeout_secs: Spanned::new(0..0, 600.0),
            deny: Spanned::new(0..0, DEFAULT_DENY.iter().map(|s| (*s).to_owned()).collect()),
            sandbox_helper: None,
        }
    }
}

impl ToolsSection {
    /// Checks the values; the problem names the key relative to `[tools]`.
    pub fn validate(&self) -> Result<(), ConfigProblem> {
        if *self.max_result_bytes.get_ref() < 1024 {
            return Err(ConfigProblem::new(
                Some(self.max_result_bytes.span()),
                "max_result_bytes",
                format!(
                    "must be at least 1024, got {}",
                    self.max_result_bytes.get_ref()
                ),
            ));
        }
        for (value, key) in [
            (&self.exec.timeout_secs, "exec.timeout_secs"),
            (&self.exec.max_timeout_secs, "exec.max_timeout_secs"),
        ] {
            let secs = *value.get_ref();
            if !(secs.is_finite() && secs > 0.0 && secs <= 86_400.0) {
                return Err(ConfigProblem::new(
                    Some(value.span()),
                    key,
                    format!("must be a positive number of seconds up to a day, got {secs}"),
                ));
            }
        }
        if self.exec.timeout_secs.get_ref() > self.exec.max_timeout_secs.get_ref() {
            return Err(ConfigProblem::new(
                Some(self.exec.timeout_secs.span()),
                "exec.timeout_secs",
                format!(
                    "is longer than exec.max_timeout_secs ({} s)",
                    self.exec.max_timeout_secs.get_ref()
                ),
            ));
        }
        for pattern in self.exec.deny.get_ref() {
            if let Err(err) = regex::Regex::new(pattern) {
                return Err(ConfigProblem::new(
                    Some(self.exec.deny.span()),
                    "exec.deny",
                    format!("`{pattern}` is not a regular expression: {err}"),
                ));
            }
        }
        Ok(())
    }

    /// How `exec` runs, from this section.
    pub fn exec_options(&self, sandbox: Option<SandboxHelper>) -> ExecOptions {
        ExecOptions {
            default_timeout: Duration::from_secs_f64(*self.exec.timeout_secs.get_ref()),
            max_timeout: Duration::from_secs_f64(*self.exec.max_timeout_secs.get_ref()),
            deny: self.exec.deny.get_ref().clone(),
            // Two streams, each kept to half of a result.
            max_output_bytes: *self.max_result_bytes.get_ref() / 2 - 256,
            sandbox,
        }
    }
}
