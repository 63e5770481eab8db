//! The panel's JSON API, under `/admin/api/`: one HTTP handler that dispatches on the method
//! and the path (one handler's worth of code, not a dozen: the panel costs a daemon without
//! it nothing but its size, docs/benchmarks.md), each answer a thin reading of what the CLI or
//! the chats already use (see the module doc of `admin`).

use std::sync::{Arc, PoisonError};
use std::time::{Duration, UNIX_EPOCH};

use axum::Json;
use axum::body::Bytes;
use axum::extract::{Query, State};
use axum::http::{Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::{Value, json};
use switchboard_adapter::PairingError;
use switchboard_core::{AgentName, InboundMessage, SenderId, SessionKey};
use switchboard_scheduler::{Asker, describe};

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

type Answer = Result<Value, Failure>;

fn failed(status: StatusCode, error: impl std::fmt::Display) -> Failure {
    Failure(status, error.to_string())
}

/// Every `/admin/api/…` request (the token was checked before).
pub(super) async fn handle(
    State(admin): State<Arc<Admin>>,
    method: Method,
    uri: Uri,
    body: Bytes,
) -> Response {
    let path = uri.path().strip_prefix("/admin/api/").unwrap_or_default();
    let segments: Vec<&str> = path.split('/').collect();
    let answer = match (method.as_str(), segments.as_slice()) {
        ("GET", ["overview"]) => Ok(overview(&admin)),
        ("GET", ["sessions"]) => sessions(&admin).await,
        ("GET", ["transcript"]) => transcript(&admin, &uri).await,
        ("POST", ["reset"]) => reset(&admin, &body).await,
        ("GET", ["pairing"]) => pairing(&admin).await,
        ("POST", ["pairing", code, verdict]) => decide(&admin, code, verdict).await,
        ("GET", ["usage"]) => usage(&admin, &uri).await,
        ("GET", ["jobs"]) => jobs(&admin).await,
        ("GET", ["jobs", id, "runs"]) => runs(&admin, id).await,
        ("POST", ["jobs", id, action]) => act(&admin, id, action).await,
        ("GET", ["config"]) => Ok(config(&admin)),
        ("POST", ["reload"]) => reload(&admin).await,
        _ => Err(failed(
            StatusCode::NOT_FOUND,
            format!("no {method} /admin/api/{path}"),
        )),
    };
    match answer {
        Ok(body) => Json(body).into_response(),
        Err(Failure(status, error)) => (status, Json(json!({"error": error}))).into_response(),
    }
}

/// The query of `uri` as `T`.
fn query<T: serde::de::DeserializeOwned>(uri: &Uri) -> Result<T, Failure> {
    Query::<T>::try_from_uri(uri)
        .map(|Query(query)| query)
        .map_err(|err| failed(StatusCode::BAD_REQUEST, err.body_text()))
}

/// Channels and checks (`/healthz`'s report), the agents, and the tools each source offers
/// (the built-in ones, each MCP server's).
fn overview(admin: &Admin) -> Value {
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
    json!({
        "healthy": healthy,
        "health": health,
        "agents": agents,
        "tools": builtin,
        "mcp": servers,
    })
}

/// The sessions of every agent, most recently written first, with their message counts.
async fn sessions(admin: &Admin) -> Answer {
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
        sessions.push(json!({
            "agent": agent.to_string(),
            "key": session.key.as_ref().map(SessionKey::to_string),
            "name": session.name,
            "modified_ms": session.modified.duration_since(UNIX_EPOCH)
                .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
            "bytes": session.bytes,
            "messages": messages,
        }));
    }
    Ok(json!({"sessions": sessions}))
}

#[derive(Deserialize)]
struct SessionRef {
    agent: String,
    key: String,
}

/// A session's conversation, read-only, as the chat page shows it.
async fn transcript(admin: &Admin, uri: &Uri) -> Answer {
    let session: SessionRef = query(uri)?;
    let Some(agent) = admin.agents.get(&AgentName::from(session.agent.as_str())) else {
        return Err(failed(
            StatusCode::NOT_FOUND,
            format!("no agent `{}`", session.agent),
        ));
    };
    let store = agent.store();
    let key = SessionKey::from(session.key);
    match store.transcript(&key).await {
        Ok(messages) => Ok(json!({"messages": switchboard_websocket::said_of(messages)})),
        Err(err) => Err(failed(StatusCode::INTERNAL_SERVER_ERROR, err)),
    }
}

