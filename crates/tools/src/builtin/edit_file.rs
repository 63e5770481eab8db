//! `edit_file`: replace one exact, unique piece of a file.

use std::io::Read;

use async_trait::async_trait;
use serde::Deserialize;
use serde_json::json;

use super::{args, blocking};
use crate::{Tool, ToolContext, ToolError, ToolOutput};

/// A file larger than this is not edited in place (write it whole instead).
const MAX_EDIT_BYTES: u64 = 8 * 1024 * 1024;

/// Replaces `old_string` by `new_string` where it occurs exactly once.
#[derive(Debug, Default)]
pub struct EditFile;

#[derive(Deserialize)]
struct Args {
    path: String,
    old_string: String,
    new_string: String,
}

#[async_trait]
impl Tool for EditFile {
    fn name(&self) -> &str {
        "edit_file"
    }

    fn description(&self) -> &str {
        "Change a file of the workspace: replace `old_string`, which must occur exactly once \
         (include enough surrounding text to make it unique), with `new_string`. Nothing \
         changes when it is missing or occurs more than once."
    }

    fn parameters(&self) -> serde_json::Value {
        json!({
            "type": "object",
            "properties": {
                "path": {"type": "string", "description": "file path, relative to the workspace"},
                "old_string": {"type": "string", "description": "the exact text to replace"},
                "new_string": {"type": "string", "description": "what replaces it"}
            },
            "required": ["path", "old_string", "new_string"]
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
            let shown = path.shown();
            if args.old_string.is_empty() {
                return Err(ToolError::InvalidArguments(
                    "old_string is empty; to write a whole file use write_file".into(),
                ));
            }
            let file = workspace.open_read(&path)?;
            let mut text = String::new();
            file.take(MAX_EDIT_BYTES + 1)
                .read_to_string(&mut text)
                .map_err(|err| ToolError::Failed(format!("`{shown}` is not UTF-8 text: {err}")))?;
            if text.len() as u64 > MAX_EDIT_BYTES {
                return Err(ToolError::Failed(format!(
                    "`{shown}` is larger than {MAX_EDIT_BYTES} bytes; it was not changed"
                )));
            }
            let edited = replace_unique(&text, &args.old_string, &args.new_string)
                .map_err(|why| ToolError::Failed(format!("`{shown}` was not changed: {why}")))?;
            workspace.write(&path, edited.as_bytes())?;
            Ok(format!("edited `{shown}`"))
        })
        .await
    }
}

/// `text` with its one occurrence of `old` replaced; why not, when `old` is missing or
/// occurs more than once.
pub(crate) fn replace_unique(text: &str, old: &str, new: &str) -> Result<String, String> {
    let mut found = text.match_indices(old);
    let Some((at, _)) = found.next() else {
        return Err("old_string was not found (check whitespace and line breaks)".into());
    };
    let more = found.count();
    if more > 0 {
        return Err(format!(
            "old_string occurs {} times; include more surrounding text so it is unique",
            more + 1
        ));
    }
    let mut out = String::with_capacity(text.len() - old.len() + new.len());
    out.push_str(&text[..at]);
    out.push_str(new);
    out.push_str(&text[at + old.len()..]);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::replace_unique;

    #[test]
    fn only_a_unique_match_is_replaced() {
        assert_eq!(replace_unique("a b c", "b", "x"), Ok("a x c".into()));
        assert!(
            replace_unique("a b c", "z", "x")
                .expect_err("refused")
                .contains("not found")
        );
        assert!(
            replace_unique("b b", "b", "x")
                .expect_err("refused")
                .contains("2 times")
        );
        // Occurrences are counted without overlap, as they would be replaced.
        assert!(replace_unique("aaa", "aa", "x").is_ok_and(|s| s == "xa"));
    }
}
