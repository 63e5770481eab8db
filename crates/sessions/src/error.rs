//! Errors of the session store.
//!
//! Their text reaches chats ("this conversation could not be saved: …"), so it never holds a
//! server path; the path is kept in the error for logs ([`StoreError::path`]).

use std::path::{Path, PathBuf};

/// What can go wrong reading or writing a session.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// A session file could not be read or written. The text is the system's reason alone
    /// (`No space left on device`): callers say what they were doing.
    #[error("{source}")]
    Io {
        /// The file or directory (for logs, not for chats).
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
    /// The state directory refused a test write when the store was opened.
    #[error("the directory {} is not writable: {source}", .dir.display())]
    Unwritable {
        /// The directory.
        dir: PathBuf,
        /// Why the test write failed.
        source: std::io::Error,
    },
    /// Another writer changed the session since this one last read it (a worker that lost
    /// its partition to another, on a cluster): nothing was written. Read the session again
    /// and decide anew.
    #[error("the conversation was changed elsewhere since it was read")]
    Stale,
    /// A message could not be encoded (never expected; kept so it is not a panic).
    #[error("could not encode a session record: {0}")]
    Encode(#[from] serde_json::Error),
}

impl StoreError {
    pub(crate) fn io(path: impl Into<PathBuf>) -> impl FnOnce(std::io::Error) -> Self {
        let path = path.into();
        move |source| Self::Io { path, source }
    }

    /// The file or directory the error is about, for logs.
    pub fn path(&self) -> Option<&Path> {
        match self {
            Self::Io { path, .. } => Some(path),
            Self::Unwritable { dir, .. } => Some(dir),
            Self::Stale | Self::Encode(_) => None,
        }
    }
}
