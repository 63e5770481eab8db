//! Logging through `tracing`, to stderr, as text or JSON; `RUST_LOG` filters.

use tracing_subscriber::EnvFilter;

use crate::cli::LogFormat;

/// Installs the global subscriber (and the `log` bridge, for libraries that use `log`).
/// `quiet` (the terminal agent, which prints its own errors) logs errors only unless
/// `RUST_LOG` says otherwise.
pub fn init(format: LogFormat, quiet: bool) {
    let default = if quiet { "error" } else { "info" };
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    let _ = match format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder.json().flatten_event(true).try_init(),
    };
}
