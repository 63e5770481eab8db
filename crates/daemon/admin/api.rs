//! The panel's JSON API, under `/admin/api/`. Each handler is a thin reading of what the
//! CLI or the chats already use (see the module doc of `admin`).

use std::sync::{Arc, PoisonError};
use std::time::{Duration, UNIX_EPOCH};

use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::{Value, json};
use switchboard_agent::scheduler::{Asker, describe};
use switchboard_core::{AgentName, InboundMessage, SenderId, SessionKey};

use super::Admin;
use crate::config::{Config, Secrets};
use crate::reload::Reloaded;
use crate::usage_cli::Report;

/// The most sessions listed (the most recently written).
const MAX_SESSIONS: usize = 200;
/// How long a reload may take before the panel stops waiting for it.
const RELOAD_WAIT: Duration = Duration::from_secs(60);

type Shared = State<Arc<Admin>>;

pub(super) fn routes() -> Router<Arc<Admin>> {
    Router::new()
        .route("/overview", get(overview))
        .route("/sessions", get(sessions))
        .route("/transcript", get(transcript))
        .route("/reset", post(reset))
        .route("/pairing", get(pairing))
        .route("/pairing/{code}/{verdict}", post(decide))
        .route("/usage", get(usage))
        .route("/jobs", get(jobs))
        .route("/jobs/{id}/runs", get(runs))
        .route("/jobs/{id}/{action}", post(act))
        .route("/config", get(config))
        .route("/reload", post(reload))
}

fn failed(status: StatusCode, error: impl std::fmt::Display) -> Response {
    (status, Json(json!({"error": error.to_string()}))).into_response()
}

/// Channels and checks (`/healthz`'s report), the agents, and the tools each source offers
/// (the built-in ones, each MCP server's).
async fn overview(State(admin): Shared) -> Response {
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
    Json(json!({
        "healthy": healthy,
        "health": health,
        "agents": agents,
        "tools": builtin,
        "mcp": servers,
    }))
    .into_response()
}

/// The sessions of every agent, most recently written first, with their message counts.
async fn sessions(State(admin): Shared) -> Response {
    let agents = admin.agents.clone();
    let listed = tokio::task::spawn_blocking(move || {
        let mut all = Vec::new();
        for agent in agents.iter() {
            let store = agent.store();
            match store.list() {
                Ok(sessions) => all.extend(
                    sessions
                        .into_iter()
                        .map(|session| (agent.name().clone(), store.clone(), session)),
                ),
                Err(err) => return Err(err.to_string()),
            }
        }
        all.sort_by_key(|entry| std::cmp::Reverse(entry.2.modified));
        all.truncate(MAX_SESSIONS);
        Ok(all
            .into_iter()
            .map(|(agent, store, session)| {
                let messages = session
                    .key
                    .as_ref()
                    .and_then(|key| store.transcript(key).ok())
                    .map(|messages| messages.len());
                json!({
                    "agent": agent.to_string(),
                    "key": session.key.as_ref().map(SessionKey::to_string),
                    "name": session.name,
                    "modified_ms": session.modified.duration_since(UNIX_EPOCH)
                        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
                    "bytes": session.bytes,
                    "messages": messages,
                })
            })
            .collect::<Vec<_>>())
    })
    .await;
    match listed {
        Ok(Ok(sessions)) => Json(json!({"sessions": sessions})).into_response(),
        Ok(Err(err)) => failed(StatusCode::INTERNAL_SERVER_ERROR, err),
        Err(err) => failed(StatusCode::INTERNAL_SERVER_ERROR, err),
    }
}

#[derive(Deserialize)]
struct SessionRef {
    agent: String,
    key: String,
}

/// A session's conversation, read-only, as the chat page shows it.
async fn transcript(State(admin): Shared, Query(session): Query<SessionRef>) -> Response {
    let Some(agent) = admin.agents.get(&AgentName::from(session.agent.as_str())) else {
        return failed(
            StatusCode::NOT_FOUND,
            format!("no agent `{}`", session.agent),
        );
    };
    let store = agent.store();
    let key = SessionKey::from(session.key);
    let read = tokio::task::spawn_blocking(move || store.transcript(&key)).await;
    match read {
        Ok(Ok(messages)) => {
            Json(json!({"messages": crate::app::said_of(messages)})).into_response()
        }
        Ok(Err(err)) => failed(StatusCode::INTERNAL_SERVER_ERROR, err),
        Err(err) => failed(StatusCode::INTERNAL_SERVER_ERROR, err),
    }
}

/// Starts a session anew: `/new` sent to its chat, through its worker, as if its person sent
/// it (the chat is told "Started a new session.").
async fn reset(State(admin): Shared, Json(session): Json<SessionRef>) -> Response {
    let key = SessionKey::from(session.key);
    let Some((channel, chat)) = key.split() else {
        return failed(StatusCode::BAD_REQUEST, format!("`{key}` names no chat"));
    };
    let agent = AgentName::from(session.agent.as_str());
    if admin.agents.get(&agent).is_none() {
        return failed(StatusCode::NOT_FOUND, format!("no agent `{agent}`"));
    }
    let mut new = InboundMessage::text(channel, chat, SenderId::from("operator"), "/new");
    new.agent = Some(agent);
    match admin.hub.publish_inbound(new).await {
        Ok(()) => Json(json!({"reset": key.to_string()})).into_response(),
        Err(err) => failed(StatusCode::SERVICE_UNAVAILABLE, err),
    }
}

