//! `/metrics`: Prometheus text, through the `metrics` facade and its Prometheus recorder.
//!
//! Nothing threads counters through the code. The agent loop is measured by a hook
//! ([`MetricsHook`]: turns by how they ended and their duration, LLM calls' latency and
//! tokens by provider and model, tool calls by tool and outcome); the scheduler counts its
//! runs by outcome and how late they started; the hub counts messages in
//! and out per channel where every message passes; and what `/healthz` already knows (active
//! sessions, connections, channel restarts, undeliverable messages) is read when `/metrics`
//! is asked. `[http] metrics = false` turns the route (and the recording) off.
//!
//! Every metric has `# HELP` and `# TYPE` (`describe`), and every series the config makes
//! possible — each model's tokens and errors of each kind, each tool's outcomes, each
//! channel's messages, each way a turn ends — is there at zero from the first scrape
//! (`publish_zeros`, run then rather than at start, so an unscraped daemon pays nothing),
//! so a dashboard or an alert (`rate(...) > 0`, `absent(...)`) works before the first
//! event.

use std::borrow::Cow;
use std::sync::{Arc, OnceLock};
use std::time::Instant;

use async_trait::async_trait;
use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use dashmap::DashMap;
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use switchboard_agent::{Hook, ToolOutcome, TurnInfo, TurnSummary};
use switchboard_core::{SessionKey, ToolCall};
use switchboard_http::{Auth, check_host};
use switchboard_llm::{ChatRequest, ChatResponse};
use switchboard_usage::Spending;

use crate::component::{Assembly, Change, Component};
use crate::config::Config;
use crate::health::{ChannelState, Health};

/// Latency buckets, in seconds: a tool call or a turn of a fast local model up to a long
/// agentic turn.
const BUCKETS: &[f64] = &[
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0,
];

/// The process's recorder: installed once (tests run several daemons in one process).
static RECORDER: OnceLock<Option<PrometheusHandle>> = OnceLock::new();

/// The Prometheus recorder, installed at the first call; `None` if another recorder was
/// installed first.
pub fn recorder() -> Option<PrometheusHandle> {
    RECORDER
        .get_or_init(|| {
            let installed = PrometheusBuilder::new()
                .set_buckets_for_metric(Matcher::Suffix("_seconds".into()), BUCKETS)
                .and_then(PrometheusBuilder::install_recorder);
            match installed {
                Ok(handle) => Some(handle),
                Err(err) => {
                    tracing::warn!(error = %err, "metrics are off: no recorder could be installed");
                    None
                }
            }
        })
        .clone()
}

/// What kind of metric each is: histograms are all of seconds.
#[derive(Clone, Copy)]
enum Kind {
    Counter,
    Gauge,
    Seconds,
}

/// Every metric with its `# HELP`.
const HELP: &[(Kind, &str, &str)] = &[
    (
        Kind::Counter,
        "switchboard_messages_in_total",
        "Messages taken in from people, by channel",
    ),
    (
        Kind::Counter,
        "switchboard_messages_out_total",
        "Messages sent out (replies, deltas, notices), by channel",
    ),
    (
        Kind::Counter,
        "switchboard_turns_started_total",
        "Turns of the agent loop started",
    ),
    (
        Kind::Counter,
        "switchboard_turns_finished_total",
        "Turns finished, by how they ended",
    ),
    (
        Kind::Seconds,
        "switchboard_turn_seconds",
        "How long a turn took, end to end",
    ),
    (
        Kind::Seconds,
        "switchboard_llm_call_seconds",
        "How long an answered LLM call took, by provider and model",
    ),
    (
        Kind::Counter,
        "switchboard_llm_tokens_total",
        "Tokens spent, by provider, model and direction (in, out)",
    ),
    (
        Kind::Counter,
        "switchboard_llm_errors_total",
        "LLM attempts that failed, by provider, model and kind of failure",
    ),
    (
        Kind::Counter,
        "switchboard_audio_errors_total",
        "Attempts of the audio servers that failed, by what they do (transcription, speech), \
         model and kind of failure",
    ),
    (
        Kind::Counter,
        "switchboard_transcriptions_total",
        "Recordings sent to be transcribed, by outcome (heard, failed)",
    ),
    (
        Kind::Counter,
        "switchboard_scheduled_runs_total",
        "Scheduled runs (jobs, heartbeat beats), by how they ended: answered, quiet, stopped, \
         failed (after its tries), skipped",
    ),
    (
        Kind::Seconds,
        "switchboard_scheduled_run_lateness_seconds",
        "How late after its due time a scheduled run started",
    ),
    (
        Kind::Counter,
        "switchboard_tool_calls_total",
        "Tool calls, by tool and outcome (ok, error)",
    ),
    (
        Kind::Counter,
        "switchboard_mcp_calls_total",
        "Calls of MCP servers' tools, by server and outcome (ok, error)",
    ),
    (
        Kind::Seconds,
        "switchboard_mcp_call_seconds",
        "How long calls of an MCP server's tools took, by server",
    ),
    (
        Kind::Gauge,
        "switchboard_usage_usd",
        "US dollars the models cost, by agent and period (today, month; days in limits.timezone), by the price table",
    ),
    (
        Kind::Gauge,
        "switchboard_usage_tokens",
        "Tokens spent, by agent, period (today, month) and kind (input, output, cached input)",
    ),
    (
        Kind::Gauge,
        "switchboard_usage_limit_usd",
        "The daily caps on what the models cost, by scope (daily, daily_per_chat)",
    ),
    (
        Kind::Gauge,
        "switchboard_channel_up",
        "1 while the channel runs, 0 while it is failing or stopped",
    ),
    (
        Kind::Counter,
        "switchboard_channel_restarts_total",
        "Restarts of the channel's task since the daemon started",
    ),
    (
        Kind::Counter,
        "switchboard_undeliverable_total",
        "Outbound messages given up on after their retries, by channel",
    ),
    (
        Kind::Gauge,
        "switchboard_active_sessions",
        "Sessions with a worker in memory",
    ),
    (
        Kind::Gauge,
        "switchboard_websocket_connections",
        "Open WebSocket connections",
    ),
    (
        Kind::Gauge,
        "switchboard_http_connections",
        "Open client connections to the HTTP listener, WebSockets included",
    ),
    (
        Kind::Gauge,
        "switchboard_http_refused_connections",
        "Connections refused for being over a limit, since start",
    ),
];

