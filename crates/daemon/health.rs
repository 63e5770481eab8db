//! `/healthz`: the daemon's and each channel's state, 200 when all is well, 503 when a
//! channel is failing, a check (the session store) reports trouble, or the daemon is
//! stopping.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

use axum::Json;
use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::routing::get;
use serde::Serialize;
use serde_json::json;

/// The state of one channel as the supervisor last saw it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "state", rename_all = "lowercase")]
pub enum ChannelState {
    /// Its task is running.
    Running {
        /// Restarts since the daemon started.
        restarts: u32,
    },
    /// Its task runs, but its connection to the platform fails (the task keeps trying).
    Reconnecting {
        /// Restarts since the daemon started.
        restarts: u32,
        /// The last error.
        error: String,
    },
    /// Its task failed and will be restarted.
    Failed {
        /// Restarts since the daemon started.
        restarts: u32,
        /// The last error.
        error: String,
    },
    /// It stopped with the daemon.
    Stopped,
    /// Another gateway of the cluster holds its connection; this one takes over if that one
    /// goes.
    Standby,
}

/// Shared health state. Cloning shares it.
#[derive(Clone)]
pub struct Health {
    inner: Arc<Inner>,
}

struct Inner {
    started: Instant,
    /// Written by supervisors, read by `/healthz`; held only to copy or set a value.
    channels: Mutex<BTreeMap<String, ChannelState>>,
    /// Set when shutdown begins.
    stopping: std::sync::atomic::AtomicBool,
    /// Set once the daemon serves (listener bound, channels and dispatcher started).
    ready: std::sync::atomic::AtomicBool,
    /// Gauges shown in `/healthz` (active sessions, open sockets), registered at start.
    gauges: Mutex<BTreeMap<String, Gauge>>,
    /// Parts that say more of themselves than a number, shown under their name.
    details: Mutex<BTreeMap<&'static str, Detail>>,
    /// Checks shown under `checks` in `/healthz` (the session store), registered at start.
    checks: Mutex<BTreeMap<&'static str, Check>>,
    /// The names of those of `checks` that do not decide readiness (`/readyz`): a failing
    /// model leaves the daemon able to take messages.
    health_only: Mutex<Vec<&'static str>>,
}

/// A number read when `/healthz` is asked.
pub type Gauge = Box<dyn Fn() -> usize + Send + Sync>;

/// Reads what a part says of itself for `/healthz`.
pub type Detail = Box<dyn Fn() -> serde_json::Value + Send + Sync>;

/// A check run when `/healthz` is asked: `Ok`, or what is wrong (a JSON object).
pub type Check = Box<dyn Fn() -> Result<(), serde_json::Value> + Send + Sync>;

impl Default for Health {
    fn default() -> Self {
        Self::new()
    }
}

impl Health {
    /// Fresh health state.
    pub fn new() -> Self {
        Self {
            inner: Arc::new(Inner {
                started: Instant::now(),
                channels: Mutex::new(BTreeMap::new()),
                stopping: Default::default(),
                ready: Default::default(),
                gauges: Mutex::new(BTreeMap::new()),
                details: Mutex::new(BTreeMap::new()),
                checks: Mutex::new(BTreeMap::new()),
                health_only: Mutex::new(Vec::new()),
            }),
        }
    }

    /// Records a channel's state.
    pub fn set(&self, channel: &str, state: ChannelState) {
        self.inner
            .channels
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(channel.to_owned(), state);
    }

    /// Forgets a channel (a reload disabled it).
    pub fn remove(&self, channel: &str) {
        self.inner
            .channels
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(channel);
    }

    /// A channel's state.
    pub fn get(&self, channel: &str) -> Option<ChannelState> {
        self.inner
            .channels
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(channel)
            .cloned()
    }

