//! `find_files`: files of the workspace whose path matches a glob, found by the `ignore`
//! walker (ripgrep's: `.gitignore` honoured, hidden files skipped, links not followed).

use async_trait::async_trait;
use globset::GlobBuilder;
use serde::Deserialize;
use serde_json::json;

use super::{args, blocking, walker};
use crate::{Tool, ToolContext, ToolError, ToolOutput};

/// Paths listed at most.
const MAX_RESULTS: usize = 500;

/// Finds files by glob.
#[derive(Debug, Default)]
pub struct FindFiles;

#[derive(Deserialize)]
struct Args {
    pattern: String,
    #[serde(default)]
    path: Option<String>,
}

#[async_trait]
impl Tool for FindFiles {
    fn name(&self) -> &str {
        "find_files"
    }

    fn description(&self) -> &str {
        "Find files of the workspace by glob, e.g. `**/*.md` or `notes/*.txt` (matched against \
         the path relative to `path`). `.gitignore`d and hidden files are skipped."
    }

    fn parameters(&self) -> serde_json::Value {
        json!({
            "type": "object",
            "properties": {
                "pattern": {"type": "string", "description": "glob, e.g. \"**/*.md\""},
                "path": {"type": "string", "description": "directory to search, relative to the workspace (default \".\")"}
            },
            "required": ["pattern"]
        })
    }

    async fn call(
        &self,
        value: serde_json::Value,
        ctx: &ToolContext,
    ) -> Result<ToolOutput, ToolError> {
        let args: Args = args(value)?;
        let glob = GlobBuilder::new(&args.pattern)
            .literal_separator(true)
            .build()
            .map_err(|err| ToolError::InvalidArguments(format!("bad glob: {err}")))?
            .compile_matcher();
        let workspace = ctx.workspace.clone();
        let cancel = ctx.cancel.clone();
        blocking(move || {
            let start = workspace.resolve(args.path.as_deref().unwrap_or("."))?;
            let root = workspace.walk_root(&start)?;
            let mut found = Vec::new();
            let mut more = 0usize;
            for entry in walker(&root).build() {
                if cancel.is_cancelled() {
                    return Err(ToolError::Cancelled);
                }
                let Ok(entry) = entry else { continue };
                if !entry.file_type().is_some_and(|t| t.is_file()) {
                    continue;
                }
                if workspace.forbids(entry.path()) {
                    continue;
                }
                let Ok(below) = entry.path().strip_prefix(&root) else {
                    continue;
                };
                if glob.is_match(below) {
                    if found.len() < MAX_RESULTS {
                        found.push(workspace.relative(entry.path()).shown());
                    } else {
                        more += 1;
                    }
                }
            }
            if found.is_empty() {
                return Ok(format!("no file matches `{}`", args.pattern));
            }
            found.sort();
            let mut out = found.join("\n");
            out.push('\n');
            if more > 0 {
                out.push_str(&format!("[… {more} more matches not shown]\n"));
            }
            Ok(out)
        })
        .await
    }
}
