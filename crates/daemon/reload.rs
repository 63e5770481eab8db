//! Reloading the config on SIGHUP (`systemctl reload`): the file is read and checked again;
//! a config with an error is refused — the error logged with file, line and key — and the
//! running one kept. What can change live does: the model chain (`[llm]`) and the tools
//! (`[tools]`, but `restrict_to_workspace`) are swapped for the turns that start next, and a
//! platform channel whose section changed (a token, an allow list, a policy) is restarted
//! with its new settings — the others go on; the jobs `[[scheduler.jobs]]` and
//! `[heartbeat]` declare are added, changed and removed in the job store; MCP servers are
//! started, stopped or restarted as `[mcp]` now says. Every other key that changed is named in a log
//! line saying it takes effect after a restart. Each of these is a component's (`component.rs`):
//! every component prepares its part — everything new built — before any part is applied,
//! so a reload is applied whole or not at all.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use crate::component::Components;
pub use crate::component::{ReloadRequest, Reloaded};
use crate::config::Config;

/// Reads `path` again and applies what can change live (see the module doc) to the running
/// `components`; `running` is the text of the config in use, replaced by the new one when
/// it is applied.
pub(crate) async fn reload(path: &Path, running: &mut String, components: &Components) -> Reloaded {
    let refuse = |err: String| {
        tracing::error!(error = %err, "config reload refused; the running config is kept");
        Reloaded::Refused(err)
    };
    let config = match Config::load(path) {
        Ok(config) => Arc::new(config),
        Err(err) => return refuse(err.to_string()),
    };
    let changed = changed_keys(running, &config.source.text);
    let (applies, need_restart) = match components.prepare(&config, &changed) {
        Ok(plan) => plan,
        Err(err) => return refuse(err),
    };
    // The tools come first, the one step that can still be refused (a new tool with the name
    // of another source's), before anything changed.
    for apply in applies {
        if let Err(err) = apply.await {
            return refuse(err);
        }
    }
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
