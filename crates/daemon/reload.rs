//! Reloading the config on SIGHUP (`systemctl reload`): the file is read and checked again;
//! a config with an error is refused — the error logged with file, line and key — and the
//! running one kept. What can change live does: the model chain (`[llm]`). Every other key
//! that changed is named in a log line saying it takes effect after a restart.

use std::collections::BTreeMap;
use std::path::Path;

use crate::config::Config;
use crate::llm_config;

/// The keys under which a change takes effect at once.
const LIVE: &[&str] = &["llm"];

/// What a reload did.
#[derive(Debug, PartialEq, Eq)]
pub enum Reloaded {
    /// The new config is in use; these changed keys need a restart to take effect.
    Applied {
        /// Dotted keys.
        need_restart: Vec<String>,
    },
    /// The new config was refused (the error); the running one stays.
    Refused(String),
}

/// Reads `path` again and applies what can change live to `agent`; `running` is the text
/// of the config in use, and is replaced by the new one when it is applied.
pub fn reload(path: &Path, running: &mut String, agent: &switchboard_agent::Agent) -> Reloaded {
    let config = match Config::load(path) {
        Ok(config) => config,
        Err(err) => {
            let err = err.to_string();
            tracing::error!(error = %err, "config reload refused; the running config is kept");
            return Reloaded::Refused(err);
        }
    };
    let llm = match llm_config::build(&config) {
        Ok(llm) => llm,
        Err(err) => {
            let err = format!("{err:#}");
            tracing::error!(error = %err, "config reload refused; the running config is kept");
            return Reloaded::Refused(err);
        }
    };
    let changed = changed_keys(running, &config.source.text);
    let live = |key: &String| {
        LIVE.iter()
            .any(|l| key == l || key.starts_with(&format!("{l}.")))
    };
    if changed.iter().any(live) {
        agent.set_llm(llm);
    }
    let need_restart: Vec<String> = changed.iter().filter(|k| !live(k)).cloned().collect();
    tracing::info!(changed = ?changed, provider = %config.llm.provider.get_ref(),
        model = %config.llm.model, "config reloaded");
    if !need_restart.is_empty() {
        tracing::warn!(keys = ?need_restart,
            "these changed keys take effect only after a restart (systemctl restart switchboard)");
    }
    *running = config.source.text.clone();
    Reloaded::Applied { need_restart }
}

/// The dotted keys whose values differ between two config texts (added and removed ones
/// included).
fn changed_keys(old: &str, new: &str) -> Vec<String> {
    let flatten = |text: &str| {
        let mut keys = BTreeMap::new();
        if let Ok(table) = text.parse::<toml::Table>() {
            flatten_into(&mut keys, String::new(), &toml::Value::Table(table));
        }
        keys
    };
    let (old, new) = (flatten(old), flatten(new));
    let mut changed: Vec<String> = old
        .keys()
        .chain(new.keys())
        .filter(|key| old.get(*key) != new.get(*key))
        .cloned()
        .collect();
    changed.sort();
    changed.dedup();
    changed
}

fn flatten_into(keys: &mut BTreeMap<String, toml::Value>, prefix: String, value: &toml::Value) {
    match value {
        toml::Value::Table(table) => {
            for (key, value) in table {
                let key = if prefix.is_empty() {
                    key.clone()
                } else {
                    format!("{prefix}.{key}")
                };
                flatten_into(keys, key, value);
            }
        }
        other => {
            keys.insert(prefix, other.clone());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn changed_keys_are_named_by_their_dotted_path() {
        let old = "[llm]\nmodel = \"a\"\n[agent]\nmax_iterations = 40\n";
        let new = "[llm]\nmodel = \"b\"\n[agent]\nmax_iterations = 40\nstream = false\n";
        assert_eq!(changed_keys(old, new), ["agent.stream", "llm.model"]);
        assert!(changed_keys(old, old).is_empty());
    }
}