/// `# HELP` of every metric (and its unit, where it has one).
fn describe() {
    use metrics::{Unit, describe_counter, describe_gauge, describe_histogram};
    for &(kind, name, help) in HELP {
        match kind {
            Kind::Counter => describe_counter!(name, help),
            Kind::Gauge => describe_gauge!(name, help),
            Kind::Seconds => describe_histogram!(name, Unit::Seconds, help),
        }
    }
}

/// Today's and this month's spending per agent, and the caps, as gauges (read from the
/// usage records at each scrape; an agent that spent nothing is at zero).
async fn publish_spending(spending: &Spending, agents: &[String]) {
    let spent = spending.by_agent().await;
    for agent in agents.iter().chain(spent.keys()) {
        let (today, month) = spent.get(agent).copied().unwrap_or_default();
        for (period, spent) in [("today", today), ("month", month)] {
            metrics::gauge!("switchboard_usage_usd", "agent" => agent.clone(), "period" => period)
                .set(spent.usd);
            for (kind, tokens) in [
                ("input", spent.input),
                ("output", spent.output),
                ("cached", spent.cached),
                ("reasoning", spent.reasoning),
            ] {
                metrics::gauge!("switchboard_usage_tokens", "agent" => agent.clone(),
                    "period" => period, "kind" => kind)
                .set(tokens as f64);
            }
        }
    }
    let limits = spending.limits();
    for (scope, cap) in [
        ("daily", limits.daily_usd),
        ("daily_per_chat", limits.daily_usd_per_chat),
    ] {
        if let Some(cap) = cap {
            metrics::gauge!("switchboard_usage_limit_usd", "scope" => scope).set(cap);
        }
    }
}

/// `/metrics` as a component: its recorder installed before anything records (it is built
/// before the channels), its route mounted (`[http] metrics = false`: nothing of it). A
/// change to it needs a restart.
pub(crate) struct Metrics;

impl Component for Metrics {
    async fn build(daemon: &mut Assembly<'_>) -> anyhow::Result<Option<Self>> {
        let config = daemon.config;
        let Some(handle) = config.http.metrics.then(recorder).flatten() else {
            return Ok(None);
        };
        let routes = router(
            handle,
            daemon.health.clone(),
            Series {
                spending: Some(daemon.core.spending.clone()),
                ..Series::of(config, daemon)
            },
            config.metrics_access()?,
            config.http.allowed_hosts.clone(),
        );
        daemon.serve(routes);
        Ok(Some(Self))
    }

    fn prepare(
        &self,
        _config: &Arc<Config>,
        _changed: &[String],
    ) -> Result<Option<Change>, String> {
        Ok(None)
    }
}

