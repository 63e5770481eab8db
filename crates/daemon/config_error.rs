//! Where a config problem is: [`ConfigError`] (file, line, column, dotted key, message) and
//! [`Source`], the file's path and text kept so that a problem found after parsing — by a
//! section's own checks, an adapter's, the agents' — is located the same way as serde's.
//! Both are the core's (`switchboard_core::ConfigSource`), so a section in any crate locates
//! its errors; reading serde's path is the daemon's.

pub use switchboard_core::{ConfigError, ConfigSource as Source};

/// The dotted key of a serde path, without the internal segments of `Spanned`.
pub(crate) fn key_of(path: &serde_path_to_error::Path) -> String {
    path.to_string()
        .split('.')
        .filter(|segment| !segment.is_empty() && !segment.starts_with("$__"))
        .collect::<Vec<_>>()
        .join(".")
}
