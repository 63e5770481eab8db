//! The built-in tools, one file each, and [`registry`], which builds them from `[tools]`.

mod edit_file;
mod exec;
mod find_files;
mod grep;
mod list_dir;
mod memory_search;
mod message;
mod read_file;
mod send_file;
mod web_fetch;
mod web_search;
mod write_file;

use std::path::Path;
use std::sync::Arc;

pub use edit_file::EditFile;
pub use exec::{DEFAULT_DENY, Exec, ExecOptions, SandboxHelper};
pub use find_files::FindFiles;
pub use grep::Grep;
pub use list_dir::ListDir;
pub use memory_search::MemorySearch;
pub use message::SendMessage;
pub use read_file::ReadFile;
pub use send_file::SendFile;
pub use web_fetch::{WebFetch, WebFetchOptions};
pub use web_search::{SearchProvider, WebSearch, WebSearchOptions};
pub use write_file::WriteFile;

use crate::config::ToolsSection;
use crate::{Outbox, ToolError, ToolOutput, ToolRegistry};

/// The built-in tools `section` turns on. `sandbox` is how `exec` confines commands (the
/// daemon passes itself as the helper); `outbox` is where `message` and `send_file` send (none:
/// neither tool, as in the terminal agent). Fails only on what the section's validation
/// already refuses, or when no HTTP client can be made.
pub fn registry(
    section: &ToolsSection,
    sandbox: Option<SandboxHelper>,
    outbox: Option<Arc<dyn Outbox>>,
) -> Result<ToolRegistry, String> {
    let mut registry = ToolRegistry::new()
        .with(Arc::new(ReadFile))
        .with(Arc::new(WriteFile))
        .with(Arc::new(EditFile))
        .with(Arc::new(ListDir))
        .with(Arc::new(FindFiles))
        .with(Arc::new(Grep));
    if section.exec.enabled {
        let exec = Exec::new(section.exec_options(sandbox).map_err(|p| p.message)?);
        registry.register(Arc::new(exec));
    }
    if section.web_fetch.enabled {
        registry.register(Arc::new(WebFetch::new(section.web_fetch_options())));
    }
    if let Some(outbox) = outbox {
        registry.register(Arc::new(SendMessage::new(outbox.clone())));
        registry.register(Arc::new(SendFile::new(outbox)));
    }
    if let Some(options) = section.web_search_options().map_err(|p| p.message)? {
        let search = WebSearch::new(options).map_err(|err| err.to_string())?;
        registry.register(Arc::new(search));
    }
    Ok(registry)
}

/// A tool's arguments as its own type; what does not fit is an error the model reads.
pub(crate) fn args<T: serde::de::DeserializeOwned>(
    value: serde_json::Value,
) -> Result<T, ToolError> {
    serde_json::from_value(value).map_err(|err| ToolError::InvalidArguments(err.to_string()))
}

/// Runs file-system work off the async threads; a panic in it becomes an error result.
pub(crate) async fn blocking<T: Into<ToolOutput> + Send + 'static>(
    work: impl FnOnce() -> Result<T, ToolError> + Send + 'static,
) -> Result<ToolOutput, ToolError> {
    tokio::task::spawn_blocking(work)
        .await
        .unwrap_or_else(|err| Err(ToolError::Failed(format!("the tool stopped: {err}"))))
        .map(Into::into)
}

/// ripgrep's walker over `root`: `.gitignore` honoured (also outside a git repository),
/// hidden files skipped, symbolic links not followed.
pub(crate) fn walker(root: &Path) -> ignore::WalkBuilder {
    let mut builder = ignore::WalkBuilder::new(root);
    builder
        .follow_links(false)
        .hidden(true)
        .require_git(false)
        .max_filesize(Some(64 * 1024 * 1024));
    builder
}
