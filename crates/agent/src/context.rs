//! The system prompt: the configured opening, then the workspace's context files.

use std::path::Path;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

/// How long a built system prompt is reused before the files are read again. Turns that
/// ran tools drop it at once, since a tool may have edited the files.
const REUSE_FOR: Duration = Duration::from_secs(1);

/// The last system prompt and when it was built.
#[derive(Default)]
pub(crate) struct ContextCache {
    /// Held only to copy or replace the prompt, never across a file read.
    last: Mutex<Option<(Instant, String)>>,
}

impl ContextCache {
    /// The system prompt, rebuilt when older than [`REUSE_FOR`].
    pub(crate) fn get(&self, opening: &str, workspace: &Path, max_bytes: usize) -> String {
        let now = Instant::now();
        if let Some((built, prompt)) = &*self.last.lock().unwrap_or_else(PoisonError::into_inner)
            && now.duration_since(*built) < REUSE_FOR
        {
            return prompt.clone();
        }
        let prompt = system_prompt(opening, workspace, max_bytes);
        *self.last.lock().unwrap_or_else(PoisonError::into_inner) = Some((now, prompt.clone()));
        prompt
    }

    /// Forgets the prompt, so the next turn reads the files again.
    pub(crate) fn invalidate(&self) {
        *self.last.lock().unwrap_or_else(PoisonError::into_inner) = None;
    }
}

/// The workspace files that make up the agent's standing context, in prompt order.
pub const CONTEXT_FILES: [&str; 5] = ["SOUL.md", "AGENTS.md", "USER.md", "TOOLS.md", "MEMORY.md"];

/// Builds the system prompt for a turn. Files are read afresh each turn (the agent may
/// have edited MEMORY.md); missing or unreadable files are skipped.
pub(crate) fn system_prompt(opening: &str, workspace: &Path, max_bytes: usize) -> String {
    let mut prompt = String::from(opening);
    for name in CONTEXT_FILES {
        let path = workspace.join(name);
        let Ok(text) = std::fs::read_to_string(&path) else {
            continue;
        };
        let text = text.trim();
        if text.is_empty() {
            continue;
        }
        prompt.push_str("\n\n## ");
        prompt.push_str(name);
        prompt.push('\n');
        if text.len() > max_bytes {
            prompt.push_str(truncate(text, max_bytes));
            prompt.push_str(&format!(
                "\n[… {name} truncated at {max_bytes} bytes of {}]",
                text.len()
            ));
        } else {
            prompt.push_str(text);
        }
    }
    prompt
}

/// The longest prefix of `text` of at most `max` bytes that ends on a char boundary.
fn truncate(text: &str, max: usize) -> &str {
    let mut end = max.min(text.len());
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_are_included_in_order_and_missing_ones_skipped() {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(dir.path().join("MEMORY.md"), "remembers tea").expect("write");
        std::fs::write(dir.path().join("SOUL.md"), "is kind").expect("write");
        let prompt = system_prompt("Opening.", dir.path(), 1000);
        let soul = prompt.find("## SOUL.md").expect("soul");
        let memory = prompt.find("## MEMORY.md").expect("memory");
        assert!(prompt.starts_with("Opening."));
        assert!(soul < memory);
        assert!(!prompt.contains("USER.md"));
    }

    #[test]
    fn the_cache_rereads_files_after_invalidation() {
        let dir = tempfile::tempdir().expect("tempdir");
        let cache = ContextCache::default();
        assert!(!cache.get("", dir.path(), 100).contains("MEMORY.md"));
        std::fs::write(dir.path().join("MEMORY.md"), "new fact").expect("write");
        assert!(
            !cache.get("", dir.path(), 100).contains("new fact"),
            "reused within a second"
        );
        cache.invalidate();
        assert!(cache.get("", dir.path(), 100).contains("new fact"));
    }

    #[test]
    fn long_files_are_cut_on_a_char_boundary() {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(dir.path().join("USER.md"), "é".repeat(100)).expect("write");
        let prompt = system_prompt("", dir.path(), 7);
        assert!(
            prompt.contains("ééé\n[… USER.md truncated at 7 bytes of 200]"),
            "{prompt}"
        );
    }
}
