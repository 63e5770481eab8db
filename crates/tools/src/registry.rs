//! [`ToolRegistry`]: the tools of one daemon, by name.

use std::collections::BTreeMap;
use std::sync::{Arc, OnceLock};

use crate::tool::{Tool, ToolDefinition};

/// A set of tools by name: one source's (the built-in tools, an MCP server's), or every
/// source's at once as a turn sees them (see [`crate::ToolSources`]). Shared read-only once
/// built.
#[derive(Clone, Default)]
pub struct ToolRegistry {
    tools: BTreeMap<String, Arc<dyn Tool>>,
    /// The definitions, built at the first request (every turn sends them; building them
    /// per turn cost tens of microseconds with the built-in tools).
    definitions: OnceLock<Arc<[ToolDefinition]>>,
}

impl ToolRegistry {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a tool, replacing one of the same name.
    pub fn register(&mut self, tool: Arc<dyn Tool>) -> &mut Self {
        self.tools.insert(tool.name().to_owned(), tool);
        self.definitions = OnceLock::new();
        self
    }

    /// Adds a tool (builder style).
    pub fn with(mut self, tool: Arc<dyn Tool>) -> Self {
        self.register(tool);
        self
    }

    /// The tool of that name.
    pub fn get(&self, name: &str) -> Option<&Arc<dyn Tool>> {
        self.tools.get(name)
    }

    /// The definitions sent to the model, sorted by name so requests are stable.
    pub fn definitions(&self) -> Arc<[ToolDefinition]> {
        self.definitions
            .get_or_init(|| {
                self.tools
                    .values()
                    .map(|tool| ToolDefinition {
                        name: tool.name().to_owned(),
                        description: tool.description().to_owned(),
                        parameters: tool.parameters(),
                    })
                    .collect()
            })
            .clone()
    }

    /// The names of the registered tools, sorted.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.tools.keys().map(String::as_str)
    }

    /// How many tools are registered.
    pub fn len(&self) -> usize {
        self.tools.len()
    }

    /// Whether no tool is registered.
    pub fn is_empty(&self) -> bool {
        self.tools.is_empty()
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use async_trait::async_trait;
    use serde_json::json;

    use super::*;
    use crate::error::ToolError;
    use crate::tool::ToolContext;

    /// A tool that answers its own name (for the registry's and the sources' tests).
    pub(crate) struct Named(pub(crate) &'static str);

    #[async_trait]
    impl Tool for Named {
        fn name(&self) -> &str {
            self.0
        }
        fn description(&self) -> &str {
            "a test tool"
        }
        fn parameters(&self) -> serde_json::Value {
            json!({"type": "object", "properties": {}})
        }
        async fn call(
            &self,
            _: serde_json::Value,
            _: &ToolContext,
        ) -> Result<crate::ToolOutput, ToolError> {
            Ok(self.0.into())
        }
    }

    #[test]
    fn definitions_are_sorted_and_complete() {
        let registry = ToolRegistry::new()
            .with(Arc::new(Named("zeta")))
            .with(Arc::new(Named("alpha")));
        let names: Vec<_> = registry
            .definitions()
            .iter()
            .map(|d| d.name.clone())
            .collect();
        assert_eq!(names, ["alpha", "zeta"]);
        assert!(registry.get("alpha").is_some());
        assert!(registry.get("beta").is_none());
    }

    #[tokio::test]
    async fn a_registered_tool_can_be_called() {
        let registry = ToolRegistry::new().with(Arc::new(Named("echo")));
        let dir = tempfile::tempdir().expect("tempdir");
        let workspace = crate::Workspace::new(dir.path(), &[], true).expect("workspace");
        let ctx = ToolContext::new(Arc::new(workspace), "s".into());
        let tool = registry.get("echo").expect("registered");
        assert_eq!(tool.call(json!({}), &ctx).await.expect("call").text, "echo");
    }
}