impl Series {
    /// The series `/metrics` publishes at zero from the start: this config's models, tools
    /// and channels (those it runs here).
    fn of(config: &Config, daemon: &Assembly<'_>) -> Self {
        let llm = &config.llm;
        let mut models = vec![(llm.provider.get_ref().as_str(), llm.model.clone())];
        for fallback in &llm.fallbacks {
            models.push((fallback.provider.get_ref().as_str(), fallback.model.clone()));
        }
        // The models beyond the chain (`[llm] models`, the agents'), on `[llm]`'s server.
        for name in config.model_names() {
            if !models.iter().any(|(_, have)| *have == name) {
                models.push((llm.provider.get_ref().as_str(), name));
            }
        }
        let agents = &daemon.core.agents;
        let all = agents.default_agent().tool_sources().snapshot();
        let channels = if daemon.place.runs_channels() {
            config.channels.enabled()
        } else {
            Vec::new()
        };
        Self {
            agents: agents
                .iter()
                .map(|agent| agent.name().to_string())
                .collect(),
            spending: None,
            models,
            tools: all.names().map(str::to_owned).collect(),
            channels: channels.into_iter().map(str::to_owned).collect(),
            scheduler: config.scheduler.enabled,
            mcp_servers: config.mcp_names(),
        }
    }
}

/// What the series published at zero are made of: the models (`provider`, `model`), the
/// tools and the channels of this daemon.
#[derive(Clone, Default)]
pub struct Series {
    /// Each model of the chain: its provider (`openai`, `anthropic`) and model.
    pub models: Vec<(&'static str, String)>,
    /// The tools offered to the model.
    pub tools: Vec<String>,
    /// The channels that run.
    pub channels: Vec<String>,
    /// Whether scheduled work runs.
    pub scheduler: bool,
    /// The MCP servers the config names.
    pub mcp_servers: Vec<String>,
    /// The agents' names.
    pub agents: Vec<String>,
    /// What the models cost (exported as gauges at each scrape).
    pub spending: Option<Arc<Spending>>,
}

/// Publishes every series `series` makes possible, at zero (a counter at zero stays
/// there until its first event; nothing that already counted is reset).
fn publish_zeros(series: &Series) {
    metrics::counter!("switchboard_turns_started_total").increment(0);
    if series.scheduler {
        for outcome in switchboard_scheduler::Outcome::ENDED {
            metrics::counter!("switchboard_scheduled_runs_total", "outcome" => outcome)
                .increment(0);
        }
    }
    for end in switchboard_core::TurnEnd::ALL {
        metrics::counter!("switchboard_turns_finished_total", "end" => end.as_str()).increment(0);
    }
    for (provider, model) in &series.models {
        for direction in ["in", "out"] {
            metrics::counter!("switchboard_llm_tokens_total", "provider" => *provider,
                "model" => model.clone(), "direction" => direction)
            .increment(0);
        }
        for kind in switchboard_llm::LlmError::ATTEMPT_KINDS {
            metrics::counter!("switchboard_llm_errors_total", "provider" => *provider,
                "model" => model.clone(), "kind" => kind)
            .increment(0);
        }
    }
    for tool in &series.tools {
        for outcome in ["ok", "error"] {
            metrics::counter!("switchboard_tool_calls_total", "tool" => tool.clone(), "outcome" => outcome)
                .increment(0);
        }
    }
    for server in &series.mcp_servers {
        for outcome in ["ok", "error"] {
            metrics::counter!("switchboard_mcp_calls_total", "server" => server.clone(), "outcome" => outcome)
                .increment(0);
        }
    }
    for channel in &series.channels {
        metrics::counter!("switchboard_messages_in_total", "channel" => channel.clone())
            .increment(0);
        metrics::counter!("switchboard_messages_out_total", "channel" => channel.clone())
            .increment(0);
    }
}

/// What `/metrics` renders from: the recorder, the health state, and the series to publish
/// at zero — at the first scrape (a daemon nobody scrapes pays nothing for them; a scraper
/// sees them from its first look, before any event).
#[derive(Clone)]
struct Exposition {
    handle: PrometheusHandle,
    health: Health,
    zeros: Arc<(Series, std::sync::Once)>,
    /// What the models cost, read at each scrape.
    spending: Option<Arc<Spending>>,
}

/// The `/metrics` route, for those `access` lets in (a bearer token, or — with
/// `Auth::None` — a loopback or `allowed_hosts` Host, against DNS rebinding). `series`
/// are published at zero at the first scrape.
pub fn router(
    handle: PrometheusHandle,
    health: Health,
    series: Series,
    access: Auth,
    allowed_hosts: Vec<String>,
) -> Router {
    let guard = Arc::new((access, allowed_hosts));
    let exposition = Exposition {
        handle,
        health,
        spending: series.spending.clone(),
        zeros: Arc::new((series, std::sync::Once::new())),
    };
    Router::new()
        .route("/metrics", get(render))
        .layer(axum::middleware::from_fn_with_state(guard, check_access))
        .with_state(exposition)
}

async fn check_access(
    State(guard): State<Arc<(Auth, Vec<String>)>>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    let (access, allowed_hosts) = &*guard;
    let refused = match access {
        Auth::Token(_) => access
            .check(request.headers(), None)
            .err()
            .map(|why| (StatusCode::UNAUTHORIZED, why)),
        Auth::None => check_host(request.headers(), allowed_hosts)
            .err()
            .map(|why| (StatusCode::FORBIDDEN, why)),
    };
    match refused {
        Some((status, why)) => {
            let mut response = (status, format!("/metrics: {why}\n")).into_response();
            if status == StatusCode::UNAUTHORIZED {
                response.headers_mut().insert(
                    header::WWW_AUTHENTICATE,
                    axum::http::HeaderValue::from_static("Bearer"),
                );
            }
            response
        }
        None => next.run(request).await,
    }
}

async fn render(State(exposition): State<Exposition>) -> impl IntoResponse {
    let Exposition {
        handle,
        health,
        zeros,
        spending,
    } = exposition;
    zeros.1.call_once(|| {
        describe();
        publish_zeros(&zeros.0);
    });
    for (channel, state) in health.channels() {
        let (up, restarts) = match state {
            ChannelState::Running { restarts } => (1.0, restarts),
            ChannelState::Failed { restarts, .. } | ChannelState::Reconnecting { restarts, .. } => {
                (0.0, restarts)
            }
            ChannelState::Stopped | ChannelState::Standby => (0.0, 0),
        };
        metrics::gauge!("switchboard_channel_up", "channel" => channel.clone()).set(up);
        metrics::counter!("switchboard_channel_restarts_total", "channel" => channel)
            .absolute(u64::from(restarts));
    }
    for (name, value) in health.gauges() {
        match name.strip_suffix("_undeliverable") {
            Some(channel) => metrics::counter!(
                "switchboard_undeliverable_total", "channel" => channel.to_owned()
            )
            .absolute(value as u64),
            None => metrics::gauge!(format!("switchboard_{name}")).set(value as f64),
        }
    }
    if let Some(spending) = spending {
        publish_spending(&spending, &zeros.0.agents).await;
    }
    handle.run_upkeep();
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        handle.render(),
    )
}

