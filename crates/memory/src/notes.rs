//! The workspace's memory files — `MEMORY.md` and `memory/*.md` — as the index reads them:
//! in chunks of a few paragraphs, so a hit shows the part of a long file that matched.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// The most of one memory file read.
const MAX_FILE: u64 = 4 * 1024 * 1024;

/// The most memory files read from `memory/`.
const MAX_FILES: usize = 1000;

/// About this many bytes make a chunk (a paragraph longer than it is a chunk of its own).
const CHUNK: usize = 1200;

/// A memory file found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Note {
    /// Where it is.
    pub(crate) path: PathBuf,
    /// Its name in the workspace (`MEMORY.md`, `memory/people.md`).
    pub(crate) relative: String,
    /// Its length and modification time in one number: it changed when this did.
    pub(crate) stamp: i64,
}

/// The memory files of `workspace`; symbolic links are not followed (a link out of the
/// workspace is not the agent's memory).
pub(crate) fn files(workspace: &Path) -> Vec<Note> {
    let mut found = Vec::new();
    let mut consider = |path: PathBuf, relative: String| {
        let Ok(meta) = std::fs::symlink_metadata(&path) else {
            return;
        };
        if meta.is_file() {
            let stamp = meta
                .mtime_nsec()
                .wrapping_add(meta.mtime().wrapping_mul(1_000_000_000))
                .wrapping_add(
                    i64::try_from(meta.len())
                        .unwrap_or(i64::MAX)
                        .wrapping_mul(31),
                );
            found.push(Note {
                path,
                relative,
                stamp,
            });
        }
    };
    consider(workspace.join("MEMORY.md"), "MEMORY.md".to_owned());
    if let Ok(entries) = std::fs::read_dir(workspace.join("memory")) {
        let mut names: Vec<String> = entries
            .filter_map(Result::ok)
            .filter_map(|entry| entry.file_name().into_string().ok())
            .filter(|name| name.ends_with(".md") && !name.starts_with('.'))
            .collect();
        names.sort();
        for name in names.into_iter().take(MAX_FILES) {
            consider(
                workspace.join("memory").join(&name),
                format!("memory/{name}"),
            );
        }
    }
    found
}

/// A memory file's text (at most [`MAX_FILE`] bytes of it; invalid UTF-8 replaced).
pub(crate) fn read(path: &Path) -> std::io::Result<String> {
    use std::io::Read;
    let mut bytes = Vec::new();
    std::fs::File::open(path)?
        .take(MAX_FILE)
        .read_to_end(&mut bytes)?;
    Ok(String::from_utf8_lossy(&bytes).into_owned())
}

/// `text` in chunks: paragraphs (split at blank lines) gathered up to about [`CHUNK`] bytes,
/// a heading starting a new chunk.
pub(crate) fn chunks(text: &str) -> Vec<String> {
    let mut chunks = Vec::new();
    let mut current = String::new();
    for paragraph in text.split("\n\n").map(str::trim).filter(|p| !p.is_empty()) {
        let heading = paragraph.starts_with('#');
        if !current.is_empty() && (heading || current.len() + paragraph.len() > CHUNK) {
            chunks.push(std::mem::take(&mut current));
        }
        if !current.is_empty() {
            current.push_str("\n\n");
        }
        current.push_str(paragraph);
    }
    if !current.is_empty() {
        chunks.push(current);
    }
    chunks
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headings_start_chunks_and_long_text_is_split() {
        let text = "# People\n\nAnna likes tea.\n\nBen likes coffee.\n\n# Places\n\nBerlin.";
        assert_eq!(
            chunks(text),
            vec![
                "# People\n\nAnna likes tea.\n\nBen likes coffee.".to_owned(),
                "# Places\n\nBerlin.".to_owned()
            ]
        );
        let long = (0..40)
            .map(|i| format!("paragraph {i} {}", "x".repeat(100)))
            .collect::<Vec<_>>()
            .join("\n\n");
        let parts = chunks(&long);
        assert!(parts.len() > 3, "{}", parts.len());
        assert!(parts.iter().all(|p| p.len() <= CHUNK + 120));
    }

    #[test]
    fn memory_files_are_found_and_links_are_not_followed() {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(dir.path().join("MEMORY.md"), "m").expect("write");
        std::fs::create_dir(dir.path().join("memory")).expect("mkdir");
        std::fs::write(dir.path().join("memory/b.md"), "b").expect("write");
        std::fs::write(dir.path().join("memory/a.txt"), "a").expect("write");
        std::os::unix::fs::symlink("/etc/passwd", dir.path().join("memory/c.md")).expect("link");
        let names: Vec<String> = files(dir.path()).into_iter().map(|n| n.relative).collect();
        assert_eq!(names, ["MEMORY.md", "memory/b.md"]);
    }
}
