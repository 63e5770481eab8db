//! The system prompt: the configured opening, then the workspace's context files.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use switchboard_tools::{Workspace, skills};

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
    /// The system prompt, rebuilt when older than [`REUSE_FOR`] (its files read on the
    /// blocking threads).
    pub(crate) async fn get(
        &self,
        opening: &str,
        workspace: &Arc<Workspace>,
        max_bytes: usize,
    ) -> String {
        let now = Instant::now();
        if let Some((built, prompt)) = &*self.last.lock().unwrap_or_else(PoisonError::into_inner)
            && now.duration_since(*built) < REUSE_FOR
        {
            return prompt.clone();
        }
        let (opening_text, files) = (opening.to_owned(), workspace.clone());
        let prompt =
            tokio::task::spawn_blocking(move || system_prompt(&opening_text, &files, max_bytes))
                .await
                .unwrap_or_else(|err| {
                    tracing::error!(error = %err, "the context files could not be read");
                    opening.to_owned()
                });
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

/// Builds the system prompt for a turn: the opening, the context files, then the list of
/// skills. Files are read afresh (the agent may have edited MEMORY.md) through the
/// workspace, so a context file linked to somewhere outside it is not read; missing or
/// unreadable files are skipped.
pub(crate) fn system_prompt(opening: &str, workspace: &Workspace, max_bytes: usize) -> String {
    let mut prompt = String::from(opening);
    for name in CONTEXT_FILES {
        let Ok((text, size)) = workspace.read_text(name, max_bytes) else {
            continue;
        };
        let text = text.trim();
        if text.is_empty() {
            continue;
        }
        prompt.push_str("\n\n## ");
        prompt.push_str(name);
        prompt.push('\n');
        prompt.push_str(text);
        if size > max_bytes as u64 {
            prompt.push_str(&format!(
                "\n[… {name} truncated at {max_bytes} bytes of {size}]"
            ));
        }
    }
    let skills = skills::prompt_section(&skills::list(workspace));
    if !skills.is_empty() {
        prompt.push_str("\n\n");
        prompt.push_str(skills.trim_end());
    }
    prompt
}

#[cfg(test)]
mod tests {
    use super::*;

    fn workspace(dir: &tempfile::TempDir) -> Workspace {
        Workspace::new(dir.path(), &[], true).expect("workspace")
    }

    #[test]
    fn files_are_included_in_order_and_missing_ones_skipped() {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(dir.path().join("MEMORY.md"), "remembers tea").expect("write");
        std::fs::write(dir.path().join("SOUL.md"), "is kind").expect("write");
        let prompt = system_prompt("Opening.", &workspace(&dir), 1000);
        let soul = prompt.find("## SOUL.md").expect("soul");
        let memory = prompt.find("## MEMORY.md").expect("memory");
        assert!(prompt.starts_with("Opening."));
        assert!(soul < memory);
        assert!(!prompt.contains("USER.md"));
    }

    #[tokio::test]
    async fn the_cache_rereads_files_after_invalidation() {
        let dir = tempfile::tempdir().expect("tempdir");
        let cache = ContextCache::default();
        let ws = Arc::new(workspace(&dir));
        assert!(!cache.get("", &ws, 100).await.contains("MEMORY.md"));
        std::fs::write(dir.path().join("MEMORY.md"), "new fact").expect("write");
        assert!(
            !cache.get("", &ws, 100).await.contains("new fact"),
            "reused within a second"
        );
        cache.invalidate();
        assert!(cache.get("", &ws, 100).await.contains("new fact"));
    }

    #[test]
    fn long_files_are_cut_on_a_char_boundary() {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(dir.path().join("USER.md"), "é".repeat(100)).expect("write");
        let prompt = system_prompt("", &workspace(&dir), 7);
        assert!(
            prompt.contains("ééé\n[… USER.md truncated at 7 bytes of 200]"),
            "{prompt}"
        );
    }

    #[test]
    fn a_context_file_linked_outside_the_workspace_is_not_read_and_skills_are_listed() {
        let outside = tempfile::tempdir().expect("tempdir");
        std::fs::write(outside.path().join("secret"), "the host's secret").expect("write");
        let dir = tempfile::tempdir().expect("tempdir");
        std::os::unix::fs::symlink(outside.path().join("secret"), dir.path().join("MEMORY.md"))
            .expect("symlink");
        std::fs::create_dir_all(dir.path().join("skills/notes")).expect("mkdir");
        std::fs::write(
            dir.path().join("skills/notes/SKILL.md"),
            "---\nname: notes\ndescription: keep notes\n---\nbody",
        )
        .expect("write");
        let prompt = system_prompt("", &workspace(&dir), 1000);
        assert!(!prompt.contains("secret"), "{prompt}");
        assert!(
            prompt.contains("- notes (skills/notes/SKILL.md): keep notes"),
            "{prompt}"
        );
        assert!(
            !prompt.contains("body"),
            "only the list, not the body: {prompt}"
        );
    }
}