/// The codes waiting and the senders approved (`switchboard pairing list`).
async fn pairing(State(admin): Shared) -> Response {
    let pairing = admin.pairing.clone();
    match tokio::task::spawn_blocking(move || pairing.list()).await {
        Ok(Ok(file)) => Json(file).into_response(),
        Ok(Err(err)) => failed(StatusCode::INTERNAL_SERVER_ERROR, err),
        Err(err) => failed(StatusCode::INTERNAL_SERVER_ERROR, err),
    }
}

/// Approves or denies a code (`switchboard pairing approve|deny CODE`).
async fn decide(State(admin): Shared, Path((code, verdict)): Path<(String, String)>) -> Response {
    let pairing = admin.pairing.clone();
    let decided = tokio::task::spawn_blocking(move || match verdict.as_str() {
        "approve" => pairing
            .approve(&code)
            .map(|a| json!({"approved": format!("{}:{}", a.channel, a.sender)}))
            .map_err(|err| (StatusCode::NOT_FOUND, err.to_string())),
        "deny" => pairing
            .deny(&code)
            .map(|p| json!({"denied": p.code}))
            .map_err(|err| (StatusCode::NOT_FOUND, err.to_string())),
        other => Err((StatusCode::NOT_FOUND, format!("`{other}`: approve or deny"))),
    })
    .await;
    match decided {
        Ok(Ok(body)) => Json(body).into_response(),
        Ok(Err((status, err))) => failed(status, err),
        Err(err) => failed(StatusCode::INTERNAL_SERVER_ERROR, err),
    }
}

#[derive(Deserialize)]
struct Days {
    days: Option<u32>,
}

/// What the models cost, per day, agent and chat (`switchboard usage`).
async fn usage(State(admin): Shared, Query(days): Query<Days>) -> Response {
    let text = admin
        .config_text
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .clone();
    let config = match Config::parse_with(&text, &admin.path, Secrets::Skip) {
        Ok(config) => config,
        Err(err) => return failed(StatusCode::INTERNAL_SERVER_ERROR, err),
    };
    match Report::read(&config, days.days.unwrap_or(7).clamp(1, 366)).await {
        Ok(report) => {
            let days: Vec<Value> = report
                .days()
                .into_iter()
                .map(|(day, spent)| json!({"day": day, "spent": spent}))
                .collect();
            Json(json!({"report": report, "days": days})).into_response()
        }
        Err(err) => failed(StatusCode::INTERNAL_SERVER_ERROR, format!("{err:#}")),
    }
}

/// Every scheduled job, as `switchboard cron list` describes it.
async fn jobs(State(admin): Shared) -> Response {
    let Some(jobs) = &admin.jobs else {
        return Json(json!({"enabled": false, "jobs": []})).into_response();
    };
    match jobs.list(&Asker::Operator).await {
        Ok(all) => {
            let now = jobs.now();
            let listed: Vec<Value> = all
                .iter()
                .map(|job| json!({"job": job, "summary": describe(job, now)}))
                .collect();
            Json(json!({"enabled": true, "jobs": listed})).into_response()
        }
        Err(err) => failed(StatusCode::INTERNAL_SERVER_ERROR, err),
    }
}

/// A job's last runs (`switchboard cron runs ID`).
async fn runs(State(admin): Shared, Path(id): Path<String>) -> Response {
    let Some(jobs) = &admin.jobs else {
        return failed(StatusCode::NOT_FOUND, "the scheduler is off");
    };
    match jobs.runs(&Asker::Operator, &id, 20).await {
        Ok(runs) => Json(json!({"runs": runs})).into_response(),
        Err(err) => failed(StatusCode::NOT_FOUND, err),
    }
}

/// Pauses, resumes or runs a job now (`switchboard cron pause|resume|run ID`).
async fn act(State(admin): Shared, Path((id, action)): Path<(String, String)>) -> Response {
    let Some(jobs) = &admin.jobs else {
        return failed(StatusCode::NOT_FOUND, "the scheduler is off");
    };
    let asker = Asker::Operator;
    let done = match action.as_str() {
        "pause" => jobs.set_enabled(&asker, &id, false).await,
        "resume" => jobs.set_enabled(&asker, &id, true).await,
        "run" => jobs.run_now(&asker, &id).await,
        other => {
            return failed(
                StatusCode::NOT_FOUND,
                format!("`{other}`: pause, resume or run"),
            );
        }
    };
    match done {
        Ok(job) => Json(json!({"job": job})).into_response(),
        Err(err) => failed(StatusCode::NOT_FOUND, err),
    }
}

/// The config in use, its secrets masked.
async fn config(State(admin): Shared) -> Response {
    let text = admin
        .config_text
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .clone();
    Json(json!({
        "path": admin.path.display().to_string(),
        "text": crate::config_values::masked(&text),
    }))
    .into_response()
}

/// Reads the config again and applies what can change live — what SIGHUP does.
async fn reload(State(admin): Shared) -> Response {
    let (answer, reloaded) = tokio::sync::oneshot::channel();
    if admin.reloads.send(answer).await.is_err() {
        return failed(
            StatusCode::SERVICE_UNAVAILABLE,
            "this daemon takes no reloads (it is stopping)",
        );
    }
    match tokio::time::timeout(RELOAD_WAIT, reloaded).await {
        Ok(Ok(Reloaded::Applied { need_restart })) => {
            Json(json!({"applied": true, "need_restart": need_restart})).into_response()
        }
        Ok(Ok(Reloaded::Refused(error))) => {
            Json(json!({"applied": false, "error": error})).into_response()
        }
        Ok(Err(_)) => failed(
            StatusCode::SERVICE_UNAVAILABLE,
            "the reload was not answered",
        ),
        Err(_) => failed(
            StatusCode::GATEWAY_TIMEOUT,
            format!("the reload took longer than {RELOAD_WAIT:?}; see the log"),
        ),
    }
}
