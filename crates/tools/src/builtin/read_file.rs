//! `read_file`: a text file of the workspace, by lines (offset/limit for big files).

use std::io::{BufRead, BufReader, Read};

use async_trait::async_trait;
use serde::Deserialize;
use serde_json::json;

use super::{args, blocking};
use crate::{Tool, ToolContext, ToolError};

/// Lines shown when the model gives no limit.
const DEFAULT_LIMIT: usize = 2000;
/// A line longer than this is cut (minified files would otherwise fill the result).
const MAX_LINE_BYTES: usize = 2000;

/// Reads a file of the workspace.
#[derive(Debug, Default)]
pub struct ReadFile;

#[derive(Deserialize)]
struct Args {
    path: String,
    /// 1-based line to start at.
    #[serde(default)]
    offset: Option<usize>,
    /// Lines to show.
    #[serde(default)]
    limit: Option<usize>,
}

#[async_trait]
impl Tool for ReadFile {
    fn name(&self) -> &str {
        "read_file"
    }

    fn description(&self) -> &str {
        "Read a text file of the workspace. Paths are relative to the workspace. Big files: \
         give `offset` (1-based line) and `limit` (lines) to read a part."
    }

    fn parameters(&self) -> serde_json::Value {
        json!({
            "type": "object",
            "properties": {
                "path": {"type": "string", "description": "file path, relative to the workspace"},
                "offset": {"type": "integer", "minimum": 1, "description": "first line to read (1-based)"},
                "limit": {"type": "integer", "minimum": 1, "description": "how many lines to read (default 2000)"}
            },
            "required": ["path"]
        })
    }

    async fn call(&self, value: serde_json::Value, ctx: &ToolContext) -> Result<String, ToolError> {
        let args: Args = args(value)?;
        let workspace = ctx.workspace.clone();
        blocking(move || {
            let path = workspace.resolve(&args.path)?;
            let file = workspace.open_read(&path)?;
            read_lines(
                file,
                &path.shown(),
                args.offset.unwrap_or(1).max(1),
                args.limit.unwrap_or(DEFAULT_LIMIT).max(1),
            )
        })
        .await
    }
}

/// Lines `offset..offset + limit` of a file, with a note when there is more.
pub(crate) fn read_lines(
    file: std::fs::File,
    shown: &str,
    offset: usize,
    limit: usize,
) -> Result<String, ToolError> {
    let mut reader = BufReader::new(file);
    let head = reader
        .fill_buf()
        .map_err(|err| ToolError::Failed(format!("`{shown}`: {err}")))?;
    if head[..head.len().min(8192)].contains(&0) {
        let size = reader.get_ref().metadata().map(|m| m.len()).unwrap_or(0);
        return Err(ToolError::Failed(format!(
            "`{shown}` is a binary file ({size} bytes); it is not shown"
        )));
    }
    let mut out = String::new();
    let mut line = Vec::new();
    let mut number = 0usize;
    let mut shown_lines = 0usize;
    loop {
        line.clear();
        let read = (&mut reader)
            .take(64 * 1024 * 1024)
            .read_until(b'\n', &mut line)
            .map_err(|err| ToolError::Failed(format!("`{shown}`: {err}")))?;
        if read == 0 {
            break;
        }
        number += 1;
        if number < offset {
            continue;
        }
        if shown_lines == limit {
            out.push_str(&format!(
                "[… more lines follow; read on with offset={number}]\n"
            ));
            return Ok(out);
        }
        shown_lines += 1;
        let text = String::from_utf8_lossy(&line);
        let text = text.trim_end_matches(['\n', '\r']);
        if text.len() > MAX_LINE_BYTES {
            let end = crate::cap::floor_char_boundary(text, MAX_LINE_BYTES);
            out.push_str(&text[..end]);
            out.push_str(&format!(" [… line cut at {MAX_LINE_BYTES} bytes]"));
        } else {
            out.push_str(text);
        }
        out.push('\n');
    }
    if number == 0 {
        return Ok(format!("`{shown}` is empty"));
    }
    if shown_lines == 0 {
        return Ok(format!(
            "`{shown}` has {number} lines; offset {offset} is past its end"
        ));
    }
    Ok(out)
}
