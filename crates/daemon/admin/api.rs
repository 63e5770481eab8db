//! The panel's JSON API, under `/admin/api/`: a route per request on axum's `Router`, each
//! handler taking what it needs as typed extractors (its state, its path's parts, its query),
//! each answer — and each refusal — JSON and a thin reading of what the CLI or the chats
//! already use (see the module doc of `admin`).

use std::sync::{Arc, PoisonError};
use std::time::{Duration, UNIX_EPOCH};

use axum::body::Bytes;
use axum::extract::{FromRequestParts, Path, Query, State};
use axum::http::request::Parts;
use axum::http::{Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::{MethodRouter, any, get, post};
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::{Value, json};
use switchboard_adapter::PairingError;
use switchboard_core::{
    AgentName, InboundMessage, MemoryError, MemoryQuery, MemoryScope, SenderId, SessionKey,
};
use switchboard_scheduler::Asker;

use super::Admin;
use crate::component::Reloaded;
use crate::config::{Config, Secrets};
use crate::usage_cli::Report;

/// The most sessions listed (the most recently written).
const MAX_SESSIONS: usize = 200;
/// How long a reload may take before the panel stops waiting for it.
const RELOAD_WAIT: Duration = Duration::from_secs(60);

/// Why a request got no answer: the status and what to tell the operator.
pub(super) struct Failure(StatusCode, String);

impl IntoResponse for Failure {
    fn into_response(self) -> Response {
        (self.0, Json(json!({"error": self.1}))).into_response()
    }
}

/// What a request is answered: JSON, or why not (JSON too).
type Answer = Result<Json<Value>, Failure>;

fn failed(status: StatusCode, error: impl std::fmt::Display) -> Failure {
    Failure(status, error.to_string())
}

/// The panel's state, as its handlers take it.
type Panel = State<Arc<Admin>>;

/// The API's routes (under `/admin/api/`; the token was checked before). A method or path it
/// does not have is answered 404, in JSON like every answer.
pub(super) fn routes() -> Router<Arc<Admin>> {
    let only = |route: MethodRouter<Arc<Admin>>| route.fallback(not_found);
    Router::new()
        .route("/admin/api/overview", only(get(overview)))
        .route("/admin/api/sessions", only(get(sessions)))
        .route("/admin/api/transcript", only(get(transcript)))
        .route("/admin/api/search", only(get(search)))
        .route("/admin/api/reset", only(post(reset)))
        .route("/admin/api/pairing", only(get(pairing)))
        .route("/admin/api/pairing/{code}/{verdict}", only(post(decide)))
        .route("/admin/api/approved/{sender}/revoke", only(post(revoke)))
        .route("/admin/api/usage", only(get(usage)))
        .route("/admin/api/jobs", only(get(jobs)))
        .route("/admin/api/jobs/{id}/runs", only(get(runs)))
        .route("/admin/api/jobs/{id}/{action}", only(post(act)))
        .route("/admin/api/config", only(get(config)))
        .route("/admin/api/reload", only(post(reload)))
        .route("/admin/api/{*path}", any(not_found))
}

/// A method or path the API does not have.
async fn not_found(method: Method, uri: Uri) -> Failure {
    failed(StatusCode::NOT_FOUND, format!("no {method} {}", uri.path()))
}

/// A query, refused in JSON when it does not read.
struct Asked<T>(T);

impl<T: serde::de::DeserializeOwned, S: Send + Sync> FromRequestParts<S> for Asked<T> {
    type Rejection = Failure;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, Failure> {
        Query::<T>::try_from_uri(&parts.uri)
            .map(|Query(query)| Asked(query))
            .map_err(|err| failed(StatusCode::BAD_REQUEST, err.body_text()))
    }
}

/// Channels and checks (`/healthz`'s report), the agents, and the tools each source offers
/// (the built-in ones, each MCP server's).
async fn overview(State(admin): Panel) -> Answer {
    let (healthy, health) = admin.health.report();
    let tools = admin.agents.default_agent().tool_sources().snapshot();
    let mut servers: std::collections::BTreeMap<&str, Vec<&str>> = Default::default();
    let mut builtin = Vec::new();
    for name in tools.names() {
        match name.split_once("__") {
            Some((server, tool)) => servers.entry(server).or_default().push(tool),
            None => builtin.push(name),
        }
    }
    let agents: Vec<Value> = admin
        .agents
        .iter()
        .map(|agent| {
            let models = agent.models();
            let choices: Vec<&str> = models.names().collect();
            json!({
                "name": agent.name().to_string(),
                "model": models.default_chain().model(),
                "choices": choices,
            })
        })
        .collect();
    Ok(Json(json!({
        "healthy": healthy,
        "health": health,
        "agents": agents,
        "tools": builtin,
        "mcp": servers,
    })))
}

/// The sessions of every agent, most recently written first, with their message counts.
async fn sessions(State(admin): Panel) -> Answer {
    let mut all = Vec::new();
    for agent in admin.agents.iter() {
        let store = agent.store();
        match store.list().await {
            Ok(sessions) => all.extend(
                sessions
                    .into_iter()
                    .map(|session| (agent.name().clone(), store.clone(), session)),
            ),
            Err(err) => return Err(failed(StatusCode::INTERNAL_SERVER_ERROR, err)),
        }
    }
    all.sort_by_key(|entry| std::cmp::Reverse(entry.2.modified));
    all.truncate(MAX_SESSIONS);
    // The web page's chats by the titles it gave them.
    let state_dir = admin.state_dir.clone();
    let titles = tokio::task::spawn_blocking(move || switchboard_websocket::titles(&state_dir))
        .await
        .unwrap_or_default();
    let prefix = format!("{}_", switchboard_websocket::CHANNEL_NAME);
    let mut sessions = Vec::with_capacity(all.len());
    for (agent, store, session) in all {
        let messages = match &session.key {
            Some(key) => store
                .transcript(key)
                .await
                .ok()
                .map(|messages| messages.len()),
            None => None,
        };
        let key = session.key.as_ref().map(SessionKey::to_string);
        let title = key
            .as_deref()
            .and_then(|key| key.strip_prefix(&prefix))
            .and_then(|chat| titles.get(chat));
        sessions.push(json!({
            "agent": agent.to_string(),
            "title": title,
            "key": key,
            "name": session.name,
            "modified_ms": session.modified.duration_since(UNIX_EPOCH)
                .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
            "bytes": session.bytes,
            "messages": messages,
        }));
    }
    Ok(Json(json!({"sessions": sessions})))
}

#[derive(Deserialize)]
struct SessionRef {
    agent: String,
    key: String,
}

/// A session's conversation, read-only, as the chat page shows it.
async fn transcript(State(admin): Panel, Asked(session): Asked<SessionRef>) -> Answer {
    let Some(agent) = admin.agents.get(&AgentName::from(session.agent.as_str())) else {
        return Err(failed(
            StatusCode::NOT_FOUND,
            format!("no agent `{}`", session.agent),
        ));
    };
    let store = agent.store();
    let key = SessionKey::from(session.key);
    match store.transcript(&key).await {
        Ok(messages) => Ok(Json(
            json!({"messages": switchboard_websocket::said_of(messages)}),
        )),
        Err(err) => Err(failed(StatusCode::INTERNAL_SERVER_ERROR, err)),
    }
}

#[derive(Deserialize)]
struct SearchRef {
    q: String,
    agent: Option<String>,
}

/// What every agent's memory (or one's) finds of `q`: its chats and memory files, best first
/// per agent (`switchboard memory search`).
async fn search(State(admin): Panel, Asked(asked): Asked<SearchRef>) -> Answer {
    let mut hits = Vec::new();
    let mut searched = false;
    for agent in admin.agents.iter() {
        if asked
            .agent
            .as_deref()
            .is_some_and(|name| name != agent.name().as_str())
        {
            continue;
        }
        let Some(memory) = agent.memory() else {
            continue;
        };
        searched = true;
        let mut query = MemoryQuery::new(asked.q.as_str(), MemoryScope::All);
        query.limit = MemoryQuery::MAX_LIMIT;
        let found = memory
            .memory
            .search(agent.name(), query)
            .await
            .map_err(|err| match err {
                MemoryError::Query(why) => failed(StatusCode::BAD_REQUEST, why),
                MemoryError::Index(why) => failed(StatusCode::INTERNAL_SERVER_ERROR, why),
            })?;
        hits.extend(found.into_iter().map(|hit| {
            json!({
                "agent": agent.name().to_string(),
                "place": hit.place,
                "file": hit.file,
                "at_ms": hit.at,
                "who": hit.who,
                "snippet": hit.snippet,
                "archived": hit.archived,
            })
        }));
    }
    if !searched {
        return Err(failed(
            StatusCode::CONFLICT,
            "memory search is off: set [memory] enabled = true",
        ));
    }
    Ok(Json(json!({"hits": hits})))
}

/// Starts a session anew: `/new` sent to its chat, through its worker, as if its person sent
/// it (the chat is told "Started a new session.").
async fn reset(State(admin): Panel, body: Bytes) -> Answer {
    let session: SessionRef = serde_json::from_slice(&body).map_err(|err| {
        failed(
            StatusCode::BAD_REQUEST,
            format!("expected {{\"agent\", \"key\"}}: {err}"),
        )
    })?;
    let key = SessionKey::from(session.key);
    let Some((channel, chat)) = key.split() else {
        return Err(failed(
            StatusCode::BAD_REQUEST,
            format!("`{key}` names no chat"),
        ));
    };
    let agent = AgentName::from(session.agent.as_str());
    let Some(found) = admin.agents.get(&agent) else {
        return Err(failed(StatusCode::NOT_FOUND, format!("no agent `{agent}`")));
    };
    // Only a session there is: a `/new` to any key would start a chat nobody had.
    if !found.store().has_history(&key).await {
        return Err(failed(
            StatusCode::NOT_FOUND,
            format!("agent `{agent}` has no session `{key}`"),
        ));
    }
    let mut new = InboundMessage::text(channel, chat, SenderId::from("operator"), "/new");
    new.agent = Some(agent);
    match admin.hub.publish_inbound(new).await {
        Ok(()) => Ok(Json(json!({"reset": key.to_string()}))),
        Err(err) => Err(failed(StatusCode::SERVICE_UNAVAILABLE, err)),
    }
}

/// The codes waiting and the senders approved (`switchboard pairing list`).
async fn pairing(State(admin): Panel) -> Answer {
    let pairing = admin.pairing.clone();
    match pairing.list().await {
        Ok(file) => serde_json::to_value(file)
            .map(Json)
            .map_err(|err| failed(StatusCode::INTERNAL_SERVER_ERROR, err)),
        Err(err) => Err(failed(StatusCode::INTERNAL_SERVER_ERROR, err)),
    }
}

/// Approves or denies a code (`switchboard pairing approve|deny CODE`).
async fn decide(State(admin): Panel, Path((code, verdict)): Path<(String, String)>) -> Answer {
    let pairing = &admin.pairing;
    let status = |err: &PairingError| match err {
        PairingError::UnknownCode(_) | PairingError::UnknownSender(_) => StatusCode::NOT_FOUND,
        _ => StatusCode::INTERNAL_SERVER_ERROR,
    };
    let decided = match verdict.as_str() {
        "approve" => pairing
            .approve(&code)
            .await
            .map(|a| json!({"approved": format!("{}:{}", a.channel, a.sender)})),
        "deny" => pairing.deny(&code).await.map(|p| json!({"denied": p.code})),
        other => {
            return Err(failed(
                StatusCode::NOT_FOUND,
                format!("`{other}`: approve or deny"),
            ));
        }
    };
    decided.map(Json).map_err(|err| failed(status(&err), err))
}

/// Revokes an approved sender, `channel:id` (`switchboard pairing revoke`): their next
/// message gets a pairing code, as a stranger's would.
async fn revoke(State(admin): Panel, Path(sender): Path<String>) -> Answer {
    match admin.pairing.revoke(&sender).await {
        Ok(gone) => {
            let revoked: Vec<String> = gone
                .iter()
                .map(|a| format!("{}:{}", a.channel, a.sender))
                .collect();
            Ok(Json(json!({"revoked": revoked})))
        }
        Err(err @ PairingError::UnknownSender(_)) => Err(failed(StatusCode::NOT_FOUND, err)),
        Err(err) => Err(failed(StatusCode::INTERNAL_SERVER_ERROR, err)),
    }
}

#[derive(Deserialize)]
struct Days {
    days: Option<u32>,
}

/// What the models cost, per day, agent and chat (`switchboard usage`).
async fn usage(State(admin): Panel, Asked(days): Asked<Days>) -> Answer {
    let text = admin
        .config_text
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .clone();
    let config = Config::parse_with(&text, &admin.path, Secrets::Skip)
        .map_err(|err| failed(StatusCode::INTERNAL_SERVER_ERROR, err))?;
    match Report::read(&config, &*admin.usage, days.days.unwrap_or(7).clamp(1, 366)).await {
        Ok(report) => {
            let days: Vec<Value> = report
                .days()
                .into_iter()
                .map(|(day, spent)| json!({"day": day, "spent": spent}))
                .collect();
            Ok(Json(json!({"report": report, "days": days})))
        }
        Err(err) => Err(failed(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("{err:#}"),
        )),
    }
}

/// Every scheduled job, as `switchboard cron list` describes it.
async fn jobs(State(admin): Panel) -> Answer {
    let Some(jobs) = &admin.jobs else {
        return Ok(Json(json!({"enabled": false, "jobs": []})));
    };
    match jobs.list(&Asker::Operator).await {
        Ok(all) => {
            let listed: Vec<Value> = all
                .iter()
                .map(|job| json!({"job": job, "reading": jobs.reading(job)}))
                .collect();
            Ok(Json(json!({"enabled": true, "jobs": listed})))
        }
        Err(err) => Err(failed(StatusCode::INTERNAL_SERVER_ERROR, err)),
    }
}

/// A job's last runs (`switchboard cron runs ID`).
async fn runs(State(admin): Panel, Path(id): Path<String>) -> Answer {
    let Some(jobs) = &admin.jobs else {
        return Err(failed(StatusCode::NOT_FOUND, "the scheduler is off"));
    };
    let runs = jobs
        .runs(&Asker::Operator, &id, 20)
        .await
        .map_err(|err| failed(StatusCode::NOT_FOUND, err))?;
    let all = jobs
        .list(&Asker::Operator)
        .await
        .map_err(|err| failed(StatusCode::INTERNAL_SERVER_ERROR, err))?;
    let job = all.iter().find(|job| job.id == id);
    // Times as the person reads them (the job's zone), and how long each run took.
    let when = |at: Option<jiff::Timestamp>| match (job, at) {
        (Some(job), Some(at)) => jobs.time_of(job, at),
        (None, Some(at)) => at.round(jiff::Unit::Second).unwrap_or(at).to_string(),
        (_, None) => String::new(),
    };
    let runs: Vec<Value> = runs
        .iter()
        .map(|run| {
            let took = run
                .started
                .zip(run.finished)
                .map(|(started, finished)| finished.duration_since(started))
                .map(|took| format!("{:.1} s", took.as_secs_f64()));
            json!({
                "due": when(Some(run.due)),
                "started": when(run.started),
                "took": took,
                "outcome": run.outcome.describe(),
                "attempt": run.attempt,
            })
        })
        .collect();
    Ok(Json(json!({"runs": runs})))
}

/// Pauses, resumes or runs a job now (`switchboard cron pause|resume|run ID`).
async fn act(State(admin): Panel, Path((id, action)): Path<(String, String)>) -> Answer {
    let Some(jobs) = &admin.jobs else {
        return Err(failed(StatusCode::NOT_FOUND, "the scheduler is off"));
    };
    let asker = Asker::Operator;
    let id = id.as_str();
    let done = match action.as_str() {
        "pause" => jobs.set_enabled(&asker, id, false).await,
        "resume" => jobs.set_enabled(&asker, id, true).await,
        "run" => jobs.run_now(&asker, id).await,
        other => {
            return Err(failed(
                StatusCode::NOT_FOUND,
                format!("`{other}`: pause, resume or run"),
            ));
        }
    };
    match done {
        Ok(job) => Ok(Json(json!({"job": job}))),
        Err(err) => Err(failed(StatusCode::NOT_FOUND, err)),
    }
}

/// The config in use, its secrets masked.
async fn config(State(admin): Panel) -> Json<Value> {
    let text = admin
        .config_text
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .clone();
    Json(json!({
        "path": admin.path.display().to_string(),
        "text": crate::config_values::masked(&text),
    }))
}

/// Reads the config again and applies what can change live — what SIGHUP does.
async fn reload(State(admin): Panel) -> Answer {
    let (answer, reloaded) = tokio::sync::oneshot::channel();
    if admin.reloads.send(answer).await.is_err() {
        return Err(failed(
            StatusCode::SERVICE_UNAVAILABLE,
            "this daemon takes no reloads (it is stopping)",
        ));
    }
    match tokio::time::timeout(RELOAD_WAIT, reloaded).await {
        Ok(Ok(Reloaded::Applied { need_restart })) => {
            Ok(Json(json!({"applied": true, "need_restart": need_restart})))
        }
        Ok(Ok(Reloaded::Refused(error))) => Ok(Json(json!({"applied": false, "error": error}))),
        Ok(Err(_)) => Err(failed(
            StatusCode::SERVICE_UNAVAILABLE,
            "the reload was not answered",
        )),
        Err(_) => Err(failed(
            StatusCode::GATEWAY_TIMEOUT,
            format!("the reload took longer than {RELOAD_WAIT:?}; see the log"),
        )),
    }
}
