//! Logging through `tracing`, to stderr, as text or JSON; `RUST_LOG` filters. Under
//! systemd (`JOURNAL_STREAM` set) text lines carry no timestamp (the journal adds its own)
//! and no colours; colours are used only when stderr is a terminal. With the
//! `otlp` feature the subscriber also has a slot for the span exporter, filled once the
//! config is read (see `telemetry.rs`).

use tracing_subscriber::EnvFilter;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;

use crate::cli::LogFormat;

#[cfg(feature = "otlp")]
type Slot = Option<Box<dyn tracing_subscriber::Layer<tracing_subscriber::Registry> + Send + Sync>>;

/// The exporter's place in the global subscriber.
#[cfg(feature = "otlp")]
static EXPORTER: std::sync::OnceLock<
    tracing_subscriber::reload::Handle<Slot, tracing_subscriber::Registry>,
> = std::sync::OnceLock::new();

/// Installs the global subscriber (and the `log` bridge, for libraries that use `log`).
/// `quiet` (the terminal agent, which prints its own errors) logs errors only unless
/// `RUST_LOG` says otherwise.
pub fn init(format: LogFormat, quiet: bool) {
    let default = if quiet { "error" } else { "info" };
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default));
    #[cfg(feature = "otlp")]
    let registry = {
        let (slot, handle) = tracing_subscriber::reload::Layer::new(Slot::None);
        let _ = EXPORTER.set(handle);
        tracing_subscriber::registry().with(slot)
    };
    #[cfg(not(feature = "otlp"))]
    let registry = tracing_subscriber::registry();
    let registry = registry.with(filter);
    let journald = std::env::var_os("JOURNAL_STREAM").is_some();
    let terminal = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let fmt = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_ansi(terminal && !journald);
    let _ = match format {
        LogFormat::Text if journald => registry.with(fmt.without_time()).try_init(),
        LogFormat::Text => registry.with(fmt).try_init(),
        LogFormat::Json => registry.with(fmt.json().flatten_event(true)).try_init(),
    };
}

/// Sends every span from now on to `provider`'s exporter.
#[cfg(feature = "otlp")]
pub(crate) fn export_spans(
    provider: &opentelemetry_sdk::trace::SdkTracerProvider,
) -> anyhow::Result<()> {
    use opentelemetry::trace::TracerProvider as _;
    let handle = EXPORTER
        .get()
        .ok_or_else(|| anyhow::anyhow!("the log subscriber is not installed"))?;
    let layer = tracing_opentelemetry::layer().with_tracer(provider.tracer("switchboard"));
    handle.reload(Some(Box::new(layer) as _))?;
    Ok(())
}
