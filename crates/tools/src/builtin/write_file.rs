//! `write_file`: create or replace a file of the workspace.

use async_trait::async_trait;
use serde::Deserialize;
use serde_json::json;

use super::{args, blocking};
use crate::{Tool, ToolContext, ToolError, ToolOutput};

/// Writes a whole file (atomically: the old content or the new, never a mix).
#[derive(Debug, Default)]
pub struct WriteFile;

#[derive(Deserialize)]
struct Args {
    path: String,
    content: String,
}

#[async_trait]
impl Tool for WriteFile {
    fn name(&self) -> &str {
        "write_file"
    }

    fn description(&self) -> &str {
        "Create a file of the workspace, or replace its whole content. Missing directories are \
         created. To change part of a file, use edit_file."
    }

    fn parameters(&self) -> serde_json::Value {
        json!({
            "type": "object",
            "properties": {
                "path": {"type": "string", "description": "file path, relative to the workspace"},
                "content": {"type": "string", "description": "the file's new content"}
            },
            "required": ["path", "content"]
        })
    }

    fn exclusive(&self) -> bool {
        true
    }

    async fn call(
        &self,
        value: serde_json::Value,
        ctx: &ToolContext,
    ) -> Result<ToolOutput, ToolError> {
        let args: Args = args(value)?;
        let workspace = ctx.workspace.clone();
        blocking(move || {
            let path = workspace.resolve(&args.path)?;
            workspace.write(&path, args.content.as_bytes())?;
            Ok(format!(
                "wrote {} bytes to `{}`",
                args.content.len(),
                path.shown()
            ))
        })
        .await
    }
}
