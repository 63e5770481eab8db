//! [`ToolSources`]: the agent's tools as named sources — the built-in tools, an embedder's,
//! later one per MCP server — each added, replaced or removed on its own while turns run.
//!
//! A turn takes one [`snapshot`](ToolSources::snapshot) when it starts and keeps it for its
//! whole life: a source replaced meanwhile changes the turns that start next, never one
//! half-way. Two sources never offer a tool of the same name: the source that would bring
//! the second is refused, naming both ([`ToolCollision`]) — nothing is shadowed silently.

use std::collections::BTreeMap;
use std::sync::{Arc, PoisonError, RwLock};

use crate::registry::ToolRegistry;

/// A tool name two sources would both offer.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "the tool `{tool}` of {refused} has the name of a tool of {other}: rename or leave out one of them"
)]
pub struct ToolCollision {
    /// The name.
    pub tool: String,
    /// The source that was refused.
    pub refused: String,
    /// The source that already offers it.
    pub other: String,
}

/// The agent's tools, by source. Shared: every method takes `&self`.
#[derive(Default)]
pub struct ToolSources {
    inner: RwLock<Inner>,
}

#[derive(Default)]
struct Inner {
    sources: BTreeMap<String, Arc<ToolRegistry>>,
    /// Every source's tools in one registry, made again at each change.
    snapshot: Arc<ToolRegistry>,
}

impl ToolSources {
    /// No tools.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sources from the start: `sources` in order, each refused as [`ToolSources::set`]
    /// would.
    pub fn of(
        sources: impl IntoIterator<Item = (String, ToolRegistry)>,
    ) -> Result<Self, ToolCollision> {
        let all = Self::new();
        for (name, tools) in sources {
            all.set(&name, tools)?;
        }
        Ok(all)
    }

    /// Adds source `name`, or replaces it. Refused, changing nothing, when one of its tools
    /// has the name of another source's tool.
    pub fn set(&self, name: &str, tools: ToolRegistry) -> Result<(), ToolCollision> {
        let mut inner = self.inner.write().unwrap_or_else(PoisonError::into_inner);
        for tool in tools.names() {
            if let Some((other, _)) = inner
                .sources
                .iter()
                .find(|(other, theirs)| other.as_str() != name && theirs.get(tool).is_some())
            {
                return Err(ToolCollision {
                    tool: tool.to_owned(),
                    refused: name.to_owned(),
                    other: other.clone(),
                });
            }
        }
        inner.sources.insert(name.to_owned(), Arc::new(tools));
        inner.rebuild();
        Ok(())
    }

    /// Removes source `name` and its tools; whether there was one.
    pub fn remove(&self, name: &str) -> bool {
        let mut inner = self.inner.write().unwrap_or_else(PoisonError::into_inner);
        let removed = inner.sources.remove(name).is_some();
        if removed {
            inner.rebuild();
        }
        removed
    }

    /// Every tool offered now, as one registry: what a turn keeps for its whole life.
    pub fn snapshot(&self) -> Arc<ToolRegistry> {
        self.inner
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .snapshot
            .clone()
    }

    /// The sources' names, sorted.
    pub fn names(&self) -> Vec<String> {
        self.inner
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .sources
            .keys()
            .cloned()
            .collect()
    }
}

impl Inner {
    fn rebuild(&mut self) {
        let mut all = ToolRegistry::new();
        for tools in self.sources.values() {
            for name in tools.names() {
                if let Some(tool) = tools.get(name) {
                    all.register(tool.clone());
                }
            }
        }
        self.snapshot = Arc::new(all);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry::tests::Named;

    fn tools(names: &[&'static str]) -> ToolRegistry {
        names.iter().fold(ToolRegistry::new(), |registry, name| {
            registry.with(Arc::new(Named(name)))
        })
    }

    fn names(registry: &ToolRegistry) -> Vec<&str> {
        registry.names().collect()
    }

    #[test]
    fn sources_come_and_go_and_a_snapshot_taken_stays_as_it_was() {
        let sources = ToolSources::new();
        sources
            .set("builtin", tools(&["read_file", "exec"]))
            .expect("set");
        sources
            .set("mcp_github", tools(&["github__issues"]))
            .expect("set");
        let before = sources.snapshot();
        assert_eq!(names(&before), ["exec", "github__issues", "read_file"]);

        // Replaced and removed while a turn holds `before`.
        sources
            .set("builtin", tools(&["read_file"]))
            .expect("replaced");
        assert!(sources.remove("mcp_github"));
        assert!(!sources.remove("mcp_github"), "gone already");
        assert_eq!(names(&sources.snapshot()), ["read_file"]);
        assert_eq!(
            names(&before),
            ["exec", "github__issues", "read_file"],
            "a snapshot taken is not changed"
        );
        assert_eq!(sources.names(), ["builtin"]);
    }

    #[test]
    fn a_name_two_sources_offer_is_refused_never_shadowed() {
        let sources = ToolSources::of([
            ("builtin".to_owned(), tools(&["exec", "grep"])),
            ("extra".to_owned(), tools(&["echo"])),
        ])
        .expect("distinct");
        let err = sources
            .set("mcp_shell", tools(&["run", "exec"]))
            .expect_err("exec is taken");
        assert_eq!(
            err,
            ToolCollision {
                tool: "exec".into(),
                refused: "mcp_shell".into(),
                other: "builtin".into()
            }
        );
        assert_eq!(
            err.to_string(),
            "the tool `exec` of mcp_shell has the name of a tool of builtin: rename or leave \
             out one of them"
        );
        // Refused whole: not even `run` came in.
        assert_eq!(names(&sources.snapshot()), ["echo", "exec", "grep"]);
        // A source may keep its own names when it is replaced.
        sources
            .set("builtin", tools(&["exec", "grep", "read_file"]))
            .expect("its own names");
        assert!(
            ToolSources::of([
                ("a".to_owned(), tools(&["x"])),
                ("b".to_owned(), tools(&["x"]))
            ])
            .is_err()
        );
    }
}
