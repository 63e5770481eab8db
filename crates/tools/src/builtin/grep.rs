//! `grep`: a regex over the files of the workspace, with ripgrep's crates: the `ignore`
//! walker, `grep-regex` and `grep-searcher`. Each file is opened through the workspace.

use async_trait::async_trait;
use globset::GlobBuilder;
use grep_regex::RegexMatcherBuilder;
use grep_searcher::sinks::UTF8;
use grep_searcher::{BinaryDetection, SearcherBuilder};
use serde::Deserialize;
use serde_json::json;

use super::{args, blocking, walker};
use crate::{Tool, ToolContext, ToolError, ToolOutput};

/// Matching lines shown at most.
const MAX_MATCHES: usize = 200;
/// A matching line longer than this is cut.
const MAX_LINE_BYTES: usize = 300;

/// Searches file contents.
#[derive(Debug, Default)]
pub struct Grep;

#[derive(Deserialize)]
struct Args {
    pattern: String,
    #[serde(default)]
    path: Option<String>,
    #[serde(default)]
    glob: Option<String>,
    #[serde(default)]
    case_insensitive: bool,
}

#[async_trait]
impl Tool for Grep {
    fn name(&self) -> &str {
        "grep"
    }

    fn description(&self) -> &str {
        "Search the files of the workspace for a regular expression (Rust regex syntax); \
         prints `path:line: text` for each matching line. Optionally only files matching \
         `glob`. `.gitignore`d, hidden and binary files are skipped."
    }

    fn parameters(&self) -> serde_json::Value {
        json!({
            "type": "object",
            "properties": {
                "pattern": {"type": "string", "description": "regular expression"},
                "path": {"type": "string", "description": "directory or file to search, relative to the workspace (default \".\")"},
                "glob": {"type": "string", "description": "only files whose path matches, e.g. \"*.md\""},
                "case_insensitive": {"type": "boolean"}
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
        let matcher = RegexMatcherBuilder::new()
            .case_insensitive(args.case_insensitive)
            .size_limit(1 << 20)
            .build(&args.pattern)
            .map_err(|err| ToolError::InvalidArguments(format!("bad regex: {err}")))?;
        let glob = args.glob.as_deref().map(glob_matcher).transpose()?;
        let workspace = ctx.workspace.clone();
        let cancel = ctx.cancel.clone();
        blocking(move || {
            let start = workspace.resolve(args.path.as_deref().unwrap_or("."))?;
            let root = workspace.walk_root(&start)?;
            let mut searcher = SearcherBuilder::new()
                .line_number(true)
                .binary_detection(BinaryDetection::quit(0))
                .build();
            let mut out = String::new();
            let mut shown = 0usize;
            let mut more = 0usize;
            for entry in walker(&root).build() {
                if cancel.is_cancelled() {
                    return Err(ToolError::Cancelled);
                }
                let Ok(entry) = entry else { continue };
                if !entry.file_type().is_some_and(|t| t.is_file())
                    || workspace.forbids(entry.path())
                {
                    continue;
                }
                if let Some(glob) = &glob {
                    let name = entry.path().strip_prefix(&root).unwrap_or(entry.path());
                    if !glob.is_match(name) && !glob.is_match(entry.file_name()) {
                        continue;
                    }
                }
                let relative = workspace.relative(entry.path());
                // Opened through the workspace: a file swapped for a link since the walk
                // saw it is refused, not read.
                let Ok(file) = workspace.open_read(&relative) else {
                    continue;
                };
                let mut found = Found {
                    out: &mut out,
                    shown: &mut shown,
                    more: &mut more,
                    path: relative.shown(),
                };
                let _ =
                    searcher.search_file(&matcher, &file, UTF8(|at, line| found.line(at, line)));
            }
            if shown == 0 {
                return Ok(format!("no match for `{}`", args.pattern));
            }
            if more > 0 {
                out.push_str(&format!("[… {more} more matching lines not shown]\n"));
            }
            Ok(out)
        })
        .await
    }
}
/// A glob of file names, or why it is not one.
fn glob_matcher(glob: &str) -> Result<globset::GlobMatcher, ToolError> {
    Ok(GlobBuilder::new(glob)
        .build()
        .map_err(|err| ToolError::InvalidArguments(format!("bad glob: {err}")))?
        .compile_matcher())
}

/// The matching lines found so far, shown up to [`MAX_MATCHES`] (the rest counted).
struct Found<'a, P> {
    out: &'a mut String,
    shown: &'a mut usize,
    more: &'a mut usize,
    path: P,
}

impl<P: std::fmt::Display> Found<'_, P> {
    /// One matching line, cut at [`MAX_LINE_BYTES`]; the search goes on.
    fn line(&mut self, line_number: u64, line: &str) -> Result<bool, std::io::Error> {
        if *self.shown >= MAX_MATCHES {
            *self.more += 1;
            return Ok(true);
        }
        *self.shown += 1;
        let line = line.trim_end_matches(['\n', '\r']);
        let end = crate::cap::floor_char_boundary(line, MAX_LINE_BYTES);
        let cut = if end < line.len() { " […]" } else { "" };
        let path = &self.path;
        self.out
            .push_str(&format!("{path}:{line_number}: {}{cut}\n", &line[..end]));
        Ok(true)
    }
}
