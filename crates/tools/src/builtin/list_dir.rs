//! `list_dir`: the entries of a directory of the workspace.

use async_trait::async_trait;
use serde::Deserialize;
use serde_json::json;

use super::{args, blocking};
use crate::workspace::EntryKind;
use crate::{Tool, ToolContext, ToolError, ToolOutput};

/// Entries listed at most; the rest are counted.
const MAX_ENTRIES: usize = 1000;

/// Lists a directory.
#[derive(Debug, Default)]
pub struct ListDir;

#[derive(Deserialize)]
struct Args {
    #[serde(default)]
    path: Option<String>,
}

#[async_trait]
impl Tool for ListDir {
    fn name(&self) -> &str {
        "list_dir"
    }

    fn description(&self) -> &str {
        "List a directory of the workspace (default: the workspace itself): directories end \
         with `/`, files show their size, symbolic links end with `@`."
    }

    fn parameters(&self) -> serde_json::Value {
        json!({
            "type": "object",
            "properties": {
                "path": {"type": "string", "description": "directory, relative to the workspace (default \".\")"}
            }
        })
    }

    async fn call(
        &self,
        value: serde_json::Value,
        ctx: &ToolContext,
    ) -> Result<ToolOutput, ToolError> {
        let args: Args = args(value)?;
        let workspace = ctx.workspace.clone();
        blocking(move || {
            let path = workspace.resolve(args.path.as_deref().unwrap_or("."))?;
            let entries = workspace.read_dir(&path)?;
            if entries.is_empty() {
                return Ok(format!("`{}` is empty", path.shown()));
            }
            let mut out = String::new();
            for entry in entries.iter().take(MAX_ENTRIES) {
                match entry.kind {
                    EntryKind::Dir => out.push_str(&format!("{}/\n", entry.name)),
                    EntryKind::File => {
                        out.push_str(&format!("{} ({} bytes)\n", entry.name, entry.size))
                    }
                    EntryKind::Symlink => out.push_str(&format!("{}@\n", entry.name)),
                    EntryKind::Other => out.push_str(&format!("{} (special)\n", entry.name)),
                }
            }
            if entries.len() > MAX_ENTRIES {
                out.push_str(&format!(
                    "[… {} more entries not shown]\n",
                    entries.len() - MAX_ENTRIES
                ));
            }
            Ok(out)
        })
        .await
    }
}