/// The agent loop's measurements.
#[derive(Default)]
pub struct MetricsHook {
    /// When each session's running LLM call began (a session runs one turn at a time).
    calls: DashMap<SessionKey, Instant>,
}

impl MetricsHook {
    /// A hook to add to the agent.
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }
}

#[async_trait]
impl Hook for MetricsHook {
    async fn before_llm(&self, turn: TurnInfo<'_>, _request: &mut Cow<'_, ChatRequest>) {
        if turn.iteration == 1 {
            metrics::counter!("switchboard_turns_started_total").increment(1);
        }
        self.calls.insert(turn.session.clone(), Instant::now());
    }

    async fn after_llm(&self, turn: TurnInfo<'_>, response: &ChatResponse) {
        let provider = response.provider;
        let model = response.model.to_string();
        if let Some((_, started)) = self.calls.remove(turn.session) {
            metrics::histogram!("switchboard_llm_call_seconds", "provider" => provider, "model" => model.clone())
                .record(started.elapsed().as_secs_f64());
        }
        let usage = response.usage;
        metrics::counter!("switchboard_llm_tokens_total", "provider" => provider, "model" => model.clone(), "direction" => "in")
            .increment(usage.input_tokens);
        metrics::counter!("switchboard_llm_tokens_total", "provider" => provider, "model" => model, "direction" => "out")
            .increment(usage.output_tokens);
    }

    async fn after_tool(&self, _turn: TurnInfo<'_>, call: &ToolCall, outcome: &mut ToolOutcome) {
        let result = if outcome.is_error { "error" } else { "ok" };
        metrics::counter!("switchboard_tool_calls_total", "tool" => call.name.clone(), "outcome" => result)
            .increment(1);
    }

    async fn on_turn_end(&self, turn: TurnInfo<'_>, summary: TurnSummary<'_>) {
        // A call the turn never saw answered (it failed, or was stopped) is forgotten.
        self.calls.remove(turn.session);
        let end = summary.end.map_or("failed", |end| end.as_str());
        metrics::counter!("switchboard_turns_finished_total", "end" => end).increment(1);
        metrics::histogram!("switchboard_turn_seconds").record(summary.duration.as_secs_f64());
    }
}
