//! [`OtlpReceiver`]: an OpenTelemetry collector's OTLP/HTTP traces endpoint
//! (`POST /v1/traces`, JSON encoding), keeping every span it receives.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::post;
use serde_json::Value;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

/// One received span, as the test reads it.
#[derive(Clone, Debug, PartialEq)]
pub struct Span {
    /// Its name (`turn`, `llm`, `tool`, `verify`, …).
    pub name: String,
    /// Its trace's id (hex).
    pub trace_id: String,
    /// Its id (hex).
    pub span_id: String,
    /// Its parent's id (hex), empty for a root span.
    pub parent_span_id: String,
    /// Its attributes, values as text.
    pub attributes: HashMap<String, String>,
}

#[derive(Default)]
struct Received {
    spans: Mutex<Vec<Span>>,
    changed: Notify,
}

/// A running receiver; it stops when dropped.
pub struct OtlpReceiver {
    addr: std::net::SocketAddr,
    received: Arc<Received>,
    stop: CancellationToken,
}

impl OtlpReceiver {
    /// Starts on 127.0.0.1 with an ephemeral port.
    pub async fn start() -> std::io::Result<Self> {
        let received = Arc::new(Received::default());
        let app = Router::new()
            .route("/v1/traces", post(traces))
            .with_state(received.clone());
        let addr = "127.0.0.1:0".parse().map_err(std::io::Error::other)?;
        let (addr, stop) = crate::serve(app, addr).await?;
        Ok(Self {
            addr,
            received,
            stop,
        })
    }

    /// The URL to configure as the traces endpoint.
    pub fn traces_url(&self) -> String {
        format!("http://{}/v1/traces", self.addr)
    }

    /// Every span received so far.
    pub fn spans(&self) -> Vec<Span> {
        self.received
            .spans
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Waits until spans with each of `names` arrived; panics after `timeout`.
    pub async fn wait_for(&self, names: &[&str], timeout: Duration) -> Vec<Span> {
        crate::wait_on(
            &self.received.changed,
            timeout,
            &format!("spans {names:?}"),
            || {
                let spans = self.spans();
                names
                    .iter()
                    .all(|name| spans.iter().any(|s| s.name == *name))
            },
            || {
                format!(
                    "received {:?}",
                    self.spans().iter().map(|s| &s.name).collect::<Vec<_>>()
                )
            },
        )
        .await;
        self.spans()
    }
}

impl Drop for OtlpReceiver {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

async fn traces(State(received): State<Arc<Received>>, body: String) -> (StatusCode, String) {
    let Ok(request) = serde_json::from_str::<Value>(&body) else {
        return (StatusCode::BAD_REQUEST, "expected OTLP JSON".into());
    };
    let mut spans = Vec::new();
    let resources = request["resourceSpans"].as_array().into_iter().flatten();
    for scope in resources.flat_map(|r| r["scopeSpans"].as_array().into_iter().flatten()) {
        for span in scope["spans"].as_array().into_iter().flatten() {
            let text = |key: &str| span[key].as_str().unwrap_or_default().to_owned();
            let attributes = span["attributes"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|a| {
                    let value = a["value"]
                        .as_object()
                        .and_then(|v| v.values().next())
                        .map(|v| v.as_str().map_or_else(|| v.to_string(), str::to_owned))
                        .unwrap_or_default();
                    (a["key"].as_str().unwrap_or_default().to_owned(), value)
                })
                .collect();
            spans.push(Span {
                name: text("name"),
                trace_id: text("traceId"),
                span_id: text("spanId"),
                parent_span_id: text("parentSpanId"),
                attributes,
            });
        }
    }
    received
        .spans
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .extend(spans);
    received.changed.notify_waiters();
    (StatusCode::OK, "{}".into())
}
