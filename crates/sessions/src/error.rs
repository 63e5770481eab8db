//! Errors of the session store.

use std::path::PathBuf;

/// What can go wrong reading or writing a session.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// A file or directory could not be read or written.
    #[error("session store I/O on {path}: {source}")]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
    /// A message could not be encoded (never expected; kept so it is not a panic).
    #[error("could not encode a session record: {0}")]
    Encode(#[from] serde_json::Error),
}

impl StoreError {
    pub(crate) fn io(path: impl Into<PathBuf>) -> impl FnOnce(std::io::Error) -> Self {
        let path = path.into();
        move |source| Self::Io { path, source }
    }
}
