//! `memory_search`: the agent finds again what was said in its chats — long out of the
//! window, or in a conversation `/new` closed — and what its memory files hold, with the date,
//! the chat and who said it. It searches only the agent's own chats and files.

use std::sync::Arc;

use async_trait::async_trait;
use serde::Deserialize;
use serde_json::json;
use switchboard_core::{Memory, MemoryQuery, MemoryScope, memory_lines, parse_utc};

use super::args;
use crate::{Tool, ToolContext, ToolError, ToolOutput};

/// Searches the agent's memory.
#[derive(Debug)]
pub struct MemorySearch {
    memory: Arc<dyn Memory>,
    default_limit: usize,
}

impl MemorySearch {
    /// A `memory_search` tool asking `memory`, returning `default_limit` hits unless asked.
    pub fn new(memory: Arc<dyn Memory>, default_limit: usize) -> Self {
        Self {
            memory,
            default_limit,
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Args {
    query: String,
    #[serde(default)]
    scope: Option<String>,
    #[serde(default)]
    since: Option<String>,
    #[serde(default)]
    until: Option<String>,
    #[serde(default)]
    limit: Option<usize>,
}

#[async_trait]
impl Tool for MemorySearch {
    fn name(&self) -> &str {
        "memory_search"
    }

    fn description(&self) -> &str {
        "Search everything said in your chats (also long ago, and conversations closed with \
         /new) and your memory files (MEMORY.md, memory/*.md). Words must all match; use \
         \"quoted phrases\", OR, NOT and prefix*. Each hit comes with its date (UTC), the chat \
         and who said it, the matching words in **bold**."
    }

    fn parameters(&self) -> serde_json::Value {
        json!({
            "type": "object",
            "properties": {
                "query": {"type": "string", "description": "What to find."},
                "scope": {
                    "type": "string",
                    "enum": ["chat", "chats", "all"],
                    "description": "chat: this chat only; chats: all your chats; all (default): your chats and memory files."
                },
                "since": {"type": "string", "description": "Only from this UTC date or time on (2026-11-30, 2026-11-30T18:00)."},
                "until": {"type": "string", "description": "Only before this UTC date or time."},
                "limit": {"type": "integer", "minimum": 1, "maximum": MemoryQuery::MAX_LIMIT, "description": "How many hits at most."}
            },
            "required": ["query"]
        })
    }

    async fn call(
        &self,
        args_value: serde_json::Value,
        ctx: &ToolContext,
    ) -> Result<ToolOutput, ToolError> {
        let a: Args = args(args_value)?;
        let scope = match a.scope.as_deref() {
            None | Some("all") => MemoryScope::All,
            Some("chats") => MemoryScope::Chats,
            Some("chat") => MemoryScope::Chat(ctx.session.clone()),
            Some(other) => {
                return Err(ToolError::InvalidArguments(format!(
                    "scope is chat, chats or all, not {other:?}"
                )));
            }
        };
        let time = |value: Option<String>, name: &str| match value {
            None => Ok(None),
            Some(text) => parse_utc(&text).map(Some).ok_or_else(|| {
                ToolError::InvalidArguments(format!(
                    "{name} is a UTC date or time like 2026-11-30 or 2026-11-30T18:00, not {text:?}"
                ))
            }),
        };
        let query = MemoryQuery {
            since: time(a.since, "since")?,
            until: time(a.until, "until")?,
            limit: a
                .limit
                .unwrap_or(self.default_limit)
                .clamp(1, MemoryQuery::MAX_LIMIT),
            text: a.query,
            scope,
        };
        let text = query.text.clone();
        let hits = self
            .memory
            .search(&ctx.agent, query)
            .await
            .map_err(|err| ToolError::Failed(err.to_string()))?;
        Ok(memory_lines(&text, &hits).into())
    }
}