    /// Every channel's state, by name.
    pub fn channels(&self) -> BTreeMap<String, ChannelState> {
        self.inner
            .channels
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Every gauge's value now, by name.
    pub fn gauges(&self) -> Vec<(String, usize)> {
        self.inner
            .gauges
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .map(|(name, read)| (name.clone(), read()))
            .collect()
    }

    /// Registers a gauge shown under its name in `/healthz`.
    pub fn gauge(&self, name: impl Into<String>, read: Gauge) {
        self.inner
            .gauges
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(name.into(), read);
    }

    /// Registers what a part says of itself, shown under `name` in `/healthz`.
    pub fn detail(&self, name: &'static str, read: Detail) {
        self.inner
            .details
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(name, read);
    }

    /// Registers a check shown under `checks` in `/healthz`; a failing one makes the
    /// daemon `degraded`.
    pub fn check(&self, name: &'static str, check: Check) {
        self.inner
            .checks
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(name, check);
    }

    /// Registers a check shown under `checks` in `/healthz`, which makes the daemon
    /// `degraded` when it fails but not unready (`/readyz`).
    pub fn check_health_only(&self, name: &'static str, check: Check) {
        self.inner
            .health_only
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(name);
        self.check(name, check);
    }

    /// Marks the daemon as stopping.
    pub fn set_stopping(&self) {
        self.inner
            .stopping
            .store(true, std::sync::atomic::Ordering::Relaxed);
    }

    /// Marks the daemon as serving.
    pub fn set_ready(&self) {
        self.inner
            .ready
            .store(true, std::sync::atomic::Ordering::Relaxed);
    }

    /// The `/healthz` and `/readyz` routes.
    pub fn router(&self) -> Router {
        Router::new()
            .route("/healthz", get(healthz))
            .route("/readyz", get(readyz))
            .with_state(self.clone())
    }
}

/// `/readyz`: whether the daemon takes messages now — started, not stopping, and able to
/// save what it is told (a failing channel does not make it unready: the others serve).
async fn readyz(State(health): State<Health>) -> impl IntoResponse {
    use std::sync::atomic::Ordering::Relaxed;
    let not_ready = |reason: String| {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(json!({"status": "not_ready", "reason": reason})),
        )
    };
    if health.inner.stopping.load(Relaxed) {
        return not_ready("stopping".into());
    }
    if !health.inner.ready.load(Relaxed) {
        return not_ready("starting".into());
    }
    let health_only = health
        .inner
        .health_only
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .clone();
    let checks = health
        .inner
        .checks
        .lock()
        .unwrap_or_else(PoisonError::into_inner);
    for (name, check) in checks
        .iter()
        .filter(|(name, _)| !health_only.contains(name))
    {
        if let Err(problem) = check() {
            return not_ready(format!("{name}: {problem}"));
        }
    }
    (StatusCode::OK, Json(json!({"status": "ready"})))
}

async fn healthz(State(health): State<Health>) -> impl IntoResponse {
    let (healthy, body) = health.report();
    let code = if healthy {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (code, Json(body))
}

impl Health {
    /// Whether the daemon is healthy, and the `/healthz` body saying why (also the control
    /// panel's overview).
    pub fn report(&self) -> (bool, serde_json::Value) {
        let health = self;
        let channels = health
            .inner
            .channels
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        let stopping = health
            .inner
            .stopping
            .load(std::sync::atomic::Ordering::Relaxed);
        let mut checks = serde_json::Map::new();
        let mut checks_ok = true;
        for (name, check) in health
            .inner
            .checks
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
        {
            let value = match check() {
                Ok(()) => json!({"state": "ok"}),
                Err(mut problem) => {
                    checks_ok = false;
                    problem["state"] = json!("degraded");
                    problem
                }
            };
            checks.insert((*name).to_owned(), value);
        }
        let healthy = !stopping
            && checks_ok
            && channels
                .values()
                .all(|state| matches!(state, ChannelState::Running { .. } | ChannelState::Standby));
        let status = if stopping {
            "stopping"
        } else if healthy {
            "ok"
        } else {
            "degraded"
        };
        let mut body = json!({
            "status": status,
            "version": env!("CARGO_PKG_VERSION"),
            "uptime_secs": health.inner.started.elapsed().as_secs(),
            "channels": channels,
            "checks": checks,
        });
        for (name, read) in health
            .inner
            .gauges
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
        {
            body[name.as_str()] = json!(read());
        }
        for (name, read) in health
            .inner
            .details
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
        {
            body[*name] = read();
        }
        (healthy, body)
    }
}