/// Starts a session anew: `/new` sent to its chat, through its worker, as if its person sent
/// it (the chat is told "Started a new session.").
async fn reset(admin: &Admin, body: &[u8]) -> Answer {
    let session: SessionRef = serde_json::from_slice(body).map_err(|err| {
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
        Ok(()) => Ok(json!({"reset": key.to_string()})),
        Err(err) => Err(failed(StatusCode::SERVICE_UNAVAILABLE, err)),
    }
}

/// The codes waiting and the senders approved (`switchboard pairing list`).
async fn pairing(admin: &Admin) -> Answer {
    let pairing = admin.pairing.clone();
    match pairing.list().await {
        Ok(file) => {
            serde_json::to_value(file).map_err(|err| failed(StatusCode::INTERNAL_SERVER_ERROR, err))
        }
        Err(err) => Err(failed(StatusCode::INTERNAL_SERVER_ERROR, err)),
    }
}

/// Approves or denies a code (`switchboard pairing approve|deny CODE`).
async fn decide(admin: &Admin, code: &str, verdict: &str) -> Answer {
    let pairing = &admin.pairing;
    let status = |err: &PairingError| match err {
        PairingError::UnknownCode(_) | PairingError::UnknownSender(_) => StatusCode::NOT_FOUND,
        _ => StatusCode::INTERNAL_SERVER_ERROR,
    };
    let decided = match verdict {
        "approve" => pairing
            .approve(code)
            .await
            .map(|a| json!({"approved": format!("{}:{}", a.channel, a.sender)})),
        "deny" => pairing.deny(code).await.map(|p| json!({"denied": p.code})),
        other => {
            return Err(failed(
                StatusCode::NOT_FOUND,
                format!("`{other}`: approve or deny"),
            ));
        }
    };
    decided.map_err(|err| failed(status(&err), err))
}

#[derive(Deserialize)]
struct Days {
    days: Option<u32>,
}

/// What the models cost, per day, agent and chat (`switchboard usage`).
async fn usage(admin: &Admin, uri: &Uri) -> Answer {
    let days: Days = query(uri)?;
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
            Ok(json!({"report": report, "days": days}))
        }
        Err(err) => Err(failed(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("{err:#}"),
        )),
    }
}

/// Every scheduled job, as `switchboard cron list` describes it.
async fn jobs(admin: &Admin) -> Answer {
    let Some(jobs) = &admin.jobs else {
        return Ok(json!({"enabled": false, "jobs": []}));
    };
    match jobs.list(&Asker::Operator).await {
        Ok(all) => {
            let now = jobs.now();
            let listed: Vec<Value> = all
                .iter()
                .map(|job| json!({"job": job, "summary": describe(job, now)}))
                .collect();
            Ok(json!({"enabled": true, "jobs": listed}))
        }
        Err(err) => Err(failed(StatusCode::INTERNAL_SERVER_ERROR, err)),
    }
}

/// A job's last runs (`switchboard cron runs ID`).
async fn runs(admin: &Admin, id: &str) -> Answer {
    let Some(jobs) = &admin.jobs else {
        return Err(failed(StatusCode::NOT_FOUND, "the scheduler is off"));
    };
    match jobs.runs(&Asker::Operator, id, 20).await {
        Ok(runs) => Ok(json!({"runs": runs})),
        Err(err) => Err(failed(StatusCode::NOT_FOUND, err)),
    }
}

/// Pauses, resumes or runs a job now (`switchboard cron pause|resume|run ID`).
async fn act(admin: &Admin, id: &str, action: &str) -> Answer {
    let Some(jobs) = &admin.jobs else {
        return Err(failed(StatusCode::NOT_FOUND, "the scheduler is off"));
    };
    let asker = Asker::Operator;
    let done = match action {
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
        Ok(job) => Ok(json!({"job": job})),
        Err(err) => Err(failed(StatusCode::NOT_FOUND, err)),
    }
}

/// The config in use, its secrets masked.
fn config(admin: &Admin) -> Value {
    let text = admin
        .config_text
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .clone();
    json!({
        "path": admin.path.display().to_string(),
        "text": crate::config_values::masked(&text),
    })
}

/// Reads the config again and applies what can change live — what SIGHUP does.
async fn reload(admin: &Admin) -> Answer {
    let (answer, reloaded) = tokio::sync::oneshot::channel();
    if admin.reloads.send(answer).await.is_err() {
        return Err(failed(
            StatusCode::SERVICE_UNAVAILABLE,
            "this daemon takes no reloads (it is stopping)",
        ));
    }
    match tokio::time::timeout(RELOAD_WAIT, reloaded).await {
        Ok(Ok(Reloaded::Applied { need_restart })) => {
            Ok(json!({"applied": true, "need_restart": need_restart}))
        }
        Ok(Ok(Reloaded::Refused(error))) => Ok(json!({"applied": false, "error": error})),
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
