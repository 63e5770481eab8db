//! `read_file`: a text file of the workspace, by lines (offset/limit for big files), or an
//! image (PNG, JPEG, GIF, WebP), shown to a model that takes images.

use std::io::{BufRead, BufReader, Read};

use async_trait::async_trait;
use serde::Deserialize;
use serde_json::json;

use switchboard_core::ImagePart;

use super::{args, blocking};
use crate::{ResolvedPath, Tool, ToolContext, ToolError, ToolOutput};

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
         give `offset` (1-based line) and `limit` (lines) to read a part. An image (PNG, \
         JPEG, GIF, WebP) is shown to you."
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

    async fn call(
        &self,
        value: serde_json::Value,
        ctx: &ToolContext,
    ) -> Result<ToolOutput, ToolError> {
        let args: Args = args(value)?;
        let workspace = ctx.workspace.clone();
        blocking(move || {
            let path = workspace.resolve(&args.path)?;
            let mut file = workspace.open_read(&path)?;
            if let Some(image) = image(&mut file, &path)? {
                return Ok(image);
            }
            read_lines(
                file,
                &path.shown(),
                args.offset.unwrap_or(1).max(1),
                args.limit.unwrap_or(DEFAULT_LIMIT).max(1),
            )
            .map(ToolOutput::from)
        })
        .await
    }
}

/// The file as an image for the model, when its first bytes say it is one of the types
/// models take; `None` for any other file (read from its start again).
fn image(file: &mut std::fs::File, path: &ResolvedPath) -> Result<Option<ToolOutput>, ToolError> {
    use std::io::{Seek, SeekFrom};
    let shown = path.shown();
    let failed = |err: std::io::Error| ToolError::Failed(format!("`{shown}`: {err}"));
    let mut head = [0u8; 12];
    let read = file.read(&mut head).map_err(failed)?;
    file.seek(SeekFrom::Start(0)).map_err(failed)?;
    let Some(mime) = ImagePart::sniff(&head[..read]) else {
        return Ok(None);
    };
    let bytes = file.metadata().map_err(failed)?.len();
    if bytes > ImagePart::MAX_BYTES {
        return Err(ToolError::Failed(format!(
            "`{shown}` is an image ({mime}, {bytes} bytes), larger than the {} bytes shown \
             to models; it is not shown",
            ImagePart::MAX_BYTES
        )));
    }
    Ok(Some(ToolOutput {
        text: format!("`{shown}` is an image ({mime}, {bytes} bytes)"),
        images: vec![ImagePart {
            path: shown.clone(),
            mime: mime.to_owned(),
        }],
    }))
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
