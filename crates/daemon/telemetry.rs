//! `[telemetry]`: sending the agent loop's spans (turn → llm → tool → verify, each with its
//! sizes, duration and attempt) to an OpenTelemetry collector over OTLP/HTTP (JSON).
//!
//! The exporter is a cargo feature (`otlp`), off by default: a build without it refuses a
//! config that sets `otlp_endpoint` rather than silently sending nothing. The spans exist
//! either way (they are `tracing` spans, in the logs at `RUST_LOG=debug`); the feature adds
//! a layer to the subscriber that exports them, batched on a thread of its own.

use serde::Deserialize;
use toml::Spanned;

use crate::config_error::{ConfigError, Source};

/// `[telemetry]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TelemetrySection {
    /// Where spans go: the collector's OTLP/HTTP traces URL,
    /// e.g. `http://127.0.0.1:4318/v1/traces`. None: no export.
    pub otlp_endpoint: Option<Spanned<String>>,
    /// The `service.name` the spans carry.
    pub service_name: String,
}

impl Default for TelemetrySection {
    fn default() -> Self {
        Self {
            otlp_endpoint: None,
            service_name: "switchboard".into(),
        }
    }
}

impl TelemetrySection {
    pub(crate) fn validate(&self, source: &Source) -> Result<(), ConfigError> {
        let Some(endpoint) = &self.otlp_endpoint else {
            return Ok(());
        };
        if !cfg!(feature = "otlp") {
            return Err(source.error_at(
                Some(endpoint.span()),
                "telemetry.otlp_endpoint".into(),
                "this switchboard was built without the OTLP exporter; build it with \
                 `cargo build --release --features otlp`, or remove the key"
                    .into(),
            ));
        }
        switchboard_llm::section::check_url(source, Some(endpoint), "telemetry.otlp_endpoint")
    }
}

/// The running exporter; [`Telemetry::shutdown`] sends what is still buffered.
#[derive(Default)]
pub struct Telemetry {
    #[cfg(feature = "otlp")]
    provider: Option<opentelemetry_sdk::trace::SdkTracerProvider>,
}

impl Telemetry {
    /// Starts exporting when the config asks for it (the config was validated, so without
    /// the feature there is nothing to start).
    pub async fn start(section: &TelemetrySection) -> anyhow::Result<Self> {
        let Some(endpoint) = &section.otlp_endpoint else {
            return Ok(Self::default());
        };
        #[cfg(feature = "otlp")]
        {
            let endpoint = endpoint.get_ref().clone();
            let service = section.service_name.clone();
            // The exporter's HTTP client is a blocking one: it must be built (and later
            // dropped) outside the async runtime's threads.
            let provider =
                tokio::task::spawn_blocking(move || otlp::provider(&endpoint, &service)).await??;
            crate::logging::export_spans(&provider)?;
            tracing::info!(endpoint = %section.otlp_endpoint.as_ref().map(|e| e.get_ref().as_str()).unwrap_or_default(),
                "exporting spans over OTLP");
            Ok(Self {
                provider: Some(provider),
            })
        }
        #[cfg(not(feature = "otlp"))]
        {
            let _ = endpoint;
            Ok(Self::default())
        }
    }

    /// Flushes and stops the exporter.
    pub async fn shutdown(self) {
        #[cfg(feature = "otlp")]
        if let Some(provider) = self.provider {
            let flushed = tokio::task::spawn_blocking(move || provider.shutdown()).await;
            if let Ok(Err(err)) = flushed {
                tracing::warn!(error = %err, "could not flush the last spans");
            }
        }
    }
}

#[cfg(feature = "otlp")]
mod otlp {
    use std::time::Duration;

    use opentelemetry_otlp::{Protocol, SpanExporter, WithExportConfig};
    use opentelemetry_sdk::Resource;
    use opentelemetry_sdk::trace::SdkTracerProvider;

    /// A tracer provider exporting to `endpoint` in batches.
    pub(super) fn provider(endpoint: &str, service: &str) -> anyhow::Result<SdkTracerProvider> {
        let exporter = SpanExporter::builder()
            .with_http()
            .with_protocol(Protocol::HttpJson)
            .with_endpoint(endpoint)
            .with_timeout(Duration::from_secs(10))
            .build()?;
        let resource = Resource::builder()
            .with_service_name(service.to_owned())
            .build();
        Ok(SdkTracerProvider::builder()
            .with_batch_exporter(exporter)
            .with_resource(resource)
            .build())
    }
}
