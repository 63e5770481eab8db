//! The system prompt: the configured opening, then the workspace's context files.

use std::path::Path;

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
